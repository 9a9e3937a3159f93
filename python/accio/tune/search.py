"""The budgeted search of `accio tune`: which plan is fastest for each request size, operation,
cache state and concurrency, measured in the time the user allows rather than cell by cell.

1. coarse: every base plan at 4 KiB, 64 KiB, 1 MiB, 8 MiB and 64 MiB, in every group (read/write x
   hot/cold x 1/N threads), one sample each, plans interleaved;
2. confirm: plans within 50% of a cell's best get two more samples (medians of three decide);
3. parameters: where parallel, direct or uring wins at 1 MiB and above, their task size and queue
   depth variants are tried against the winner;
4. boundaries: between neighbouring sizes whose winners differ, the size in between (a power of two)
   is measured with both winners, halving the interval while time remains;
5. polish: the closest contests get more samples;
6. guard: each cell's winner (and its best plan without alignment needs) against the built-in
   model's plan, in paired rounds (the two measured together, which goes first by stats.rotation), at least
   stats.MIN_SAMPLES rounds, more up to GUARD_MAX while it is not settled (stats.settled: undecided,
   or a difference seen in fewer than stats.CONFIRM_SAMPLES rounds).
Each step stops when the budget is spent; from the parameters step on, the steps leave the guard
the time its rounds are estimated to take. What was not measured falls back to the built-in model
(recorded in the profile). Ties within 3% go to the simpler plan (posix, parallel, uring, direct).

A profile never plans worse than the built-in model within what was measured: the built-in model's
plan for each size is measured beside the others, and a measured winner replaces it only where it
wins by more than the noise measured, by the project's statistics rule (decide(): at least
stats.MIN_SAMPLES paired rounds of the guard, and the 95% bootstrap interval of the paired
winner/built-in ratio above 1.0, accio.stats); otherwise the cell keeps the built-in plan.
"""
from __future__ import annotations

import functools
import json
import math
import statistics
import time
from dataclasses import dataclass, field, replace

from .. import _ext, stats
from .measure import MiB, Bench, Plan, knobs

KiB = 1 << 10
COARSE_SIZES = (4 * KiB, 64 * KiB, MiB, 8 * MiB, 64 * MiB)
TIE = 0.03            # within 3%: prefer the simpler plan
CONFIRM_WITHIN = 0.50  # plans this close to the best get more samples (one sample can be far off)
MIN_EVEN_TASK = _ext.MIN_EVEN_TASK  # parallel(even) of at most this many bytes runs as one task: posix
SAMPLE_SECONDS = 0.04  # aim of one sample's timed part
GUARD_MAX = 15         # the guard's rounds for a contest still undecided (the evaluation's cap)
GUARD_EXTRA = 4        # rounds added at a time to an undecided contest
# Tuning policy, not engine facts: which of the built-in mechanisms wins a tie (within TIE), and the
# plans the search starts from. A mechanism the engine registers beyond these is tried too, at its
# default settings (and with direct=on where it reads `direct`), and loses ties to them.
SIMPLICITY = {"posix": 0, "parallel": 1, "uring": 2, "direct": 3}


# The device tables' base plans, simplest first (ties go to the earlier one). pagecache runs at every
# measured size (its pagecache_min at the smallest, 4 KiB): the table's boundary is its crossing.
DEVICE_SIMPLICITY = {"staged": 0, "naive": 1, "gds": 2, "pagecache": 3}
READ_ONLY = {"pagecache"}  # writes through it run staged: not measured for writes


def device_plans() -> list[Plan]:
    """The device mechanisms that run here (gds only where cuFile loads, pagecache only where the
    driver registers read-only pages), at their default settings."""
    avail = [m["name"] for m in _ext.mechanisms() if m["device"] and m["available"]]
    return [Plan(m, pagecache_min=COARSE_SIZES[0]) if m == "pagecache" else Plan(m)
            for m in sorted(avail, key=lambda m: DEVICE_SIMPLICITY.get(m, len(DEVICE_SIMPLICITY)))]


