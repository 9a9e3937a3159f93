#!/usr/bin/env python3
"""What O_APPEND appends cost (audit session 20, M3). File.append is one write(2) on an O_APPEND
descriptor whatever the mechanism, so a large append no longer runs split over the thread pool as
the old, unsafe append did (a range reserved from a cached end of file, then written by the planned
mechanism). Three contenders, interleaved (accio.stats), for each append size:

- `append`: accio File.append under --mechanism (default parallel);
- `os.write`: os.write on an O_APPEND descriptor, the plain baseline;
- `pwrite-split`: File.write_from(buf, end) under --mechanism, which is what the old append ran.

Each sample truncates the file (not timed), then appends --total bytes in pieces of the size, into
the page cache; the rate is MiB/s. Prints each ratio with its 95% bootstrap interval; --json stores
the samples and the command.

    python benchmarks/append_cost.py [--sizes 1m,16m,128m] [--total 256m] [--rounds 9]
                                     [--mechanism parallel] [--dir /var/tmp] [--json FILE]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

import accio
from accio import stats
from accio._system import parse_size
from accio._usage import write_json


def measure(path: str, size: int, total: int, rounds: int, mechanism: str) -> dict:
    buf = os.urandom(size)
    count = max(1, total // size)
    mib = size * count / (1 << 20)
    f = accio.open(path, "a", mechanism=mechanism)
    plain = os.open(path, os.O_WRONLY | os.O_APPEND)

    def run(body) -> float:
        os.ftruncate(plain, 0)
        t = time.perf_counter()
        body()
        return mib / (time.perf_counter() - t)

    def append() -> None:
        for _ in range(count):
            f.append(buf)

    def write() -> None:
        for _ in range(count):
            os.write(plain, buf)

    def split() -> None:
        for i in range(count):
            f.write_from(buf, i * size)

    try:
        run(append), run(write), run(split)  # warm: the pool's threads, the file's blocks
        samples = stats.interleave({"append": lambda: run(append), "os.write": lambda: run(write),
                                    "pwrite-split": lambda: run(split)}, rounds)
        assert f.stats()["mechanisms"]["posix"]["calls"] >= count, "appends ran something else than one write"
    finally:
        f.close()
        os.close(plain)
    out = {"size": size, "count": count, "samples": samples, "ratios": {}}
    med = {k: stats.median(v) for k, v in samples.items()}
    line = [f"{k} {v:,.0f} MiB/s" for k, v in med.items()]
    for a, b in (("append", "os.write"), ("append", "pwrite-split")):
        r = stats.ratio(samples[a], samples[b], paired=True)
        out["ratios"][f"{a}/{b}"] = r.__dict__
        line.append(f"{a}/{b} {stats.describe(r)} ({stats.verdict(r)})")
    head = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size} B"
    print(f"{head} x {count}: " + "; ".join(line), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1m,16m,128m")
    ap.add_argument("--total", default="256m")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--mechanism", default="parallel")
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.rounds < stats.MIN_SAMPLES:
        ap.error(f"--rounds: at least {stats.MIN_SAMPLES}")
    fd, path = tempfile.mkstemp(prefix="accio-append-", dir=a.dir)
    os.close(fd)
    try:
        results = [measure(path, parse_size(s), parse_size(a.total), a.rounds, a.mechanism) for s in a.sizes.split(",")]
    finally:
        os.unlink(path)
    if a.json:
        write_json(a.json, {"command": "python " + " ".join(sys.argv), "machine": platform.node(),
                            "cpus": os.cpu_count(), "kernel": platform.release(), "dir": a.dir,
                            "mechanism": a.mechanism, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
