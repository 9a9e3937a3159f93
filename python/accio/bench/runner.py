"""Runs a Spec: for every configuration and iteration, the selected tests in IOzone's order.

Each timed phase: files prepared (created, or written untimed when a read test finds no data; a
user's --files only in a run with a write test: a run of reads only reads them as they are, unverified),
caches handled (cold-read: fsync, drop, verify the residency), handles opened, a barrier across
ranks, then the native phase (accio._ext.bench_run: every thread of every rank starts at the
barrier and times itself and every request), then IOR's bandwidth: total bytes / (latest end -
earliest start), IOPS (requests / the same span) and the latency histogram of every request.
Open and close are outside the timed region (IOzone without -c); fsync is inside for write+sync.
Every result is handed to `on_result` as soon as its configuration is done (the CLI writes the
JSON then, so that a run cut off keeps what it measured).
"""
from __future__ import annotations

import os
import secrets
import statistics
from dataclasses import dataclass

from .. import File, _ext, stats
from .._system import COLD_MAX_RESIDENCY, drop_all_caches, drop_pages, fmt_size
from . import fio, latency
from .spec import READ_TESTS, Column, Spec

MiB = 1 << 20


@dataclass(frozen=True)
class Config:
    directory: str
    layout: str
    processes: int
    threads: int
    file_size: int
    record: int
    mechanism: Column
    iodepth: int = 1

    @property
    def data_key(self):
        """What the files hold after a write phase of this configuration (verifiable by reads)."""
        return (self.directory, self.layout, self.processes, self.threads, self.file_size, self.record)


@dataclass(frozen=True)
class Job:
    path: str
    offset: int
    length: int


class BenchError(RuntimeError):
    """everywhere: every rank raises it (a collective decision), so no rank waits for another."""

    def __init__(self, message: str, everywhere: bool = False):
        super().__init__(message)
        self.everywhere = everywhere


def reads_files_as_found(spec: Spec) -> bool:
    """--files and read tests only: the reads take the user's files as they are, unverified (they
    hold no stamps), as fio reads an existing file, and nothing writes them (_ensure_data). A run
    with any write test overwrites them, as its help says, however its tests are ordered (a read
    first and a random-write after it wrote the files while saying it would not)."""
    return bool(spec.files) and all(t in READ_TESTS for t in spec.tests)


def file_extents(spec: Spec) -> dict[str, tuple[int, int]]:
    """--files: {file: (bytes the run reads or writes from its start, writers sharing it)}, the most
    over the configurations (fpp: -s each; shared: the first file, -s per writer)."""
    out: dict[str, tuple[int, int]] = {}
    for _d, layout, p, t, fs, *_rest in spec.configurations():
        writers = p * t
        ends = {spec.files[0]: (writers * fs, writers)} if layout == "shared" else \
            {f: (fs, 1) for f in spec.files[:writers]}
        for f, (n, w) in ends.items():
            out[f] = max(out.get(f, (0, 1)), (n, w))
    return out


def _close_quietly(handles) -> None:
    """Close what a failed phase opened; the failure that is already on its way matters more."""
    for h in handles:
        try:
            h.close()
        except OSError:
            pass




