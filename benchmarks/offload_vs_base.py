#!/usr/bin/env python3
"""The offload runtime's latency against a previous build of it, side by side in one run (issue 22:
"latency must not regress"). Both contenders are accio-offload-bench programs, each with the
libaccio_offload and worker of its own build; every round runs each once (rotating order, as
accio.stats.interleave does) and takes AVEO's tests 1-4 at N calls and the 1-byte read/write
latency from its JSON. Per metric: both medians, the ratio base/new of the latencies (> 1: the new
build is faster) with its 95% bootstrap interval, the verdict, and the goal of offload_bench.

    # the previous build (main), built apart from this tree:
    mkdir -p /tmp/offload-base && git archive main | tar -x -C /tmp/offload-base
    cmake -S /tmp/offload-base -B /tmp/offload-base/build -G Ninja -DCMAKE_BUILD_TYPE=Release
    ninja -C /tmp/offload-base/build accio-offload-bench accio-offload-worker
    python benchmarks/offload_vs_base.py --base /tmp/offload-base/build/accio-offload-bench \\
        --new build/main/accio-offload-bench [--rounds 9] [--n 10000] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time

from accio import stats
from accio._system import cpu_model
from accio._usage import write_json
from accio.offload_bench import TARGETS_US

METRICS = ["test1", "test2", "test3", "test4", "read_1b", "write_1b"]


def run_once(binary: str, n: int, transport: str, spin: str | None) -> dict[str, float]:
    """One run of an accio-offload-bench: microseconds per call of each metric."""
    cmd = [binary, "--transport", transport, "--ns", str(n), "--reps", "1", "--max-bytes", "4096"]
    if spin:
        cmd += ["--spin", spin]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    out = json.loads(r.stdout)
    got = {x["test"]: x["us_per_call"][0] for x in out["latency"] if x["n"] == n}
    got.update({x["op"]: x["us"][0] if isinstance(x["us"], list) else x["us"] for x in out["memory_latency"]})
    missing = [m for m in METRICS if m not in got]
    if missing:
        raise SystemExit(f"{binary}: no {', '.join(missing)} in its output")
    return {m: float(got[m]) for m in METRICS}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="accio-offload-bench of the previous build")
    p.add_argument("--new", required=True, help="accio-offload-bench of this build")
    p.add_argument("--rounds", type=int, default=9, help=f"rounds (each runs both; at least {stats.MIN_SAMPLES})")
    p.add_argument("--n", type=int, default=10000, help="calls per test (default 10000)")
    p.add_argument("--transport", default="shm", choices=["shm", "socket"])
    p.add_argument("--spin", default=None, help="worker spin: microseconds or 'forever' (default: the setting)")
    p.add_argument("--json", metavar="FILE", help="write the samples and ratios as JSON")
    a = p.parse_args(argv)
    if a.rounds < stats.MIN_SAMPLES:
        p.error(f"--rounds must be at least {stats.MIN_SAMPLES} (the project's statistics rule)")
    runs: dict[str, list[dict[str, float]]] = {"base": [], "new": []}

    def contender(name: str, binary: str):
        def one() -> float:
            runs[name].append(run_once(binary, a.n, a.transport, a.spin))
            return 1.0
        return one

    t0 = time.time()
    stats.interleave({"base": contender("base", a.base), "new": contender("new", a.new)}, a.rounds)
    result = {"command": " ".join([sys.executable] + sys.argv), "cpu": cpu_model(), "machine": platform.node(),
              "rounds": a.rounds, "n": a.n, "transport": a.transport, "spin": a.spin,
              "seconds": round(time.time() - t0, 1), "samples_us": runs, "metrics": {}}
    print(f"{'metric':<9} {'base us':>8} {'new us':>8}  base/new (>1: new faster)   verdict       goal")
    for m in METRICS:
        base = [r[m] for r in runs["base"]]
        new = [r[m] for r in runs["new"]]
        r = stats.ratio([1 / x for x in new], [1 / x for x in base])  # rates: new over base
        met = "met" if stats.median(new) <= TARGETS_US[m] else "missed"
        result["metrics"][m] = {"base_median_us": stats.median(base), "new_median_us": stats.median(new),
                                "ratio_base_over_new": r.as_dict(), "verdict": stats.verdict(r),
                                "goal_us": TARGETS_US[m], "goal": met}
        print(f"{m:<9} {stats.median(base):8.3f} {stats.median(new):8.3f}  {stats.describe(r):<26} "
              f"{stats.verdict(r):<13} <= {TARGETS_US[m]} us {met}")
    if a.json:
        write_json(a.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
