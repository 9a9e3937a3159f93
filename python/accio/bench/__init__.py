"""`accio bench`: every accio mechanism measured side by side with the methodology of IOzone and IOR.

    accio bench --preset quick --report report.html      (the same as `accio bench run ...`)
    accio bench -T write,write+sync,cold-read -s 1g -r 1m,16m -t 1,2 -m all --json out.json
    accio bench -T random-read -r 4k -Q 1,4,16 --runtime 10 --json qd.json
    mpirun -np 4 accio bench --preset ior --json ior.json
    accio bench compare A.json B.json
    accio bench report run.json -o run.html
    accio bench safetensors model.safetensors

Modules: spec (tests, parameters, presets), runner (the phases, caches, ranks), comm (MPI),
fio (--vs-fio), latency (percentiles), output (tables, JSON, CSV, compare), report (plots, HTML),
checkpoint (safetensors). docs/methodology.md explains what is measured and how.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import io
import json
import os
import sys
import tempfile
import time

from .. import __version__, _ext, settings as effective_settings
from .._parser import Parser
from .._progress import Progress
from .._usage import UsageError, check_creatable, describe, check_output_path, distinct_files, file_identity, stdout_outputs
from ..info import _profile as tuning_profile, filesystem, gather, path_info
from . import comm as comm_mod
from . import fio, output, report
from .runner import Runner, file_extents, reads_files_as_found
from .._system import interrupted_status, online_cpus, parse_sizes, seconds_arg, sigterm_interrupts
from .spec import LAYOUTS, TESTS, Spec, apply_preset, parse_counts, parse_mechanisms, parse_tests

DEFAULTS = dict(tests="write,rewrite,read,reread", mechanisms="all", file_sizes="256m", records="1m",
                threads="1", iterations=3)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Measure every mechanism with IOzone/IOR semantics: write, rewrite, read, reread,\n"
                     "write+sync (fsync timed), cold-read (page cache dropped and verified), random-read,\n"
                     "random-write. Under mpirun, one rank per process with IOR's rules.\n"
                     "Sub-commands beside the run (`accio bench run ...` is the same as `accio bench ...`):\n"
                     "  compare A.json B.json   ratios of two runs with their intervals (descriptive: no verdict)\n"
                     "                          ('-' reads stdin)\n"
                     "  report RUN.json         redraw the HTML report (and the table) of a run\n"
                     "  safetensors FILE        checkpoint loading against safetensors and fastsafetensors\n"
                     "Methodology: docs/methodology.md.")
    g = p.add_argument_group("what to measure")
    g.add_argument("--preset", choices=("quick", "veaccio", "xeonphi", "ior"),
                   help="a predefined study (options given explicitly override it)")
    g.add_argument("-T", "--tests", help=f"comma-separated tests or 'all': {', '.join(TESTS)} "
                   f"(default {DEFAULTS['tests']})")
    g.add_argument("-m", "--mechanisms", help="comma-separated mechanisms or 'all' (default all); "
                   "NAME+direct opens the file side with O_DIRECT, e.g. uring+direct")
    g.add_argument("-s", "--file-size", dest="file_sizes",
                   help="file size per thread and process: list or doubling range, e.g. 1g or 16m:256m (default 256m)")
    g.add_argument("-r", "--record", dest="records", help="record (transfer) sizes, e.g. 1m,16m or 4k:64m (default 1m)")
    g.add_argument("-t", "--threads", help="thread counts: 1,2,4 or 1:8 (doubling) or 1..N; N = online CPUs (default 1)")
    g.add_argument("-p", "--processes", help="process counts under mpirun, each <= the number of ranks "
                   "(default: all ranks)")
    g.add_argument("-i", "--iterations", type=int, help="repetitions of every test (default 3); "
                   "median, min, max and stddev are reported")
    g.add_argument("-Q", "--iodepth", dest="iodepths", help="requests in flight per thread, a list or doubling "
                   "range: 1,4,16 or 1:32 (default 1; above 1 the requests are submitted asynchronously)")
    g.add_argument("--runtime", type=seconds_arg, metavar="SECONDS", help="time-based: every phase runs this long, "
                   "going round its range again if need be (fio's time_based; default: once over the range)")
    g.add_argument("--target", default="host", help="where the buffers live: host or cuda:N (GPU memory: the "
                   "columns are the device mechanisms that can run there, naive, staged, gds, pagecache, and auto, "
                   "plus the ceilings host and pinned-copy)")
    g.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="an engine setting for every mechanism, e.g. --set threads=2 (repeatable)")
    g = p.add_argument_group("files")
    g.add_argument("-d", "--dir", action="append", dest="dirs", metavar="DIR",
                   help="directory for the files under test (repeatable: each is a row group; default: temp dir)")
    g.add_argument("--files", help="comma-separated file names to use instead (as iozone -F), kept afterwards. "
                   "WRITE TESTS OVERWRITE THEM (write and write+sync truncate them first). A run of read tests "
                   "only (e.g. -T read,random-read) reads them as they are, unverified, and never writes them; a "
                   "file shorter than the run reads is refused before it starts")
    g.add_argument("-F", "--file-per-process", dest="layout", action="store_const", const="fpp",
                   help="one file per thread and process (IOR -F; the default)")
    g.add_argument("--shared", dest="layout", action="store_const", const="shared",
                   help="one shared file, each thread and process in its own block")
    g.add_argument("--layout", dest="layout", help="fpp, shared or fpp,shared")
    g.add_argument("--keep", action="store_true", help="keep the files under test afterwards")
    g = p.add_argument_group("caches and checks")
    g.add_argument("--drop-caches", action="store_true",
                   help="cold reads drop all caches via /proc/sys/vm/drop_caches (root) instead of posix_fadvise")
    g.add_argument("--vs-fio", action="store_true", help="also run the equivalent fio job on the same files "
                   "for posix, parallel, direct and uring and print the ratios (a verdict from -i 7 on)")
    g.add_argument("--no-verify", dest="verify", action="store_false",
                   help="do not check the record stamps that reads find")
    g = p.add_argument_group("output")
    g.add_argument("--json", metavar="FILE", help="every sample and the environment (schema accio.bench/1); "
                   "'-' for stdout (the table then goes to stderr)")
    g.add_argument("--csv", metavar="FILE", help="one line per result ('-' for stdout)")
    g.add_argument("--plot", metavar="DIR", help="PNG plots (needs matplotlib)")
    g.add_argument("--report", metavar="FILE", help="a self-contained HTML report ('-' for stdout)")
    g.add_argument("-q", "--quiet", action="store_true",
                   help="no progress, and no table on stderr (when stdout holds --json/--csv/--report -)")


def _files(args) -> list[str]:
    """--files as a list; refused when it names no file, or with -d (which it replaces)."""
    if args.files is None:
        return []
    files = [f for f in args.files.split(",") if f]
    if not files:
        raise ValueError(f"--files {args.files!r} names no file: give comma-separated file names")
    if args.dirs:
        raise ValueError("--files and -d do not go together: the files under test are the --files themselves")
    return files


def build_spec(args, world: int, ranks_here: int = 1) -> Spec:
    explicit = {k for k in ("tests", "mechanisms", "file_sizes", "records", "threads", "processes", "iterations",
                            "dirs", "layout", "iodepths") if getattr(args, k) is not None}
    explicit = {{"layout": "layouts"}.get(k, k) for k in explicit}
    n = online_cpus()
    get = lambda k: getattr(args, k) if getattr(args, k) is not None else DEFAULTS.get(k)  # noqa: E731
    _check_target(args.target)
    spec = Spec(tests=parse_tests(get("tests")), mechanisms=parse_mechanisms(get("mechanisms"), args.target),
                file_sizes=_option("-s", parse_sizes, get("file_sizes")),
                records=_option("-r", parse_sizes, get("records")),
                threads=_option("-t", parse_counts, get("threads"), n),
                processes=_option("-p", parse_counts, args.processes, world) if args.processes else [world],
                layouts=_layouts(args.layout), dirs=args.dirs or [tempfile.gettempdir()],
                iterations=get("iterations"), target=args.target,
                files=_files(args),
                settings=dict(_kv(x) for x in args.set), drop_caches=args.drop_caches, vs_fio=args.vs_fio,
                keep=args.keep, verify=args.verify,
                iodepths=_option("-Q", parse_counts, args.iodepths, 1 << 16) if args.iodepths else [1],
                runtime=args.runtime or 0.0)
    if args.preset:
        spec = apply_preset(spec, args.preset, world, explicit)
    _check(spec, world, ranks_here)
    return spec


def _option(option: str, parse, text: str, *more):
    """parse(text, *more), its ValueError naming the option: "-s: 'abc' is not a size (e.g. 64m, 1g)"."""
    try:
        return parse(text, *more)
    except ValueError as e:
        raise ValueError(f"{option}: {e}") from None


def _layouts(text: str | None) -> list[str]:
    names = [x.strip() for x in (text or "fpp").split(",") if x.strip()]
    bad = [x for x in names if x not in LAYOUTS]
    if bad or not names:
        raise ValueError(f"unknown layout {', '.join(bad) or text!r}; choose fpp, shared or fpp,shared")
    return names


def _kv(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise ValueError(f"--set {text!r}: expected NAME=VALUE")
    k, v = text.split("=", 1)
    return k.strip(), v.strip()


def _check_target(target: str) -> None:
    if target == "host":
        return
    name, _, num = target.partition(":")
    if name != "cuda" or not num.isdigit():
        raise ValueError(f"unknown target {target!r}; use host or cuda:N")
    ok, why = _ext.cuda_available()
    if not ok:
        raise ValueError(f"target {target}: {why}")
    if int(num) >= len(_ext.gpus()):
        raise ValueError(f"target {target}: this machine has {len(_ext.gpus())} GPU(s)")


def _check_dirs_distinct(dirs: list[str]) -> None:
    """`-d sig -d ./sig` measured one directory twice, as two row groups."""
    seen: dict = {}
    for d in dirs:
        key = file_identity(d)
        if key is None:
            continue  # said below, with what is wrong with it
        if key in seen:
            raise ValueError(f"-d {seen[key]} and -d {d} name the same directory: give it once")
        seen[key] = d


def skipped_sizes(spec: Spec) -> list[str]:
    """File sizes that no record fits and records that fit no file size (IOR: a transfer is at most
    the block), said before the run: `-s 1m,4m -r 2m` dropped the 1 MiB size without a word."""
    from .._system import fmt_size
    sizes = ", ".join(map(fmt_size, spec.records))
    notes = [f"file size {fmt_size(fs)} skipped: no record ({sizes}) fits in it"
             for fs in spec.file_sizes if all(r > fs for r in spec.records)]
    biggest = max(spec.file_sizes, default=0)
    notes += [f"record {fmt_size(r)} skipped: larger than every file size (at most {fmt_size(biggest)})"
              for r in spec.records if r > biggest]
    return notes


def unaligned_direct(spec: Spec) -> list[str]:
    """O_DIRECT columns whose records (or, in the shared layout, file sizes: the writers' offsets) are
    not a multiple of the directory's O_DIRECT alignment: the engine writes and reads the unaligned
    head and tail of each record through the buffered descriptor, so such a column measures mostly
    buffered I/O (bench audit, session 25: -r 3000 made `direct` 288k IOPS from the page cache)."""
    import re
    from .._system import fmt_size
    out = []
    cols = [c.label for c in spec.mechanisms if not c.host and c.o_direct(spec.settings)]
    for d in spec.dirs if cols else ():
        ok, detail = _ext.probe("o_direct", d)
        m = re.search(r"offset alignment (\d+) B", detail)
        align = int(m.group(1)) if ok and m else 4096
        bad = sorted({r for r in spec.records if r % align} |
                     ({fs for fs in spec.file_sizes if fs % align} if "shared" in spec.layouts else set()))
        if bad:
            out.append(f"{', '.join(cols)} in {d}: {', '.join(map(fmt_size, bad))} is not a multiple of the O_DIRECT "
                       f"alignment ({align} B): the unaligned part of each request goes through the page cache, so "
                       "those cells measure buffered I/O in part")
    return out


def _check(spec: Spec, world: int, ranks_here: int = 1) -> None:
    if spec.target != "host":
        if world > 1:
            raise ValueError(f"--target {spec.target} runs in a single process; run it without mpirun")
        if spec.vs_fio:
            raise ValueError("--vs-fio compares host mechanisms; it does not apply to --target cuda:N")
    if spec.iterations < 1:
        raise ValueError("--iterations must be at least 1")
    if spec.threads and spec.file_sizes and spec.records and not any(True for _ in spec.configurations()):
        from .._system import fmt_size
        raise ValueError(f"no record size ({', '.join(map(fmt_size, spec.records))}) fits in a file size "
                         f"({', '.join(map(fmt_size, spec.file_sizes))}): nothing would run; a record (-r) must be "
                         "at most the file size (-s), as IOR refuses a transfer larger than the block")
    _check_dirs_distinct(spec.dirs)
    if spec.drop_caches and os.geteuid() != 0:
        raise ValueError("--drop-caches writes /proc/sys/vm/drop_caches and needs root; without it cold reads "
                         "use posix_fadvise(DONTNEED), verified with a residency check")
    if spec.vs_fio and not fio.available():
        raise ValueError("--vs-fio needs fio on PATH (apt-get install fio)")
    if spec.vs_fio and (spec.iodepths != [1] or spec.runtime):
        raise ValueError("--vs-fio runs fio's equivalent of one synchronous pass over the range: "
                         "it does not combine with --iodepth above 1 or --runtime")
    if spec.vs_fio and world > 1:
        raise ValueError("--vs-fio runs in a single process; run it without mpirun")
    if max(spec.processes) > world:
        raise ValueError(f"{max(spec.processes)} processes asked for, but {world} rank(s) run; "
                         f"start with: mpirun -np {max(spec.processes)} accio bench ...")
    try:  # two writers truncating one file (one named twice, or by two names)
        distinct_files(**{f"--files' file {i + 1}": f for i, f in enumerate(spec.files)})
    except UsageError as e:
        raise ValueError(f"{e}: a file is named twice; each thread and process needs its own") from None
    if spec.files:  # one file per thread and process (fpp); found before the run, not in its middle
        need = max((p * t for _d, layout, p, t, *_ in spec.configurations() if layout == "fpp"), default=1)
        if len(spec.files) < need:
            raise ValueError(f"--files: {need} files needed (one per thread and process), {len(spec.files)} given")
        if reads_files_as_found(spec):
            _check_files_cover(spec)
        _check_files_open(spec.files, write=not reads_files_as_found(spec))
    for d in spec.dirs:  # the file system said no: exit 1, as for any path that cannot be used
        if not os.path.exists(d):
            raise FileNotFoundError(2, "No such file or directory", f"-d {d}")
        if not os.path.isdir(d):
            raise NotADirectoryError(20, "Not a directory", f"-d {d}")
        if not os.access(d, os.W_OK):
            raise PermissionError(13, "Permission denied (not a writable directory)", f"-d {d}")
    _check_resources(spec, ranks_here)
    # settings (with each mechanism's own) are checked by the engine now rather than in the middle of the run;
    # the environment's ACCIO_* alone first: a bad one is exit 1, as in info and tune (--set is usage, 2)
    _ext.settings([])  # an OSError: exit 1 (the CLI adds what to do)
    names = {m["name"] for m in _ext.mechanisms()}
    for m in spec.mechanisms:
        if m.name in names and not m.host:
            device = _ext.mechanism_is_device(m.name)
            if device and spec.target == "host":
                raise ValueError(f"mechanism {m.label} serves GPU memory: use it with --target cuda:N")
            if not device and m.name != "auto" and spec.target != "host":
                raise ValueError(f"mechanism {m.label} serves host memory: with --target {spec.target} use naive, "
                                 "staged or gds (host and pinned-copy are added as ceilings)")
        try:
            _ext.settings(list({**spec.settings, **dict(m.settings)}.items()))
        except OSError as e:  # a bad --set (or NAME+knob) value is a usage error
            raise ValueError(str(e)) from None


def _check_resources(spec: Spec, ranks_here: int) -> None:
    """What the run needs, against what the machine has, before it starts (bench audit, session 25:
    -r 64g ended in a MemoryError traceback, and nothing stopped -s 40g from filling the disk):
    - memory: each rank's buffers (threads x iodepth x record) and request offsets (8 bytes per
      record per thread) of the ranks on this host, at most 90% of MemAvailable;
    - space: per directory, the files of the largest configuration (processes x threads x -s;
      --files are the user's, already there), at most the free space there."""
    from .._system import fmt_amount, fmt_size, meminfo
    avail = meminfo().get("MemAvailable", 0) * 1024
    per_host = ranks_here  # the ranks sharing this host's memory
    need_mem, need_disk = 0, {}
    for d, _layout, p, t, fs, r, qd, m in spec.configurations():
        mem = t * (qd * r + 8 * -(-fs // r))
        if mem > need_mem:
            need_mem, why = mem, (t, qd, r, fs)
        if not spec.files:
            need_disk[d] = max(need_disk.get(d, 0), p * t * fs)
    if avail and need_mem * per_host > 0.9 * avail:
        t, qd, r, fs = why
        raise ValueError(f"the run needs {fmt_amount(need_mem)} of memory per process ({t} thread(s) x {qd} in flight x "
                         f"-r {fmt_size(r)}, and the offsets of -s {fmt_size(fs)})"
                         + (f", {per_host} processes on this host" if per_host > 1 else "")
                         + f", but {fmt_amount(avail)} is available: give a smaller -r, -s, -t or -Q")
    for d, need in need_disk.items():
        try:
            st = os.statvfs(d)
        except OSError:
            continue  # said by the checks of -d
        free = st.f_bavail * st.f_frsize
        if need > free:
            raise ValueError(f"-d {d}: the run writes up to {fmt_amount(need)} there (processes x threads x -s), but "
                             f"{fmt_amount(free)} is free: give a smaller -s, -t or -p, or another -d")


def _check_files_cover(spec: Spec) -> None:
    """A run of read tests only reads the --files as they are and never writes them: each must exist
    (else exit 1, as for any path) and hold every byte the run reads (else exit 2) with what to do,
    before it starts, rather than the file rewritten or a short read halfway."""
    from .._system import fmt_size
    tests = ",".join(spec.tests)
    for f, (need, writers) in file_extents(spec).items():
        try:  # a path that does not exist or cannot be used: exit 1, as for -d
            have = _file_size(f)
        except FileNotFoundError:
            raise FileNotFoundError(2, f"No such file; -T {tests} reads the files as they are and does not "
                                    f"create them: name an existing file, or put a write test first "
                                    f"(-T write,{tests}), which writes it", f"--files {f}") from None
        except OSError as e:
            raise type(e)(e.errno, e.strerror, f"--files {f}") from None
        if have < need:
            fit = have // writers
            fit_text = f"{fit >> 20}m" if fit >= 1 << 20 else f"{fit >> 10}k" if fit >= 1 << 10 else str(fit)
            raise ValueError(f"--files {f}: {fmt_size(have)}, but -T {tests} reads {fmt_size(need)} of it"
                             + (f" ({writers} writers x -s)" if writers > 1 else "") +
                             f"; a read-only run reads the files as they are and never writes them: give -s {fit_text} "
                             f"or less, or put a write test first (-T write,{tests}), which overwrites the file")


def _check_files_open(files: list[str], write: bool) -> None:
    """Each --files file that exists opens as the run will open it (read-only, or for writing without
    truncating it): an unreadable file was found by the first phase as `open 'secret': Permission
    denied`, without the option's name. One that does not exist is made by the run, in its directory."""
    for f in files:
        try:
            os.close(os.open(f, (os.O_RDWR if write else os.O_RDONLY) | os.O_NONBLOCK))  # a FIFO: no wait
        except FileNotFoundError:
            if write:  # made by the run, in a directory that must exist
                check_output_path("--files", f)
        except OSError as e:
            raise type(e)(e.errno, e.strerror, f"--files {f}") from None


def _file_size(path: str) -> int:
    """The bytes a file (or block device: its size is not in st_size) holds; IsADirectoryError for a directory."""
    import stat
    st = os.stat(path)
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(21, "Is a directory", path)
    if stat.S_ISREG(st.st_mode):
        return st.st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, 0, os.SEEK_END)
    finally:
        os.close(fd)


def count_phases(spec: Spec) -> int:
    n = 0
    for *_rest, m in spec.configurations():
        n += len(spec.tests) * spec.iterations * (2 if spec.vs_fio and fio.comparable(m) else 1)
    return n


def environment(spec: Spec, world: int) -> dict:
    info = gather(spec.dirs[0])
    paths = {d: {**path_info(d), "block_device": block_device(filesystem(d)["device"]),
                 "tuning_profile": tuning_profile(d)}
             for d in dict.fromkeys(spec.dirs + [os.path.dirname(os.path.abspath(f)) for f in spec.files])}
    return {"kernel": info["kernel"], "machine": info["machine"], "cpu": info["cpu"], "memory": info["memory"],
            "hostname": os.uname().nodename, "processes": world, "huge_pages": info["huge_pages"],
            "rlimit_memlock": info["rlimit_memlock"], "io_uring": info["io_uring"],
            "residency_query": info["residency_query"], "paths": paths,
            "settings": {k: v for k, v in effective_settings(**spec.settings).items() if k != "mechanism"},
            "mechanisms": info["mechanisms"], "fio": _fio_version() if spec.vs_fio else None}


def block_device(device: str) -> dict | None:
    """The block device under a filesystem, from /sys/class/block (the queue of the whole disk for
    a partition): model, rotational, scheduler, queue depth, block size, read-ahead. None for a
    filesystem without one (tmpfs, overlay, NFS)."""
    name = os.path.basename(os.path.realpath(device)) if device.startswith("/dev/") else ""
    sys_dir = f"/sys/class/block/{name}"
    if not name or not os.path.isdir(sys_dir):
        return None
    disk = os.path.realpath(sys_dir)
    if os.path.exists(os.path.join(disk, "partition")):
        disk = os.path.dirname(disk)

    def read(rel: str) -> str | None:
        try:
            with open(os.path.join(disk, rel)) as f:
                return f.read().strip()
        except OSError:
            return None
    sched = read("queue/scheduler")
    if sched and "[" in sched:
        sched = sched[sched.index("[") + 1:sched.index("]")]
    facts = {"name": name, "disk": os.path.basename(disk), "model": read("device/model"),
             "rotational": read("queue/rotational") == "1" if read("queue/rotational") else None,
             "scheduler": sched, "nr_requests": read("queue/nr_requests"),
             "logical_block_size": read("queue/logical_block_size"), "max_sectors_kb": read("queue/max_sectors_kb"),
             "read_ahead_kb": read("queue/read_ahead_kb")}
    return {k: v for k, v in facts.items() if v is not None}


def _fio_version() -> str:
    import subprocess
    return subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()


def parameters(spec: Spec) -> dict:
    return {"tests": spec.tests, "mechanisms": [m.label for m in spec.mechanisms], "file_sizes": spec.file_sizes,
            "records": spec.records, "threads": spec.threads, "processes": spec.processes, "layouts": spec.layouts,
            "dirs": spec.dirs, "files": spec.files, "iterations": spec.iterations, "target": spec.target,
            "drop_caches": spec.drop_caches, "vs_fio": spec.vs_fio, "verify": spec.verify,
            "iodepths": spec.iodepths, "runtime_s": spec.runtime, "files_read_as_found": reads_files_as_found(spec)}


def check_outputs(args) -> str | None:
    """The output options: which one (if any) is stdout; a DIR for --plot; FILEs that can be written.
    Checked before anything runs, so that a long run never ends on a bad output path."""
    if args.plot == "-":
        raise UsageError("--plot takes a directory for the PNG files; '-' (stdout) cannot hold them")
    if args.plot and importlib.util.find_spec("matplotlib") is None:  # now, not after the run; looked
        raise UsageError(report.NEEDS_MATPLOTLIB)                      # up, not imported, on every rank
    if args.plot:  # a directory made at the end (with its parents): checked now
        check_creatable("--plot", args.plot, directory=True)
    to_stdout = stdout_outputs(**{"--json": args.json, "--csv": args.csv, "--report": args.report})
    distinct_files(**{"--json": args.json, "--csv": args.csv, "--report": args.report})
    for option, path in (("--json", args.json), ("--csv", args.csv), ("--report", args.report)):
        check_output_path(option, path)
    return to_stdout


def main(args) -> int:
    world = comm_mod.world()
    err, code = None, 0
    try:
        spec = build_spec(args, world.size, world.ranks_here)
        to_stdout = check_outputs(args)
    except (ValueError, UsageError) as e:
        err, code = UsageError(str(e)), 2
    except OSError as e:
        err, code = e, 1
    if world.size > 1:
        # One decision for every rank: a rank that refused alone (its host's memory or space, a path
        # only it lacks) exited while the others waited for it at their first barrier (review, s25).
        said = world.gather((code, None if err is None else f"rank {world.rank}: {describe(err)}"))
        verdict = world.bcast(None if said is None else
                              (max(c for c, _m in said), next((m for c, m in said if m), None)))
        if verdict[0] and err is None:
            err = UsageError(verdict[1]) if verdict[0] == 2 else RuntimeError(verdict[1])
        code = verdict[0]
    if err is not None:
        if world.rank == 0:
            raise err
        return code
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    t0 = time.monotonic()
    phases = count_phases(spec)
    progress = Progress("accio bench", world.rank == 0 and not args.quiet, total=phases)
    notes = skipped_sizes(spec) + unaligned_direct(spec)
    if spec.vs_fio and (alone := [m.label for m in spec.mechanisms if not fio.comparable(m)]):
        # said, not silent (bench audit, session 25: -m auto --vs-fio printed no fio table and no word)
        same = [m.label for m in spec.mechanisms if fio.comparable(m)]
        notes.append(f"--vs-fio: {', '.join(alone)} {'has' if len(alone) == 1 else 'have'} no fio equivalent (fio runs "
                     f"one fixed way); compared with fio: {', '.join(same) or 'none'}")
    if world.rank == 0:
        for note in notes:  # not progress: said under -q too
            print(f"accio bench: warning: {note}", file=sys.stderr, flush=True)
    if world.rank == 0 and not args.quiet:
        print(f"accio bench{' --preset ' + spec.preset if spec.preset else ''}: {phases} timed "
              f"phase{'' if phases == 1 else 's'}, "
              f"{len(spec.mechanisms)} mechanism(s), {world.size} process(es), in {', '.join(spec.files or spec.dirs)}"
              + (" (read as they are: not written, not verified)" if reads_files_as_found(spec) else ""),
              file=sys.stderr, flush=True)
    doc = None
    if world.rank == 0:
        doc = {"schema": output.SCHEMA, "accio": {"version": __version__, "git_commit": _ext.git_commit()},
               "command": ["accio", "bench", *sys.argv[2:]] if sys.argv[1:2] == ["bench"] else sys.argv,
               "preset": spec.preset, "table": spec.table, "started": started, "duration_s": 0.0, "complete": False,
               "environment": environment(spec, world.size), "parameters": parameters(spec),
               "warnings": [], "results": []}

    json_failed: list[str] = []  # why the --json file could not be written, once said

    def keep(_result=None) -> bool:
        """After every cell (and at the end): the JSON so far, replaced atomically, so that a run that
        is interrupted or killed keeps every cell it finished. A file that cannot be written (its
        folder gone, a full or read-only filesystem) stops nothing: the run goes on, says so once,
        and tries again after the next cell (bench audit, session 25: the run ended with exit 1 and
        lost every cell, and under mpirun the other ranks waited at their barrier for ever)."""
        doc["duration_s"] = time.monotonic() - t0
        doc["warnings"] = notes + [w for w in _ext.warnings().splitlines() if w]
        if not args.json or args.json == "-":
            return True
        try:
            output.write_json(args.json, doc)
        except OSError as e:
            if not json_failed:
                print(f"accio bench: warning: cannot write --json {args.json}: {describe(e)}; the run goes on, "
                      "and the results are printed (and saved elsewhere) at the end", file=sys.stderr, flush=True)
            json_failed[:] = [describe(e)]
            return False
        json_failed.clear()
        return True

    runner = Runner(spec, world, progress, on_result=keep if world.rank == 0 else None)
    if doc is not None:
        doc["results"] = runner.results  # the list the runner appends to
    interrupted = 0  # the exit status of an interruption
    try:  # SIGTERM (kill, a batch system, mpirun passing on Ctrl-C or ending the job) as Ctrl-C: each rank
        # removes its own scratch files on the way out (under mpirun they stayed: bench audit, session 25)
        with sigterm_interrupts():
            runner.run()
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: report what was measured, then exit 130 or 143
        interrupted = interrupted_status(e)
    except Exception as e:
        if world.size > 1 and getattr(e, "everywhere", False):  # every rank has it: rank 0 says it, once
            if world.rank != 0:
                return 1
        elif world.size > 1:  # the other ranks would wait at their next barrier, and at MPI_Finalize, for ever
            progress.close()
            print(f"accio bench: rank {world.rank}: {describe(e)}; ending every rank", file=sys.stderr, flush=True)
            runner.remove_run_files()
            world.abort(1)
        raise
    finally:
        progress.close()
    if world.rank != 0:
        return _leave(world, interrupted, runner)
    doc["complete"] = not interrupted
    saved_elsewhere = None
    if not keep():  # the asked file still cannot be written: keep the run in a file that can
        try:
            fd, saved_elsewhere = tempfile.mkstemp(prefix="accio-bench.", suffix=".json")
            os.close(fd)
            output.write_json(saved_elsewhere, doc)
        except OSError as e:  # nowhere to keep it: the table is all that is left
            saved_elsewhere = f"nowhere: {describe(e)}; the table is all that is left of the run"
    results = doc["results"]
    # stdout holds the JSON, CSV or HTML asked for: the tables go to stderr, or nowhere under -q
    table_out = (io.StringIO() if args.quiet else sys.stderr) if to_stdout else sys.stdout
    print(output.render_table(results, spec.table), file=table_out)
    if lat := output.render_latency(results):
        print("\n" + lat, file=table_out)
    if spec.target != "host" and (ratios := output.device_ratios(results)):
        print("\n" + ratios, file=table_out)
    fio_table = output.render_fio(results)
    if fio_table:
        print("\naccio vs fio (same files, same run)\n" + fio_table, file=table_out)
    table_out.flush()
    written = []
    if args.json:
        if args.json == "-":
            output.write_json(args.json, doc)
        if not saved_elsewhere:
            written.append(args.json)
    if args.csv:
        output.write_csv(args.csv, results)
        written.append(args.csv)
    if args.plot:
        plots = report.write_plots(results, args.plot)
        if not plots and results:  # an empty folder and exit 0 said nothing (new-user audit, session 25)
            print(f"accio bench: note: --plot {args.plot}: no plot to draw; a plot needs two record sizes (-r), "
                  "thread counts (-t), or file sizes and record sizes (-s, -r)", file=sys.stderr)
        written += plots
    if args.report:
        report.write_html(args.report, doc, spec.table)
        written.append(args.report)
    written = [w for w in written if w != "-"]
    if written and not args.quiet:
        print("wrote " + ", ".join(written), file=sys.stderr)
    kept = sorted(runner.created) if spec.keep and not spec.files else []
    if kept and not args.quiet:  # where --keep left them (generated names)
        print(f"kept {len(kept)} file(s){' of rank 0 (each rank keeps its own)' if world.size > 1 else ''}: "
              f"{', '.join(kept)}", file=sys.stderr)
    if saved_elsewhere:
        print(f"accio bench: cannot write --json {args.json}: {json_failed[0]}; the run's JSON is "
              + (saved_elsewhere if saved_elsewhere.startswith("nowhere") else f"in {saved_elsewhere}"), file=sys.stderr)
    if interrupted:
        print(f"accio bench: interrupted after {len(results)} result(s); the output holds those "
              "(\"complete\": false in the JSON)", file=sys.stderr, flush=True)
        return _leave(world, interrupted, runner)
    return 1 if saved_elsewhere else 0


LEAVE_S = 10.0  # how long an interrupted rank waits for the others to leave too, before MPI_Abort


def _leave(world, interrupted: int, runner) -> int:
    """An interrupted rank's way out under mpirun: the others leave too (Ctrl-C to mpirun reaches
    them all), or, past LEAVE_S (one rank was signalled alone), MPI_Abort ends them. mpirun's
    SIGTERM makes them remove their files, and this rank removes first every file of the run it
    sees (Runner.remove_run_files: mpirun's SIGKILL follows a second later)."""
    if interrupted and world.size > 1 and not world.leave(LEAVE_S):
        print(f"accio bench: rank {world.rank}: interrupted alone; ending every rank", file=sys.stderr, flush=True)
        runner.remove_run_files()
        world.abort(interrupted)
    return interrupted


def compare_main(argv: list[str]) -> int:
    p = Parser(prog="accio bench compare", description="Ratios B/A of two accio bench JSON "
                                "files, for every result (test, mechanism, sizes, threads, ...) present in both, "
                                "each with the 95% bootstrap interval of the two runs' own spread, and their "
                                "geometric mean. Descriptive: two runs are not interleaved, so drift between them "
                                "is in no interval, and no result is called faster or slower; to judge a change, "
                                "interleave the contenders (docs/methodology.md).")
    p.add_argument("a", metavar="A.json", help="the run to compare against ('-' for stdin)")
    p.add_argument("b", metavar="B.json", help="the other run ('-' for stdin, if A is a file)")
    args = p.parse_args(argv)
    if args.a == args.b == "-":
        raise UsageError("A and B both ask for stdin ('-'); give one of them a file name")
    a, b = _load_run(args.a), _load_run(args.b)  # missing or not a bench JSON: exit 1
    try:
        text = output.compare(a, b)
    except (ValueError, KeyError, TypeError) as e:
        what = f"a result lacks {e}" if isinstance(e, KeyError) else str(e)
        raise RuntimeError(f"{args.a} vs {args.b}: {what}: not complete accio bench files") from None
    if text is None:  # nothing to compare is a failure a script must see, not a table
        raise RuntimeError(f"no result appears in both {args.a} and {args.b} (the same test, mechanism, sizes, "
                           "threads, processes and layout)")
    print(text)
    return 0


def _load_run(path: str) -> dict:
    """A bench JSON file ('-': stdin): a missing or unreadable one is an OSError, one that is not a
    bench JSON (or not JSON) a RuntimeError: both exit 1 (it ran and failed) with one sentence that
    names the file."""
    name = "stdin" if path == "-" else path
    with (contextlib.nullcontext(sys.stdin) if path == "-" else open(path)) as f:
        try:
            doc = json.load(f)
        except ValueError as e:  # UnicodeDecodeError too: a binary file
            raise RuntimeError(f"{name} is not JSON ({e}): give the --json file of an accio bench run") from None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("accio.bench/"):
        raise RuntimeError(f"{name} is not an accio bench JSON file "
                           f"(schema {doc.get('schema') if isinstance(doc, dict) else None!r}): give the --json file "
                           "of an accio bench run")
    return doc


def report_main(argv: list[str]) -> int:
    """`accio bench report RUN.json`: the table again, and the HTML report redrawn from the JSON
    (also from a run that was interrupted: it holds the cells that finished)."""
    p = Parser(prog="accio bench report", description="Redraw the report of an accio bench "
                                "run from its JSON: the table on stdout and the HTML report (tables, plots, "
                                "summary), e.g. after an interrupted run or with a newer accio.")
    p.add_argument("run", metavar="RUN.json", help="the run's --json file ('-' for stdin, with -o)")
    p.add_argument("-o", "--output", metavar="FILE", help="the HTML report (default: RUN.html beside the JSON; "
                   "'-' for stdout, the table then goes to stderr)")
    args = p.parse_args(argv)
    out = args.output or (args.run[:-5] if args.run.endswith(".json") else args.run) + ".html"
    if args.run == "-":  # the output checked before stdin is read, which cannot be read twice
        if not args.output:
            raise UsageError("a run from stdin ('-') has no name to put the report beside: give -o FILE.html "
                             "(or -o - for stdout)")
        check_output_path("--output", out)
    distinct_files(**{"RUN.json": args.run, "--output": out})
    doc = _load_run(args.run)  # a file's error first: it is the one to fix
    check_output_path("--output", out)
    try:
        preset = doc.get("preset")  # files from before "table": the preset's layout
        kind = doc.get("table") or (preset if preset in output.ROW_DIMS else "generic")
        print(output.render_table(doc["results"], kind), file=sys.stderr if out == "-" else sys.stdout)
        report.write_html(out, doc, kind)
    except (KeyError, TypeError) as e:
        raise RuntimeError(f"{'stdin' if args.run == '-' else args.run}: a result lacks {e}: not a complete "
                           "accio bench file") from None
    if out != "-":
        print(f"wrote {out}", file=sys.stderr)
    return 0


# `accio bench NAME ...`: the sub-commands beside the run; `accio bench run ...` is the run itself.
SUBCOMMANDS = ("run", "compare", "report", "safetensors")


def subcommand(name: str):
    """The function behind `accio bench NAME argv...` for a SUBCOMMANDS name other than run."""
    if name == "compare":
        return compare_main
    if name == "report":
        return report_main
    if name == "safetensors":
        from .checkpoint import main as safetensors_main
        return safetensors_main
    raise KeyError(name)


__all__ = ["add_arguments", "main", "compare_main", "report_main", "SUBCOMMANDS", "subcommand"]
