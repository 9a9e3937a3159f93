"""`accio tune --evaluate`: how close `auto` comes to the best fixed mechanism of every cell, with
the project's statistics rule (accio.stats, docs/methodology.md).

A grid of cells (file size x transfer size x hot/cold x 1 and N threads x read/write). In every cell
`auto` and every fixed mechanism (default settings) are measured in the same run: one untimed
warm-up phase each, then `reps` rounds (at least MIN_SAMPLES for a result) in a rotating order
(accio.stats.rotation, starting at the cell's index); within a round their phases take turns
(Bench.sample_together), so that the samples of a round are taken close together. The
oracle of a cell is the fixed mechanism with the best median; a contender's ratio to it is the
median of their per-round ratios (paired: the estimate the intervals are about). Any contender's
but the oracle's can exceed 1: auto's, and a fixed mechanism's whose median is below the oracle's
while its per-round ratios are not (a 2-round cell can show it). auto is compared with the oracle and with every fixed mechanism
by the paired ratio of the rounds they share (_pair; unpaired, and said so, only below MIN_SAMPLES
common rounds) and its 95% bootstrap interval: faster or slower when the interval
excludes 1.0, within noise when it contains 1.0 and lies inside +-5%, else undecided; with fewer
than MIN_SAMPLES rounds, too few samples (stats.verdict). A comparison with the oracle that is not
settled (stats.settled: undecided, too few, or a difference seen in fewer than CONFIRM_SAMPLES
rounds) gets more rounds (auto and the fixed mechanisms within 10% of the oracle, EXTRA_ROUNDS at a
time) up to max_reps samples; what is still undecided then is reported so.

Other profiles (--vs-profile) join as more auto contenders, named auto[label] (auto[built-in] for
the built-in model): measured in the same rounds, they are not fixed mechanisms (never the oracle),
and auto is compared with each by the same paired ratio, cell by cell and over the grid.

A cell meets the goal when auto's median ratio to the oracle (the median of the paired per-round
ratios, the estimate the interval is about) is at least GOAL (0.9) or the two are within noise; a
cell with fewer than MIN_SAMPLES rounds meets nothing (too few samples). The summary compares auto
with every fixed mechanism over the grid: the geomean of the per-cell paired ratios auto/m, with an
interval from resampling every cell; "auto >= every fixed mechanism" is that geomean's goal 1.0
(stats.goal: the median decides) against each of them. Until the twenty-fourth session a cell with
three rounds could be "fine", and that verdict was a ratio of the geomeans of ratios of medians,
which printed "no" beside a paired auto/posix of 1.03 (statistics audit, session 24).
"""
from __future__ import annotations

import math
import time

from .. import stats
from .._system import interrupted_status
from ..bench.spec import host_mechanisms
from .measure import MiB, Bench, fmt

KiB = 1 << 10
FILE_SIZES = (8 * MiB, 128 * MiB)
TRANSFERS = (4 * KiB, 256 * KiB, 8 * MiB)
SAMPLE_SECONDS = 0.05  # timed transfer per sample: short phases are repeated (see Bench.sample)
MAX_SAMPLE_SECONDS = 0.25  # a contender that moves the cell's file in longer than this moves a part of it
MAX_SAMPLES = 15       # the cap of the extra rounds for a cell not settled (--max-reps)
EXTRA_ROUNDS = 4       # rounds added at a time to a cell not settled
WARMUP_BYTES = 16 * MiB  # each contender's untimed phase before a cell's first round
GOAL = 0.9             # a cell is fine when auto reaches this fraction of the oracle, or is within noise
NEAR = 0.9             # fixed mechanisms at least this close to the oracle join the extra rounds


def is_auto(m: str) -> bool:
    """auto, or auto with another profile (auto[label]): not a fixed mechanism."""
    return m == "auto" or m.startswith("auto[")


def warmup_bytes(file_size: int, transfer: int, threads: int) -> int:
    """What a contender's untimed warm-up phase moves: one request per thread at least, else at most
    WARMUP_BYTES of the cell's file."""
    return min(file_size, max(transfer * threads, WARMUP_BYTES))


OPS = ("read", "write")
CACHES = ("hot", "cold")


