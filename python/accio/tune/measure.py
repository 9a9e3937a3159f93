"""The one timed measurement `accio tune` and `accio tune --evaluate` are built from.

A Bench owns two scratch files in the tuned directory: one that reads use (written once) and one
that writes use, both of file_size bytes; a sample can ask for a file of another size (the
evaluation's 8 MiB file is an 8 MiB file, not the first 8 MiB of a larger one), which the Bench
writes once, beside them. sample() measures one plan on one cell: operation (read/write), cache state
(hot: the range is in the page cache; cold: reads after fsync + posix_fadvise(DONTNEED) with the
residency checked, writes into a freshly truncated file), concurrency (that many threads, each with
its own handle and byte range, started together), request size and target (host memory, or GPU
`device`: the records then live in that GPU's memory). Timing is the native loop of
`accio bench` (accio._ext.bench_phase); bandwidth is IOR's: total bytes / (latest end - earliest
start). Writes are followed by an untimed fsync, so every sample starts with a clean page cache.
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import asdict, dataclass

from .. import File, _ext
from .._system import COLD_MAX_RESIDENCY, MiB, drop_pages, fmt_size, fsync_path, residency


# A plan's members that are not knobs: annotations the engine writes for readers (PlanSpec).
_ANNOTATIONS = ("label", "needs_alignment")


@dataclass(frozen=True)
class Plan:
    """A mechanism and its parameters; 0 = the handle's setting (task_size 0 = even split). The
    fields are the knobs the tuner varies; `extra` holds any other knob a profile's plan sets
    (sorted (name, value) pairs), kept as given, so that a mechanism's new knob survives the tuner
    and --show without a change here (the engine checks it: PlanSpec)."""
    mechanism: str
    task_size: int = 0
    threads: int = 0
    queue_depth: int = 0
    direct: bool = False
    pagecache_min: int = 0  # pagecache: reads below this run staged
    extra: tuple = ()

    def settings(self) -> dict:
        s = {"mechanism": self.mechanism, "task_size": self.task_size}
        if self.threads:
            s["threads"] = self.threads
        if self.queue_depth:
            s["queue_depth"] = self.queue_depth
        if self.pagecache_min:
            s["pagecache_min"] = self.pagecache_min
        if "direct" in knobs(self.mechanism):
            s["direct"] = self.direct
        s.update(self.extra)
        return s

    @property
    def needs_alignment(self) -> bool:
        """Whether requests need O_DIRECT alignment: the planner says (PlanSpec::needs_alignment)."""
        return _describe(self)[1]

    @property
    def label(self) -> str:
        """The planner's label for this plan (PlanSpec::label), e.g. "uring+direct(even, qd=16)"."""
        return _describe(self)[0]

    def to_json(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "extra" and (v or k == "mechanism")}
        return {**d, **dict(self.extra)}

    @staticmethod
    def from_json(d: dict) -> "Plan":
        """A profile's plan (as the engine describes it: the knobs it knows as numbers); members
        other than the fields, and other than the engine's annotations, go to `extra`."""
        def count(name: str) -> int:
            v = d.get(name, 0)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"plan {name} {v!r}: not a non-negative integer")
            return v
        fields = ("mechanism", "task_size", "threads", "queue_depth", "direct", "pagecache_min")
        other = tuple(sorted((k, v) for k, v in d.items() if k not in fields and k not in _ANNOTATIONS))
        return Plan(d["mechanism"], count("task_size"), count("threads"), count("queue_depth"),
                    bool(d.get("direct", False)), count("pagecache_min"), other)


@functools.lru_cache(maxsize=None)
def knobs(mechanism: str) -> tuple[str, ...]:
    """The settings a mechanism reads (its registration in the engine names them)."""
    return tuple(next(m["knobs"] for m in _ext.mechanisms() if m["name"] == mechanism))


@functools.lru_cache(maxsize=None)
def _describe(plan: Plan) -> tuple[str, bool]:
    return _ext.plan_describe(json.dumps(plan.to_json()))


def _fill(path: str, size: int) -> None:
    """Writes `size` bytes of incompressible data to path and fsyncs it."""
    chunk = bytearray(os.urandom(1 << 16)) * 128  # 8 MiB
    with File(path, "w", mechanism="posix") as f:
        for off in range(0, size, len(chunk)):
            f.write_from(memoryview(chunk)[:min(len(chunk), size - off)], off)
        f.fsync()


def fmt(n: int) -> str:
    """4194304 -> "4MiB": bench's size format without the space, as the engine's plan labels write it."""
    return fmt_size(n).replace(" ", "")


