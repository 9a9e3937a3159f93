#!/usr/bin/env python3
"""accio's `uring` mechanism against fio's io_uring engine at the same queue depth, block size and
buffering, interleaved sample by sample (accio.stats: median ratio with a 95% bootstrap interval).

Grid: block size (4K, 64K, 1M, 8M) x read/write x buffered/O_DIRECT x hot/cold. One sample moves
the whole file once:
  accio  one request of the whole file on a `uring` handle with task_size=<bs>, queue_depth=<qd>,
         direct=on|off, timed around the call (CLOCK_MONOTONIC), into a buffer whose pages alias one
         window of qd x bs bytes (the window is mapped again and again over the file's length), so
         that both tools move the data through the same physical memory: fio cycles through its
         iodepth buffers of bs each. With a file-sized buffer, a hot buffered read writes the whole
         file to DRAM where fio's 1 MiB window at 64 KiB stays in the CPU cache (1.4 x the CPU time
         per byte: 0.82 x fio, docs/performance.md)
  fio    ioengine=io_uring bs=<bs> iodepth=<qd> direct=0|1 registerfiles=1, one job, the same file;
         fio's runtime counts whole milliseconds, so the file grows with the block size (bs x 16384,
         at least --size, at most --max-size: 128 MiB at 4K, 1 GiB from 64K) and every run of
         fio shorter than 100 ms is counted in the JSON and the table
Same timing boundaries for both: file creation, the cache drop and the fsync of the previous
sample's dirty pages are before the clock, close after it, no fsync inside (end_fsync=0). accio
opens before its clock; fio 3.x opens in its I/O loop, inside (one open: microseconds).
  read  hot   the file is cached (residency checked, >= 99%) before every sample
        cold  fsync + POSIX_FADV_DONTNEED before every sample (residency checked, <= 1%); fio
              runs with invalidate=0 so both see the same drop
  write hot   the file exists at full size (every block allocated) and clean: an overwrite; for
              buffered writes its pages are cached, for O_DIRECT writes they are dropped (a cached
              page costs an O_DIRECT write its invalidation; the file's creation caches them all)
        cold  the file is deleted before every sample: a fresh file, every page allocated
Before the timed rounds each contender runs --warmup times (default 1), untimed: round 0 starts with
accio, so without it accio's first sample alone came after the cell's set-up (a new window, the
previous cell's statistics) and paid for what comes once per cell (cold buffered writes: the first
sample of 343-702 MiB/s against 2200-4600 for the others in the same cell, issue 19).
Ratio = accio / fio (> 1: accio faster); the goal is >= 0.9 in every cell (docs/performance.md).
Buffered write cells also time, in the same rounds, the file written in requests of <bs> each by
`uring` and by `posix` (one request per block, what an application doing small writes issues):
"vs_posix" is uring / posix there, goal >= 0.9 as well.

    python benchmarks/uring_vs_fio.py [--dir /var/tmp] [--size 128m] [--max-size 1g] [--qd 16] [--rounds 7] [--warmup 1]
        [--bs 4k,64k,1m,8m] [--rw read,write] [--buffering buffered,direct] [--cache hot,cold]
        [--quick] [--json results/uring/uring_vs_fio.json]
--quick (development only: 3 rounds, 16 MiB files, not a result) checks that every cell runs.
"""
from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import mmap
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time

import accio
from accio import _ext, stats
from accio._usage import write_json
from accio._system import drop_pages, fmt_size, fsync_path, parse_size, residency

MiB = 1 << 20
GOAL = 0.9
MAP_FIXED, MAP_POPULATE = 0x10, 0x8000  # Linux's values (the mmap module names neither everywhere)
MAX_WINDOWS = 32768  # mappings per WindowBuffer (each window is one; the kernel's default limit is 65530)


def prepare(path: str, size: int, rw: str, cache: str, direct: bool) -> dict:
    """Puts the file in the state the cell asks for (outside the timed region); returns what was
    checked."""
    if rw == "write" and cache == "cold":
        if os.path.exists(path):
            os.unlink(path)
        return {}
    if not os.path.exists(path) or os.path.getsize(path) != size:
        with open(path, "wb") as f:
            chunk = os.urandom(MiB)
            for _ in range(size // MiB):
                f.write(chunk)
            f.write(chunk[:size % MiB])
    fsync_path(path)  # the previous sample's dirty pages are not this sample's work
    if rw == "write" and cache == "hot" and direct:
        drop_pages(path)
        return {}
    if cache == "cold":
        drop_pages(path)
        r = residency(path)
        if r > 0.01:
            raise RuntimeError(f"cold {rw}: {r:.0%} of {path} still cached after the drop")
        return {"residency": r}
    r = residency(path)
    if r < 0.99:
        with open(path, "rb") as f:
            while f.read(8 * MiB):
                pass
        r = residency(path)
    if r < 0.99:
        raise RuntimeError(f"hot {rw}: only {r:.0%} of {path} stays cached")
    return {"residency": r}


class WindowBuffer:
    """`size` bytes of address space whose pages alias one `window` of memory (a memfd mapped again
    and again), filled with random bytes: a whole-file request that touches only `window` bytes of
    physical memory, as fio's rotating buffers do."""

    def __init__(self, size: int, window: int):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self._munmap, self.size = libc.munmap, size
        fd = os.memfd_create("accio-uring-window")
        try:
            os.ftruncate(fd, window)
            os.pwrite(fd, os.urandom(window), 0)
            # address space only (PROT_NONE), replaced window by window below
            self.base = libc.mmap(None, size, 0, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
            if self.base in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), f"mmap of {size} bytes of address space failed")
            for off in range(0, size, window):
                at = libc.mmap(self.base + off, min(window, size - off), mmap.PROT_READ | mmap.PROT_WRITE,
                               mmap.MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd, 0)
                if at != self.base + off:
                    err = ctypes.get_errno()
                    self.close()
                    raise OSError(err, f"mapping the {window}-byte window at +{off} failed")
        finally:
            os.close(fd)
        self.view = (ctypes.c_char * size).from_address(self.base)

    def close(self) -> None:
        if self.base:
            self._munmap(self.base, self.size)
            self.base = 0