def grid(file_sizes, transfers, threads: int, cold_reads: bool, ops=OPS, caches=CACHES) -> list[dict]:
    cells = []
    for op in ops:
        for cache in caches:
            if op == "read" and cache == "cold" and not cold_reads:
                continue
            for t in sorted({1, threads}):
                for fs in file_sizes:
                    for x in transfers:
                        if x * t <= fs:
                            cells.append({"op": op, "cache": cache, "threads": t, "file_size": fs, "transfer": x})
    return cells


def geomean(xs) -> float:
    xs = list(xs)
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def _pair(rounds: dict, samples: dict, a: str, b: str) -> tuple[list, list, bool]:
    """a's and b's samples, paired on the rounds both were measured in (the extra rounds of an
    undecided cell take auto and the fixed mechanisms near the oracle only: auto and any other then
    share the first rounds, not all); unpaired, every sample of each, only where they share fewer
    than stats.MIN_SAMPLES rounds and not all of them (a cell measured with --reps below it). Until
    session 26 two contenders were paired only when their round lists were equal, so every
    comparison with a contender left out of the extra rounds was unpaired, and a clear 1.3x lead
    on a drifting machine came out undecided."""
    ra, rb = rounds[a], rounds[b]
    if ra == rb:
        return samples[a], samples[b], True
    at = {r: x for r, x in zip(rb, samples[b])}
    common = [(x, at[r]) for r, x in zip(ra, samples[a]) if r in at]
    if len(common) < stats.MIN_SAMPLES:
        return samples[a], samples[b], False
    return [x for x, _ in common], [y for _, y in common], True


def _estimate(rounds: dict, samples: dict, a: str, b: str) -> float:
    xa, xb, paired = _pair(rounds, samples, a, b)
    return stats.estimate(xa, xb, paired=paired)


def _compare(rounds: dict, samples: dict, a: str, b: str) -> dict:
    xa, xb, paired = _pair(rounds, samples, a, b)
    r = stats.ratio(xa, xb, paired=paired)
    return {"estimate": round(r.estimate, 4), "low": round(r.low, 4), "high": round(r.high, 4),
            "method": r.method, "n": min(len(xa), len(xb)), "verdict": stats.verdict(r)}  # n: common rounds


def measure_cell(sample_round, contenders, reps: int, max_reps: int, note=None, warmup=None,
                 first: int = 0) -> tuple[dict, dict]:
    """Samples of every contender, `reps` rounds, plus extra rounds while auto vs the oracle is not
    settled (stats.settled; up to max_reps). sample_round(names) measures one round: the contenders named, in
    that (rotating) order, -> {name: MiB/s}. warmup(names), if given, runs first, untimed and not
    kept: without it the first phase of every cell went to the same contender (round 0 of the
    rotation) and ran at 0.91-0.93 of its median. `first` offsets the rotation (the cell's index), so
    that no contender always leads a round. Returns (samples, rounds), rounds naming for each
    contender the rounds it was measured in (so that pairs are paired)."""
    samples = {m: [] for m in contenders}
    rounds = {m: [] for m in contenders}
    fixed = [m for m in contenders if not is_auto(m)]
    autos = [m for m in contenders if is_auto(m)]  # auto first; other profiles stay paired with it
    n_round = 0

    def more(names, k):
        nonlocal n_round
        for r in range(n_round, n_round + k):
            order = stats.rotation(names, r + first)
            got = sample_round(order)
            for m in order:
                samples[m].append(got[m])
                rounds[m].append(r)
                if note:
                    note(m, r, got[m])
        n_round += k

    if warmup:
        warmup(stats.rotation(contenders, first))
    more(contenders, reps)
    while "auto" in samples and fixed and len(samples["auto"]) < max_reps:
        med = {m: stats.median(samples[m]) for m in fixed}
        oracle = max(med, key=med.get)
        c = _compare(rounds, samples, "auto", oracle)
        if stats.settled(c["verdict"], c["n"]):  # n: the rounds auto and the oracle share
            break
        near = [*autos, *(m for m in fixed if med[m] >= NEAR * med[oracle])]
        more(near, min(EXTRA_ROUNDS, max_reps - len(samples["auto"])))
    return samples, rounds