class Runner:
    def __init__(self, spec: Spec, comm, progress=None, on_result=None):
        self.spec, self.comm, self.progress, self.on_result = spec, comm, progress, on_result
        # The run's mark in its file names: rank 0's pid and a random part, so that two jobs whose rank 0
        # has the same pid on two nodes sharing a scratch directory never take (or remove) each
        # other's files (remove_run_files: review, session 27).
        self.tag = comm.bcast(f"{os.getpid()}-{secrets.token_hex(3)}")
        self.data_key = None  # what the files under test hold (None: unknown, no verification)
        self.created: set[str] = set()
        self.results: list[dict] = []

    # -- files --
    def jobs(self, c: Config) -> list[Job]:
        """This rank's byte ranges: one per thread; none if the rank sits this configuration out."""
        r = self.comm.rank
        if r >= c.processes:
            return []
        out = []
        for t in range(c.threads):
            k = r * c.threads + t
            if c.layout == "shared":
                out.append(Job(self.path(c, 0), k * c.file_size, c.file_size))
            else:
                out.append(Job(self.path(c, k), 0, c.file_size))
        return out

    def path(self, c: Config, k: int) -> str:
        if self.spec.files:
            if k >= len(self.spec.files):
                raise BenchError(f"{c.processes * c.threads} files needed, {len(self.spec.files)} given with -F")
            return self.spec.files[k]
        if c.layout == "shared":
            return os.path.join(c.directory, f"accio-bench.{self.tag}.shared")
        return os.path.join(c.directory, f"accio-bench.{self.tag}.fpp.r{k // c.threads}.t{k % c.threads}")

    def cleanup(self) -> None:
        if self.spec.keep or self.spec.files:
            return
        for p in self.created:
            try:
                os.unlink(p)
            except FileNotFoundError:  # another rank removed it (remove_run_files)
                pass

    def remove_run_files(self) -> None:
        """Every scratch file of this run that this rank can see, the other ranks' too: a rank about
        to end the job with MPI_Abort calls it. mpirun's SIGTERM lets the others remove their own,
        but it sends SIGKILL a second later (OpenMPI's odls_base_sigkill_timeout), and a rank on a
        loaded machine was killed before it had (a file of rank 0 stayed in a fresh Debian check).
        Where the directory is shared, nothing is left; a node-local one is its ranks' own to clean."""
        if self.spec.keep or self.spec.files:
            return
        prefix = f"accio-bench.{self.tag}."
        for d in dict.fromkeys(self.spec.dirs):
            try:
                names = [n for n in os.listdir(d) if n.startswith(prefix)]
            except OSError:
                continue
            for n in names:
                try:
                    os.unlink(os.path.join(d, n))
                except OSError:  # gone already, or not ours to remove: the rank that made it tries too
                    pass

    def _create(self, c: Config, jobs: list[Job], for_fio: bool = False) -> None:
        """Truncate the files a write test starts from (IOzone's write creates the file anew). For
        fio, then extend them, sparse, to the jobs' end: fio unlinks and re-creates a write job's
        file that is shorter than the job (filesetup.c, extend_file), which replaced a --files
        symlink (or hard link) with a new regular file and, in the shared layout under MPI, took the
        file from under the other ranks' fio."""
        if c.layout == "shared":
            if self.comm.rank == 0:
                with open(jobs[0].path if jobs else self.path(c, 0), "w") as f:
                    if for_fio:
                        f.truncate(c.processes * c.threads * c.file_size)
        else:
            for j in jobs:
                with open(j.path, "w") as f:
                    if for_fio:
                        f.truncate(j.offset + j.length)
        self.created.update(j.path for j in jobs)
        self.comm.barrier()

    def _drop(self, jobs: list[Job]) -> None:
        """The cold-read drop, the same before accio's phase and fio's."""
        if self.spec.drop_caches:
            drop_all_caches()
        else:
            for j in jobs:
                drop_pages(j.path, j.offset, j.length)

    def _ensure_data(self, c: Config, usable: tuple) -> None:
        """Before a read test: if the files do not hold data of this configuration, write it untimed
        with plain calls; not a user's --files in a run of reads only, which reads them as they are
        (unverified; the CLI checked before the run that they are long enough)."""
        if self.data_key not in usable and not reads_files_as_found(self.spec):
            self.phase(c, "write", Column("posix", "posix"), timed=False)

    # -- one timed phase --
    def phase(self, c: Config, test: str, mech: Column, *, seed: int = 1, timed: bool = True) -> dict | None:
        spec, comm = self.spec, self.comm
        jobs = self.jobs(c)
        write = test not in READ_TESTS
        device = -1 if spec.target == "host" or mech.host else int(spec.target.split(":")[1])
        if mech.name == "pinned-copy":
            return self._copy_ceiling(jobs, write, device) if timed else None
        if test in ("write", "write+sync"):
            self._create(c, jobs)
        cached = total = 0
        err = None
        handles: list[File] = []
        local = []
        try:
            if test == "cold-read":
                self._drop(jobs)
            settings = {**spec.settings, **dict(mech.settings)}
            mode = "r" if not write else "r+"
            handles = [File(j.path, mode, mech.name, **settings) for j in jobs]
            if not write:
                res = [h.residency(j.offset, j.length) for h, j in zip(handles, jobs)]
                cached, total = sum(r["cached"] for r in res), sum(r["total"] for r in res)
        except Exception as e:  # noqa: BLE001 - reported on every rank below
            err = e
            _close_quietly(handles)
        if not write:  # the residency of every writer's range, summed over the ranks
            cached, total = comm.allreduce(cached, "sum"), comm.allreduce(total, "sum")
        self._raise_if_any(err, f"preparing {test}")
        comm.barrier()
        ran, plans, hist = [], [], []
        as_found = not write and self.data_key != c.data_key  # --files read before any write: no stamps
        verify = not write and spec.verify and not as_found
        try:
            if jobs:
                out = _ext.bench_run([h._f for h in handles], [j.offset for j in jobs], [j.length for j in jobs],
                                     c.record, write, test.startswith("random"), test == "write+sync", verify, seed,
                                     device,
                                     int(spec.runtime * 1e9) if timed else 0, c.iodepth)
                local, hist = out["intervals"], out["latency_ns"]
            for h in handles:
                st = h.stats()
                ran.append(st["last_mechanism"] or mech.name)
                plans += st["plans"]  # the plans that served the requests, and why (auto's choice)
            for h in handles:
                h.close()
        except Exception as e:  # noqa: BLE001
            err = e
            _close_quietly(handles)
        self._raise_if_any(err, f"{test} with {mech.label}")
        if write:
            self.data_key = c.data_key
        if not timed:
            return None
        off = comm.offset_ns
        start = comm.allreduce(min(iv[0] for iv in local) - off if local else float("inf"), "min")
        end = comm.allreduce(max(iv[1] for iv in local) - off if local else float("-inf"), "max")
        nbytes = comm.allreduce(sum(iv[2] for iv in local), "sum")
        ops = comm.allreduce(sum(iv[3] for iv in local), "sum")
        ran, plans, hist = comm.gather(ran), comm.gather(plans), comm.gather(hist)
        if comm.rank != 0:
            return None
        seconds = (end - start) / 1e9
        sample = {"mib_s": nbytes / MiB / seconds if seconds > 0 else float("inf"), "seconds": seconds,
                  "bytes": nbytes, "ran": "/".join(sorted({m for r in ran for m in r})), "ops": ops,
                  "iops": ops / seconds if seconds > 0 else float("inf"),
                  "plans": sum_plans(p for rank in plans for p in rank), "latency_ns": latency.merge(hist)}
        if not write:
            sample.update(residency=cached / total if total else 0.0, verified=verify, as_found=as_found)
        return sample

    def _copy_ceiling(self, jobs, write: bool, device: int) -> dict:
        """The pinned-copy ceiling of a device target: the jobs' bytes copied between registered host
        buffers of buffer_size bytes and the GPU by as many threads (device-to-host for write tests)."""
        effective = {n: v for n, _env, _doc, v in _ext.settings(list(self.spec.settings.items()))}
        chunk = int(effective["buffer_size"])
        nbytes = sum(j.length for j in jobs)
        seconds = _ext.cuda_copy_seconds(device, not write, nbytes, chunk, len(jobs))
        sample = {"mib_s": nbytes / MiB / seconds if seconds > 0 else float("inf"), "seconds": seconds,
                  "bytes": nbytes, "ran": "pinned-copy", "ops": 0, "iops": 0.0, "plans": [], "latency_ns": []}
        if not write:
            sample["residency"] = 0.0  # no file: nothing is cached
        return sample

    def _raise_if_any(self, err: Exception | None, what: str) -> None:
        """Every rank learns whether any rank failed, so none is left waiting at a barrier."""
        if self.comm.size == 1:
            if err is not None:
                raise err
            return
        msgs = self.comm.gather(None if err is None else f"rank {self.comm.rank}: {err}")
        msgs = self.comm.bcast([m for m in msgs if m] if msgs else None)
        if msgs:
            raise BenchError(f"{what} failed: " + "; ".join(msgs), everywhere=True)

    # -- the whole run --
    def run(self) -> list[dict]:
        spec = self.spec
        try:
            for d, layout, p, t, fs, r, qd, m in spec.configurations():
                if p > self.comm.size:
                    raise BenchError(f"{p} processes asked for, but only {self.comm.size} ranks run "
                                     f"(start with mpirun -np {p} accio bench ...)", everywhere=True)
                c = Config(d, layout, p, t, fs, r, m, qd)
                self._run_config(c)
        finally:
            self.cleanup()
        return self.results

    def _run_config(self, c: Config) -> None:
        """Every iteration runs the test sequence with accio and (--vs-fio) with fio on the same
        files, so that both see the same conditions (cache, device, neighbours) at nearly the same
        time; which of the two goes first alternates (accio.stats.rotation), as the statistics rule asks."""
        spec = self.spec
        samples: dict[str, list[dict]] = {test: [] for test in spec.tests}
        fio_samples: dict[str, list[dict]] = {test: [] for test in spec.tests}
        with_fio = spec.vs_fio and fio.comparable(c.mechanism)

        def accio_pass(it: int) -> None:
            for test in spec.tests:
                self._note(c, test, it)
                if test in READ_TESTS and c.mechanism.name != "pinned-copy":
                    self._ensure_data(c, (c.data_key,))
                s = self.phase(c, test, c.mechanism, seed=it + 1)
                if s is not None:
                    samples[test].append(s)

        def fio_pass(it: int) -> None:
            for test in spec.tests:
                self._note(c, test, it, "fio ")
                jobs = self.jobs(c)
                if test in READ_TESTS:
                    self._ensure_data(c, (c.data_key, ("fio",) + c.data_key))
                if test in ("write", "write+sync"):
                    self._create(c, jobs, for_fio=True)
                if test == "cold-read":
                    self._drop(jobs)
                fio_samples[test].append(fio.run(jobs, test, c.mechanism, c.record, spec.settings))
                if test not in READ_TESTS:
                    self.data_key = ("fio",) + c.data_key  # the right size, but no stamps to verify

        passes = {"accio": accio_pass, "fio": fio_pass} if with_fio else {"accio": accio_pass}
        try:
            for it in range(spec.iterations):
                for who in stats.rotation(list(passes), it):
                    passes[who](it)
        except KeyboardInterrupt:
            # The iterations every test (and fio) finished are kept, as results of fewer samples: an
            # interrupted configuration was dropped whole (bench audit, session 25).
            done = min(len(v) for v in list(samples.values()) + (list(fio_samples.values()) if with_fio else []))
            if self.comm.rank == 0 and done:
                self._keep(spec, c, {t: v[:done] for t, v in samples.items()},
                           {t: v[:done] for t, v in fio_samples.items()})
            raise
        if self.comm.rank == 0:
            self._keep(spec, c, samples, fio_samples)

    def _keep(self, spec: Spec, c: Config, samples: dict, fio_samples: dict) -> None:
        for test in spec.tests:
            self.results.append(make_result(spec, c, test, samples[test], fio_samples[test]))
            if self.on_result:
                self.on_result(self.results[-1])

    def _note(self, c: Config, test: str, it: int, who: str = "") -> None:
        if self.progress:
            self.progress.step(f"{who}{c.mechanism.label} {test} {fmt_size(c.record)} x{c.threads}"
                               f"{'' if c.processes == 1 else f' p{c.processes}'}"
                               f"{'' if c.iodepth == 1 else f' qd{c.iodepth}'} it{it + 1}")


