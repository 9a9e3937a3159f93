"""Machine and file helpers that every command and benchmark shares: sizes read and printed, the
CPUs this process may use, /proc facts, and the page cache (fsync, drop, how much is resident).

One home for them, so no command imports another command's internals to get one (issue 18).
Sizes are parsed by the engine (`accio_parse_size`): one grammar for the C API, the environment
and every command line.
"""
from __future__ import annotations

import contextlib
import os
import platform

from . import _ext

MiB = 1 << 20
# A read is called cold only if at most 1% of its range is in the page cache (bench, tune).
COLD_MAX_RESIDENCY = 0.01


SIZE_EXAMPLES = "e.g. 64m, 1g"


def parse_size(text: str) -> int:
    """One size: 4096, 4k, 16m, 1g, 2GiB (binary units), by the engine's grammar. ValueError
    "'abc' is not a size (e.g. 64m, 1g)": a sentence a command prefixes with its option."""
    try:
        return int(_ext.parse_size(text.strip()))
    except OSError:
        raise ValueError(f"{text.strip()!r} is not a size ({SIZE_EXAMPLES})") from None


def parse_sizes(text: str) -> list[int]:
    """A list of sizes and doubling ranges: '1m,16m', '4k:64m' (4k, 8k, ... 64m), '1g'."""
    out: list[int] = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        if ":" in item:
            lo, hi = (parse_size(x) for x in item.split(":", 1))
            if lo <= 0 or hi < lo:
                raise ValueError(f"{item!r} is not a range of sizes: need 0 < low <= high (e.g. 4k:64m)")
            while lo <= hi:
                out.append(lo)
                lo *= 2
        elif (v := parse_size(item)) <= 0:
            raise ValueError(f"{item!r} is not a positive size ({SIZE_EXAMPLES})")
        else:
            out.append(v)
    if not out:
        raise ValueError(f"no size given ({SIZE_EXAMPLES})")
    return sorted(set(out))


def fmt_size(n: int) -> str:
    """4194304 -> '4 MiB'; sizes that are not a whole unit stay in bytes ('4097 B')."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def fmt_amount(n: int) -> str:
    """An amount for a person: a whole unit as fmt_size gives it, else three significant digits of the
    largest unit it reaches ('515 MiB', '1.23 GiB'; bytes below 1 KiB)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0 and n >> shift < 1024:
            return f"{n >> shift} {unit}"
    if n < 1024:
        return f"{n} B"
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            v = n / (1 << shift)
            return f"{v:.3g} {unit}" if v < 1000 else f"{v:.0f} {unit}"
    return f"{n} B"


def seconds_arg(text: str) -> float:
    """A time option (bench --runtime, tune --budget and --device-budget), for argparse: seconds, '30',
    '30s', '2m' or '1.5h'; above 0. One grammar: tune took only a bare number (new-user audit,
    session 25)."""
    import argparse
    t = text.strip().lower()
    scale = {"s": 1, "m": 60, "h": 3600}.get(t[-1:], None)
    try:
        v = float(t[:-1] if scale else t) * (scale or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time: give seconds, e.g. 30, 30s, 2m") from None
    if not 0 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: the time must be above 0")
    return v


def online_cpus() -> int:
    """The CPUs this process may run on (its affinity mask), not every CPU of the machine."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def meminfo() -> dict[str, int]:
    """/proc/meminfo as {field: kB}; empty where it cannot be read."""
    out = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                k, v = line.split(":", 1)
                out[k] = int(v.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return out


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C's KeyboardInterrupt is (sigterm_interrupts)."""


def interrupted_status(e: BaseException) -> int:
    """The exit status of a command interrupted by e: 128 + the signal, as a shell reports a process
    killed by it (130 for Ctrl-C, 143 for SIGTERM: a batch system's accounting reads it)."""
    return 143 if isinstance(e, Terminated) else 130


def _raise_terminated(signum, frame):
    raise Terminated()


@contextlib.contextmanager
def sigterm_interrupts():
    """SIGTERM raises Terminated (a KeyboardInterrupt) in the main thread while inside, as Ctrl-C
    does, so that a command killed by `kill` or a batch system removes its scratch files on the way
    out (the `with` blocks and `finally` clauses run) instead of leaving them behind, and exits 143
    (interrupted_status). The previous handler is put back on leaving; outside the main thread
    (where no handler can be set) nothing changes."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:  # None: a handler not set from Python, which cannot be put back: the default then
        signal.signal(signal.SIGTERM, old if old is not None else signal.SIG_DFL)


def fsync_path(path: str) -> None:
    """fsync the file at path (written through another descriptor, or by another library)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def drop_pages(path: str, offset: int = 0, length: int = 0) -> None:
    """fsync the file, then drop the range's pages from the page cache (posix_fadvise DONTNEED;
    length 0 = to the end). Dirty pages cannot be dropped, hence the fsync."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def drop_all_caches() -> None:
    """sync, then drop the whole page cache (root only: /proc/sys/vm/drop_caches)."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def residency(path: str, offset: int = 0, length: int | None = None, *, empty: float = 0.0) -> float:
    """The share of the range's pages in the page cache, from the engine's residency probe
    (cachestat, mincore...). `empty` is the answer for a range with no pages."""
    from . import File  # accio imports this module's users lazily; File is ready by then
    with File(path, "r", mechanism="posix") as f:
        r = f.residency(offset, length)
    return r["cached"] / r["total"] if r["total"] else empty
