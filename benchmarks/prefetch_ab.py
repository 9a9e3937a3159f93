#!/usr/bin/env python3
"""A cold sequential reader plainly and under one or more builds of the preload shim with the
prefetch forced on (ACCIO_PRELOAD_PREFETCH=WINDOW), interleaved (accio.stats: >= 7 rounds, median
ratio with its 95% bootstrap interval): what a change to the prefetch itself does, on a device of
your choice, with the same window. Each run drops the file's pages first.

    # the shim of two commits side by side (build the older one in a worktree first):
    python benchmarks/prefetch_ab.py --file /mnt/lp/f.bin --shim before=/tmp/old/libaccio_preload.so \\
        --shim after=build/main/libaccio_preload.so --rounds 11 --json results/run/prefetch_ab.json

The shims load the engine beside the first --shim's library unless ACCIO_PRELOAD_ENGINE is set
(a library copied alone elsewhere finds none); the reader (default `cat`) reads into /dev/null.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

from accio import stats
from accio._system import drop_pages, residency


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", required=True, help="the file to read (on the device to measure)")
    ap.add_argument("--shim", action="append", required=True, metavar="NAME=PATH",
                    help="a build of libaccio_preload.so to run the reader under (repeat it)")
    ap.add_argument("--window", default="32m", help="ACCIO_PRELOAD_PREFETCH for every shim (default 32m)")
    ap.add_argument("--reader", default="cat", help="the reader's command; the file is its last argument")
    ap.add_argument("--rounds", type=int, default=stats.MIN_SAMPLES)
    ap.add_argument("--json", help="write the samples and ratios here")
    a = ap.parse_args()
    if a.rounds < stats.MIN_SAMPLES:
        ap.error(f"--rounds must be at least {stats.MIN_SAMPLES} (the project's statistics rule)")
    f = Path(a.file)
    if not f.is_file():
        ap.error(f"--file {f}: no such file")
    shims = {}
    for s in a.shim:
        name, sep, path = s.partition("=")
        if not sep or not name or not Path(path).is_file() or name == "plain" or name in shims:
            ap.error(f"--shim {s}: give NAME=PATH of an existing library, each name once (not 'plain')")
        shims[name] = str(Path(path).resolve())
    drop_pages(str(f))
    if residency(str(f)) > 0.05:
        ap.error(f"{f}: its pages stay in memory (tmpfs?): nothing cold to read")
    engine = os.environ.get("ACCIO_PRELOAD_ENGINE") or str(Path(next(iter(shims.values()))).with_name("libaccio.so"))
    envs = {"plain": dict(os.environ)}
    for name, path in shims.items():
        envs[name] = dict(os.environ, LD_PRELOAD=path, ACCIO_QUIET="1", ACCIO_PRELOAD_PREFETCH=a.window,
                          ACCIO_PRELOAD_ENGINE=engine)
    cmd = [*shlex.split(a.reader), str(f)]
    size = f.stat().st_size

    def contender(name):
        def go() -> float:
            drop_pages(str(f))
            t0 = time.perf_counter()
            subprocess.run(cmd, env=envs[name], stdout=subprocess.DEVNULL, check=True)
            return size / 2**20 / (time.perf_counter() - t0)
        return go

    samples = stats.interleave({n: contender(n) for n in envs}, a.rounds)
    names = list(envs)
    ratios = {}
    for i, x in enumerate(names[1:], 1):
        for y in names[:i]:
            r = stats.ratio(samples[x], samples[y], paired=True)
            ratios[f"{x}/{y}"] = {"ratio": r.as_dict(), "text": stats.describe(r), "verdict": stats.verdict(r)}
            print(f"{x}/{y:8s} {stats.describe(r):26s} {stats.verdict(r)}", flush=True)
    print("spread " + " ".join(f"{n} ±{stats.summary(v)['spread_pct']:.0f}%" for n, v in samples.items()))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps({
            "schema": "accio.prefetch-ab/1", "command": " ".join([sys.executable, *sys.argv]),
            "file": str(f), "size": size, "window": a.window, "reader": cmd[:-1], "shims": shims,
            "shim_sha256": {n: hashlib.sha256(Path(p).read_bytes()).hexdigest() for n, p in shims.items()},
            "machine": {"cpus": os.cpu_count(), "kernel": platform.release()}, "rounds": a.rounds,
            "samples": samples, "summary": {n: stats.summary(v) for n, v in samples.items()}, "ratios": ratios},
            indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