def judge(cell: dict, samples: dict, rounds: dict) -> None:
    """Adds to the cell: medians, the oracle, ratios to it, auto's comparisons, and whether it is fine."""
    med = {m: stats.median(v) for m, v in samples.items()}
    fixed = [m for m in samples if not is_auto(m)]
    oracle = max(fixed, key=med.get) if fixed else max(med, key=med.get)
    cell.update({"samples": {m: [round(x, 1) for x in v] for m, v in samples.items()},
                 "median": {m: round(v, 1) for m, v in med.items()},
                 "oracle": oracle,
                 "ratio": {m: round(_estimate(rounds, samples, m, oracle), 4) for m in samples}})
    if "auto" in samples:
        cell["auto_vs"] = {m: _compare(rounds, samples, "auto", m) for m in samples if m != "auto"}
        vs = cell["auto_vs"].get(oracle)
        cell["verdict"] = vs["verdict"] if vs else "undecided"
        # auto's ratio to the oracle is the median of the paired per-round ratios, the estimate its
        # interval is about (the project's rule), not the ratio of the two medians: on a machine whose
        # speed moves between rounds the medians can come from different rounds (a median ratio of
        # 0.82 printed beside a paired interval of [0.88-0.98], sixth-session model evaluation).
        cell["auto_ratio"] = vs["estimate"] if vs else cell["ratio"]["auto"]
        cell["fine"] = not cell["verdict"].startswith(stats.TOO_FEW) and (
            cell["auto_ratio"] >= GOAL or cell["verdict"] in ("within noise", "faster"))
    cell["rounds"] = {m: r for m, r in rounds.items()}


def run(bench: Bench, cells: list[dict], reps: int, contenders=None, progress=None, max_reps: int = MAX_SAMPLES,
        device: int = -1, profiles: dict | None = None) -> dict:
    """contenders: auto and every host mechanism (the engine's registry) unless given; device >= 0:
    the buffers are in that GPU's memory (contenders: auto and the device mechanisms). profiles:
    {label: profile setting} of more auto contenders, auto[label] (a profile file, or "off")."""
    profiles = profiles or {}
    contenders = (*(contenders or ("auto", *host_mechanisms())), *(f"auto[{k}]" for k in profiles))
    settings = {f"auto[{k}]": {"mechanism": "auto", "profile": v} for k, v in profiles.items()}
    max_reps = max(max_reps, reps)
    total = len(cells) * reps * len(contenders)
    done = 0
    t0 = time.monotonic()
    last: dict = {}  # (op, cache, threads, transfer, contender) -> its latest MiB/s, over file sizes
    finished: list[dict] = []  # the cells measured to the end
    interrupted = 0
    try:
        for index, c in enumerate(cells):
            used: set = set()

            def sample_round(order: list[str], c=c, used=used, warm: bool = False) -> dict[str, float]:
                # The contenders' phases take turns (Bench.sample_together), so a round's pairs share the
                # machine's moment. A slow contender (direct or uring at 4 KiB: 50-100 MiB/s) moves what it
                # moves in about MAX_SAMPLE_SECONDS, a part of the cell's file, rather than seconds per
                # sample: its rate is its per-request cost, the same over 16 MiB as over 128 MiB.
                entries = []
                for m in order:
                    k = (c["op"], c["cache"], c["threads"], c["transfer"], m)
                    nbytes = c["file_size"]
                    if k in last:
                        nbytes = min(nbytes, max(c["transfer"] * c["threads"], int(last[k] * MiB * MAX_SAMPLE_SECONDS)))
                    if warm:  # the warm-up pass: one short phase each (threads, rings, the planner's first look)
                        nbytes = min(nbytes, warmup_bytes(c["file_size"], c["transfer"], c["threads"]))
                    # auto's plans are those of its timed phases (the warm-up's are not counted)
                    entries.append((settings.get(m, {"mechanism": m}), nbytes, used if m == "auto" and not warm else None))
                got = bench.sample_together(entries, c["op"], c["cache"] == "cold", c["threads"], c["transfer"],
                                            min_seconds=0 if warm else SAMPLE_SECONDS, device=device,
                                            file_size=c["file_size"])
                if not warm:
                    for m, v in zip(order, got):
                        last[(c["op"], c["cache"], c["threads"], c["transfer"], m)] = v
                return dict(zip(order, got))

            def note(m: str, _round: int, _value: float, c=c) -> None:
                nonlocal done
                done += 1
                if progress:
                    progress(("" if device < 0 else f"cuda:{device} ") + f"{c['op']} {c['cache']} {c['threads']}t {fmt(c['file_size'])}/{fmt(c['transfer'])} {m}",
                             min(1.0, done / total))

            samples, rounds = measure_cell(sample_round, contenders, reps, max_reps, note,
                                           warmup=lambda order, f=sample_round: f(order, warm=True), first=index)
            judge(c, samples, rounds)
            c["auto_plans"] = sorted(used)
            finished.append(c)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: the cells finished so far are the result
        interrupted = interrupted_status(e)
    result = summarize(finished, contenders, time.monotonic() - t0)
    if interrupted:
        result["interrupted"] = interrupted  # the exit status (130, 143) of the interruption
    return result


