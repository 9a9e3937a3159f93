#!/usr/bin/env python3
"""cold_split: a cold file read front to back in large requests (a stream, as `dd bs=64M` or a
loader reading 64 MiB chunks), one pread per request against the engine's plans, interleaved in the
same rounds (accio.stats: >= 7 rounds, median ratio with its 95% bootstrap interval). The file's
pages are dropped before every sample.

Contenders: `pread` (os.preadv, one call per request: what a program does without accio), the
`posix` and `parallel(task=4MiB)` mechanisms, and `auto` with the built-in model (profile=off),
whose plan for these reads depends on whether the file's device says it is rotational (on such a
device the model reads a cold range in one stream: docs/tuning.md). The JSON records the model the
engine built for the directory ("model_rotational"), the block device's facts, and the plans auto
ran, with their reasons.

    python benchmarks/cold_split.py --dir /var/tmp --size 1g --rounds 15 --json results/cold_split.json
"""
from __future__ import annotations

import argparse
import datetime
import json
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


def device(directory: str) -> dict | None:
    """The block device under directory (accio.bench.block_device: rotational, read-ahead, ...)."""
    from accio.bench import block_device
    st = os.stat(directory)
    link = f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    return block_device("/dev/" + os.path.basename(os.path.realpath(link))) if os.path.exists(link) else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dir", default="/var/tmp")
    p.add_argument("--size", default="1g", help="file size (default 1g)")
    p.add_argument("--request", default="64m", help="bytes per request (default 64m)")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--json")
    a = p.parse_args()
    if a.rounds < stats.MIN_SAMPLES:
        p.error(f"--rounds must be at least {stats.MIN_SAMPLES}")
    size, req = parse_size(a.size), parse_size(a.request)
    if not 0 < req <= size:
        p.error(f"--request {a.request!r} must be between 1 byte and --size")
    path = os.path.join(a.dir, f"accio-cold-split-{os.getpid()}.bin")
    with open(path, "wb") as f:
        chunk = os.urandom(MiB)
        for _ in range(size // MiB):
            f.write(chunk)
        f.write(chunk[:size % MiB])
        os.fsync(f.fileno())
    buf = memoryview(mmap.mmap(-1, req))  # page-aligned: realign is not what is measured
    plans: dict = {}

    def cold() -> None:
        drop_pages(path, 0, size)
        if residency(path) > 0.05:
            raise SystemExit(f"{path}: its pages stay cached after dropping them (tmpfs?): no cold reads here")

    def pread() -> float:
        cold()
        fd = os.open(path, os.O_RDONLY)
        try:
            t0 = time.perf_counter()
            for off in range(0, size, req):
                os.preadv(fd, [buf[:min(req, size - off)]], off)
            return size / MiB / (time.perf_counter() - t0)
        finally:
            os.close(fd)

    def engine(name: str, **settings):
        def go() -> float:
            cold()
            with accio.open(path, "r", **settings) as f:
                t0 = time.perf_counter()
                for off in range(0, size, req):
                    f.read_into(buf[:min(req, size - off)], off)
                mibps = size / MiB / (time.perf_counter() - t0)
                for pl in f.stats()["plans"]:
                    seen = plans.setdefault(name, {}).setdefault(pl["plan"] + " | " + pl["why"], 0)
                    plans[name][pl["plan"] + " | " + pl["why"]] = seen + pl["calls"]
            return mibps
        return go

    contenders = {"pread": pread, "posix": engine("posix", mechanism="posix"),
                  "parallel(task=4MiB)": engine("parallel(task=4MiB)", mechanism="parallel", task_size=4 * MiB),
                  "auto (built-in model)": engine("auto (built-in model)", mechanism="auto", profile="off")}
    try:
        samples = stats.interleave(contenders, a.rounds)
    finally:
        os.unlink(path)
    out = {"command": "python benchmarks/cold_split.py " + " ".join(sys.argv[1:]), "accio": accio.__version__,
           "git_commit": _ext.git_commit(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"cpu": cpu_model(), "arch": platform.machine(), "cpus": os.cpu_count(), "load": os.getloadavg()},
           "device": device(a.dir),
           "model_rotational": bool(json.loads(_ext.profile_describe(None, a.dir)).get("rotational")),
           "size": size, "request": req, "rounds": a.rounds, "cache": "cold",
           "medians_mibps": {k: round(statistics.median(v), 1) for k, v in samples.items()}, "samples": samples,
           "auto_plans": plans.get("auto (built-in model)", {}), "ratios": []}
    for name in contenders:
        if name == "pread":
            continue
        r = stats.ratio(samples[name], samples["pread"], paired=True)
        out["ratios"].append({"what": f"{name} / pread", "ratio": r.as_dict(), "verdict": stats.verdict(r)})
        print(f"{name + ' / pread':34s} {stats.describe(r):24s} {stats.verdict(r)}")
    for k, v in out["medians_mibps"].items():
        print(f"  {k:24s} {v:9.0f} MiB/s")
    for plan, calls in out["auto_plans"].items():
        print(f"  auto ran {plan} ({calls} requests)")
    if a.json:
        write_json(a.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