def simplicity(mechanism: str) -> int:
    if mechanism in DEVICE_SIMPLICITY:
        return DEVICE_SIMPLICITY[mechanism]
    return SIMPLICITY.get(mechanism, len(SIMPLICITY))


def base_plans(directory_takes_direct: bool) -> list[Plan]:
    plans = [Plan("posix"), Plan("parallel"), Plan("uring", queue_depth=16)]
    if directory_takes_direct:
        plans += [Plan("direct"), Plan("uring", queue_depth=16, direct=True)]
    for m in (m["name"] for m in _ext.mechanisms() if not m["device"]):  # the engine's registry: a new
        if m not in SIMPLICITY:                                            # mechanism is measured, no edit here
            plans.append(Plan(m))
            if directory_takes_direct and "direct" in knobs(m):
                plans.append(Plan(m, direct=True))
    return plans


def variants(p: Plan, size: int) -> list[Plan]:
    """Parameter variants of a winning plan worth trying at this request size: queue depths for a
    mechanism that reads queue_depth, task sizes for one that reads task_size (the engine says which)."""
    out = []
    if "queue_depth" in knobs(p.mechanism):
        out += [replace(p, queue_depth=q) for q in (4, 64)]
    if "task_size" in knobs(p.mechanism):
        out += [replace(p, task_size=t) for t in (MiB, 4 * MiB) if t < size]
    return [v for v in out if v != p]


@functools.lru_cache(maxsize=None)
def _pagecache_min() -> int:
    """The pagecache_min setting (default, or ACCIO_PAGECACHE_MIN) that a pagecache plan without its
    own runs with."""
    from .. import settings
    return _ext.parse_size(settings()["pagecache_min"])


def as_run(plan: Plan, size: int) -> Plan:
    """The plan a request of `size` actually runs: a parallel plan of one task is posix; a pagecache
    read below its pagecache_min is staged (pagecache hands it over)."""
    if plan.mechanism == "parallel" and size <= (plan.task_size or MIN_EVEN_TASK):
        return Plan("posix")
    if plan.mechanism == "pagecache" and size < (plan.pagecache_min or _pagecache_min()):
        return Plan("staged")
    return plan


@functools.lru_cache(maxsize=None)
def builtin_model(device: bool = False, where: str | None = None) -> dict:
    """The engine's built-in model (device: its built-in device rule) as a profile document, with
    every plan's label (accio._ext.profile_describe): the model of the device under `where` (a
    file or directory: on a rotational one it reads cold ranges in one stream), else of a device
    that is not rotational."""
    model = json.loads(_ext.profile_describe(None, where))
    return model["builtin_device"] if device else model


def builtin_cells(op: str, conc: str, cache: str = "hot", device: bool = False, where: str | None = None) -> list[dict]:
    """The model's cells for op, concurrency and cache state (cold: its cold cells where it has
    them, else the hot ones, as the planner reads them)."""
    entry = builtin_model(device, where)["decisions"][op][conc]
    return (entry.get("cold") if cache == "cold" else None) or entry["hot"]


@functools.lru_cache(maxsize=None)
def _builtin_table(op: str, conc: str, cache: str, device: bool, where: str | None) -> tuple:
    plans = [Plan.from_json(p) for p in builtin_model(device, where)["plans"]]
    return tuple((c["max_size"], plans[c["plans"][0]]) for c in builtin_cells(op, conc, cache, device, where))


def builtin_plan(op: str, conc: str, size: int, device: bool = False, cache: str = "hot",
                 where: str | None = None) -> Plan:
    """The engine's built-in model's plan for a request of `size` (this machine; the device under
    `where`) in that cache state (a cold read that continues a stream), as it runs."""
    table = _builtin_table(op, conc, cache, device, where)
    plan = next(p for max_size, p in table if max_size is None or size <= max_size)
    return as_run(plan, size)


