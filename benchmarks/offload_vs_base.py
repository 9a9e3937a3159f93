#!/usr/bin/env python3
"""The offload runtime's latency against a previous build of it, side by side in one process (issue
22: "latency must not regress"). benchmarks/offload_ab.cpp loads both builds' libaccio_offload (each
starts its own worker, the one next to its library) and times AVEO's tests 1-4 at N calls and the
1-byte read/write, the two builds taking turns per metric, milliseconds apart. Per metric: both
medians, the ratio base/new of the latencies (> 1: the new build is faster) with its 95% bootstrap
interval over the paired rounds, the verdict, and the goal of offload_bench.

Why in one process: a shared-memory round trip on a VM costs what the hypervisor's placement of the
two vCPUs allows at that moment, and that moves 2-5x between seconds. Run as separate processes in
alternation, two builds of the same source came out 8% apart with an interval that called it
significant; taking turns inside one process, the same two agree within 1% ([0.99-1.01]).

    # a previous commit's runtime, built apart from this tree (links this tree's libaccio):
    benchmarks/build_offload_base.sh REV /tmp/offload-base
    python benchmarks/offload_vs_base.py --base /tmp/offload-base/bin --new build/main \\
        [--rounds 150] [--n 10000] [--json FILE]

--base and --new each name a libaccio_offload.so, the directory that holds it, or an
accio-offload-bench next to it. --aa compares --base with itself (a second copy loaded from a
temporary directory): the method's noise floor on this machine.
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from accio import stats
from accio._system import cpu_model
from accio._usage import write_json
from accio.offload_bench import TARGETS_US

ROOT = Path(__file__).resolve().parent.parent
METRICS = ["test1", "test2", "test3", "test4", "read_1b", "write_1b"]
LIB = "libaccio_offload.so"


def library(path: str) -> Path:
    """The libaccio_offload.so that a --base/--new argument names."""
    p = Path(path).resolve()
    if p.is_file() and p.name.startswith(LIB):
        return p
    d = p if p.is_dir() else p.parent
    if not (d / LIB).is_file():
        raise SystemExit(f"{path}: no {LIB} there (give the library, its directory, or an "
                         "accio-offload-bench next to it)")
    return d / LIB


def copy_build(lib: Path, into: Path) -> Path:
    """A second copy of a build, for the A/A run: its library and worker copied (the same bytes,
    loaded twice), the libaccio beside them linked (an installed build finds it through $ORIGIN;
    through the link it is the same file, loaded once, as for two builds)."""
    into.mkdir()
    shutil.copy2(lib, into / LIB)
    worker = lib.parent / "accio-offload-worker"
    if not worker.is_file():
        raise SystemExit(f"{lib.parent}: no accio-offload-worker next to {LIB}")
    shutil.copy2(worker, into / worker.name)
    for f in lib.parent.glob("libaccio.so*"):
        (into / f.name).symlink_to(f.resolve())
    # The copied worker finds libaccio_offload by its soname (libaccio_offload.so.0 in a CMake build):
    # those names lead to the copy, so that the copy's worker runs the copy's library.
    for f in lib.parent.glob(LIB + ".*"):
        (into / f.name).symlink_to(LIB)
    return into / LIB


def source_state() -> str:
    """This checkout's commit and whether it has changes (the default --new is built from it)."""
    r = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=12"],
                       capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "unknown (no git)"