def cache_summary(test: str, mech: Column, samples: list[dict], drop_caches: bool, settings: dict) -> dict | None:
    if test not in READ_TESTS:
        return None
    worst = max((s["residency"] for s in samples), default=None)
    method = "none"
    if test == "cold-read":
        method = ("drop_caches" if drop_caches else "fadvise") + ("+o_direct" if mech.o_direct(settings) else "")
    return {"method": method, "residency": worst, "cold": worst is not None and worst <= COLD_MAX_RESIDENCY}


def sum_plans(plans) -> list[dict]:
    """Plan statistics ({'plan', 'why', 'calls'}) of several handles, ranks or iterations, summed per
    plan and reason, the most used first."""
    calls: dict[tuple[str, str], int] = {}
    for p in plans:
        calls[(p["plan"], p["why"])] = calls.get((p["plan"], p["why"]), 0) + p["calls"]
    return [{"plan": p, "why": w, "calls": n} for (p, w), n in sorted(calls.items(), key=lambda x: -x[1])]


def stats_of(values: list[float]) -> dict:
    return {"mib_s": statistics.median(values), "min": min(values), "max": max(values),
            "stddev": statistics.stdev(values) if len(values) > 1 else 0.0}


def make_result(spec: Spec, c: Config, test: str, samples: list[dict], fio_samples: list[dict] | None) -> dict:
    """One cell: medians over the iterations; the latency histogram holds every request of every
    iteration (percentiles per phase, as fio's clat), kept out of the samples to keep them small."""
    bw = [s["mib_s"] for s in samples]
    hist = latency.merge(s.pop("latency_ns") for s in samples)
    out = {"test": test, "mechanism": c.mechanism.label, "engine_mechanism": c.mechanism.name,
           "ran": "/".join(sorted({s["ran"] for s in samples})), "target": spec.target,
           "record_size": c.record, "file_size": c.file_size, "threads": c.threads, "processes": c.processes,
           "layout": c.layout, "directory": c.directory, "iodepth": c.iodepth, "runtime_s": spec.runtime,
           "cache": cache_summary(test, c.mechanism, samples, spec.drop_caches, spec.settings),
           **stats_of(bw), "iops": statistics.median(s["iops"] for s in samples),
           "plans": sum_plans(p for s in samples for p in s["plans"]),
           "latency": latency.summary(hist), "samples": samples}
    if test in READ_TESTS:  # whether every read checked accio's stamps; as_found: some read a user's file as it was
        out["verified"] = all(s.get("verified", False) for s in samples)
        out["as_found"] = any(s.get("as_found", False) for s in samples)
    for s in samples:
        del s["plans"]  # summed into the result's
    if fio_samples:
        fbw = [s["mib_s"] for s in fio_samples]
        out["fio"] = {**stats_of(fbw), "samples": fio_samples, "job": fio_samples[0]["job"]}
        # accio / fio: the median of the per-iteration ratios (paired: both ran in the same
        # iteration) with its 95% bootstrap interval and verdict (accio.stats).
        r = stats.ratio(bw, fbw, paired=True) if min(bw + fbw) > 0 else None
        out["fio"]["ratio"] = r.estimate if r else None
        if r:
            out["fio"]["interval"] = [r.low, r.high]
            out["fio"]["verdict"] = stats.verdict(r)
    return out

