#!/usr/bin/env python3
"""Two builds of the preload shim against each other and against no shim, on one program: Python
`readinto` of 64 MiB chunks of a hot file (the large-request case of issue 20), each run timed
whole, the three contenders interleaved (accio.stats), each shim preloaded directly with the
launcher's floor. Prints and keeps the paired ratios old/plain, new/plain and new/old with their 95%
intervals: whether a change of the shim moved what a program gets.

    python benchmarks/shim_ab.py --old OLD/libaccio_preload.so [--new NEW/libaccio_preload.so]
                                 [--size 2g] [--rounds 15] [--dir /var/tmp] [--json OUT]

A build's shim: `pip install --no-build-isolation --no-deps --target DIR .` of that commit puts it
in DIR/accio/lib/ (the engine beside it); --new defaults to the installed package's.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from accio import stats
from accio._system import parse_size
from accio.run import shim_path

READ = "import sys\nbuf = bytearray(64 << 20)\nwith open(sys.argv[1], 'rb', buffering=0) as f:\n    while f.readinto(buf):\n        pass\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the other build's libaccio_preload.so")
    ap.add_argument("--new", default=shim_path(), help="default: the installed package's")
    ap.add_argument("--size", default="2g")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.rounds < stats.MIN_SAMPLES:
        ap.error(f"--rounds must be at least {stats.MIN_SAMPLES} (the project's statistics rule)")
    size = parse_size(a.size)
    path = os.path.join(a.dir, f"accio-shim-ab.{os.getpid()}")
    try:
        with open(path, "wb") as f:
            block = os.urandom(64 << 20)
            for off in range(0, size, len(block)):
                f.write(block[:min(len(block), size - off)])
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)  # hot

        def run(shim):
            env = dict(os.environ, ACCIO_QUIET="1")
            if shim:
                env.update(LD_PRELOAD=shim, ACCIO_PRELOAD_FLOOR="1572864,18446744073709551615")
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", READ, path], env=env, check=True)
            return size / (1 << 20) / (time.perf_counter() - t0)

        got = stats.interleave({"plain": lambda: run(None), "old": lambda: run(a.old), "new": lambda: run(a.new)},
                               a.rounds)
    finally:
        os.unlink(path)
    ratios = {}
    for x, y in (("old", "plain"), ("new", "plain"), ("new", "old")):
        r = stats.ratio(got[x], got[y], paired=True)
        ratios[f"{x}/{y}"] = {**r.as_dict(), "verdict": stats.verdict(r)}
        print(f"{x}/{y}: {stats.describe(r)} {stats.verdict(r)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"command": " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]]), "old": a.old, "new": a.new,
                       "size": size, "samples_mib_s": got, "ratios": ratios}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
