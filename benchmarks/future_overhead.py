#!/usr/bin/env python3
"""What accio.Future (a concurrent.futures.Future settled by one watcher thread) costs per request
against the engine's bare future (accio._ext.Future), side by side: each round submits the same
batch of small cached reads both ways and waits for every result, contenders interleaved
(accio.stats). Prints the rate ratio accio.Future / bare with its 95% interval; --json stores the
samples and the command.

    python benchmarks/future_overhead.py [--requests 2000] [--size 4k] [--rounds 9] [--json FILE]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import accio
from accio import stats
from accio._system import parse_size
from accio._usage import write_json


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--size", default="4k")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--json")
    a = ap.parse_args()
    size = parse_size(a.size)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f")
        with open(path, "wb") as w:
            w.write(os.urandom(size * a.requests))
        bufs = [bytearray(size) for _ in range(a.requests)]
        reqs = [(b, i * size) for i, b in enumerate(bufs)]
        with accio.open(path, mechanism="posix") as f:
            def bare() -> float:
                t = time.perf_counter()
                for fut in f._f.submit(reqs, False):
                    fut.result(None)
                return a.requests / (time.perf_counter() - t)

            def wrapped() -> float:
                t = time.perf_counter()
                for fut in f.submit(reqs):
                    fut.result()
                return a.requests / (time.perf_counter() - t)

            samples = stats.interleave({"accio.Future": wrapped, "bare": bare}, a.rounds)
    r = stats.ratio(samples["accio.Future"], samples["bare"])
    per_req_us = (1 / stats.median(samples["accio.Future"]) - 1 / stats.median(samples["bare"])) * 1e6
    print(f"{a.requests} reads of {size} B: bare {stats.median(samples['bare']):,.0f} req/s, accio.Future "
          f"{stats.median(samples['accio.Future']):,.0f} req/s; ratio {stats.describe(r)} ({stats.verdict(r)}); "
          f"about {per_req_us:.1f} us more per request")
    if a.json:
        write_json(a.json, {"command": " ".join([os.path.basename(sys.executable)] + sys.argv), "samples": samples,
                            "ratio": r.__dict__, "extra_us_per_request": per_req_us})
    return 0


if __name__ == "__main__":
    sys.exit(main())
