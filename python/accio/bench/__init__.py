"""`accio bench`: every accio mechanism measured side by side with the methodology of IOzone and IOR.

    accio bench --preset quick --report report.html
    accio bench -T write,write+sync,cold-read -s 1g -r 1m,16m -t 1,2 -m all --json out.json
    mpirun -np 4 accio bench --preset ior --json ior.json
    accio bench compare A.json B.json

Modules: spec (tests, parameters, presets), runner (the phases, caches, ranks), comm (MPI),
fio (--vs-fio), output (tables, JSON, CSV, compare), report (plots, HTML). docs/methodology.md
explains what is measured and how.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time

from .. import __version__, _ext, settings as effective_settings
from .._usage import UsageError, check_output_path, stdout_outputs
from ..info import gather, path_info
from . import comm as comm_mod
from . import fio, output, report
from .runner import Runner
from .._system import online_cpus, parse_sizes
from .spec import LAYOUTS, TESTS, Spec, apply_preset, parse_counts, parse_mechanisms, parse_tests

DEFAULTS = dict(tests="write,rewrite,read,reread", mechanisms="all", file_sizes="256m", records="1m",
                threads="1", iterations=3)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Measure every mechanism with IOzone/IOR semantics: write, rewrite, read, reread,\n"
                     "write+sync (fsync timed), cold-read (page cache dropped and verified), random-read,\n"
                     "random-write. Under mpirun, one rank per process with IOR's rules.\n"
                     "`accio bench compare A.json B.json` prints the ratios of two runs.\n"
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
    g.add_argument("--target", default="host", help="where the buffers live: host or cuda:N (GPU memory: the "
                   "columns are naive, staged, gds plus the ceilings host and pinned-copy)")
    g.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="an engine setting for every mechanism, e.g. --set threads=2 (repeatable)")
    g = p.add_argument_group("files")
    g.add_argument("-d", "--dir", action="append", dest="dirs", metavar="DIR",
                   help="directory for the files under test (repeatable: each is a row group; default: temp dir)")
    g.add_argument("--files", help="comma-separated file names to use instead (as iozone -F; overwritten, kept)")
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
                   "for posix, parallel, direct and uring and print the ratios")
    g.add_argument("--no-verify", dest="verify", action="store_false",
                   help="do not check the record stamps that reads find")
    g = p.add_argument_group("output")
    g.add_argument("--json", metavar="FILE", help="every sample and the environment (schema accio.bench/1); "
                   "'-' for stdout (the table then goes to stderr)")
    g.add_argument("--csv", metavar="FILE", help="one line per result ('-' for stdout)")
    g.add_argument("--plot", metavar="DIR", help="PNG plots (needs matplotlib)")
    g.add_argument("--report", metavar="FILE", help="a self-contained HTML report ('-' for stdout)")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def build_spec(args, world: int) -> Spec:
    explicit = {k for k in ("tests", "mechanisms", "file_sizes", "records", "threads", "processes", "iterations",
                            "dirs", "layout") if getattr(args, k) is not None}
    explicit = {{"layout": "layouts"}.get(k, k) for k in explicit}
    n = online_cpus()
    get = lambda k: getattr(args, k) if getattr(args, k) is not None else DEFAULTS.get(k)  # noqa: E731
    _check_target(args.target)
    spec = Spec(tests=parse_tests(get("tests")), mechanisms=parse_mechanisms(get("mechanisms"), args.target),
                file_sizes=parse_sizes(get("file_sizes")), records=parse_sizes(get("records")),
                threads=parse_counts(get("threads"), n),
                processes=parse_counts(args.processes, world) if args.processes else [world],
                layouts=_layouts(args.layout), dirs=args.dirs or [tempfile.gettempdir()],
                iterations=get("iterations"), target=args.target,
                files=[f for f in (args.files or "").split(",") if f],
                settings=dict(_kv(x) for x in args.set), drop_caches=args.drop_caches, vs_fio=args.vs_fio,
                keep=args.keep, verify=args.verify)
    if args.preset:
        spec = apply_preset(spec, args.preset, world, explicit)
    _check(spec, world)
    return spec


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


def _check(spec: Spec, world: int) -> None:
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
    if spec.drop_caches and os.geteuid() != 0:
        raise ValueError("--drop-caches writes /proc/sys/vm/drop_caches and needs root; without it cold reads "
                         "use posix_fadvise(DONTNEED), verified with a residency check")
    if spec.vs_fio and not fio.available():
        raise ValueError("--vs-fio needs fio on PATH (apt-get install fio)")
    if spec.vs_fio and world > 1:
        raise ValueError("--vs-fio runs in a single process; run it without mpirun")
    if max(spec.processes) > world:
        raise ValueError(f"{max(spec.processes)} processes asked for, but {world} rank(s) run; "
                         f"start with: mpirun -np {max(spec.processes)} accio bench ...")
    if spec.files:  # one file per thread and process (fpp); found before the run, not in its middle
        need = max((p * t for _d, layout, p, t, *_ in spec.configurations() if layout == "fpp"), default=1)
        if len(spec.files) < need:
            raise ValueError(f"--files: {need} files needed (one per thread and process), {len(spec.files)} given")
    for d in spec.dirs:  # the file system said no: exit 1, as for any path that cannot be used
        if not os.path.exists(d):
            raise FileNotFoundError(2, "No such file or directory", f"-d {d}")
        if not os.path.isdir(d):
            raise NotADirectoryError(20, "Not a directory", f"-d {d}")
        if not os.access(d, os.W_OK):
            raise PermissionError(13, "Permission denied (not a writable directory)", f"-d {d}")
    # settings (with each mechanism's own) are checked by the engine now rather than in the middle of the run
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


class Progress:
    """Progress on stderr, one step per timed phase: a tqdm bar on a terminal (after 2 s), otherwise
    (a pipe, a log file, a batch job) a line every `every` seconds with the phase count, the time
    so far and an estimate of the rest, so that a long run is never silent."""

    def __init__(self, total: int, enabled: bool, tty: bool | None = None, every: float = 10.0,
                 clock=time.monotonic):
        self.bar = None
        self.total, self.done, self.every, self.clock = total, 0, every, clock
        self.lines = enabled and not (sys.stderr.isatty() if tty is None else tty)
        self.t0 = self.last = clock()
        if enabled and not self.lines:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, file=sys.stderr, delay=2, unit="phase", leave=False,
                                bar_format="{l_bar}{bar}| {n}/{total} [{elapsed}<{remaining}]")
            except ImportError:
                self.lines = True

    def step(self, desc: str) -> None:
        """Called as a phase starts; desc names it."""
        if self.bar:
            self.bar.set_description_str(desc, refresh=False)
            self.bar.update(1)
            return
        if self.lines:
            t = self.clock()
            if t - self.last >= self.every:
                self.last = t
                spent = t - self.t0
                left = spent / self.done * (self.total - self.done) if self.done else float("nan")
                print(f"accio bench: {self.done}/{self.total} phases done, {spent:.0f} s"
                      + (f", about {left:.0f} s left" if self.done else "") + f"; now {desc}",
                      file=sys.stderr, flush=True)
        self.done += 1

    def close(self) -> None:
        if self.bar:
            self.bar.close()


def count_phases(spec: Spec) -> int:
    n = 0
    for *_rest, m in spec.configurations():
        n += len(spec.tests) * spec.iterations * (2 if spec.vs_fio and fio.comparable(m) else 1)
    return n


def environment(spec: Spec, world: int) -> dict:
    info = gather(spec.dirs[0])
    paths = {d: path_info(d) for d in dict.fromkeys(spec.dirs + [os.path.dirname(os.path.abspath(f))
                                                                  for f in spec.files])}
    return {"kernel": info["kernel"], "machine": info["machine"], "cpu": info["cpu"], "memory": info["memory"],
            "hostname": os.uname().nodename, "processes": world, "huge_pages": info["huge_pages"],
            "rlimit_memlock": info["rlimit_memlock"], "io_uring": info["io_uring"],
            "residency_query": info["residency_query"], "paths": paths,
            "settings": {k: v for k, v in effective_settings(**spec.settings).items() if k != "mechanism"},
            "mechanisms": info["mechanisms"], "fio": _fio_version() if spec.vs_fio else None}


def _fio_version() -> str:
    import subprocess
    return subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()


def parameters(spec: Spec) -> dict:
    return {"tests": spec.tests, "mechanisms": [m.label for m in spec.mechanisms], "file_sizes": spec.file_sizes,
            "records": spec.records, "threads": spec.threads, "processes": spec.processes, "layouts": spec.layouts,
            "dirs": spec.dirs, "files": spec.files, "iterations": spec.iterations, "target": spec.target,
            "drop_caches": spec.drop_caches, "vs_fio": spec.vs_fio, "verify": spec.verify}


def check_outputs(args) -> str | None:
    """The output options: which one (if any) is stdout; a DIR for --plot; FILEs that can be written.
    Checked before anything runs, so that a long run never ends on a bad output path."""
    if args.plot == "-":
        raise UsageError("--plot takes a directory for the PNG files; '-' (stdout) cannot hold them")
    to_stdout = stdout_outputs(**{"--json": args.json, "--csv": args.csv, "--report": args.report})
    for option, path in (("--json", args.json), ("--csv", args.csv), ("--report", args.report)):
        check_output_path(option, path)
    return to_stdout


def main(args) -> int:
    world = comm_mod.world()
    try:
        spec = build_spec(args, world.size)
        to_stdout = check_outputs(args)
    except (ValueError, UsageError) as e:
        if world.rank == 0:
            raise UsageError(str(e)) from None
        return 2
    except OSError:
        if world.rank == 0:
            raise
        return 1
    started = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    t0 = time.monotonic()
    phases = count_phases(spec)
    progress = Progress(phases, world.rank == 0 and not args.quiet)
    if world.rank == 0 and not args.quiet:
        print(f"accio bench{' --preset ' + spec.preset if spec.preset else ''}: {phases} timed phases, "
              f"{len(spec.mechanisms)} mechanism(s), {world.size} process(es), in {', '.join(spec.files or spec.dirs)}",
              file=sys.stderr, flush=True)
    try:
        results = Runner(spec, world, progress).run()
    finally:
        progress.close()
    if world.rank != 0:
        return 0
    doc = {"schema": output.SCHEMA, "accio": {"version": __version__, "git_commit": _ext.git_commit()},
           "command": ["accio", "bench", *sys.argv[2:]] if sys.argv[1:2] == ["bench"] else sys.argv,
           "preset": spec.preset, "started": started, "duration_s": time.monotonic() - t0,
           "environment": environment(spec, world.size), "parameters": parameters(spec),
           "warnings": [w for w in _ext.warnings().splitlines() if w], "results": results}
    table_out = sys.stderr if to_stdout else sys.stdout  # stdout holds the JSON, CSV or HTML asked for
    print(output.render_table(results, spec.table), file=table_out)
    if spec.target != "host" and (ratios := output.device_ratios(results)):
        print("\n" + ratios, file=table_out)
    fio_table = output.render_fio(results)
    if fio_table:
        print("\naccio vs fio (same files, same run)\n" + fio_table, file=table_out)
    table_out.flush()
    written = []
    if args.json:
        output.write_json(args.json, doc)
        written.append(args.json)
    if args.csv:
        output.write_csv(args.csv, results)
        written.append(args.csv)
    if args.plot:
        written += report.write_plots(results, args.plot)
    if args.report:
        report.write_html(args.report, doc, spec.table)
        written.append(args.report)
    written = [w for w in written if w != "-"]
    if written and not args.quiet:
        print("wrote " + ", ".join(written), file=sys.stderr)
    return 0


def compare_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="accio bench compare", description="Ratios B/A of two accio bench JSON "
                                "files, for every result (test, mechanism, sizes, threads, ...) present in both.")
    p.add_argument("a", metavar="A.json")
    p.add_argument("b", metavar="B.json")
    args = p.parse_args(argv)
    try:  # a file that is missing or not a bench JSON: it ran and failed (1); OSError goes to the guard
        with open(args.a) as fa, open(args.b) as fb:
            a, b = json.load(fa), json.load(fb)
        print(output.compare(a, b))
    except (ValueError, KeyError) as e:
        raise RuntimeError(str(e)) from None
    return 0


__all__ = ["add_arguments", "main", "compare_main"]
