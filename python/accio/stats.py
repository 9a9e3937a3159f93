"""Side-by-side measurement statistics, the project's one rule for claiming "faster" or "same".

Contenders run interleaved (in each block of n rounds every one of the n contenders starts one
round, so none always goes first or last; which starts which round is shuffled per block, so that a
disturbance that repeats with the rounds does not fall on one contender), at least MIN_SAMPLES
samples each. A comparison is the ratio a/b of two contenders (or of a
contender and a ceiling) with a 95% percentile-bootstrap interval:

- paired (the default when both have one sample per round): the median of the per-round ratios
  a_i/b_i, resampling rounds, so that drift shared by a round cancels out;
- unpaired: median(a)/median(b), resampling a and b independently.

Verdicts (values are rates, higher is better): "faster" when the whole interval is above 1,
"slower" when it is below, "within noise" only when it contains 1.0 and lies inside
[1 - NOISE, 1 + NOISE], otherwise "undecided" (too noisy samples: measure more). A goal such as
"staged >= 0.95 x the ceiling" is "met" when the median ratio reaches it, else "missed" (the
project's rule); the interval is reported beside it, so a goal met by a noisy median shows. With
fewer than MIN_SAMPLES samples on a side neither verdict() nor goal() claims anything: both say
"too few samples (N < 7)" (too_few), whoever prints them; the ratio and interval are still shown.

Adaptive sampling (`accio tune --evaluate`, the tuner's guard) stops on settled(): within noise, or
a difference (faster, slower) once CONFIRM_SAMPLES rounds show it. At MIN_SAMPLES the interval spans
the 2nd to the 6th of 7 per-round ratios, which holds the true median 87.5% of the time, not 95%;
simulated, it held 0.89 at 7 rounds, 0.94 at 11 and 0.94 at 15 (`benchmarks/guard_false_accept.py
--coverage --trials 1000`, results/tune/interval_coverage_s16.json), so a difference seen at 7 is measured again before it is claimed.

Used by benchmarks/gpu_bench.py, benchmarks/offload_vs_base.py and `accio tune --evaluate` (its
rotation and ratios; its rounds take turns phase by phase, Bench.sample_together); docs/methodology.md.
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Mapping, Sequence

MIN_SAMPLES = 7
CONFIDENCE = 0.95
NOISE = 0.05
RESAMPLES = 10000
CONFIRM_SAMPLES = 11  # rounds a difference needs before adaptive sampling stops on it (settled)
TOO_FEW = "too few samples"  # the verdict under MIN_SAMPLES: "too few samples (3 < 7)"


def rotation(names: Sequence[str], round_index: int) -> list[str]:
    """The order of one round, in the names' cyclic order: rounds come in blocks of n (the number of
    contenders), each contender starts one round of a block, and which starts which is a shuffle
    seeded by the block (the same round index always gives the same order). A fixed cycle put a
    disturbance that repeats every 2n runs on one contender every time: with two contenders (AB BA
    AB BA ...), the 2-vCPU VM's disk read a cold file at about 0.7x in every other round, and for
    each program in a cold run_programs.py run those slow runs all fell on the same side, plain or
    shim (results/run/run_programs_cold_s11.json)."""
    n = len(names)
    if not n:
        return []
    block, i = divmod(round_index, n)
    starts = list(range(n))
    random.Random(block).shuffle(starts)
    k = starts[i]
    return list(names[k:]) + list(names[:k])


def interleave(contenders: Mapping[str, Callable[[], float]], rounds: int,
               on_sample: Callable[[str, int, float], None] | None = None,
               on_round: Callable[[int, dict[str, list[float]]], bool | None] | None = None) -> dict[str, list[float]]:
    """Runs every contender once per round in rotating order; returns each one's samples (what its
    callable returned, e.g. MiB/s). on_sample(name, round, value) follows every sample and
    on_round(round, samples so far) every round, so a caller can show progress and keep partial
    results when a run is cut off; on_round returning True ends the run after that round (a time
    budget)."""
    names = list(contenders)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in rotation(names, r):
            v = contenders[n]()
            samples[n].append(v)
            if on_sample:
                on_sample(n, r, v)
        if on_round and on_round(r, samples):
            break
    return samples


def median(xs: Iterable[float]) -> float:
    return statistics.median(list(xs))


def summary(xs: Sequence[float]) -> dict:
    """Median, min, max and the spread (half the range, in % of the median) of one contender."""
    xs = list(xs)
    if not xs:
        return {"n": 0}
    m = statistics.median(xs)
    return {"n": len(xs), "median": m, "min": min(xs), "max": max(xs),
            "spread_pct": (max(xs) - min(xs)) / 2 / m * 100 if m else float("nan")}


@dataclass(frozen=True)
class Ratio:
    estimate: float
    low: float
    high: float
    n_a: int
    n_b: int
    method: str  # "paired", "unpaired", or "geomean" (of cells; n_a = n_b = the cells)
    confidence: float = CONFIDENCE
    cell_samples: int | None = None  # geomean: the fewest samples a side of any cell has

    def as_dict(self) -> dict:
        return asdict(self)


def _quantile(sorted_xs, q: float) -> float:
    """The inverted-CDF quantile: the smallest value whose cumulative share reaches q."""
    n = len(sorted_xs)
    return float(sorted_xs[min(n - 1, max(0, math.ceil(q * n) - 1))])


def _boot_medians(values, resamples: int, rng):
    import numpy as np
    idx = rng.integers(0, len(values), size=(resamples, len(values)))
    return np.median(np.asarray(values, dtype=float)[idx], axis=1)


def ratio(a: Sequence[float], b: Sequence[float], *, paired: bool | None = None, confidence: float = CONFIDENCE,
          resamples: int = RESAMPLES, seed: int = 0) -> Ratio:
    """a over b (rates: > 1 means a is faster) with a percentile-bootstrap interval. paired=None
    pairs the samples when there are as many of a as of b (one each per interleaved round)."""
    import numpy as np
    a, b, paired = _checked(a, b, paired)
    est, boot = _bootstrap(a, b, paired, resamples, np.random.default_rng(seed))
    alpha = (1 - confidence) / 2
    boot = np.sort(boot)
    return Ratio(est, _quantile(boot, alpha), _quantile(boot, 1 - alpha), len(a), len(b),
                 "paired" if paired else "unpaired", confidence)


def _checked(a, b, paired: bool | None) -> tuple[list[float], list[float], bool]:
    """a and b as floats, and whether they pair (None: when there are as many of each); ValueError
    for an empty side, a sample that is not positive and finite, or a pairing of unequal counts."""
    a, b = [float(x) for x in a], [float(x) for x in b]
    if not a or not b:
        raise ValueError("ratio needs at least one sample on each side")
    if any(x <= 0 or not math.isfinite(x) for x in a + b):
        raise ValueError("ratio needs positive, finite samples")
    if paired is None:
        paired = len(a) == len(b)
    if paired and len(a) != len(b):
        raise ValueError(f"paired ratio needs as many samples on each side ({len(a)} vs {len(b)})")
    return a, b, paired


def _bootstrap(a, b, paired: bool, resamples: int, rng):
    """The ratio's estimate and its bootstrap replicates (unsorted)."""
    if paired:
        per_round = [x / y for x, y in zip(a, b)]
        return statistics.median(per_round), _boot_medians(per_round, resamples, rng)
    return statistics.median(a) / statistics.median(b), _boot_medians(a, resamples, rng) / _boot_medians(b, resamples, rng)


