#!/usr/bin/env python3
"""What classifying buffers (host or GPU memory?) costs small host requests, side by side (issue 4).

Builds benchmarks/classify_cost.c against each libaccio given (label=DIR, DIR holding libaccio.so),
then runs the builds alternately, --repeat times per thread count, and reports medians and spreads
of: plain pread(2) of 4 KiB from a cached file, the same through the engine (mechanism posix), and
the exact look (accio_mem_kind), per call per thread. Compare a build before and after a change:

    git worktree add /tmp/base BASE_COMMIT && cmake -S /tmp/base -B /tmp/base/b -DCMAKE_BUILD_TYPE=Release \\
        && cmake --build /tmp/base/b --target accio
    cmake -S . -B build/rel -DCMAKE_BUILD_TYPE=Release && cmake --build build/rel --target accio
    python benchmarks/classify_cost.py before=/tmp/base/b after=build/rel --json results/classify_cost.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("builds", nargs="+", help="LABEL=DIR with DIR/libaccio.so")
    ap.add_argument("--threads", default=f"1,{os.cpu_count()}", help="thread counts (default 1 and the CPUs)")
    ap.add_argument("--requests", type=int, default=300_000, help="requests per thread per run")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json")
    a = ap.parse_args()
    builds = dict(b.split("=", 1) for b in a.builds)
    work = Path(tempfile.mkdtemp(prefix="accio-classify-"))
    data = work / "f"
    data.write_bytes(os.urandom(4096))
    exes = {}
    for label, d in builds.items():
        lib = Path(d).resolve()
        exe = work / f"classify_cost_{label}"
        subprocess.run(["cc", "-O2", f"-I{ROOT / 'include'}", str(ROOT / "benchmarks/classify_cost.c"), f"-L{lib}",
                        "-laccio", "-lpthread", f"-Wl,-rpath,{lib}", "-o", str(exe)], check=True)
        exes[label] = exe
    rows = []
    for t in (int(x) for x in a.threads.split(",")):
        runs = {label: [] for label in exes}
        for _ in range(a.repeat):
            for label, exe in exes.items():  # alternate, so drift hits every build alike
                out = subprocess.run([str(exe), str(data), str(t), str(a.requests)], check=True, capture_output=True,
                                     text=True, env=dict(os.environ, ACCIO_QUIET="1")).stdout
                runs[label].append(json.loads(out))
        for label, rs in runs.items():
            row = {"build": label, "lib": builds[label], "threads": t}
            for k in ("plain_ns", "engine_ns", "exact_look_ns"):
                v = [r[k] for r in rs]
                row[k] = {"median": statistics.median(v), "min": min(v), "max": max(v), "runs": v}
            row["engine_over_plain_ns"] = row["engine_ns"]["median"] - row["plain_ns"]["median"]
            rows.append(row)
    print(f"{'build':<10} {'threads':>7} {'plain ns':>18} {'engine ns':>18} {'engine-plain':>12} {'exact look ns':>18}")
    for r in rows:
        f = lambda k: f"{r[k]['median']:.0f} ({r[k]['min']:.0f}-{r[k]['max']:.0f})"
        print(f"{r['build']:<10} {r['threads']:>7} {f('plain_ns'):>18} {f('engine_ns'):>18} "
              f"{r['engine_over_plain_ns']:>12.0f} {f('exact_look_ns'):>18}")
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({
            "command": "python benchmarks/classify_cost.py " + " ".join(a.builds) + f" --threads {a.threads} "
                       f"--requests {a.requests} --repeat {a.repeat}",
            "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
            "request": "4 KiB pread of a cached file, mechanism posix", "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
