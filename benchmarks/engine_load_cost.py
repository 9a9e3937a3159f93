#!/usr/bin/env python3
"""What loading the engine costs a process under the preload shim, and what the floor saves
(docs/preload.md, "The floor"). Short `dd` runs of a hot file, interleaved (accio.stats, >= 7
rounds), each a whole process:

  plain        dd bs=1M count=2, no shim
  shim-128k    the shim preloaded, dd bs=128k count=16: below the threshold, the engine never loads
  no-floor     the shim preloaded without a floor (as by hand), dd bs=1M count=2: the first 1 MiB
               read loads the engine to learn that posix runs it
  floor        the same with ACCIO_PRELOAD_FLOOR as `accio run` gives it on this machine

The shim is preloaded directly (LD_PRELOAD), so no launcher start-up is in any of them.

    python benchmarks/engine_load_cost.py --json results/run/engine_load_cost_s9.json
"""
from __future__ import annotations

import argparse
import datetime
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import accio
from accio import _ext, stats
from accio._usage import write_json
from accio.run import launcher_path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default="/var/tmp")
    p.add_argument("--rounds", type=int, default=41)
    p.add_argument("--json")
    a = p.parse_args()
    if a.rounds < stats.MIN_SAMPLES:
        p.error(f"--rounds must be at least {stats.MIN_SAMPLES}")
    shim = Path(launcher_path()).with_name("libaccio_preload.so")
    launcher = str(launcher_path())
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCIO_")}
    env["ACCIO_PROFILE_DIR"] = os.path.join(a.dir, "accio-no-profiles")  # the built-in model
    floor = [x.split("=", 1)[1] for x in subprocess.run([launcher, "--", "env"], env=env, capture_output=True,
                                                         text=True, check=True).stdout.splitlines()
             if x.startswith("ACCIO_PRELOAD_FLOOR=")][0]
    with tempfile.NamedTemporaryFile(dir=a.dir, prefix="accio-load-cost.") as f:
        f.write(os.urandom(16 << 20))
        f.flush()
        subprocess.run(["cat", f.name], stdout=subprocess.DEVNULL, check=True)  # hot
        dd = ["dd", f"if={f.name}", "of=/dev/null", "status=none"]
        pre = dict(env, LD_PRELOAD=str(shim), ACCIO_QUIET="1")
        runs = {"plain": (dd + ["bs=1M", "count=2"], env),
                "shim-128k": (dd + ["bs=128k", "count=16"], pre),
                "no-floor": (dd + ["bs=1M", "count=2"], pre),
                "floor": (dd + ["bs=1M", "count=2"], dict(pre, ACCIO_PRELOAD_FLOOR=floor))}

        def timed(cmd, e):
            def go() -> float:
                t0 = time.perf_counter()
                subprocess.run(cmd, env=e, check=True)
                return 1.0 / (time.perf_counter() - t0)  # runs per second: a rate, as accio.stats wants
            return go
        samples = stats.interleave({k: timed(*v) for k, v in runs.items()}, a.rounds)
    ms = {k: [1e3 / x for x in v] for k, v in samples.items()}
    out = {"command": "python benchmarks/engine_load_cost.py " + " ".join(sys.argv[1:]), "accio": accio.__version__,
           "git_commit": _ext.git_commit(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "cpus": len(os.sched_getaffinity(0)), "floor": floor, "rounds": a.rounds,
           "median_ms": {k: round(stats.median(v), 3) for k, v in ms.items()}, "ms": ms, "ratios": {}}
    for x, y in (("no-floor", "shim-128k"), ("floor", "shim-128k"), ("no-floor", "floor")):
        r = stats.ratio(samples[y], samples[x], paired=True)  # time of x over time of y
        out["ratios"][f"{x} / {y} (time)"] = {"ratio": r.as_dict(), "verdict": stats.verdict(r)}
        print(f"{x:9s} / {y:9s} time {stats.describe(r)}")
    for k, v in out["median_ms"].items():
        print(f"  {k:10s} {v:7.3f} ms")
    if a.json:
        write_json(a.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