def build_ab(work: Path) -> Path:
    exe = work / "offload_ab"
    cmd = ["c++", "-O2", "-std=c++20", f"-I{ROOT / 'include'}", str(ROOT / "benchmarks/offload_ab.cpp"),
           "-ldl", "-o", str(exe)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr}")
    return exe


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="the previous build (library, its directory or its bench)")
    p.add_argument("--new", help="this build (default: build/main)", default=str(ROOT / "build/main"))
    p.add_argument("--aa", action="store_true", help="compare --base with a copy of itself (noise floor)")
    p.add_argument("--rounds", type=int, default=150, help=f"rounds, each timing both builds (at least "
                   f"{stats.MIN_SAMPLES}; 150 take about 10 s)")
    p.add_argument("--n", type=int, default=10000, help="calls per test (default 10000)")
    p.add_argument("--lat-n", type=int, default=30000, help="1-byte transfers per sample (default 30000)")
    p.add_argument("--transport", default="shm", choices=["shm", "socket"])
    p.add_argument("--spin", type=int, default=100, help="worker spin in microseconds, below 500 (default 100)")
    p.add_argument("--json", metavar="FILE", help="write the samples and ratios as JSON")
    a = p.parse_args(argv)
    if a.rounds < stats.MIN_SAMPLES:
        p.error(f"--rounds must be at least {stats.MIN_SAMPLES} (the project's statistics rule)")
    if not 0 <= a.spin < 500:
        p.error("--spin must be 0..499 microseconds: an idle worker that polls longer takes the CPU from the "
                "other build's")
    base = library(a.base)
    new = None if a.aa else library(a.new)
    if new is not None and new.samefile(base):
        p.error(f"--base and --new are the same library ({base}): give two builds, or --aa for the noise floor")
    with tempfile.TemporaryDirectory(prefix="accio-offload-ab-") as tmp:
        work = Path(tmp)
        new = new or copy_build(base, work / "copy")
        exe = build_ab(work)
        cmd = [str(exe), str(base), str(new), str(a.rounds), str(a.n), str(a.lat_n), a.transport, str(a.spin)]
        t0 = time.time()
        # Calls per round, both builds: tests 1-4 (n each) and the 1-byte read and write (lat_n each),
        # each after 200 warm-up calls; at 100 us a call (socket) or 5 us (shm): about 20x a quiet VM.
        per_call_us = 100 if a.transport == "socket" else 5
        limit = 60 + a.rounds * 2 * (4 * a.n + 2 * a.lat_n + 6 * 200) * per_call_us // 1_000_000
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"offload_ab took over {limit} s: a worker hung, or the machine is far slower "
                             "than expected (fewer --rounds)")
        if r.returncode != 0:
            raise SystemExit(f"offload_ab failed ({r.returncode}): {r.stderr.strip()}")
        out = json.loads(r.stdout)
    runs = {"base": out["a"], "new": out["b"]}
    args = sys.argv[1:] if argv is None else argv
    result = {"command": " ".join([sys.executable, str(Path(__file__).resolve()), *args]), "cpu": cpu_model(),
              "machine": platform.node(), "method": "in-process A/B (benchmarks/offload_ab.cpp)", "base": str(base),
              "new": "copy of base (A/A)" if a.aa else str(new), "checkout": source_state(), "rounds": a.rounds, "n": a.n, "lat_n": a.lat_n,
              "transport": a.transport, "spin_us": a.spin, "seconds": round(time.time() - t0, 1),
              "samples_us": runs, "metrics": {}}
    print(f"{'metric':<9} {'base us':>8} {'new us':>8}  base/new (>1: new faster)   verdict       goal")
    for m in METRICS:
        b, n = runs["base"][m], runs["new"][m]
        ratio = stats.ratio([1 / x for x in n], [1 / x for x in b], paired=True)  # rates, paired by round: new over base
        met = "met" if stats.median(n) <= TARGETS_US[m] else "missed"
        result["metrics"][m] = {"base_median_us": stats.median(b), "new_median_us": stats.median(n),
                                "ratio_base_over_new": ratio.as_dict(), "verdict": stats.verdict(ratio),
                                "goal_us": TARGETS_US[m], "goal": met}
        print(f"{m:<9} {stats.median(b):8.3f} {stats.median(n):8.3f}  {stats.describe(ratio):<26} "
              f"{stats.verdict(ratio):<13} <= {TARGETS_US[m]} us {met}")
    if a.json:
        write_json(a.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