def accio_sample(path: str, size: int, bs: int, qd: int, rw: str, direct: bool, mechanism: str = "uring",
                 record: int = 0, window: WindowBuffer | None = None) -> float:
    """One pass over the file by `mechanism`: one request from/into `window` (record 0), or requests of
    `record` bytes by the engine's timed loop (accio._ext.bench_phase, one reused record buffer)."""
    write = rw == "write"
    f = accio.File(path, "r+" if write and os.path.exists(path) else ("w" if write else "r"), mechanism,
                   task_size=bs, queue_depth=qd, direct="on" if direct else "off")
    try:
        if record:
            (start, end, moved), = _ext.bench_phase([f._f], [0], [size], record, write)
        else:
            start = time.monotonic_ns()
            moved = f.write_from(window.view, 0) if write else f.read_into(window.view, 0)
            end = time.monotonic_ns()
        ran = f.stats()["last_mechanism"]
    finally:
        f.close()
    if ran != mechanism:
        raise RuntimeError(f"accio ran {ran}, not {mechanism}")
    if moved != size:
        raise RuntimeError(f"accio moved {moved} of {size} bytes")
    return moved / MiB / ((end - start) / 1e9)


def fio_sample(path: str, size: int, bs: int, qd: int, rw: str, direct: bool, short: list) -> float:
    cmd = ["fio", "--output-format=json", "--name=uring", f"--filename={path}", f"--size={size}", f"--bs={bs}",
           f"--iodepth={qd}", f"--rw={rw}", f"--direct={int(direct)}", "--ioengine=io_uring", "--registerfiles=1",
           "--thread=1", "--invalidate=0", "--fallocate=none", "--end_fsync=0", "--randrepeat=0",
           "--gtod_reduce=1", "--disk_util=0", "--iomem_align=4096"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"fio failed: {p.stderr.strip() or p.stdout.strip()}")
    side = json.loads(p.stdout[p.stdout.index("{"):])["jobs"][0][rw]
    if side["io_bytes"] != size:
        raise RuntimeError(f"fio moved {side['io_bytes']} of {size} bytes")
    if side["runtime"] < 100:
        short.append(side["runtime"])
    return side["io_bytes"] / MiB / (max(side["runtime"], 1) / 1000.0)


