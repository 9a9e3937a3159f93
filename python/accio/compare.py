"""`accio compare`: write, write+fsync, cold read and re-read of one file with each mechanism.

Cold means the file's pages were dropped (fsync, then posix_fadvise DONTNEED) and the residency
measured just before the timed read says so; the table prints that residency. Each phase is timed
over the whole file in records of --record bytes; with --repeat N the median is reported.
"""
from __future__ import annotations

import json
import mmap
import os
import statistics
import sys
import tempfile
import time

from . import File, __version__, _ext
from .info import filesystem

PHASES = ("write", "write+fsync", "cold read", "re-read")


def parse_size(s: str) -> int:
    s = s.strip().lower().removesuffix("b").removesuffix("i")
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def add_arguments(p) -> None:
    p.add_argument("--size", default="1g", help="file size (default 1g)")
    p.add_argument("--record", default="16m", help="bytes per request (default 16m)")
    p.add_argument("--dir", default=None, help="directory for the test file (default: the temp directory)")
    p.add_argument("-m", "--mechanisms", default="posix,parallel,direct,uring",
                   help="comma-separated mechanisms (default posix,parallel,direct,uring)")
    p.add_argument("--repeat", type=int, default=1, help="repetitions per phase; the median is shown")
    p.add_argument("--json", metavar="FILE", help="also write every sample as JSON")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="a setting for every mechanism, e.g. --set threads=2 (repeatable)")


def _progress(msg: str) -> None:
    if sys.stderr.isatty():
        print(f"\r\033[K{msg}", end="", file=sys.stderr, flush=True)


def drop_cache(path: str) -> None:
    """fsync path, then ask the kernel to drop its pages (posix_fadvise DONTNEED)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def run_one(path: str, mech: str, size: int, record: int, buf: mmap.mmap, settings: dict) -> dict:
    """One repetition of the four phases; returns seconds per phase and the cold residency."""
    view = memoryview(buf)
    out = {}
    with File(path, "w+", mech, **settings) as f:
        t0 = time.perf_counter()
        for off in range(0, size, record):
            f.write_from(view[:min(record, size - off)], off)
        t1 = time.perf_counter()
        f.fsync()
        t2 = time.perf_counter()
        out["write"], out["write+fsync"] = t1 - t0, t2 - t0
        ran = f.stats()["last_mechanism"]
    drop_cache(path)
    with File(path, "r", mech, **settings) as f:
        res = f.residency()
        out["cold_residency"] = res["cached"] / res["total"] if res["total"] else 0.0
        for phase in ("cold read", "re-read"):
            t0 = time.perf_counter()
            got = 0
            for off in range(0, size, record):
                got += f.read_into(view[:min(record, size - off)], off)
            out[phase] = time.perf_counter() - t0
            if got != size:
                raise OSError(f"{mech}: read {got} of {size} bytes")
    out["ran"] = ran
    return out


def main(args) -> int:
    size, record = parse_size(args.size), parse_size(args.record)
    mechs = [m.strip() for m in args.mechanisms.split(",") if m.strip()]
    settings = dict(kv.split("=", 1) for kv in args.set)
    directory = args.dir or tempfile.gettempdir()
    buf = mmap.mmap(-1, record)
    buf.write(os.urandom(min(record, 1 << 20)) * (record // min(record, 1 << 20)))
    fs = filesystem(directory)
    print(f"accio compare: {size / 2**20:.0f} MiB file, {record / 2**20:g} MiB records, in {directory} "
          f"({fs['fstype']} on {fs['device']}); MiB/s, median of {args.repeat}", file=sys.stderr)
    results = []
    fd, path = tempfile.mkstemp(prefix="accio-compare-", dir=directory)
    os.close(fd)
    try:
        for mech in mechs:
            samples = []
            for r in range(args.repeat):
                _progress(f"  {mech}: repetition {r + 1}/{args.repeat}")
                samples.append(run_one(path, mech, size, record, buf, settings))
            row = {"mechanism": mech, "ran": samples[-1]["ran"],
                   "cold_residency": max(s["cold_residency"] for s in samples), "mib_s": {}, "samples": {}}
            for ph in PHASES:
                bw = [size / 2**20 / s[ph] for s in samples]
                row["mib_s"][ph] = statistics.median(bw)
                row["samples"][ph] = bw
            results.append(row)
    finally:
        os.unlink(path)
    _progress("")
    base = next((r for r in results if r["mechanism"] == "posix"), None)
    head = f"{'mechanism':<12}" + "".join(f"{p:>13}" for p in PHASES) + f"{'cold cached':>13}"
    print(head)
    print("-" * len(head))
    for r in results:
        name = r["mechanism"] if r["ran"] == r["mechanism"] else f"{r['mechanism']}->{r['ran']}"
        cells = "".join(f"{r['mib_s'][p]:>13.0f}" for p in PHASES)
        print(f"{name:<12}{cells}{r['cold_residency'] * 100:>12.1f}%")
    if base and len(results) > 1:
        print("\nratio to posix")
        for r in results:
            if r is base:
                continue
            cells = "".join(f"{r['mib_s'][p] / base['mib_s'][p]:>13.2f}" for p in PHASES)
            print(f"{r['mechanism']:<12}{cells}")
    if args.json:
        doc = {"schema": "accio.compare/1", "accio_version": __version__, "size": size, "record": record,
               "directory": directory, "filesystem": fs, "repeat": args.repeat,
               "settings": {n: v for n, _e, _d, v in _ext.settings(list(settings.items()))}, "results": results}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
    return 0
