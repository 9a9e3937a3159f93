"""Side-by-side measurement statistics, the project's one rule for claiming "faster" or "same".

Contenders run interleaved (in each block of n rounds every one of the n contenders starts one
round, so none always goes first or last; which starts which round is shuffled per block, so that a
disturbance that repeats with the rounds does not fall on one contender), at least MIN_SAMPLES
samples each. A comparison is the ratio a/b of two contenders (or of a
contender and a ceiling) with a 95% percentile-bootstrap interval:

- paired (both have one sample per round; the caller says so): the median of the per-round ratios
  a_i/b_i, resampling rounds, so that drift shared by a round cancels out. The interval is widened
  where it is narrower than the distribution-free interval of a median (order statistics: the k-th
  smallest to the k-th largest per-round ratio, holding the median at least 95% of the time for any
  distribution of the ratios). At MIN_SAMPLES rounds the bootstrap spans the 2nd to the 6th of 7
  ratios, which holds the median 87.5% of the time (0.888 simulated, results/tune/
  interval_coverage_s16.json): equal contenders came out "faster" or "slower" about one time in 8,
  and every printer that compares 7 rounds said so. Widened, 7 rounds span all 7 ratios (98.4%), 11
  the 2nd to the 10th (98.8%), 15 the 4th to the 12th (96.5%) (statistics audit, session 24);
- unpaired: median(a)/median(b), resampling a and b independently (0.957 simulated at 7 a side).

Verdicts (values are rates, higher is better): "faster" when the whole interval is above 1,
"slower" when it is below, "within noise" only when it contains 1.0 and lies inside
[1 - NOISE, 1 + NOISE], otherwise "undecided" (too noisy samples: measure more). A goal such as
"staged >= 0.95 x the ceiling" is "met" when the median ratio reaches it, else "missed" (the
project's rule); the interval is reported beside it, so a goal met by a noisy median shows. With
fewer than MIN_SAMPLES samples on a side neither verdict() nor goal() claims anything: both say
"too few samples (N < 7)" (too_few), whoever prints them; the ratio and interval are still shown.

Adaptive sampling (`accio tune --evaluate`, the tuner's guard) stops on settled(): within noise, or
a difference (faster, slower) once CONFIRM_SAMPLES rounds show it (with the bootstrap alone, the
interval held the median 0.89 of the time at 7 rounds, 0.94 at 11 and 0.94 at 15:
`benchmarks/guard_false_accept.py --coverage --trials 1000`; the widening above makes the confirmation
a second safeguard, not the only one).

Used by `accio tune` (the guard, the prefetch decision) and `--evaluate` (its rounds take turns
phase by phase, Bench.sample_together), `accio bench --vs-fio`, `compare` and `safetensors`, and the
scripts under benchmarks/ that compare; docs/methodology.md says which outputs are descriptive.
"""
from __future__ import annotations

