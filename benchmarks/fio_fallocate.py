#!/usr/bin/env python3
"""How much a fresh file's O_DIRECT writes gain when its size is set first: fio alone, io_uring,
iodepth 16, a fresh 1 GiB file per sample, --fallocate=none (an application writing a fresh file;
uring_vs_fio.py's setting) against --fallocate=native (fio sets the size with fallocate before it
writes), interleaved (accio.stats, median ratio native/none with its 95% bootstrap interval).

It is the measurement behind write_direct_split setting the file's new end first on ext4
(src/io/odirect.cpp, issue 19): ext4 runs a direct write that moves the end of the file one at a
time. About 2 minutes on the 2-vCPU VM.

    .venv/bin/python benchmarks/fio_fallocate.py --dir /var/tmp --json results/uring/fio_fallocate.json
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from accio import _ext, stats
from accio._system import parse_size
from accio._usage import write_json

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_programs import fio_mibps  # noqa: E402  (one reading of fio's JSON for the benchmarks)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--size", default="1g")
    ap.add_argument("--bs", default="64k,1m")
    ap.add_argument("--rounds", type=int, default=stats.MIN_SAMPLES)
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.rounds < stats.MIN_SAMPLES:
        ap.error(f"--rounds must be at least {stats.MIN_SAMPLES}")
    size, path = parse_size(a.size), os.path.join(a.dir, f"accio-fio-fallocate.{os.getpid()}")
    out = {"schema": "accio.fio-fallocate/1", "command": "python " + " ".join(sys.argv),
           "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "git_commit": _ext.git_commit(),
           "fio": subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip(),
           "kernel": platform.release(), "dir": a.dir, "size": size, "cells": []}

    def fio(bs: str, fallocate: str):
        def one() -> float:
            if os.path.exists(path):
                os.unlink(path)
            return fio_mibps(["--name=w", f"--filename={path}", f"--size={size}", "--rw=write", f"--bs={bs}",
                              "--iodepth=16", "--ioengine=io_uring", "--direct=1", f"--fallocate={fallocate}",
                              "--end_fsync=0", "--thread=1"], "write")
        return one
    try:
        for bs in a.bs.split(","):
            got = stats.interleave({"none": fio(bs, "none"), "native": fio(bs, "native")}, a.rounds)
            r = stats.ratio(got["native"], got["none"], paired=True)
            print(f"{bs:>4} O_DIRECT fresh-file writes, native/none: {stats.describe(r)} {stats.verdict(r)}"
                  f" (medians {stats.summary(got['none'])['median']:.0f} and {stats.summary(got['native'])['median']:.0f} MiB/s)",
                  flush=True)
            out["cells"].append({"bs": bs, "samples": got, "ratio": r.as_dict(), "ratio_text": stats.describe(r),
                                 "verdict": stats.verdict(r)})
    finally:
        if os.path.exists(path):
            os.unlink(path)
    if a.json:
        write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