@dataclass(frozen=True)
class Group:
    op: str        # read | write
    cache: str     # hot | cold
    threads: int   # application threads issuing requests at once

    @property
    def concurrency(self) -> str:
        return "1" if self.threads == 1 else "N"


@dataclass
class Search:
    bench: Bench
    threads: int
    budget: float
    plans: list[Plan]
    progress: object = None
    samples: dict = field(default_factory=dict)   # (group, size, plan) -> [MiB/s]
    # (group, size, plan) -> ([plan MiB/s], [built-in MiB/s]): the guard's paired rounds against the
    # built-in plan for that size; kept apart from `samples`, so the ranking stays the search's
    pairs: dict = field(default_factory=dict)
    secs: dict = field(default_factory=dict)      # (group, size, plan) and (group, plan) -> seconds of its last sample
    est: dict = field(default_factory=dict)       # (group, size, plan) and (group, plan) -> last MiB/s (sizes the next sample)
    notes: list = field(default_factory=list)
    start: float = field(default_factory=time.monotonic)
    exhausted: bool = False
    hold: bool = False  # leave the guard the time it needs (the steps after confirm)
    _reserve_at: float = field(default=float("-inf"), repr=False)  # guard_reserve's cache: when, and its value
    _reserve: float = field(default=0.0, repr=False)
    device: int = -1  # >= 0: a GPU's device table (buffers in its memory, device mechanisms)

    # ---- bookkeeping ----
    def left(self) -> float:
        return self.budget - (time.monotonic() - self.start)

    def groups(self) -> list[Group]:
        out = []
        for threads in sorted({1, self.threads}):
            for op in ("read", "write"):
                for cache in ("hot", "cold"):
                    if op == "read" and cache == "cold" and not self.bench.cold_reads:
                        continue
                    out.append(Group(op, cache, threads))
        return out

    def measure(self, g: Group, size: int, plan: Plan) -> bool:
        """One more sample; False (and nothing measured) once the budget is spent. A parallel plan
        that would run as one task is posix exactly: not measured (ties between the two are noise)."""
        if as_run(plan, size) != plan:
            return True
        if self.left() <= (self.guard_reserve() if self.hold else 0.0):
            self.exhausted = True
            return False
        t0 = time.monotonic()
        mibps = self.bench.sample(plan.settings(), g.op, g.cache == "cold", g.threads, size, self._nbytes(g, size, plan),
                                  min_seconds=SAMPLE_SECONDS / 2, device=self.device)
        self.samples.setdefault((g, size, plan), []).append(mibps)
        self._record(g, size, plan, mibps, time.monotonic() - t0)
        self._progress(g, size, plan.label)
        return True

    def _record(self, g: Group, size: int, plan: Plan, mibps: float, seconds: float) -> None:
        """The plan's last rate and sample time, at this size and for the group."""
        for k in ((g, size, plan), (g, plan)):
            self.est[k], self.secs[k] = mibps, seconds

    def _last(self, table: dict, g: Group, size: int, plan: Plan, default: float) -> float:
        """The plan's last value at this size, else its last in the group, else default."""
        return table.get((g, size, plan), table.get((g, plan), default))

    def _nbytes(self, g: Group, size: int, plan: Plan) -> int:
        """Bytes for one sample of about SAMPLE_SECONDS at the plan's last measured rate (at this size
        where it was measured at it: a rate of 64 MiB requests would make a 4 KiB sample far too long)."""
        nbytes = int(self._last(self.est, g, size, plan, 1000.0) * MiB * SAMPLE_SECONDS)
        return max(nbytes, size * g.threads, min(self.bench.file_size, 8 * MiB))

    def _progress(self, g: Group, size: int, what: str) -> None:
        if self.progress:
            where = f"cuda:{self.device} " if self.device >= 0 else ""
            self.progress(f"{where}{g.op} {g.cache} {g.threads}t {size >> 10}KiB {what}",
                          min(1.0, (time.monotonic() - self.start) / self.budget))

    def measure_pair(self, g: Group, size: int, plan: Plan, builtin: Plan) -> bool:
        """One paired round of `plan` and the built-in plan (Bench.sample_together: their phases take
        turns, so both see the same machine), which goes first by stats.rotation (a strict A-B, B-A
        alternation put a disturbance of period two on one side); False (and nothing measured) once
        the budget is spent."""
        if self.left() <= 0:
            self.exhausted = True
            return False
        a, b = self.pairs.setdefault((g, size, plan), ([], []))
        order = stats.rotation([plan, builtin], len(a) + size.bit_length())
        t0 = time.monotonic()
        got = self.bench.sample_together([(p.settings(), self._nbytes(g, size, p), None) for p in order], g.op,
                                         g.cache == "cold", g.threads, size, SAMPLE_SECONDS / 2, self.device)
        by = dict(zip(order, got))
        a.append(by[plan])
        b.append(by[builtin])
        seconds = (time.monotonic() - t0) / 2
        for p in order:
            self._record(g, size, p, by[p], seconds)
        self._progress(g, size, f"{plan.label} vs built-in {builtin.label}")
        return True

    def median(self, g: Group, size: int, plan: Plan) -> float | None:
        s = self.samples.get((g, size, plan))
        return statistics.median(s) if s else None

    def ranking(self, g: Group, size: int) -> list[tuple[Plan, float]]:
        """Measured plans, best first; ties within TIE go to the simpler plan."""
        got = [(p, self.median(g, size, p)) for p in self.plans_at(g, size)]
        got = [(p, m) for p, m in got if m]
        if not got:
            return []
        best = max(m for _, m in got)

        def key(pm):
            plan, mibps = pm
            tied = mibps >= best * (1 - TIE)
            return (not tied, simplicity(plan.mechanism) if tied else 0, -mibps)
        return sorted(got, key=key)

    def builtin(self, g: Group, size: int) -> Plan:
        if self.device >= 0:  # the device rule: the same on every disk
            return builtin_plan(g.op, g.concurrency, size, device=True)
        return builtin_plan(g.op, g.concurrency, size, cache=g.cache, where=self.bench.directory)

    def contenders(self, g: Group, size: int) -> list[Plan]:
        """The base plans that serve the group's operation (pagecache only reads) and the built-in
        model's plan for this size (the guard needs its samples)."""
        b = self.builtin(g, size)
        plans = [p for p in self.plans if g.op == "read" or p.mechanism not in READ_ONLY]
        return plans + ([b] if b not in plans else [])

    def rounds(self, g: Group, size: int, plan: Plan) -> int:
        """The guard's paired rounds of plan against the built-in plan so far."""
        return len(self.pairs.get((g, size, plan), ([], []))[0])

    def guard_ratio(self, g: Group, size: int, plan: Plan) -> stats.Ratio | None:
        """plan / the built-in plan over the guard's paired rounds; None before stats.MIN_SAMPLES."""
        a, b = self.pairs.get((g, size, plan), ([], []))
        return stats.ratio(a, b, paired=True) if self.rounds(g, size, plan) >= stats.MIN_SAMPLES else None

    def decide(self, g: Group, size: int, ranked: list[Plan]) -> tuple[Plan, dict]:
        """The first of `ranked` (best first) if the guard found it faster than the built-in plan (the
        95% interval of the paired ratio above 1.0) over at least stats.CONFIRM_SAMPLES rounds
        (stats.settled), else the built-in plan; with the guard's comparison ({} where the winner is
        the built-in plan, "kept": True where it was set aside, and "unconfirmed": True where it was
        faster in fewer rounds: the budget ran out before the guard could confirm it)."""
        best, builtin = ranked[0], self.builtin(g, size)
        if best == builtin:
            return best, {}
        r = self.guard_ratio(g, size, best)
        n = self.rounds(g, size, best)
        why = {"winner": best.label, "rounds": n,
               "vs_builtin": [round(r.estimate, 3), round(r.low, 3), round(r.high, 3)] if r else None}
        if r and r.low > 1.0:
            if stats.settled("faster", n):
                return best, why
            return builtin, {**why, "kept": True, "unconfirmed": True}
        return builtin, {**why, "kept": True}

    def unconfirmed(self) -> int:
        """Guard contests found faster in fewer than stats.CONFIRM_SAMPLES rounds (decide() keeps the
        built-in plan for them)."""
        return sum(bool(self.decide(g, size, [p])[1].get("unconfirmed")) for g, size, p, _ in self.guard_targets())

    def guard_targets(self) -> list[tuple[Group, int, Plan, Plan]]:
        """(group, size, plan, built-in plan) for each measured cell's winner, and its best plan without
        alignment needs, where that is not the built-in plan: the contests decide() needs the guard for."""
        out = []
        for g in self.groups():
            for size in self.sizes(g):
                ranked = [p for p, _ in self.ranking(g, size)]
                builtin = self.builtin(g, size)
                unaligned = [p for p in ranked if not p.needs_alignment]
                for p in dict.fromkeys(ranked[:1] + unaligned[:1]):
                    if p != builtin:
                        out.append((g, size, p, builtin))
        return out

    def guard_reserve(self) -> float:
        """Seconds the guard's first stats.CONFIRM_SAMPLES rounds of every current contest are
        estimated to take (by each plan's last sample), recomputed at most once a second: a winner
        that differs from the built-in plan is confirmed over that many rounds (stats.settled)."""
        now = time.monotonic()
        if now - self._reserve_at >= 1.0:
            self._reserve_at = now
            self._reserve = sum(max(0, stats.CONFIRM_SAMPLES - self.rounds(g, size, p))
                                * (self._last(self.secs, g, size, p, SAMPLE_SECONDS)
                                   + self._last(self.secs, g, size, b, SAMPLE_SECONDS))
                                for g, size, p, b in self.guard_targets())
        return self._reserve

    def plans_at(self, g: Group, size: int) -> list[Plan]:
        return [p for (gg, s, p) in self.samples if gg == g and s == size]

    def sizes(self, g: Group) -> list[int]:
        return sorted({s for (gg, s, _) in self.samples if gg == g})

    # ---- the steps ----
    def run(self) -> None:
        for step in (self.coarse, self.confirm):
            step()
            if self.exhausted:
                what = ("cells not measured use the built-in model" if step == self.coarse else
                        "every cell was measured, some with fewer samples than planned")
                self.notes.append(f"the budget ran out during the {step.__name__} step: {what}; no winner "
                                  "was guarded, so every measured cell keeps the built-in plan")
                return
        self.hold = True
        for step in (self.parameters, self.boundaries, self.polish):
            step()
            if self.exhausted:
                if step != self.polish:  # polish runs until the time left is the guard's: no news
                    self.notes.append(f"the {step.__name__} step stopped to leave the noise guard its time: some "
                                      "cells have fewer samples or parameter variants than planned")
                break
        self.hold = self.exhausted = False
        self.guard()
        if self.exhausted:
            targets = self.guard_targets()
            short = sum(self.rounds(*t[:3]) < stats.MIN_SAMPLES for t in targets)
            unconfirmed = self.unconfirmed()
            self.notes.append(f"the budget ran out during the guard step: {short} of {len(targets)} winners had fewer "
                              f"than {stats.MIN_SAMPLES} paired rounds against the built-in plan and keep it" if short else
                              "the budget ran out while the guard added rounds to contests not yet settled: they keep "
                              f"the built-in plan ({unconfirmed} of {len(targets)} found faster in fewer than "
                              f"{stats.CONFIRM_SAMPLES} rounds, unconfirmed)")

    def coarse(self) -> None:
        for size in COARSE_SIZES:
            for g in self.groups():
                if size * g.threads > self.bench.file_size:
                    continue  # the scratch file is too small for this cell (--file-size)
                for p in self.contenders(g, size):
                    if not self.measure(g, size, p):
                        return

    def confirm(self, sizes=None, extra: int = 2) -> None:
        for g in self.groups():
            for size in sizes or self.sizes(g):
                r = self.ranking(g, size)
                if not r:
                    continue
                best = max(m for _, m in r)
                close = [p for p, m in r if m >= best * (1 - CONFIRM_WITHIN) or p == self.builtin(g, size)]
                for _ in range(extra):
                    for p in close:
                        if len(self.samples[(g, size, p)]) < 1 + extra and not self.measure(g, size, p):
                            return

    def parameters(self) -> None:
        for g in self.groups():
            for size in self.sizes(g):
                if size < MiB:
                    continue
                r = self.ranking(g, size)
                if not r or r[0][0].mechanism == "posix":
                    continue
                for v in variants(r[0][0], size):
                    for _ in range(3):
                        if not self.measure(g, size, v):
                            return

    def boundaries(self) -> None:
        for _round in range(4):
            todo = []
            for g in self.groups():
                s = self.sizes(g)
                for a, b in zip(s, s[1:]):
                    ra, rb = self.ranking(g, a), self.ranking(g, b)
                    if ra and rb and ra[0][0] != rb[0][0] and b > 2 * a:
                        mid = 1 << round((math.log2(a) + math.log2(b)) / 2)
                        todo.append((g, mid, list(dict.fromkeys([ra[0][0], rb[0][0], self.builtin(g, mid)]))))
            if not todo:
                return
            for g, mid, contenders in todo:
                for _ in range(3):
                    for p in contenders:
                        if not self.measure(g, mid, p):
                            return

    def polish(self) -> None:
        """More samples where the two best are within 10%, closest first, until the budget is spent."""
        while self.left() > 0:
            close = []
            for g in self.groups():
                for size in self.sizes(g):
                    r = self.ranking(g, size)
                    if len(r) >= 2 and r[1][1] >= r[0][1] * 0.9:
                        n = min(len(self.samples[(g, size, r[0][0])]), len(self.samples[(g, size, r[1][0])]))
                        if n < 9:
                            close.append((n, r[0][1] / r[1][1], g, size, r[0][0], r[1][0]))
            if not close:
                return
            close.sort(key=lambda c: (c[0], c[1]))
            _n, _ratio, g, size, a, b = close[0]
            if not (self.measure(g, size, a) and self.measure(g, size, b)):
                return

    def guard(self) -> None:
        """Paired rounds of every contest of guard_targets(): first stats.MIN_SAMPLES each, then, for
        those not settled (stats.settled: undecided, or a difference seen in fewer than
        stats.CONFIRM_SAMPLES rounds), GUARD_EXTRA more at a time up to GUARD_MAX, as the evaluation
        does. The largest gains the search saw go first: when the budget
        runs out, what is left unguarded is what matters least."""
        def gain(t):
            g, size, p, b = t
            mp, mb = self.median(g, size, p), self.median(g, size, b)
            return mp / mb if mp and mb else 1.0
        todo, want = sorted(self.guard_targets(), key=gain, reverse=True), stats.MIN_SAMPLES
        while todo:
            for g, size, p, b in todo:
                while self.rounds(g, size, p) < want:
                    if not self.measure_pair(g, size, p, b):
                        return
            if want >= GUARD_MAX:
                return
            todo = [t for t in todo if not stats.settled(stats.verdict(r := self.guard_ratio(*t[:3])), r.n_a)]
            want = min(GUARD_MAX, want + GUARD_EXTRA)