def summarize(cells: list[dict], contenders, elapsed: float) -> dict:
    per = {}
    for m in contenders if cells else ():  # no cell (interrupted in the first): no summary
        ratios = [c["ratio"][m] for c in cells]
        per[m] = {"geomean": round(geomean(ratios), 4), "worst": round(min(ratios), 4),
                  "cells_within_10pct": sum(r >= GOAL for r in ratios)}
    fixed = [m for m in contenders if not is_auto(m)]
    best_fixed = max(fixed, key=lambda m: per[m]["geomean"]) if fixed and per else None
    verdict = {}
    if "auto" in per and best_fixed:
        # auto over each fixed mechanism (and other profile) across the grid: the geomean of the
        # per-cell ratios.
        vs = {}
        for m in (m for m in contenders if m != "auto"):
            r = stats.geomean_ratio([_pair(c["rounds"], c["samples"], "auto", m) for c in cells])
            vs[m] = {"estimate": round(r.estimate, 4), "low": round(r.low, 4), "high": round(r.high, 4),
                     "verdict": stats.verdict(r), "goal_1": stats.goal(r, 1.0)}
        verdict = {
            "auto_geomean_vs": vs,
            "auto_at_least_every_fixed": all(vs[m]["goal_1"] == "met" for m in fixed),
            "cells_fine": sum(c["fine"] for c in cells),
            "cells_slower": sum(c["verdict"] == "slower" for c in cells),
            "cells_undecided": sum(_undecided(c) for c in cells),
            "cells_too_few": sum(c["verdict"].startswith(stats.TOO_FEW) for c in cells),
            "auto_fine_every_cell": all(c["fine"] for c in cells),
            "best_fixed": best_fixed,
            "best_fixed_worst": per[best_fixed]["worst"],
        }
    return {"cells": cells, "contenders": list(contenders), "summary": per, "verdict": verdict,
            "rule": {"min_samples": stats.MIN_SAMPLES, "confidence": stats.CONFIDENCE, "noise": stats.NOISE,
                     "goal": GOAL},
            "elapsed_s": round(elapsed, 1)}


def _undecided(c: dict) -> bool:
    """Undecided: not decided with enough samples (a cell of too few samples is counted apart)."""
    return not stats.decided(c["verdict"]) and not c["verdict"].startswith(stats.TOO_FEW)


def _unpaired(c: dict, m: str) -> str:
    """' (unpaired)' where auto's comparison with m in cell c is unpaired (stats.ratio's ratio of
    medians: fewer than stats.MIN_SAMPLES common rounds), else ''."""
    return " (unpaired)" if c["auto_vs"][m].get("method") == "unpaired" else ""


def _cell_name(c: dict) -> str:
    return f"{c['op']} {c['cache']} {c['threads']}t {fmt(c['file_size'])}/{fmt(c['transfer'])}"