import math
import numbers
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


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The distribution-free interval of the median of values: the k-th smallest to the k-th largest,
    k the largest with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2 (at least 1: the whole range
    where even that holds the median less often, under 6 values)."""
    v = sorted(values)
    n, alpha = len(v), (1 - confidence) / 2
    k, below = 1, 0.0
    for j in range(n):
        below += math.comb(n, j) / 2 ** n  # P(Binomial(n, 1/2) <= j)
        if below > alpha + 1e-12:
            break
        k = j + 1
    k = max(1, min(k, (n + 1) // 2))
    return float(v[k - 1]), float(v[n - k])


def _boot_medians(values, resamples: int, rng):
    import numpy as np
    idx = rng.integers(0, len(values), size=(resamples, len(values)))
    return np.median(np.asarray(values, dtype=float)[idx], axis=1)


def ratio(a: Sequence[float], b: Sequence[float], *, paired: bool, confidence: float = CONFIDENCE,
          resamples: int = RESAMPLES, seed: int = 0) -> Ratio:
    """a over b (rates: > 1 means a is faster) with a percentile-bootstrap interval (paired: widened to
    the per-round ratios' median_interval where that is wider; see the module's docstring).
    paired: True where a_i and b_i are one round's samples (interleaved), False for two separate runs;
    the caller says which (a default that paired any two lists of one length invited pairing two
    separate runs: statistics audit, session 24)."""
    import numpy as np
    a, b, paired = _checked(a, b, paired)
    if paired:
        est, low, high = median_ci([x / y for x, y in zip(a, b)], confidence=confidence, resamples=resamples, seed=seed)
    else:
        est, boot = _bootstrap(a, b, paired, resamples, np.random.default_rng(seed))
        boot = np.sort(boot)
        low, high = _quantile(boot, _alpha(confidence)), _quantile(boot, 1 - _alpha(confidence))
    return Ratio(est, low, high, len(a), len(b), "paired" if paired else "unpaired", confidence)


def median_ci(values: Sequence[float], *, confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
              seed: int = 0) -> tuple[float, float, float]:
    """(median, low, high) of per-round values (ratios, or differences that may be negative): the
    percentile-bootstrap interval of the median, widened to median_interval where that is wider. A
    paired ratio's interval (ratio) and any per-round quantity's (benchmarks/decision_cost.py)."""
    import numpy as np
    v = [_number(x) for x in values]
    if not v or not all(math.isfinite(x) for x in v):
        raise ValueError("median_ci needs finite values")
    boot = np.sort(_boot_medians(v, resamples, np.random.default_rng(seed)))
    alpha = _alpha(confidence)
    lo, hi = median_interval(v, confidence)
    return statistics.median(v), min(_quantile(boot, alpha), lo), max(_quantile(boot, 1 - alpha), hi)


def _alpha(confidence: float) -> float:
    """Each tail's share, rounded so that 0.95 gives 0.025 exactly (1 - 0.95 is 0.05000000000000004,
    which moved the low quantile one replicate up)."""
    return round((1 - confidence) / 2, 12)


def _checked(a, b, paired: bool) -> tuple[list[float], list[float], bool]:
    """a and b as floats, and whether they pair; ValueError for an empty side, a sample that is not
    positive and finite, or a pairing of unequal counts."""
    a, b = [_number(x) for x in a], [_number(x) for x in b]
    if not a or not b:
        raise ValueError("ratio needs at least one sample on each side")
    if any(x <= 0 or not math.isfinite(x) for x in a + b):
        raise ValueError("ratio needs positive, finite samples")
    if not isinstance(paired, bool):
        raise TypeError(f"paired must be True or False, not {paired!r}")
    if paired and len(a) != len(b):
        raise ValueError(f"paired ratio needs as many samples on each side ({len(a)} vs {len(b)})")
    return a, b, paired


def _number(x) -> float:
    """x as a float; ValueError for what is not a real number (a bool, a string, None)."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise ValueError(f"ratio needs numbers as samples, not {x!r}")
    return float(x)


def estimate(a: Sequence[float], b: Sequence[float], *, paired: bool) -> float:
    """The estimate ratio() reports, without its interval: the median of the per-round ratios
    (paired), else median(a)/median(b)."""
    return _estimate(*_checked(a, b, paired))


def _estimate(a, b, paired: bool) -> float:
    return statistics.median([x / y for x, y in zip(a, b)]) if paired else statistics.median(a) / statistics.median(b)


def _bootstrap(a, b, paired: bool, resamples: int, rng):
    """The ratio's estimate and its bootstrap replicates (unsorted)."""
    if paired:
        per_round = [x / y for x, y in zip(a, b)]
        return _estimate(a, b, True), _boot_medians(per_round, resamples, rng)
    return _estimate(a, b, False), _boot_medians(a, resamples, rng) / _boot_medians(b, resamples, rng)


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
    alpha = _alpha(confidence)
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
    """'1.02x [0.99-1.05]' (the estimate and its interval, bounds())."""
    return f"{r.estimate:.2f}x [{bounds(r.low, r.high)}]"


def bounds(low: float, high: float) -> str:
    """An interval as '0.93-1.05': rounded outwards, to 2 decimals, or more where 2 would put a bound
    on 1 - NOISE, 1.0 or 1 + NOISE that it is not on. Rounded to nearest, a high bound of 0.9973
    printed "0.98x [0.93-1.00] slower" and a low one of 0.9497 "[0.95-1.03] undecided" beside
    verdicts that their printed bounds contradicted (statistics audit, session 24)."""
    def text(x: float, up: bool) -> str:
        for d in (2, 3, 4, 5, 6):
            f = 10 ** d
            r = (math.ceil(x * f - 1e-9) if up else math.floor(x * f + 1e-9)) / f
            if not any(r == t and x != t for t in (1 - NOISE, 1.0, 1 + NOISE)):
                return f"{r:.{d}f}"
        return repr(x)
    return f"{text(low, False)}-{text(high, True)}"


def enough(samples: Sequence[float]) -> bool:
    return len(samples) >= MIN_SAMPLES


__all__ = ["MIN_SAMPLES", "CONFIDENCE", "NOISE", "Ratio", "rotation", "interleave", "median", "summary", "ratio",
           "estimate", "median_ci", "geomean_ratio", "verdict", "goal", "describe", "bounds", "median_interval", "enough", "too_few", "decided", "TOO_FEW"]