def run_cell(path: str, size: int, bs: int, qd: int, rw: str, buffering: str, cache: str, rounds: int,
             warmup: int = 1) -> dict:
    direct = buffering == "direct"
    checks: list[dict] = []
    short: list[int] = []

    def sample(fn):
        def go() -> float:
            checks.append(prepare(path, size, rw, cache, direct))
            return fn()
        return go

    window = WindowBuffer(size, qd * bs)
    contenders = {
        "accio": sample(lambda: accio_sample(path, size, bs, qd, rw, direct, window=window)),
        "fio": sample(lambda: fio_sample(path, size, bs, qd, rw, direct, short)),
    }
    small_writes = rw == "write" and not direct
    if small_writes:
        contenders["uring_requests"] = sample(lambda: accio_sample(path, size, bs, qd, rw, False, "uring", bs))
        contenders["posix_requests"] = sample(lambda: accio_sample(path, size, bs, qd, rw, False, "posix", bs))
    try:
        for go in contenders.values():  # one untimed round (see --warmup)
            for _ in range(warmup):
                go()
        samples = stats.interleave(contenders, rounds)
    finally:
        window.close()
    r = stats.ratio(samples["accio"], samples["fio"], paired=True)
    res = [c["residency"] for c in checks if "residency" in c]
    cell = {"bs": bs, "rw": rw, "buffering": buffering, "cache": cache, "qd": qd, "size": size,
            **{name: {**stats.summary(v), "samples": v} for name, v in samples.items()},
            "ratio": r.as_dict(), "verdict": stats.verdict(r), "goal": stats.goal(r, GOAL),
            "residency": [min(res), max(res)] if res else None,
            "fio_runs_under_100ms": short}
    if small_writes:
        rp = stats.ratio(samples["uring_requests"], samples["posix_requests"], paired=True)
        cell["vs_posix"] = {"ratio": rp.as_dict(), "verdict": stats.verdict(rp), "goal": stats.goal(rp, GOAL)}
    return cell


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--size", help="smallest file (one sample moves it once; default 128m, --quick 16m)")
    ap.add_argument("--max-size", help="largest file (the file is bs x 16384 in between; default 1g, --quick 16m)")
    ap.add_argument("--qd", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=stats.MIN_SAMPLES)
    ap.add_argument("--warmup", type=int, default=1,
                    help="untimed samples of each contender before the timed rounds (default 1)")
    ap.add_argument("--bs", default="4k,64k,1m,8m")
    ap.add_argument("--rw", default="read,write")
    ap.add_argument("--buffering", default="buffered,direct")
    ap.add_argument("--cache", default="hot,cold")
    ap.add_argument("--quick", action="store_true", help="3 rounds, 16 MiB files: checks the grid runs, not a result")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.quick:
        a.rounds = 3
    a.size = a.size or ("16m" if a.quick else "128m")
    a.max_size = a.max_size or ("16m" if a.quick else "1g")
    min_size, max_size = parse_size(a.size), parse_size(a.max_size)

    def size_for(bs: int) -> int:
        return min(max_size, max(min_size, bs * 16384)) // bs * bs
    if a.warmup < 0:
        ap.error(f"--warmup must be 0 or more, not {a.warmup}")
    if a.rounds < stats.MIN_SAMPLES and not a.quick:
        ap.error(f"--rounds must be at least {stats.MIN_SAMPLES} (the project's statistics rule)")
    grid = list(itertools.product([parse_size(b) for b in a.bs.split(",")], a.rw.split(","),
                                  a.buffering.split(","), a.cache.split(",")))
    for bs, rw, buf, cache in grid:
        if rw not in ("read", "write") or buf not in ("buffered", "direct") or cache not in ("hot", "cold"):
            ap.error(f"unknown cell {rw}/{buf}/{cache}")
        if size_for(bs) < bs:
            ap.error(f"--max-size {a.max_size} is smaller than the block size {fmt_size(bs)}")
        windows = -(-size_for(bs) // (a.qd * bs))
        if windows > MAX_WINDOWS:
            ap.error(f"a {fmt_size(size_for(bs))} file in windows of qd x bs = {fmt_size(a.qd * bs)} needs {windows} "
                     f"mappings, more than {MAX_WINDOWS} (vm.max_map_count is 65530 by default): raise --qd or "
                     f"lower --size/--max-size")
    fio_version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
    doc = {"command": ["python", "benchmarks/uring_vs_fio.py", *sys.argv[1:]], "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "machine": {"kernel": platform.release(), "cpus": os.cpu_count(), "fio": fio_version,
                       "accio": accio.__version__, "load_before": os.getloadavg()},
           "quick": a.quick, "goal": GOAL, "warmup": a.warmup,
           "accio_buffer": "one window of qd x bs bytes mapped over the file's length (fio's footprint)",
           "cells": []}
    print(f"{'bs':>5} {'file':>7} {'rw':5} {'buffering':9} {'cache':5} {'accio MiB/s':>11} {'fio MiB/s':>10}  accio/fio")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run removes its file too
    fd, path = tempfile.mkstemp(prefix="accio-uring-fio-", dir=a.dir)
    os.close(fd)
    try:
        for bs, rw, buf, cache in grid:
            cell = run_cell(path, size_for(bs), bs, a.qd, rw, buf, cache, a.rounds, a.warmup)
            doc["cells"].append(cell)
            r = stats.Ratio(**cell["ratio"])
            print(f"{fmt_size(bs):>5} {fmt_size(cell['size']):>7} {rw:5} {buf:9} {cache:5} {cell['accio']['median']:11.0f} "
                  f"{cell['fio']['median']:10.0f}  {stats.describe(r)} {cell['verdict']}, goal {cell['goal']}"
                  + (f" (fio runs < 100 ms: {len(cell['fio_runs_under_100ms'])})" if cell["fio_runs_under_100ms"] else "")
                  + (f"; {fmt_size(bs)} requests, uring/posix {stats.describe(stats.Ratio(**cell['vs_posix']['ratio']))} "
                     f"goal {cell['vs_posix']['goal']}" if "vs_posix" in cell else ""),
                  flush=True)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    doc["machine"]["load_after"] = os.getloadavg()
    met = sum(c["goal"] == "met" for c in doc["cells"])
    few = sum(c["goal"].startswith(stats.TOO_FEW) for c in doc["cells"])  # --quick: no goal under 7 rounds
    print(f"{met} of {len(doc['cells'])} cells meet accio/fio >= {GOAL}"
          + (f" ({few} with too few samples to say)" if few else ""))
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        write_json(a.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
