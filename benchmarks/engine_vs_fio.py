#!/usr/bin/env python3
"""Engine benchmark: accio's mechanisms against a plain baseline and against fio, side by side.

Measures, in one run, on one file (default 2 GiB):
  hot read     parallel (2 threads) vs posix, file fully cached (residency checked), with the
               1- and 2-thread memcpy bandwidth measured in the same run as the ceiling
  cold read    direct and uring (O_DIRECT, 1 MiB pieces, 16 in flight) vs
               fio --direct=1 --ioengine=libaio --iodepth=16 --bs=1M, cache dropped before each run
  write+fsync  the same three, fsync inside the timed region
Each repetition runs every contender of a group once, in the order accio.stats.rotation gives it;
each cell is the median of --repeat runs (at least 7), the spread (min..max) printed and stored.
A ratio is the median of the per-repetition ratios with its 95% interval and verdict, and its goal
is met when that median reaches it (accio.stats; until the twenty-fourth session a ratio of
medians from 3-5 repetitions in a fixed order, statistics audit). Speed goals are ratios measured
here, never asserted: see docs/performance.md.

    python benchmarks/engine_vs_fio.py [--size 2g] [--dir DIR] [--repeat 7] [--json results/engine_vs_fio.json]
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import accio
from accio import stats
from accio._system import drop_pages, parse_size, residency
from accio.info import filesystem, gather

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_programs import fio_mibps  # noqa: E402  (one reading of fio's JSON for the benchmarks)

MiB = 1 << 20




def accio_pass(path: str, size: int, record: int, buf, write: bool, fsync: bool, mechanism: str,
               settings: dict) -> tuple[float, str]:
    view = memoryview(buf)
    with accio.open(path, "r+" if write else "r", mechanism, **settings) as f:
        t0 = time.perf_counter()
        for off in range(0, size, record):
            n = min(record, size - off)
            if write:
                f.write_from(view[:n], off)
            elif f.read_into(view[:n], off) != n:
                raise RuntimeError("short read")
        if fsync:
            f.fsync()
        dt = time.perf_counter() - t0
        ran = f.stats()["last_mechanism"]
    return size / MiB / dt, ran


def fio_pass(path: str, size: int, write: bool) -> float:
    cmd = ["--name=accio-peer", f"--filename={path}", f"--size={size}", "--bs=1M", "--direct=1",
           "--ioengine=libaio", "--iodepth=16", f"--rw={'write' if write else 'read'}", "--invalidate=1"]
    if write:
        cmd.append("--end_fsync=1")
    return fio_mibps(cmd, "write" if write else "read")  # over the job's wall time: the fsync included


def memcpy_scaling(nbytes: int = 256 * MiB, rounds: int = 4) -> tuple[float, float]:
    """MiB/s of plain memory copies by 1 and by 2 threads (NumPy releases the GIL while copying):
    the ceiling for a hot-cache read, which is a copy from the page cache."""
    import threading

    import numpy as np
    srcs = [np.ones(nbytes, dtype=np.uint8) for _ in range(2)]
    dsts = [np.full(nbytes, 2, dtype=np.uint8) for _ in range(2)]  # touched: no page faults timed

    def work(i):
        for _ in range(rounds):
            np.copyto(dsts[i], srcs[i])

    t0 = time.perf_counter()
    work(0)
    one = rounds * nbytes / MiB / (time.perf_counter() - t0)
    ts = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    two = 2 * rounds * nbytes / MiB / (time.perf_counter() - t0)
    return one, two


def summarize(samples: list[float]) -> dict:
    return {"mib_s": statistics.median(samples), "min": min(samples), "max": max(samples),
            "stdev": statistics.stdev(samples) if len(samples) > 1 else 0.0, "samples": samples}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="2g")
    ap.add_argument("--record", default="64m", help="bytes per accio request (default 64m)")
    ap.add_argument("--dir", default=None, help="directory on the filesystem under test (default: temp dir)")
    ap.add_argument("--repeat", type=int, default=stats.MIN_SAMPLES)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.repeat < stats.MIN_SAMPLES:
        ap.error(f"--repeat must be at least {stats.MIN_SAMPLES} (the project's statistics rule)")
    size, record = parse_size(args.size), parse_size(args.record)
    directory = args.dir or tempfile.gettempdir()
    have_fio = shutil.which("fio") is not None
    if not have_fio:
        print("fio not found: peer columns skipped (apt-get install fio)", file=sys.stderr)

    buf = mmap.mmap(-1, record)
    buf.write(os.urandom(MiB) * (record // MiB))
    fd, path = tempfile.mkstemp(prefix="accio-bench-", dir=directory)
    os.close(fd)
    hot = {"threads": 2, "task_size": "4m"}
    dio = {"task_size": "1m", "threads": 16, "buffer_size": "1m", "buffer_count": 16}
    uring_dio = {"task_size": "1m", "queue_depth": 16, "direct": True, "buffer_size": "1m", "buffer_count": 16}
    cells: dict[str, list[float]] = {}
    ran: dict[str, str] = {}
    notes: list[str] = []

    def add(key, value, mech=None):
        cells.setdefault(key, []).append(value)
        if mech:
            ran[key] = mech

    try:
        # Lay the file down once (posix) so every read pass reads the same blocks.
        accio_pass(path, size, record, buf, True, True, "posix", {})
        for rep in range(args.repeat):
            print(f"repetition {rep + 1}/{args.repeat}", file=sys.stderr)
            # -- hot read: warm the cache, check residency, then time
            accio_pass(path, size, record, buf, False, False, "posix", {})
            res = residency(path)
            if res < 0.99:
                notes.append(f"hot read: residency only {res:.1%} before timing")
            for mech in stats.rotation(["posix", "parallel"], rep):
                bw, m = accio_pass(path, size, record, buf, False, False, mech, {"posix": {}, "parallel": hot}[mech])
                add(f"hot read/{mech}", bw, m)
            one, two = memcpy_scaling()
            add("memcpy/1 thread", one, "memcpy")
            add("memcpy/2 threads", two, "memcpy")
            # -- cold read, then write+fsync: the contenders of each in a rotating order
            peers = ["direct", "uring"] + (["fio"] if have_fio else [])
            for mech in stats.rotation(peers, rep):
                drop_pages(path, 0, 0)
                res = residency(path)
                if res > 0.01:
                    notes.append(f"cold read {mech}: residency {res:.1%} before timing")
                if mech == "fio":
                    add("cold read/fio", fio_pass(path, size, False))
                else:
                    bw, m = accio_pass(path, size, record, buf, False, False, mech, {"direct": dio, "uring": uring_dio}[mech])
                    add(f"cold read/{mech}", bw, m)
            for mech in stats.rotation(peers, rep):
                if mech == "fio":
                    add("write+fsync/fio", fio_pass(path, size, True))
                else:
                    bw, m = accio_pass(path, size, record, buf, True, True, mech, {"direct": dio, "uring": uring_dio}[mech])
                    add(f"write+fsync/{mech}", bw, m)
    finally:
        os.unlink(path)

    results = {k: {**summarize(v), "ran": ran.get(k, "fio")} for k, v in cells.items()}
    ratios = {
        "hot read: parallel / posix": ("hot read/parallel", "hot read/posix", 1.8),
        "memcpy: 2 threads / 1 (ceiling)": ("memcpy/2 threads", "memcpy/1 thread", 0.0),
        "cold read: direct / fio": ("cold read/direct", "cold read/fio", 0.95),
        "cold read: uring / fio": ("cold read/uring", "cold read/fio", 0.95),
        "write+fsync: direct / fio": ("write+fsync/direct", "write+fsync/fio", 0.95),
        "write+fsync: uring / fio": ("write+fsync/uring", "write+fsync/fio", 0.95),
    }
    print(f"\n{'test/mechanism':<22}{'MiB/s':>10}{'min':>10}{'max':>10}  ran")
    for k, r in results.items():
        print(f"{k:<22}{r['mib_s']:>10.0f}{r['min']:>10.0f}{r['max']:>10.0f}  {r['ran']}")
    print(f"\n{'ratio (median of the per-repetition ratios)':<44}{'value [95% interval]':<24}{'verdict':<14}goal")
    ratio_out = {}
    for name, (a, b, goal) in ratios.items():
        if a in results and b in results:
            r = stats.ratio(cells[a], cells[b], paired=True)
            ratio_out[name] = {**r.as_dict(), "value": r.estimate, "verdict": stats.verdict(r), "goal": goal or None,
                               "goal_verdict": stats.goal(r, goal) if goal else None}
            print(f"{name:<44}{stats.describe(r):<24}{stats.verdict(r):<14}"
                  + (f">= {goal:.2f}: {stats.goal(r, goal)}" if goal else "(context)"))
    for n in sorted(set(notes)):
        print(f"note: {n}")
    if args.json:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
        except OSError:
            commit = ""
        info = gather(directory)
        doc = {
            "schema": "accio.engine_vs_fio/1",
            "command": " ".join([os.path.basename(sys.argv[0]), *sys.argv[1:]]),
            "accio_version": accio.__version__, "git_commit": commit,
            "machine": {"kernel": info["kernel"], "cpu": info["cpu"], "memory": info["memory"],
                        "hostname": platform.node()},
            "filesystem": filesystem(directory), "directory": directory,
            "fio_version": subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
            if have_fio else None,
            "size": size, "record": record, "repeat": args.repeat,
            "settings": {"hot parallel": hot, "direct": dio, "uring": uring_dio},
            "results": results, "ratios": ratio_out, "notes": sorted(set(notes)),
        }
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
