#!/usr/bin/env python3
"""An A/A check of `accio tune --evaluate`'s sampling: `posix` against itself in one cell, its phases
taking turns as the evaluation's contenders do (Bench.sample_together, the order swapped every
round), and the paired ratio of the two. What it shows is the noise floor of that cell on this
machine: an evaluation verdict inside it says nothing about auto.

    python benchmarks/evaluate_aa.py OP CACHE THREADS FILE_MIB TRANSFER_BYTES [ROUNDS=15 [DIR=/var/tmp]]
    python benchmarks/evaluate_aa.py write cold 1 128 4096 15
"""
import sys
from accio.tune.measure import Bench
from accio import stats
MiB = 1 << 20
op, cache, threads, fs, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) * MiB, int(sys.argv[5])
rounds = int(sys.argv[6]) if len(sys.argv) > 6 else 15
with Bench(sys.argv[7] if len(sys.argv) > 7 else "/var/tmp", fs) as b:
    a, c = [], []
    for r in range(rounds):
        e = [({"mechanism": "posix"}, fs, None), ({"mechanism": "posix"}, fs, None)]
        x = b.sample_together(e, op, cache == "cold", threads, size, min_seconds=0.05)
        if r % 2: x = x[::-1]
        a.append(x[0]); c.append(x[1])
    rt = stats.ratio(a, c)
    print(op, cache, threads, fs >> 20, size, "A/A", stats.describe(rt), stats.verdict(rt), [round(v) for v in a], [round(v) for v in c])
