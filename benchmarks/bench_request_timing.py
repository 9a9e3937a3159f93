#!/usr/bin/env python3
"""What `accio bench`'s per-request latency timing costs: the same phase (hot reads of one cached
file, one thread, posix) with and without the two clock reads per request that give IOPS'
companions p50/p99/p99.9 (src/python/bench_phase.hpp, time_requests), interleaved round by round
(accio.stats: rotating order, >= 7 rounds, median of the per-round ratios, 95% bootstrap interval).

The ratio is untimed/timed bandwidth: 1.00 means the timing costs nothing measurable; the goal is
<= 1.02 at 4 KiB records (the smallest, where a request takes about a microsecond from the page
cache) and "within noise" from 64 KiB up.

    python benchmarks/bench_request_timing.py [--dir /dev/shm] [--size 256m] [--records 4k,64k,1m]
                                              [--rounds 15] [--json results/bench/request_timing.json]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

from accio import _ext, stats
from accio._system import fmt_size, parse_size, parse_sizes
from accio._usage import write_json

MiB = 1 << 20


def phase(path: str, size: int, record: int, timed: bool) -> float:
    """MiB/s of one hot read of the whole file with record-sized requests."""
    f = _ext.File(path, "r", [("mechanism", "posix")])
    try:
        out = _ext.bench_run([f], [0], [size], record, False, time_requests=timed)
    finally:
        f.close()
    (s, e, b, ops), = out["intervals"]
    if b != size or ops != -(-size // record):
        raise RuntimeError(f"read {b} bytes in {ops} requests, expected {size} in {-(-size // record)}")
    if timed != bool(out["latency_ns"]):
        raise RuntimeError("latencies present without timing, or missing with it")
    return b / MiB / ((e - s) / 1e9)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir())
    ap.add_argument("--size", default="256m")
    ap.add_argument("--records", default="4k,64k,1m")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.rounds < stats.MIN_SAMPLES:
        ap.error(f"--rounds: at least {stats.MIN_SAMPLES} (the project's statistics rule)")
    size = parse_size(a.size)
    fd, path = tempfile.mkstemp(prefix="accio-timing-", dir=a.dir)
    out = {"command": [sys.executable, *sys.argv], "dir": a.dir, "size": size, "rounds": a.rounds, "records": []}
    try:
        with os.fdopen(fd, "wb") as f:
            for _ in range(max(1, size // (64 * MiB))):
                f.write(os.urandom(min(size, 64 * MiB)))
        for rec in parse_sizes(a.records):
            phase(path, size, rec, True)  # warm-up, untimed: the file in the page cache, the code paged in
            samples = stats.interleave({"untimed": lambda: phase(path, size, rec, False),
                                        "timed": lambda: phase(path, size, rec, True)}, a.rounds)
            r = stats.ratio(samples["untimed"], samples["timed"], paired=True)
            out["records"].append({"record": rec, "samples": samples, "ratio": r.as_dict(),
                                   "verdict": stats.verdict(r)})
            print(f"record {fmt_size(rec):>7}: untimed/timed {stats.describe(r)} {stats.verdict(r)}"
                  f"  (median {stats.median(samples['timed']):.0f} MiB/s timed)", flush=True)
    finally:
        os.unlink(path)
    if a.json:
        write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
