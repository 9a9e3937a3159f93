#!/usr/bin/env python3
"""Hot sequential read of one cached file by accio (posix), fio (psync) and dd, interleaved round by
round (accio.stats.interleave: the order rotates; until the twenty-fourth session it was accio, fio,
dd in every round): a third tool to tell which of accio and fio is off when `accio bench --vs-fio`
disagrees on cached reads (docs/methodology.md). Prints medians and spreads, and accio/fio and
accio/dd as paired ratios with their 95% intervals and verdicts; --json stores every sample.

    python benchmarks/hot_read_three_tools.py [--dir /dev/shm] [--size 1g] [--rounds 9] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

from accio import _ext, stats
from accio.bench.fio import run as fio_run
from accio.bench.runner import Job
from accio._system import parse_size
from accio.bench.spec import Column

MiB = 1 << 20


def accio_once(path: str, size: int, record: int) -> float:
    f = _ext.File(path, "r", [("mechanism", "posix")])
    try:
        (s, e, b), = _ext.bench_phase([f], [0], [size], record, False)
    finally:
        f.close()
    return b / MiB / ((e - s) / 1e9)


def dd_once(path: str, record: int) -> float:
    out = subprocess.run(["dd", f"if={path}", "of=/dev/null", f"bs={record}"], capture_output=True, text=True,
                         check=True).stderr
    m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", out)
    return int(m.group(1)) / MiB / float(m.group(2))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--size", default="1g")
    ap.add_argument("--records", default="1m,16m")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.rounds < stats.MIN_SAMPLES:
        ap.error(f"--rounds must be at least {stats.MIN_SAMPLES} (the project's statistics rule)")
    size = parse_size(a.size)
    fd, path = tempfile.mkstemp(prefix="accio-3tools-", dir=a.dir)
    os.close(fd)
    out = {"command": sys.argv, "dir": a.dir, "size": size, "rounds": a.rounds, "records": {}}
    try:
        with open(path, "wb") as f:
            for _ in range(size // (64 * MiB)):
                f.write(os.urandom(64 * MiB))
        for rec in (parse_size(r) for r in a.records.split(",")):
            s = stats.interleave({
                "accio": lambda: accio_once(path, size, rec),
                "fio": lambda: fio_run([Job(path, 0, size)], "reread", Column("posix", "posix"), rec, {})["mib_s"],
                "dd": lambda: dd_once(path, rec)}, a.rounds)
            out["records"][rec] = s
            vs = {b: stats.ratio(s["accio"], s[b], paired=True) for b in ("fio", "dd")}
            out.setdefault("ratios", {})[rec] = {b: {**r.as_dict(), "verdict": stats.verdict(r)} for b, r in vs.items()}
            print(f"record {rec // MiB:>3} MiB: " + "  ".join(
                f"{k} {stats.median(v):.0f} ({min(v):.0f}..{max(v):.0f})" for k, v in s.items())
                + "".join(f"  accio/{b} {stats.describe(r)} {stats.verdict(r)}" for b, r in vs.items()))
    finally:
        os.unlink(path)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
