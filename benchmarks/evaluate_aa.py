#!/usr/bin/env python3
"""An A/A check of `accio tune --evaluate`'s sampling: `posix` against itself in one cell, sampled as
the evaluation samples (one untimed warm-up phase each, then rounds whose phases take turns,
Bench.sample_together, the order by stats.rotation), and the paired ratio of the two. What it
shows is the noise floor of that cell on this machine: an evaluation verdict inside it says nothing
about auto.

    python benchmarks/evaluate_aa.py OP CACHE THREADS FILE_MIB TRANSFER_BYTES [--rounds 15] [--dir /var/tmp]
                                     [--json FILE]   (appends this cell's result to FILE's list)
    python benchmarks/evaluate_aa.py write cold 1 128 4096 --json results/tune/evaluate_aa_s8.json
"""
import argparse
import datetime
import json
import os
import sys

from accio import stats
from accio._usage import write_json
from accio.tune.evaluate import SAMPLE_SECONDS, warmup_bytes
from accio.tune.measure import Bench

MiB = 1 << 20

p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("op", choices=["read", "write"])
p.add_argument("cache", choices=["hot", "cold"])
p.add_argument("threads", type=int)
p.add_argument("file_mib", type=int)
p.add_argument("transfer", type=int, help="bytes per request")
p.add_argument("--rounds", type=int, default=15)
p.add_argument("--dir", default="/var/tmp")
p.add_argument("--json", help="a file holding a list of results; this cell's is appended")
a = p.parse_args()
if a.rounds < stats.MIN_SAMPLES:
    p.error(f"--rounds must be at least {stats.MIN_SAMPLES}")
fs, cold = a.file_mib * MiB, a.cache == "cold"
with Bench(a.dir, fs) as b:
    warm = warmup_bytes(fs, a.transfer, a.threads)
    b.sample_together([({"mechanism": "posix"}, warm, None)] * 2, a.op, cold, a.threads, a.transfer)
    x_a, x_b = [], []
    for r in range(a.rounds):
        e = [({"mechanism": "posix"}, fs, None), ({"mechanism": "posix"}, fs, None)]
        x = b.sample_together(e, a.op, cold, a.threads, a.transfer, min_seconds=SAMPLE_SECONDS)
        # which side goes first: stats.rotation, as the evaluation orders its rounds (a strict
        # alternation put a disturbance that repeats every other round on one side: statistics audit,
        # session 24)
        got = dict(zip(stats.rotation(["a", "b"], r), x))
        x_a.append(got["a"])
        x_b.append(got["b"])
rt = stats.ratio(x_a, x_b, paired=True)
print(a.op, a.cache, a.threads, a.file_mib, a.transfer, "A/A", stats.describe(rt), stats.verdict(rt),
      [round(v) for v in x_a], [round(v) for v in x_b])
if a.json:
    doc = []
    if os.path.exists(a.json):
        with open(a.json) as f:
            doc = json.load(f)
    doc.append({"command": " ".join([sys.executable, *sys.argv]),
                "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "cell": {"op": a.op, "cache": a.cache, "threads": a.threads, "file_size": fs, "transfer": a.transfer},
                "rounds": a.rounds, "samples_mib_s": {"a": [round(v, 1) for v in x_a], "b": [round(v, 1) for v in x_b]},
                "ratio": rt.as_dict(), "verdict": stats.verdict(rt)})
    write_json(a.json, doc)