class Bench:
    def __init__(self, directory: str, file_size: int, writes: bool = True):
        self.directory = directory
        self.file_size = file_size
        self.writes = writes  # False: no write file (an evaluation of reads alone)
        tag = f"accio-tune.{os.getpid()}"
        self.read_path = os.path.join(directory, tag + ".r")
        self.write_path = os.path.join(directory, tag + ".w")
        self.cold_reads = True
        self.cold_note = ""
        self._read_files = {file_size: self.read_path}  # size -> a read file of exactly that size

    def __enter__(self) -> "Bench":
        try:
            self.prepare()
        except BaseException:  # interrupted while writing its files (Ctrl-C, SIGTERM): none stay
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup()

    def prepare(self) -> None:
        """Writes the read file (file_size bytes) and finds out whether reads can be made cold here."""
        for path in (self.read_path, self.write_path) if self.writes else (self.read_path,):
            _fill(path, self.file_size)
        drop_pages(self.read_path, 0, self.file_size)
        r = residency(self.read_path, 0, self.file_size)
        if r > COLD_MAX_RESIDENCY:
            self.cold_reads = False
            self.cold_note = (f"{r:.0%} of the file stayed in memory after fsync + POSIX_FADV_DONTNEED "
                              "(tmpfs and similar keep files in memory): cold reads cannot be measured here")

    def read_file(self, size: int = 0) -> str:
        """The path of a read file of exactly `size` bytes (0: file_size), written on first use."""
        size = size or self.file_size
        if size not in self._read_files:
            path = f"{self.read_path}.{size}"
            _fill(path, size)
            # Dropped, as prepare() drops the first: a hot phase then finds the pages a read brought
            # in (_warm), as in every file of the bench. Pages cached by the writing read 2.1x
            # faster here (a hot 8 MiB file in 256 KiB posix reads, 9 rounds taking turns).
            drop_pages(path, 0, size)
            self._read_files[size] = path
        return self._read_files[size]

    def cleanup(self) -> None:
        for p in (*self._read_files.values(), self.write_path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    def _warm(self, path: str, length: int) -> None:
        if residency(path, 0, length) < 0.99:
            buf = bytearray(8 * MiB)
            with File(path, "r", mechanism="posix") as f:
                for off in range(0, length, len(buf)):
                    f.read_into(buf, off)

    def sample(self, settings: dict, op: str, cold: bool, threads: int, size: int, nbytes: int,
               plans_used: set | None = None, min_seconds: float = 0.0, device: int = -1) -> float:
        """MiB/s of `threads` threads moving about nbytes in requests of `size`, on handles opened with
        these settings; plans_used collects the plans that served the requests. Short phases are
        repeated (each prepared untimed as the first) until min_seconds of timed transfer add up."""
        return self.sample_together([(settings, nbytes, plans_used)], op, cold, threads, size, min_seconds,
                                    device)[0]

    def sample_together(self, contenders: list, op: str, cold: bool, threads: int, size: int,
                        min_seconds: float = 0.0, device: int = -1, file_size: int = 0) -> list[float]:
        """sample() of several contenders ((settings, nbytes, plans_used) each) at once: their phases
        take turns, one phase each in the given order, until every one has min_seconds of timed
        transfer (or 64 phases). So the samples of one round are measured in the same tens of
        milliseconds, not one after the other: on a VM whose speed moves from one second to the next
        (vCPU placement), a pair of them then sees the same machine. file_size: the phases run on a
        file of exactly that size (0: file_size), so that a request that reaches the cell's end of
        file reaches the file's; a cold write starts a fresh file whatever it is."""
        moved = [0] * len(contenders)
        span = [0] * len(contenders)
        passes = [0] * len(contenders)
        todo = list(range(len(contenders)))
        while todo:
            for i in todo:
                settings, nbytes, plans_used = contenders[i]
                m, s = self._phase(settings, op, cold, threads, size, nbytes, plans_used, device, file_size)
                moved[i], span[i], passes[i] = moved[i] + m, span[i] + s, passes[i] + 1
            todo = [i for i in todo if span[i] < min_seconds * 1e9 and passes[i] < 64]
        return [moved[i] / MiB / (max(span[i], 1) / 1e9) for i in range(len(contenders))]

    def _phase(self, settings, op, cold, threads, size, nbytes, plans_used, device, file_size=0) -> tuple[int, int]:
        """One prepared, timed phase: (bytes moved, ns from the earliest start to the latest end)."""
        write = op == "write"
        file_size = file_size or self.file_size
        path = self.write_path if write else self.read_file(file_size)
        per = max(size, min(nbytes, file_size) // threads // size * size)
        total = per * threads
        if write:
            if cold:
                os.truncate(path, 0)
            elif (have := os.path.getsize(path)) != (want := max(total, file_size)):
                # hot: an overwrite inside a file of the cell's size
                os.truncate(path, min(have, want))
                if have < want:
                    with File(path, "r+", mechanism="posix") as f:
                        f.write_from(bytearray(want - have), have)
            if not cold:
                self._warm(path, total)
        elif cold:
            drop_pages(path, 0, total)
        else:
            self._warm(path, total)
        handles = [File(path, "r+" if write else "r", **settings) for _ in range(threads)]
        try:
            iv = _ext.bench_phase([h._f for h in handles], [i * per for i in range(threads)], [per] * threads,
                                  size, write, device=device)
            if plans_used is not None:
                plans_used.update(p["plan"] for h in handles for p in h.stats()["plans"])
        finally:
            for h in handles:
                h.close()
        if write:
            fsync_path(path)
        span = max(e for _, e, _ in iv) - min(s for s, _, _ in iv)
        moved = sum(b for _, _, b in iv)
        if moved != total:
            raise RuntimeError(f"{op} moved {moved} of {total} bytes in {path}")
        return moved, span