def geomean_ratio(pairs: Sequence[tuple[Sequence[float], Sequence[float], bool]], *, confidence: float = CONFIDENCE,
                  resamples: int = RESAMPLES, seed: int = 0) -> Ratio:
    """The geometric mean over cells of the ratio a/b, each cell given as (a, b, paired), with a
    bootstrap interval: every cell resampled as ratio() resamples it, the geometric mean taken per
    replicate. How `accio tune --evaluate` compares auto with a fixed mechanism over a whole grid."""
    import numpy as np
    if not pairs:
        raise ValueError("geomean_ratio needs at least one cell")
    rng = np.random.default_rng(seed)
    logs, boot = [], np.zeros(resamples)
    fewest = min(min(len(a), len(b)) for a, b, _ in pairs)
    for a, b, paired in pairs:
        est, reps = _bootstrap(*_checked(a, b, paired), resamples, rng)
        logs.append(math.log(est))
        boot += np.log(reps)
    boot = np.sort(np.exp(boot / len(pairs)))
    alpha = (1 - confidence) / 2
    n = len(pairs)
    return Ratio(math.exp(sum(logs) / n), _quantile(boot, alpha), _quantile(boot, 1 - alpha), n, n, "geomean",
                 confidence, fewest)


def too_few(r: Ratio) -> str | None:
    """'too few samples (N < 7)' when a side of r has fewer than MIN_SAMPLES samples, else None: the
    one place that says when a ratio may be called anything. A geometric mean over cells (n_a, n_b
    count cells) is held to it by its cells' samples: each cell's own, the fewest of any (a grid
    measured once a cell was called faster or slower from one sample)."""
    n = r.cell_samples if r.method == "geomean" and r.cell_samples is not None else min(r.n_a, r.n_b)
    if (r.method == "geomean" and r.cell_samples is None) or n >= MIN_SAMPLES:
        return None
    return f"{TOO_FEW} ({n} < {MIN_SAMPLES})"


def decided(v: str) -> bool:
    """Whether a verdict() says something: faster, slower or within noise (not undecided, not too few)."""
    return v in ("faster", "slower", "within noise")


def settled(v: str, n: int) -> bool:
    """Whether adaptive sampling may stop at verdict v after n rounds: within noise, or faster or
    slower with at least CONFIRM_SAMPLES rounds (see the module's docstring)."""
    return v == "within noise" or (v in ("faster", "slower") and n >= CONFIRM_SAMPLES)


def verdict(r: Ratio, noise: float = NOISE) -> str:
    """faster, slower, within noise, undecided, or too few samples (see the module's docstring)."""
    if few := too_few(r):
        return few
    if r.low > 1.0:
        return "faster"
    if r.high < 1.0:
        return "slower"
    if 1.0 - noise <= r.low and r.high <= 1.0 + noise:
        return "within noise"
    return "undecided"


def goal(r: Ratio, target: float) -> str:
    """met or missed for a goal 'a >= target x b': the median ratio decides (describe() gives the
    interval to report beside it); too few samples (too_few) under MIN_SAMPLES a side."""
    if few := too_few(r):
        return few
    return "met" if r.estimate >= target else "missed"


def describe(r: Ratio) -> str:
    """'1.02x [0.99-1.05]' (the estimate and its interval)."""
    return f"{r.estimate:.2f}x [{r.low:.2f}-{r.high:.2f}]"


def enough(samples: Sequence[float]) -> bool:
    return len(samples) >= MIN_SAMPLES


__all__ = ["MIN_SAMPLES", "CONFIDENCE", "NOISE", "Ratio", "rotation", "interleave", "median", "summary", "ratio",
           "geomean_ratio", "verdict", "goal", "describe", "enough", "too_few", "decided", "TOO_FEW"]
