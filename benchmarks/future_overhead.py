#!/usr/bin/env python3
"""What accio.Future (a concurrent.futures.Future the engine settles at completion) costs per request
against the engine's bare future (accio._ext.Future), side by side: each round submits the same
batch of cached reads both ways and waits for every result with result(), contenders interleaved
(accio.stats), for each request size. Prints, per size, the rate ratio accio.Future / bare with its
95% interval and the difference in microseconds per request; --json stores the samples and the
command.

    python benchmarks/future_overhead.py [--sizes 4k,1m] [--requests 2000] [--bytes 256m] [--rounds 9]
                                         [--json FILE]
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


def measure(path: str, size: int, requests: int, rounds: int) -> dict:
    bufs = [bytearray(size) for _ in range(requests)]
    reqs = [(b, i * size) for i, b in enumerate(bufs)]
    with accio.open(path, mechanism="posix") as f:
        f.submit(reqs)  # the file into the page cache, the pool's threads started
        def bare() -> float:
            t = time.perf_counter()
            for fut in f._f.submit(reqs, False):
                fut.result(None)
            return requests / (time.perf_counter() - t)

        def wrapped() -> float:
            t = time.perf_counter()
            for fut in f.submit(reqs):
                fut.result()
            return requests / (time.perf_counter() - t)

        samples = stats.interleave({"accio.Future": wrapped, "bare": bare}, rounds)
    r = stats.ratio(samples["accio.Future"], samples["bare"], paired=True)
    extra_us = (1 / stats.median(samples["accio.Future"]) - 1 / stats.median(samples["bare"])) * 1e6
    print(f"{requests} reads of {size} B: bare {stats.median(samples['bare']):,.0f} req/s, accio.Future "
          f"{stats.median(samples['accio.Future']):,.0f} req/s; ratio {stats.describe(r)} ({stats.verdict(r)}); "
          f"about {extra_us:.2f} us more per request", flush=True)
    return {"size": size, "requests": requests, "samples": samples, "ratio": r.__dict__,
            "extra_us_per_request": extra_us}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="4k,1m", help="request sizes, comma-separated")
    ap.add_argument("--requests", type=int, default=2000, help="requests per batch (at most --bytes in all)")
    ap.add_argument("--bytes", default="256m", help="the most one batch reads")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.rounds < stats.MIN_SAMPLES:
        ap.error(f"--rounds must be at least {stats.MIN_SAMPLES} (the project's statistics rule)")
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    cap = parse_size(a.bytes)
    results = []
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f")
        with open(path, "wb") as w:
            w.write(os.urandom(min(cap, max(s * a.requests for s in sizes))))
        for size in sizes:
            requests = max(1, min(a.requests, cap // size))
            results.append(measure(path, size, requests, a.rounds))
    if a.json:
        write_json(a.json, {"command": " ".join([os.path.basename(sys.executable)] + sys.argv),
                            "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
