"""`accio bench --vs-fio`: the fio job that does what an accio mechanism does, on the same files.

One fio section per unit of concurrency the mechanism uses, over the same byte ranges:
  posix     one psync job per bench thread, bs = record
  parallel  per bench thread, E = min(threads, tasks per record) psync jobs with bs = task_size,
            job k taking tasks k, k+E, k+2E, ... (rw=read:skip), as the shared pool does
  direct    as parallel, with direct=1
  uring     one io_uring job per bench thread, bs = task_size, iodepth = min(queue_depth, tasks
            per record)
The differences that remain (accio waits for every record before the next, fio keeps its queue
full; accio's pool threads take tasks dynamically) are discussed in docs/methodology.md.
Bandwidth is fio's total io_bytes over the group's runtime (the longest job's, end_fsync included);
fio reports it in whole milliseconds, so phases shorter than ~100 ms compare poorly.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

from .. import settings as effective_settings
from .._system import parse_size
from .spec import Column, host_mechanisms

MiB = 1 << 20
RW = {"write": "write", "write+sync": "write", "rewrite": "write", "read": "read", "reread": "read",
      "cold-read": "read", "random-read": "randread", "random-write": "randwrite"}


def available() -> bool:
    return shutil.which("fio") is not None


def comparable(mech: Column) -> bool:
    return mech.name in host_mechanisms()


def sections(jobs, test: str, mech: Column, record: int, settings: dict) -> tuple[list[dict], str]:
    """fio job sections for the phase, and a one-line description of the equivalent job."""
    eff = effective_settings(**{**settings, **dict(mech.settings)})
    threads, task, qd = int(eff["threads"]), parse_size(eff["task_size"]), int(eff["queue_depth"])
    direct = 1 if mech.o_direct(settings) else 0
    rw = RW[test]
    tasks = -(-record // task)
    out = []
    if mech.name == "uring":
        bs, depth = (task, min(qd, tasks)) if tasks > 1 else (record, 1)
        for j in jobs:
            out.append(dict(ioengine="io_uring", bs=bs, iodepth=depth, registerfiles=1, filename=j.path,
                            offset=j.offset, size=j.length, direct=direct, rw=rw))
        return out, f"io_uring bs={bs} iodepth={depth} direct={direct} x{len(jobs)}"
    width = min(threads, tasks) if mech.name in ("parallel", "direct") else 1
    if width == 1:
        for j in jobs:
            out.append(dict(ioengine="psync", bs=record, filename=j.path, offset=j.offset, size=j.length,
                            direct=direct, rw=rw))
        return out, f"psync bs={record} direct={direct} x{len(jobs)}"
    for j in jobs:
        for k in range(width):
            n_tasks = len(range(k, -(-j.length // task), width))
            if n_tasks == 0:
                continue
            if rw.startswith("rand"):  # a share of random tasks over the whole range (approximate)
                sec = dict(offset=j.offset, size=j.length, rw=rw)
            else:  # every width-th task, skipping the others
                sec = dict(offset=j.offset + k * task, size=j.length - k * task, rw=f"{rw}:{(width - 1) * task}")
            out.append(dict(ioengine="psync", bs=task, filename=j.path, io_size=n_tasks * task, direct=direct, **sec))
    return out, f"psync bs={task} direct={direct} x{len(out)} ({width} per thread, strided)"


def run(jobs, test: str, mech: Column, record: int, settings: dict) -> dict:
    """Runs the equivalent fio job once on files the caller prepared (truncated for write tests,
    dropped for cold reads); returns a sample like accio's."""
    if not jobs:
        raise RuntimeError("no jobs for fio")
    secs, desc = sections(jobs, test, mech, record, settings)
    glob = dict(thread=1, group_reporting=1, fallocate="none", invalidate=1 if test == "cold-read" else 0,
                end_fsync=1 if test == "write+sync" else 0, randrepeat=0,
                disk_util=0, gtod_reduce=1,  # no latency or disk statistics: fio's bookkeeping off the clock
                iomem_align=4096)  # page-aligned buffers, as accio's (fio's default alignment is smaller)
    with tempfile.NamedTemporaryFile("w", suffix=".fio", delete=False) as f:
        f.write("[global]\n" + "".join(f"{k}={v}\n" for k, v in glob.items()))
        for i, s in enumerate(secs):
            f.write(f"[accio-{i}]\n" + "".join(f"{k}={v}\n" for k, v in s.items()))
        jobfile = f.name
    try:
        p = subprocess.run(["fio", "--output-format=json", jobfile], capture_output=True, text=True)
    finally:
        os.unlink(jobfile)
    if p.returncode != 0:
        raise RuntimeError(f"fio failed ({desc}): {p.stderr.strip() or p.stdout.strip()}")
    doc = json.loads(p.stdout[p.stdout.index("{"):])
    side = doc["jobs"][0]["read" if RW[test] in ("read", "randread") else "write"]
    # With group_reporting, side["runtime"] is the longest job's (job_runtime would be their sum).
    seconds = max(side["runtime"], 1) / 1000.0
    return {"mib_s": side["io_bytes"] / MiB / seconds, "seconds": seconds, "bytes": side["io_bytes"],
            "ran": "fio", "job": desc}

