#!/usr/bin/env python3
"""What opening a file costs through accio against Python's own open (the ML audit of session 27:
for many small cached files one thread at a time, accio.read took about 1.5x the time of
open().readinto, almost all of it fixed cost per open).

Per round, interleaved (accio.stats), each contender opens and closes one cached file --loops times
and reports microseconds per open and close:
  open()        Python's built-in open(path, "rb") and close (buffered reader, one descriptor);
  os.open       os.open and os.close (the system calls alone);
  _ext.File     accio's extension object alone (the engine's open: both descriptors, the plan);
  accio.open    accio.open(path) and close, default settings (mechanism auto);
  accio.posix   accio.open(path, mechanism="posix") and close.
and, for the whole read of a --size file: accio.read against open().readinto into a preallocated
bytearray. Ratios are each contender's speed (calls per second) over open()'s (over
open().readinto's for accio.read), paired by round, with their 95% interval and verdict
(stats.ratio, stats.verdict): below 1 is slower.

    .venv/bin/python benchmarks/open_cost.py --dir /var/tmp --json results/open_cost.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone

import accio
from accio import _ext, defaults, stats
from accio._system import parse_sizes


def per_call_us(fn, loops: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(loops):
        fn()
    return (time.perf_counter_ns() - t0) / loops / 1000.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", default="/var/tmp")
    p.add_argument("--size", default="1m", help="the file's size (read whole by the read contenders)")
    p.add_argument("--loops", type=int, default=2000, help="opens (or reads) per sample")
    p.add_argument("--rounds", type=int, default=stats.MIN_SAMPLES * 2)
    p.add_argument("--json")
    args = p.parse_args()
    size = parse_sizes(args.size)[0]
    path = os.path.join(args.dir, f"accio-open-cost.{os.getpid()}")
    with open(path, "wb") as f:
        f.write(os.urandom(size))
    buf = bytearray(size)
    with open(path, "rb") as f:  # cached
        f.readinto(buf)
    settings = defaults._resolve({"mechanism": None})

    def builtin():
        open(path, "rb").close()

    def sys_open():
        os.close(os.open(path, os.O_RDONLY))

    def ext_file():
        _ext.File(path, "r", settings).close()

    def accio_open():
        accio.open(path).close()

    def accio_posix():
        accio.open(path, mechanism="posix").close()

    def read_builtin():
        with open(path, "rb") as f:
            f.readinto(buf)

    def read_accio():
        accio.read(path, out=buf)

    opens = {"open()": builtin, "os.open": sys_open, "_ext.File": ext_file, "accio.open": accio_open,
             "accio.posix": accio_posix}
    reads = {"open().readinto": read_builtin, "accio.read": read_accio}
    read_loops = max(1, args.loops // 10)
    try:
        for fn in (*opens.values(), *reads.values()):  # warm: imports, the thread pool, the profile lookup
            per_call_us(fn, 50)
        contenders = {**{k: (lambda f=f: per_call_us(f, args.loops)) for k, f in opens.items()},
                      **{k: (lambda f=f: per_call_us(f, read_loops)) for k, f in reads.items()}}
        samples = stats.interleave(contenders, args.rounds)
    finally:
        os.unlink(path)

    def against(name: str, base: str) -> dict:
        """name's speed (calls per second) over base's, paired by round: below 1, name is slower."""
        r = stats.ratio([1 / x for x in samples[name]], [1 / x for x in samples[base]], paired=True)
        return {"estimate": r.estimate, "low": r.low, "high": r.high, "verdict": stats.verdict(r),
                "text": stats.describe(r)}

    from accio.info import gather
    info = gather(args.dir)
    result = {
        "schema": "accio.open-cost/1",
        "command": " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _ext.git_commit(),
        "machine": {**{k: info[k] for k in ("kernel", "cpu", "memory")}, "loadavg": os.getloadavg()},
        "size": size, "loops": args.loops, "read_loops": read_loops, "rounds": args.rounds,
        "us_per_call": {k: stats.median(v) for k, v in samples.items()},
        "samples_us": samples,
        "speed_vs_open": {k: against(k, "open()") for k in opens if k != "open()"},
        "read_speed_vs_readinto": against("accio.read", "open().readinto"),
    }
    print(f"per open and close, median of {args.rounds} interleaved rounds of {args.loops}:")
    for k, v in result["us_per_call"].items():
        if k in opens:
            extra = "" if k == "open()" else f"   {result['speed_vs_open'][k]['text']} open()'s speed"
            print(f"  {k:12s} {v:7.2f} us{extra}")
    r = result["read_speed_vs_readinto"]
    print(f"whole read of {args.size}: accio.read {result['us_per_call']['accio.read']:.1f} us, "
          f"open().readinto {result['us_per_call']['open().readinto']:.1f} us: {r['text']} its speed, {r['verdict']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
