"""Request latencies of a bench phase: the engine's log-linear histogram (bench_phase.hpp: exact
below 64 ns, then 64 buckets per power of two, so a value is known within 1.6%), merged over
threads, ranks and iterations, and its percentiles as fio reports them (p50, p99, p99.9).

A histogram is a list of [low_ns, high_ns, count] buckets (low inclusive, high exclusive), in
increasing order, without empty buckets; that is also how the JSON stores it.
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

PERCENTILES = (50.0, 99.0, 99.9)


def merge(histograms: Iterable[Sequence[Sequence[int]]]) -> list[list[int]]:
    """One histogram holding every request of the given ones."""
    out: dict[tuple[int, int], int] = {}
    for h in histograms:
        for low, high, count in h:
            if count < 0 or high <= low:
                raise ValueError(f"not a latency bucket: [{low}, {high}) x {count}")
            out[(low, high)] = out.get((low, high), 0) + count
    return [[lo, hi, n] for (lo, hi), n in sorted(out.items()) if n]


def _value(low: int, high: int) -> float:
    """What a bucket stands for: its value when it holds one value, else its middle."""
    return float(low) if high - low <= 1 else (low + high) / 2


def percentile(hist: Sequence[Sequence[int]], p: float) -> float:
    """The p-th percentile (0 < p <= 100) in ns, by the inverted CDF (as accio.stats' quantiles): the
    bucket holding the request of rank ceil(p/100 x n), counted from the fastest."""
    if not 0 < p <= 100:
        raise ValueError(f"percentile {p} is not in (0, 100]")
    n = sum(c for _lo, _hi, c in hist)
    if n == 0:
        raise ValueError("no requests: no latency percentiles")
    rank = max(1, math.ceil(p / 100 * n - 1e-9))  # the tolerance keeps 99.9% of 1000 at rank 999
    seen = 0
    for low, high, count in hist:
        seen += count
        if seen >= rank:
            return _value(low, high)
    raise AssertionError("unreachable: rank <= n")


def summary(hist: Sequence[Sequence[int]]) -> dict:
    """{'requests', 'mean_ns', 'p50_ns', 'p99_ns', 'p99.9_ns', 'max_ns', 'histogram'} of one histogram
    (mean and max from the buckets' values, so within their resolution)."""
    n = sum(c for _lo, _hi, c in hist)
    if n == 0:
        return {"requests": 0, "histogram": []}
    out = {"requests": n, "mean_ns": sum(_value(lo, hi) * c for lo, hi, c in hist) / n}
    for p in PERCENTILES:
        out[f"p{p:g}_ns"] = percentile(hist, p)
    out["max_ns"] = _value(*hist[-1][:2])
    out["histogram"] = [list(b) for b in hist]
    return out


def fmt_ns(ns: float) -> str:
    """A latency with three significant digits in the unit that suits it: 812 ns, 12.3 us, 4.56 ms."""
    from .output import sig3
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{sig3(ns / scale)} {unit}"
    return f"{sig3(ns)} ns"