def render(result: dict) -> str:
    cont = result["contenders"]
    has_auto = "auto" in cont
    head = ("op", "cache", "thr", "file", "xfer", *cont) + (("auto/oracle [95% CI]", "verdict", "auto plan") if has_auto else ())
    rows = [head]
    for c in result["cells"]:
        row = (c["op"], c["cache"], str(c["threads"]), fmt(c["file_size"]), fmt(c["transfer"]),
               *[f"{c['median'][m]:.0f}" + ("*" if m == c["oracle"] else "") for m in cont])
        if has_auto:
            vs = c["auto_vs"][c["oracle"]]
            row += (f"{c['auto_ratio']:.2f} [{stats.bounds(vs['low'], vs['high'])}]",
                    c["verdict"] + ("" if c["fine"] else " !"), ", ".join(c.get("auto_plans", [])))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    ncol = 5 + len(cont)
    out = ["median MiB/s per cell (* = the oracle: the best fixed mechanism); auto/oracle: the median of the "
           "per-round ratios and its 95% bootstrap interval; ! = auto below "
           f"{GOAL:.0%} of the oracle and not within noise"]
    out += ["  ".join(v.rjust(w) if 4 < i < ncol + 1 else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]
    if has_auto:
        diff = [c for c in result["cells"] if c["verdict"] in ("slower", "faster")]
        out.append("")
        out.append(f"cells where auto differs significantly from the oracle ({len(diff)}):" if diff else
                   "no cell where auto differs significantly from the oracle")
        for c in diff:
            vs = c["auto_vs"][c["oracle"]]
            out.append(f"  {_cell_name(c):28s} auto {c['verdict']} than {c['oracle']} by "
                       f"{abs(1 - vs['estimate']):.1%} [{stats.bounds(vs['low'], vs['high'])}], n={vs['n']}"
                       + _unpaired(c, c["oracle"]))
        und = [c for c in result["cells"] if _undecided(c)]
        if und:
            out.append(f"undecided after up to {max(c['auto_vs'][c['oracle']]['n'] for c in und)} samples "
                       f"({len(und)}): " + "; ".join(f"{_cell_name(c)} {c['auto_ratio']:.2f}" for c in und))
        for other in (m for m in cont if is_auto(m) and m != "auto"):  # --vs-profile
            sig = [c for c in result["cells"] if c["auto_vs"][other]["verdict"] in ("slower", "faster")]
            out.append(f"cells where auto differs significantly from {other} ({len(sig)})" + (":" if sig else ""))
            for c in sig:
                vs = c["auto_vs"][other]
                out.append(f"  {_cell_name(c):28s} auto {vs['verdict']} by {abs(1 - vs['estimate']):.1%} "
                           f"[{stats.bounds(vs['low'], vs['high'])}], n={vs['n']}{_unpaired(c, other)} "
                           f"({', '.join(c.get('auto_plans', []))})")
        unpaired = sorted({m for c in result["cells"] for m in c["auto_vs"] if _unpaired(c, m)})
        if unpaired:
            out.append(f"unpaired comparisons (auto and these shared fewer than {stats.MIN_SAMPLES} rounds in some "
                       f"cells: ratio of medians, each side resampled on its own): {', '.join(unpaired)}")
    out.append("")
    out.append("ratio to the oracle per contender (geometric mean over the cells):")
    for m, s in result["summary"].items():
        out.append(f"  {m:9s} geomean {s['geomean']:.3f}  worst {s['worst']:.3f}  "
                   f"within {1 - GOAL:.0%}: {s['cells_within_10pct']}/{len(result['cells'])} cells")
    v = result.get("verdict")
    if v:
        out.append("auto over each fixed mechanism and other profile (geomean of the per-cell ratios, 95% interval):")
        for m, g in v["auto_geomean_vs"].items():
            out.append(f"  auto/{m:9s} {g['estimate']:.3f} [{g['low']:.3f}-{g['high']:.3f}]  {g['verdict']}")
        out.append(f"auto >= every fixed mechanism (each geomean auto/m >= 1): "
                   f"{'yes' if v['auto_at_least_every_fixed'] else 'no'}; cells within {1 - GOAL:.0%} of the oracle "
                   f"or within noise: {v['cells_fine']}/{len(result['cells'])}"
                   + (f" ({v['cells_too_few']} with too few samples: no verdict)" if v.get("cells_too_few") else ""))
    if "decision_ns" in result:
        d = result["decision_ns"]
        out.append("auto decision cost: " + ", ".join(f"{k} {v:.0f} ns" for k, v in d.items()))
    return "\n".join(out)
