#!/usr/bin/env python3
"""accio `staged` against KvikIO in its POSIX (compatibility) mode, GPU memory, side by side (issue 4).

Both tools move the same file to and from the same GPU buffer with the same thread count and task
size; KvikIO runs with KVIKIO_COMPAT_MODE=ON (its own pinned bounce buffers, no cuFile). Rounds
alternate the tools (which one starts alternates too). Tests, each timed alone:
  hot-read    the whole file, already in the page cache, into GPU memory
  write       the GPU buffer to a new file (page cache)
  write+sync  the same, with fsync inside the timing
Prints medians and spreads in MiB/s and accio/KvikIO per test; --json keeps every sample. Each
tool's last read and last written file are checked byte for byte against the source.

    python bench/gpu_vs_kvikio.py [--dir /tmp] [--size 4g] [--threads 8] [--task-size 4m] \\
        [--rounds 5] [--device 0] [--json results/gpu/vs_kvikio.json]

Without KvikIO (or with --no-peer) only accio runs, which is how CI checks the script against the
fake driver; the output then says the peer is missing and gives no ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import zlib

MiB = 1 << 20
TESTS = ("hot-read", "write", "write+sync")


def parse_size(text: str) -> int:
    from accio.bench.spec import parse_size as p
    return p(text)


def crc_file(path: str) -> int:
    c = 0
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(64 * MiB):
            c = zlib.crc32(chunk, c)
    return c


class Buffer:
    """One GPU buffer: a CuPy array where CuPy is installed, else an accio.DeviceArray."""

    def __init__(self, nbytes: int, device: int):
        import accio
        try:
            import cupy
            with cupy.cuda.Device(device):
                self.array = cupy.empty(nbytes, dtype=cupy.uint8)
            self.crc = lambda: zlib.crc32(cupy.asnumpy(self.array).tobytes())
        except ImportError:
            self.array = accio.device_array(nbytes, device=f"cuda:{device}")
            self.crc = lambda: zlib.crc32(self.array.to_bytes())


class Accio:
    name = "accio"

    def __init__(self, threads: int, task_size: int):
        import accio
        self.accio = accio
        self.settings = dict(mechanism="staged", threads=threads, task_size=task_size)

    def read(self, path: str, buf, size: int) -> None:
        with self.accio.open(path, **self.settings) as f:
            if f.read_into(buf) != size:
                raise RuntimeError("accio: short read")
            ran = f.stats()["last_mechanism"]
            if ran != "staged":
                raise RuntimeError(f"accio ran {ran}, not staged")

    def write(self, path: str, buf, size: int, sync: bool) -> None:
        with self.accio.open(path, "w", **self.settings) as f:
            f.write_from(buf)
            if sync:
                f.fsync()


class KvikIO:
    name = "kvikio"

    def __init__(self, threads: int, task_size: int):
        # KvikIO reads its settings from the environment when it is first imported.
        os.environ.update(KVIKIO_COMPAT_MODE="ON", KVIKIO_NTHREADS=str(threads), KVIKIO_TASK_SIZE=str(task_size))
        import kvikio
        import kvikio.defaults
        self.kvikio = kvikio
        self.version = getattr(kvikio, "__version__", "?")
        if not kvikio.defaults.compat_mode():
            raise RuntimeError("KvikIO is not in compatibility mode")

    def read(self, path: str, buf, size: int) -> None:
        f = self.kvikio.CuFile(path, "r")
        try:
            if f.read(buf) != size:
                raise RuntimeError("kvikio: short read")
        finally:
            f.close()

    def write(self, path: str, buf, size: int, sync: bool) -> None:
        f = self.kvikio.CuFile(path, "w")
        try:
            if f.write(buf) != size:
                raise RuntimeError("kvikio: short write")
        finally:
            f.close()
        if sync:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--size", default="4g")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--task-size", default="4m")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--no-peer", action="store_true", help="run accio alone")
    ap.add_argument("--json")
    a = ap.parse_args()
    size, task = parse_size(a.size), parse_size(a.task_size)

    tools = [Accio(a.threads, task)]
    peer_note = "not asked for (--no-peer)"
    if not a.no_peer:
        try:
            tools.append(KvikIO(a.threads, task))
            peer_note = f"KvikIO {tools[-1].version}, compatibility mode"
        except Exception as e:  # noqa: BLE001 - missing or unusable KvikIO: report, do not fail
            peer_note = f"KvikIO unavailable: {type(e).__name__}: {e}"
    print(f"peer: {peer_note}", flush=True)

    src = os.path.join(a.dir, f"accio-vs-kvikio-{os.getpid()}.src")
    out = {t.name: os.path.join(a.dir, f"accio-vs-kvikio-{os.getpid()}.{t.name}") for t in tools}
    samples = {t.name: {k: [] for k in TESTS} for t in tools}
    checks = {}
    try:
        with open(src, "wb") as f:  # incompressible data, written once
            left = size
            while left:
                n = min(left, 64 * MiB)
                f.write(os.urandom(n))
                left -= n
        src_crc = crc_file(src)  # also leaves the file in the page cache
        buf = Buffer(size, a.device)
        for r in range(a.rounds):
            order = tools if r % 2 == 0 else tools[::-1]
            for t in order:
                samples[t.name]["hot-read"].append(size / MiB / timed(lambda: t.read(src, buf.array, size)))
                for test, sync in (("write", False), ("write+sync", True)):
                    if os.path.exists(out[t.name]):
                        os.unlink(out[t.name])
                    samples[t.name][test].append(size / MiB / timed(lambda: t.write(out[t.name], buf.array, size, sync)))
            print(f"round {r + 1}/{a.rounds}: " + "  ".join(
                f"{t.name} " + " ".join(f"{samples[t.name][k][-1]:.0f}" for k in TESTS) for t in tools), flush=True)
        for t in tools:  # byte for byte: what each tool last read, and last wrote
            t.read(src, buf.array, size)
            checks[t.name] = {"read": buf.crc() == src_crc, "write": crc_file(out[t.name]) == src_crc}
    finally:
        for p in [src, *out.values()]:
            if os.path.exists(p):
                os.unlink(p)

    med = {n: {k: statistics.median(v) for k, v in s.items()} for n, s in samples.items()}
    print(f"\n{'test':<11}" + "".join(f"{n + ' MiB/s (min-max)':>32}" for n in samples) +
          ("   accio/kvikio" if "kvikio" in samples else ""))
    for k in TESTS:
        row = f"{k:<11}" + "".join(f"{med[n][k]:>14.0f} ({min(samples[n][k]):.0f}-{max(samples[n][k]):.0f})".rjust(32)
                                   for n in samples)
        if "kvikio" in samples:
            row += f"   {med['accio'][k] / med['kvikio'][k]:>12.2f}"
        print(row)
    print("byte-for-byte: " + ", ".join(f"{n} read {'ok' if c['read'] else 'DIFFERS'}, write "
                                        f"{'ok' if c['write'] else 'DIFFERS'}" for n, c in checks.items()))
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump({"command": " ".join(["python", *sys.argv]), "peer": peer_note, "size": size,
                       "threads": a.threads, "task_size": task, "rounds": a.rounds, "device": a.device,
                       "machine": {"cpus": os.cpu_count(), "kernel": platform.release()},
                       "samples_mib_s": samples, "median_mib_s": med, "checks": checks,
                       "accio_over_kvikio": {k: med["accio"][k] / med["kvikio"][k] for k in TESTS}
                       if "kvikio" in samples else None}, f, indent=1)
    return 0 if all(c["read"] and c["write"] for c in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
