#!/usr/bin/env python3
"""Unmodified programs, plain and under `accio run` (the native launcher accio-run, default
settings), side by side in one run (issue 20). For each case and cache state the two contenders
run interleaved (accio.stats: rotating order, >= 7 rounds each), and the report gives the median
ratio (shim over plain, as rates: > 1 is faster under the shim) with its 95% bootstrap interval,
each side's spread, the goal (>= 0.98: never slower) and which calls the shim served (one extra
untimed run with --stats-json: engine calls, calls the planner passed back to libc, prefetch
windows asked for).

Cases: cat, cp, dd at bs 128K/1M/64M, sha256sum, tar c, gzip -1, numpy.fromfile, Python readinto
of 64 KiB and 64 MiB, fio's psync engine at 128K and 4M, torch.load when torch is installed. Each
reads the test file, except gzip -1 (a 64 MiB file of its own: it compresses at about 45 MB/s) and
torch.load (a saved tensor of the test file's size); each case's own file is made hot or cold
before every run and gives its rate.
Beside them, measured in the same run:
  engine   accio's own read of the whole file, parallel vs posix (64 MiB requests): the ratio the
           large-request goal compares with (dd bs=64M and readinto 64 MiB >= 0.8 x it, hot);
  loop     the readinto programs time their own reading (the open and the readinto loop, not the
           buffer's allocation: "loop" in the JSON), as the engine's figure is timed, so the
           large-request goal is given for the whole run and for that loop, and the rest of each
           run (the interpreter's start and exit, the buffer, the preload) is shown in ms per side;
  fio-qd   with --cache cold: fio libaio O_DIRECT sequential 128K reads at queue depth 16 vs 1, and
           fio psync buffered 128K reads (a reader's own rate, the kernel's readahead at work):
           where QD16 is >= 1.5x QD1 and >= 1.5x the reader's own rate (the headroom: a prefetch
           cannot add more), the cold small-request readers (cat, sha256sum, readinto 64 KiB; not
           numpy.fromfile, which reads the whole file with one fread) should gain >= 1.5x from the
           shim's prefetch;
  launch   `true` plainly, as `accio-run -- true` and as `accio run -- true` (the native `accio`
           front end, src/preload/front.c), interleaved: each one's cost (goal: within 2 ms);
  front    the exec the front end adds in front of accio-py (the Python CLI it execs for every
           command but run), alone, with true(1) standing in for accio-py (goal: <= 1 ms); and
           `accio --version` and `accio info` vs the same through accio-py (goal: within noise).
Cold runs drop the file's pages first (accio._system.drop_pages; residency checked). With --prefetch
SIZE, the cold small-request readers get one more shim contender with the prefetch forced on
(ACCIO_PRELOAD_PREFETCH=SIZE): the default settings prefetch only where a tuning profile measured
that the device gains from depth, and this says what the prefetch gives on a device never tuned.

Which tuning profile the shim's planner uses: without --profile, the environment's (ACCIO_PROFILE,
else the profile `accio tune` wrote for the file's filesystem, else the built-in model). Each
--profile (`off`: the built-in model, or a profile's path) adds one shim contender run with
ACCIO_PROFILE set so, all interleaved in the same rounds with plain, so that a profile and the
built-in model are compared with each other in one run and not across runs of different noise:
each gets its ratio over plain, and the JSON records the profiles and, with two, the ratio of the
second over the first ("profile_vs").

    python benchmarks/run_programs.py --quick                       # small file, 7 rounds, a minute
    python benchmarks/run_programs.py --size 2g --cache hot --json results/run/run_programs_hot.json
    python benchmarks/run_programs.py --size 2g --cache hot --profile off --profile results/tune/profile_ext4_vda.json \
        --cases cat,dd-128k,dd-1m --json results/run/run_programs_hot_profiles.json
    python benchmarks/run_programs.py --size 1g --cache cold --json results/run/run_programs_cold.json
    python benchmarks/run_programs.py --launch-only --rounds 61 --json results/run/launch.json   # under a minute
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import accio
from accio import stats
from accio.bench import block_device
from accio.info import filesystem
from accio._system import drop_pages, parse_size, residency
from accio._usage import write_json
from accio.run import launcher_path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from preload_bench import make_file, timed  # noqa: E402  (the file maker and the timed run of issue 5's bench)

MiB = 1 << 20
GOAL_NEVER_SLOWER = 0.98
GOAL_LARGE = 0.8      # of the engine's own parallel/posix ratio
GOAL_PREFETCH = 1.5   # cold small-request readers, where fio QD16/QD1 >= 1.5
GOAL_LAUNCH_MS = 2.0
GOAL_FRONT_MS = 1.0   # accio COMMAND over accio-py COMMAND: one exec

# The readinto cases also time their own reading (the open and the loop) and append the seconds to
# the file named by argv[3]. The interpreter's start and exit (about 90 ms for the GPU machine's torch
# venv, 10 ms here) and the buffer's allocation (bytearray zeroes it: 64 MiB took 32 ms on the 2-CPU
# VM, while the shim's whole timed loop of 2 GiB on the H200's 16 CPUs took 75 ms) are left out of
# that figure, as engine_ratio leaves its buffer out; the case's own rate (the whole run) keeps them.
READINTO = ("import sys, time\nn = int(sys.argv[2])\nbuf = bytearray(n)\nt0 = time.perf_counter()\n"
            "with open(sys.argv[1], 'rb', buffering=0) as f:\n    while f.readinto(buf):\n        pass\n"
            "with open(sys.argv[3], 'a') as out:\n    out.write(f'{time.perf_counter() - t0}\\n')\n")
FROMFILE = "import sys, numpy\nnumpy.fromfile(sys.argv[1], dtype=numpy.uint8)\n"
TORCH_LOAD = "import sys, torch\ntorch.load(sys.argv[1])\n"
# numpy.fromfile is not one: it reads the whole file with one fread, a large read the shim serves.
SMALL_READERS = {"cat", "sha256sum", "readinto-64k"}


def installed(name: str) -> str | None:
    """A command as installed beside this interpreter (the scripts directory), else on PATH."""
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.is_file() else shutil.which(name)


def launcher() -> str:
    """accio-run beside this interpreter (it finds that installation's accio-py for --stats), else on
    PATH, else the package's own."""
    return installed("accio-run") or launcher_path()


def added_ms(samples: dict, name: str, base: str, r: stats.Ratio) -> dict:
    """What name adds to base in milliseconds (samples are 1/seconds): the paired median ratio of name
    over base and its interval, applied to base's median time."""
    t = 1 / stats.median(samples[base]) * 1e3
    return {"added_ms": t * (1 / r.estimate - 1), "interval_ms": [t * (1 / r.high - 1), t * (1 / r.low - 1)]}


def launch(rounds: int) -> dict:
    """`true` plainly, through accio-run and through the native accio, interleaved: what each adds."""
    front = installed("accio")
    contenders = {"plain": lambda: 1 / timed(["true"]), "accio-run": lambda: 1 / timed([launcher(), "--", "true"])}
    if front:
        contenders["accio run"] = lambda: 1 / timed([front, "run", "--", "true"])
    samples = stats.interleave(contenders, rounds)
    rec = {"case": "launch", "samples": samples, "summary": {n: stats.summary(v) for n, v in samples.items()},
           "goal_ms": GOAL_LAUNCH_MS, "front": front, "added": {}}
    for name in samples:
        if name == "plain":
            continue
        r = stats.ratio(samples[name], samples["plain"], paired=True)
        add = dict(added_ms(samples, name, "plain", r), ratio=r.as_dict(), ratio_text=stats.describe(r))
        add["goal_result"] = "met" if add["added_ms"] <= GOAL_LAUNCH_MS else "missed"
        rec["added"][name] = add
        lo, hi = add["interval_ms"]
        print(f"{'launch':18s} {name + ' -- true':22s} adds {add['added_ms']:.2f} ms [{lo:.2f}-{hi:.2f}] over `true` "
              f"(goal <= {GOAL_LAUNCH_MS} ms: {add['goal_result']})", flush=True)
    return rec


def front_end(rounds: int) -> list[dict]:
    """accio's other commands: the native front end execs accio-py; against accio-py itself."""
    front, py = installed("accio"), installed("accio-py")
    if not front or not py:
        print("front: no accio and accio-py installed beside this interpreter or on PATH: skipped")
        return []
    # The exec alone, without Python's noise: a copy of the front end whose accio-py is true(1).
    bare = Path(tempfile.mkdtemp(prefix="accio-front-"))
    shutil.copy2(front, bare / "accio")
    shutil.copy2(shutil.which("true"), bare / "accio-py")
    out = []
    for label, fr, p, args in (("exec only", str(bare / "accio"), str(bare / "accio-py"), ["--version"]),
                               ("accio --version", front, py, ["--version"]), ("accio info", front, py, ["info", "."])):
        rec = compare(label, {"accio-py": lambda p=p, a=args: 1 / timed([p, *a]),
                              "accio": lambda f=fr, a=args: 1 / timed([f, *a])}, rounds, base="accio-py")
        rec.update(added_ms(rec["samples"], "accio", "accio-py", stats.Ratio(**rec["ratio"])))
        if fr == front:  # behind a Python start-up one exec is noise: the goal is "not slower"
            rec["goal"] = "within noise of accio-py, or faster"
            rec["goal_result"] = {"within noise": "met", "faster": "met", "slower": "missed"}.get(rec["verdict"],
                                                                                                "undecided")
        else:
            rec["goal_ms"] = GOAL_FRONT_MS
            rec["goal_result"] = "met" if rec["added_ms"] <= GOAL_FRONT_MS else "missed"
        lo, hi = rec["interval_ms"]
        print(f"{'':18s} accio adds {rec['added_ms']:.2f} ms [{lo:.2f}-{hi:.2f}] over accio-py "
              f"(goal {rec.get('goal') or f'<= {GOAL_FRONT_MS} ms'}: {rec['goal_result']})", flush=True)
        out.append(rec)
    shutil.rmtree(bare)
    return out


# gzip -1 compresses this random data at about 45 MB/s (one core): it reads a file of its own,
# GZIP_SIZE bytes of random data made as the test file is, so that one run takes about a second and a half
# and not 45 s (a 2 GiB file, 15 runs: 11 minutes). Its ratio is the shim's cost for a CPU-bound reader.
GZIP_SIZE = 64 * MiB


def cases(big: Path, work: Path, size: int) -> dict[str, tuple[list[str], Path]]:
    """Each case's command and the file it reads (what is made hot or cold before each run, and
    whose size gives the rate)."""
    py = sys.executable
    gz = work / "gzip-input.bin" if size > GZIP_SIZE else big
    tensor = work / "tensor.pt"
    fio = ["fio", "--name=accio-run-bench", f"--filename={big}", f"--size={size}", "--rw=read", "--ioengine=psync",
           "--invalidate=0", "--readonly", "--output-format=terse"]
    c = {
        "cat": ["cat", str(big)],
        "cp": ["cp", str(big), str(work / "copy.bin")],
        "dd-128k": ["dd", f"if={big}", "of=/dev/null", "bs=128k"],
        "dd-1m": ["dd", f"if={big}", "of=/dev/null", "bs=1M"],
        "dd-64m": ["dd", f"if={big}", "of=/dev/null", "bs=64M"],
        "sha256sum": ["sha256sum", str(big)],
        "tar-c": ["tar", "cf", str(work / "out.tar"), "-C", str(big.parent), big.name],
        "gzip-1": ["sh", "-c", f"gzip -1 -c '{gz}' > /dev/null"],
        "numpy.fromfile": [py, "-c", FROMFILE, str(big)],
        "readinto-64k": [py, "-c", READINTO, str(big), str(64 << 10), str(work / "loop-seconds")],
        "readinto-64m": [py, "-c", READINTO, str(big), str(64 << 20), str(work / "loop-seconds")],
        "fio-psync-128k": fio + ["--bs=128k"],
        "fio-psync-4m": fio + ["--bs=4M"],
    }
    if shutil.which("fio") is None:
        del c["fio-psync-128k"], c["fio-psync-4m"]
    try:
        import torch  # noqa: F401
        c["torch.load"] = [py, "-c", TORCH_LOAD, str(tensor)]
    except ImportError:
        pass
    return {n: (argv, gz if n == "gzip-1" else tensor if n == "torch.load" else big) for n, argv in c.items()}


def prepare(big: Path, size: int, cold: bool) -> None:
    """Makes the file's first `size` bytes cold (dropped and checked) or hot (read in and checked)."""
    if cold:
        drop_pages(str(big), 0, size)
        if residency(str(big)) > 0.05:
            raise SystemExit(f"{big}: more than 5% of the file stayed cached after dropping its pages")
    else:
        with open(big, "rb", buffering=0) as f:  # read it in, then check
            buf = bytearray(16 * MiB)
            while f.readinto(buf):
                pass
        if residency(str(big)) < 0.95:
            raise SystemExit(f"{big}: not fully cached (memory pressure?): the hot runs would not be hot")


def compare(name: str, contenders: dict, rounds: int, goal: float | None = None, base: str = "plain") -> dict:
    """Interleaved rounds of rate-returning callables; the ratio of each other contender over base.
    The record's ratio, verdict and goal are the first other contender's; with several, "others"
    has each one's."""
    samples = stats.interleave(contenders, rounds)
    others = {}
    for other in (n for n in contenders if n != base):
        r = stats.ratio(samples[other], samples[base], paired=True)
        o = {"ratio": r.as_dict(), "ratio_text": stats.describe(r), "verdict": stats.verdict(r)}
        if goal is not None:
            o["goal_result"] = stats.goal(r, goal)
        others[other] = o
        print(f"{name:18s} {other}/{base} {stats.describe(r):24s} {o['verdict']:13s} "
              f"{'goal ' + format(goal, '.2f') + ' ' + o['goal_result'] if goal is not None else '':18s}", flush=True)
    first = next(iter(others.values()))
    rec = {"case": name, "samples": samples, "summary": {n: stats.summary(v) for n, v in samples.items()},
           "ratio": first["ratio"], "ratio_text": first["ratio_text"], "verdict": first["verdict"]}
    if goal is not None:
        rec["goal"] = goal
        rec["goal_result"] = first["goal_result"]
    if len(others) > 1:
        rec["others"] = others
    print(f"{'':18s} spread " + " ".join(f"{n} ±{rec['summary'][n]['spread_pct']:.0f}%" for n in samples), flush=True)
    return rec


def program_loop(rec: dict, loops: dict[str, list[float]], mib: float) -> dict:
    """The rates a program timed of its own work (READINTO), the first shim contender over plain as
    for the whole run, and what the rest of the run (interpreter start and exit, the preload) took
    on each side: the median whole-run time less the median loop time, in ms."""
    r = stats.ratio(loops[next(n for n in rec["samples"] if n != "plain")], loops["plain"], paired=True)
    rest = {n: round((1 / stats.median(rec["samples"][n]) - 1 / stats.median(v)) * mib * 1e3, 1)
            for n, v in loops.items()}
    print(f"{'':18s} its own loop: {stats.describe(r)}; the rest of the run {rest} ms", flush=True)
    return {"samples": loops, "summary": {n: stats.summary(v) for n, v in loops.items()}, "ratio": r.as_dict(),
            "ratio_text": stats.describe(r), "verdict": stats.verdict(r), "rest_ms": rest}


def served(cmd: list[str], tmp: Path, env: dict | None = None) -> dict:
    """One untimed run under the shim with --stats-json: what it did with the program's calls."""
    out = tmp / "stats.json"
    subprocess.run([launcher(), "--stats-json", str(out), "--", *cmd], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True, env=dict(env or os.environ, ACCIO_RUN_PYTHON=sys.executable))
    rep = json.loads(out.read_text())
    tot = {k: sum(f[op].get(k, 0) for f in rep["files"] for op in ("read", "write"))
           for k in ("calls", "accelerated_calls", "accelerated_bytes", "declined_calls", "remembered_calls",
                     "bytes")}
    tot["prefetch_windows"] = sum(p.get("prefetch_windows", 0) for p in rep["processes"])
    # calls on files past the shim's per-process limit: in no file's row, so counted here (the
    # tensor torch.load read on the H100 was one, when the limit was 1024 files)
    tot["dropped"] = rep.get("dropped", {"calls": 0, "bytes": 0})
    tot["files"] = len(rep["files"])
    tot["plans"] = sorted({p["plan"] for f in rep["files"] for p in f["plans"]})
    if not tot["calls"]:
        tot["note"] = ("no read/write calls counted: the program copies inside the kernel (cp: copy_file_range), "
                       "or reads through stdio in small pieces (the shim serves only large freads)")
    return tot


def engine_ratio(big: Path, size: int, rounds: int, cold: bool) -> dict:
    buf = bytearray(64 * MiB)
    view = memoryview(buf)

    def read_all(mechanism: str):
        def go() -> float:
            prepare(big, size, cold)
            with accio.open(str(big), "r", mechanism) as f:
                t0 = time.perf_counter()
                for off in range(0, size, len(buf)):
                    f.read_into(view[:min(len(buf), size - off)], off)
                return size / MiB / (time.perf_counter() - t0)
        return go
    return compare("engine", {"posix": read_all("posix"), "parallel": read_all("parallel")}, rounds, base="posix")


def fio_mibps(args: list[str], side: str) -> float:
    """MiB/s of one fio job run with these options: the bytes of its `side` ("read" or "write")
    over the job's wall time (job_runtime, which includes an end_fsync)."""
    out = subprocess.run(["fio", *args, "--output-format=json"], capture_output=True, text=True, check=True).stdout
    job = json.loads(out)["jobs"][0]
    return job[side]["io_bytes"] / MiB / (job["job_runtime"] / 1000.0)


def fio_qd(big: Path, size: int, rounds: int) -> dict:
    """fio's sequential 128 KiB reads of the cold file: libaio O_DIRECT at iodepth 1 and 16 (the
    issue's measure of what depth gives), and psync buffered (a reader's own rate: the kernel's
    readahead at work; fio drops the file's pages first, invalidate=1), interleaved. The record's
    ratio is QD16/QD1; "headroom" is QD16 over the reader's own rate: what a prefetch can add."""
    def go(qd: int):
        opts = ["--direct=0", "--ioengine=psync", "--invalidate=1"] if qd == 0 else \
            ["--direct=1", "--ioengine=libaio", f"--iodepth={qd}"]

        def one() -> float:
            return fio_mibps(["--name=qd", f"--filename={big}", f"--size={size}", "--rw=read", "--bs=128k",
                              *opts, "--readonly"], "read")
        return one
    rec = compare("fio-qd16/qd1", {"qd1": go(1), "qd16": go(16), "reader": go(0)}, rounds, base="qd1")
    h = stats.ratio(rec["samples"]["qd16"], rec["samples"]["reader"], paired=True)
    rec["headroom"] = {"ratio": h.as_dict(), "ratio_text": stats.describe(h)}
    print(f"{'':18s} qd16/reader {stats.describe(h)} (what a prefetch can add to a reader's own rate)", flush=True)
    return rec


def shim_contenders(profiles: list[str] | None) -> dict[str, dict]:
    """The shim's contenders and their environments: one "shim" with the environment's profile, or
    one per --profile ("shim" alone, else "shim[off]", "shim[NAME.json]")."""
    if not profiles:
        return {"shim": dict(os.environ)}
    name = (lambda p: "shim") if len(profiles) == 1 else (lambda p: f"shim[{p if p == 'off' else Path(p).name}]")
    out = {name(p): dict(os.environ, ACCIO_PROFILE=p if p == "off" else str(Path(p).resolve())) for p in profiles}
    if len(out) != len(profiles):
        raise SystemExit("--profile: two profiles of the same name; give them different names")
    return out


def prefetch_contender(size: str | None) -> dict[str, dict]:
    """--prefetch SIZE: the shim with its prefetch forced on (ACCIO_PRELOAD_PREFETCH=SIZE), named
    "shim[prefetch=SIZE]"; none without it."""
    if size is None:
        return {}
    return {f"shim[prefetch={size}]": dict(os.environ, ACCIO_PRELOAD_PREFETCH=size)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp", help="directory for the test file (default /tmp)")
    ap.add_argument("--size", default="2g", help="file size (default 2g)")
    ap.add_argument("--rounds", type=int, default=stats.MIN_SAMPLES, help="interleaved rounds (>= 7)")
    ap.add_argument("--cache", choices=("hot", "cold", "both"), default="both")
    ap.add_argument("--cases", default="all", help="comma-separated subset (names as printed)")
    ap.add_argument("--quick", action="store_true", help="development setting: 64 MiB file, hot and cold")
    ap.add_argument("--launch-only", action="store_true", help="only the launch and front-end costs (no file)")
    ap.add_argument("--profile", action="append", metavar="off|PATH",
                    help="run the shim with ACCIO_PROFILE set to this (off: the built-in model); repeat it to "
                         "compare profiles in the same rounds (default: the environment's)")
    ap.add_argument("--prefetch", metavar="SIZE",
                    help="with --cache cold: one more shim contender for the small-request readers, with "
                         "ACCIO_PRELOAD_PREFETCH=SIZE (the prefetch forced on, whatever the profile says): "
                         "what the prefetch gives on this device, beside the default settings")
    ap.add_argument("--json", help="write every sample and the summary here")
    a = ap.parse_args()
    if a.prefetch is not None:
        if a.cache == "hot":
            ap.error("--prefetch: the prefetch reads ahead of cold files; give --cache cold or both")
        try:
            if parse_size(a.prefetch) <= 0:
                raise ValueError
        except ValueError:
            ap.error(f"--prefetch {a.prefetch}: give a window size above 0, such as 32m")
    for p in a.profile or []:
        if p != "off" and not Path(p).is_file():
            ap.error(f"--profile {p}: no such file (give `off` or a profile's path)")
    shims = shim_contenders(a.profile)
    if a.quick:
        a.size = "64m"
    if a.rounds < stats.MIN_SAMPLES:
        ap.error(f"--rounds must be at least {stats.MIN_SAMPLES} (the project's statistics rule)")
    size = parse_size(a.size)
    work = Path(a.dir) / f"accio-run-programs.{os.getpid()}"
    work.mkdir(parents=True)
    big = work / "big.bin"
    results: dict = {"schema": "accio.run-programs/1", "command": " ".join([sys.executable, *sys.argv]),
                     "accio_version": accio.__version__, "machine": {"cpus": os.cpu_count(),
                     "kernel": platform.release(), "load_before": os.getloadavg(),
                     "block_device": block_device(filesystem(a.dir)["device"])},
                     "size": size, "rounds": a.rounds, "launcher": launcher(),
                     "profiles": {name: env.get("ACCIO_PROFILE") for name, env in shims.items()},
                     "prefetch_forced": a.prefetch, "runs": []}
    all_cases = cases(big, work, size)
    want = None if a.cases == "all" else set(a.cases.split(","))
    if want and want - set(all_cases):
        work.rmdir()
        ap.error(f"--cases: no case {', '.join(sorted(want - set(all_cases)))} here (the cases: {', '.join(all_cases)})")
    pick = {n: c for n, c in all_cases.items() if want is None or n in want}
    try:
        results["launch"] = launch(max(a.rounds, 15))
        results["front"] = front_end(max(a.rounds, 15))
        if a.launch_only:
            return 0
        make_file(big, size)
        if "gzip-1" in pick and pick["gzip-1"][1] != big:
            make_file(pick["gzip-1"][1], GZIP_SIZE)
        if "torch.load" in pick:
            import torch
            torch.save(torch.zeros(size // 4, dtype=torch.float32), pick["torch.load"][1])
        for cache in (("hot", "cold") if a.cache == "both" else (a.cache,)):
            cold = cache == "cold"
            print(f"-- {cache}, {size / MiB:.0f} MiB file, {a.rounds} rounds", flush=True)
            block = {"cache": cache, "cases": []}
            block["engine"] = engine_ratio(big, size, a.rounds, cold)
            if cold and shutil.which("fio"):
                block["fio_qd"] = fio_qd(big, size, a.rounds)
            for name, (cmd, src) in pick.items():
                nbytes = src.stat().st_size
                loop_file = work / "loop-seconds"
                loops: dict[str, list[float]] = {}  # the program's own timing of its work, per contender

                def side(label, argv, env=None, src=src, nbytes=nbytes):
                    def go() -> float:
                        prepare(src, nbytes, cold)
                        loop_file.unlink(missing_ok=True)
                        rate = nbytes / MiB / timed(argv, env=env)
                        if loop_file.exists():
                            loops.setdefault(label, []).append(nbytes / MiB / float(loop_file.read_text()))
                        return rate
                    return go
                contenders = {"plain": side("plain", cmd)}
                forced = prefetch_contender(a.prefetch) if cold and name in SMALL_READERS else {}
                contenders.update({n: side(n, [launcher(), "--", *cmd], env) for n, env in {**shims, **forced}.items()})
                rec = compare(f"{name} ({cache})", contenders, a.rounds, GOAL_NEVER_SLOWER)
                if loops:
                    rec["loop"] = program_loop(rec, loops, nbytes / MiB)
                for n in forced:
                    o = rec["others"][n]
                    o["goal"], o["goal_result"] = GOAL_PREFETCH, stats.goal(stats.Ratio(**o["ratio"]), GOAL_PREFETCH)
                    prepare(src, nbytes, cold)
                    rec["prefetch_forced"] = {"contender": n, **o, "served": served(cmd, work, forced[n])}
                    print(f"{'':18s} {n}/plain: prefetch goal {GOAL_PREFETCH:.2f} {o['goal_result']} "
                          f"({rec['prefetch_forced']['served']['prefetch_windows']} windows)", flush=True)
                if len(shims) == 2:  # the second profile over the first, in the same rounds
                    first, second = shims
                    r = stats.ratio(rec["samples"][second], rec["samples"][first], paired=True)
                    rec["profile_vs"] = {"of": second, "over": first, "ratio": r.as_dict(),
                                         "ratio_text": stats.describe(r), "verdict": stats.verdict(r)}
                    print(f"{'':18s} {second}/{first} {stats.describe(r)} {stats.verdict(r)}", flush=True)
                rec["served"] = {}
                for n, env in shims.items():
                    prepare(src, nbytes, cold)
                    rec["served"][n] = served(cmd, work, env)
                if len(shims) == 1:
                    rec["served"] = rec["served"]["shim"]
                rec["name"], rec["command"], rec["input_bytes"] = name, " ".join(cmd), nbytes
                eng = block["engine"]["ratio"]["estimate"]
                if name in ("dd-64m", "readinto-64m") and not cold:
                    rec["large_goal"] = {"target": GOAL_LARGE * eng, "of_engine_ratio": eng,
                                         "result": stats.goal(stats.Ratio(**rec["ratio"]), GOAL_LARGE * eng)}
                    if "loop" in rec:
                        rec["large_goal"]["loop_result"] = stats.goal(stats.Ratio(**rec["loop"]["ratio"]),
                                                                      GOAL_LARGE * eng)
                        print(f"{'':18s} large goal {GOAL_LARGE * eng:.2f}: whole program "
                              f"{rec['large_goal']['result']}, its own loop {rec['large_goal']['loop_result']}",
                              flush=True)
                if name in SMALL_READERS and cold and "fio_qd" in block:
                    qd = block["fio_qd"]["ratio"]["estimate"]
                    room = block["fio_qd"]["headroom"]["ratio"]["estimate"]
                    applies = qd >= GOAL_PREFETCH and room >= GOAL_PREFETCH
                    rec["prefetch_goal"] = {
                        "applies": applies, "fio_qd16_over_qd1": qd, "fio_qd16_over_reader": room,
                        "result": stats.goal(stats.Ratio(**rec["ratio"]), GOAL_PREFETCH) if applies else
                        "n/a (the device gains < 1.5x at QD16)" if qd < GOAL_PREFETCH else
                        "n/a (a reader's own rate, the kernel's readahead at work, is within 1.5x of QD16)"}
                block["cases"].append(rec)
            results["runs"].append(block)
    finally:
        results["machine"]["load_after"] = os.getloadavg()
        shutil.rmtree(work, ignore_errors=True)
        if a.json:
            Path(a.json).parent.mkdir(parents=True, exist_ok=True)
            write_json(a.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
