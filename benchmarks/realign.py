#!/usr/bin/env python3
"""realign: hot reads into buffers misaligned against the file offset, with the aligned per-thread
buffer (realign=auto: where this CPU's kernel copy is slow for them) and without (realign=off), and
the same reads into a page-aligned buffer, interleaved in the same rounds (accio.stats: >= 7 rounds,
median ratio with its 95% bootstrap interval). Buffers: page-aligned, a bytearray (whose data sits
16 bytes into its allocation, as a numpy array's does) and --offsets bytes off a page (default 8).
Each sample reads the whole file in requests of --request bytes through
accio.open(mechanism=...).read_into.

    python benchmarks/realign.py --dir /var/tmp --size 1g --json results/realign.json
    python benchmarks/realign.py --dir /var/tmp --size 1g --mechanisms posix --offsets 8,32,48 \
        --json results/realign_offsets.json    # realign's rule: a buffer off the offset's 32-byte alignment
    python benchmarks/realign.py --dir /var/tmp --size 512m --cold --rounds 11 --json results/realign_cold.json

--cold drops the file's pages before every sample (accio._system.drop_pages, residency checked):
what realign does to reads that wait for the device.
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import mmap
import os
import platform
import statistics
import sys
import time

import accio
from accio import _ext, stats
from accio._system import cpu_model, drop_pages, parse_size, residency
from accio._usage import write_json

MiB = 1 << 20


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default="/var/tmp")
    p.add_argument("--size", default="1g", help="file size (default 1g)")
    p.add_argument("--request", default="64m", help="bytes per read_into (default 64m)")
    p.add_argument("--mechanisms", default="posix,parallel")
    p.add_argument("--offsets", default="8", help="buffers this many bytes off a page, comma-separated "
                   "(default 8; each below 4096)")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--cold", action="store_true", help="drop the file's pages before every sample")
    p.add_argument("--json")
    a = p.parse_args()
    if a.rounds < stats.MIN_SAMPLES:
        p.error(f"--rounds must be at least {stats.MIN_SAMPLES}")
    try:
        offsets = [int(x) for x in a.offsets.split(",")]
    except ValueError:
        offsets = [-1]
    if any(not 0 < o < 4096 for o in offsets):
        p.error(f"--offsets {a.offsets!r}: expected byte counts between 1 and 4095")
    size, req = parse_size(a.size), parse_size(a.request)
    path = os.path.join(a.dir, f"accio-realign-{os.getpid()}.bin")
    with open(path, "wb") as f:
        chunk = os.urandom(MiB)
        for _ in range(size // MiB):
            f.write(chunk)
    area = mmap.mmap(-1, req + 4096)  # page-aligned, room for the offsets
    view = memoryview(area)
    view[:] = bytes(len(view))
    ba = bytearray(req)
    addr = ctypes.addressof((ctypes.c_char * 1).from_buffer(ba))
    buffers = {"page-aligned": view[:req], f"bytearray (+{addr % 64})": memoryview(ba),
               **{f"+{o}": view[o:o + req] for o in offsets}}

    def reader(mech: str, buf, realign: str):
        def go() -> float:
            if a.cold:
                drop_pages(path, 0, size)
                if residency(path) > 0.05:
                    raise SystemExit(f"{path}: its pages stay cached after dropping them (tmpfs?): no cold reads here")
            with accio.open(path, "r", mechanism=mech, realign=realign) as f:
                t0 = time.perf_counter()
                for off in range(0, size, req):
                    f.read_into(buf[:min(req, size - off)], off)
                return size / MiB / (time.perf_counter() - t0)
        return go

    try:
        with open(path, "rb", buffering=0) as f:  # hot
            while f.read(16 * MiB):
                pass
        contenders = {}
        for m in a.mechanisms.split(","):
            contenders[f"{m} page-aligned"] = reader(m, buffers["page-aligned"], "off")
            for name, buf in buffers.items():
                if name != "page-aligned":
                    contenders[f"{m} {name} off"] = reader(m, buf, "off")
                    contenders[f"{m} {name} auto"] = reader(m, buf, "auto")
        samples = stats.interleave(contenders, a.rounds)
    finally:
        os.unlink(path)
    out = {"command": "python benchmarks/realign.py " + " ".join(sys.argv[1:]), "accio": accio.__version__,
           "git_commit": _ext.git_commit(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"cpu": cpu_model(), "arch": platform.machine(), "cpus": os.cpu_count(),
                       "load": os.getloadavg(),
                       "slow_misaligned_copy": _ext.probe("slow_misaligned_copy")[0]},
           "size": size, "request": req, "rounds": a.rounds, "cache": "cold" if a.cold else "hot",
           "medians_mibps": {k: round(statistics.median(v), 1) for k, v in samples.items()}, "samples": samples,
           "ratios": []}
    for m in a.mechanisms.split(","):
        for name in buffers:
            if name == "page-aligned":
                continue
            on, off, al = samples[f"{m} {name} auto"], samples[f"{m} {name} off"], samples[f"{m} page-aligned"]
            for what, x, y in (("realign auto / off", on, off), ("realign auto / page-aligned", on, al),
                               ("off / page-aligned", off, al)):
                r = stats.ratio(x, y, paired=True)
                out["ratios"].append({"mechanism": m, "buffer": name, "what": what, "ratio": r.as_dict(),
                                      "verdict": stats.verdict(r)})
                print(f"{m:9s} {name:16s} {what:28s} {stats.describe(r):24s} {stats.verdict(r)}")
    for k, v in out["medians_mibps"].items():
        print(f"  {k:32s} {v:9.0f} MiB/s")
    if a.json:
        write_json(a.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
