"""`accio tune --evaluate`: how close `auto` comes to the best mechanism of every cell.

A grid of cells (file size x transfer size x hot/cold x 1 and N threads x read/write). In every cell
`auto` and every fixed mechanism (with default settings) are measured in the same run, interleaved
in a rotating order (accio.stats.interleave), `reps` samples each. The oracle of a cell is its best median; a contender's
ratio is its median over the oracle's (1.0 = as fast as the best), its regret 1 - ratio. The
verdict compares auto's worst and geometric-mean ratio with those of the best single fixed
mechanism (the one with the highest geometric mean).
"""
from __future__ import annotations

import math
import time

from ..bench.spec import host_mechanisms
from ..stats import interleave, median
from .measure import MiB, Bench, fmt

KiB = 1 << 10
FILE_SIZES = (8 * MiB, 128 * MiB)
TRANSFERS = (4 * KiB, 256 * KiB, 8 * MiB)
SAMPLE_SECONDS = 0.05  # timed transfer per sample: short phases are repeated (see Bench.sample)


def grid(file_sizes, transfers, threads: int, cold_reads: bool) -> list[dict]:
    cells = []
    for op in ("read", "write"):
        for cache in ("hot", "cold"):
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


def run(bench: Bench, cells: list[dict], reps: int, contenders=None, progress=None) -> dict:
    """contenders: auto and every host mechanism (the engine's registry) unless given."""
    contenders = contenders or ("auto", *host_mechanisms())
    total = len(cells) * reps * len(contenders)
    done = 0
    t0 = time.monotonic()
    for c in cells:
        used: set = set()

        def sample(m: str, c=c, used=used) -> float:
            return bench.sample({"mechanism": m}, c["op"], c["cache"] == "cold", c["threads"], c["transfer"],
                                c["file_size"], used if m == "auto" else None, min_seconds=SAMPLE_SECONDS)

        def note(m: str, _round: int, _value: float, c=c) -> None:
            nonlocal done
            done += 1
            if progress:
                progress(f"{c['op']} {c['cache']} {c['threads']}t {fmt(c['file_size'])}/{fmt(c['transfer'])} {m}",
                         done / total)

        samples = interleave({m: (lambda m=m: sample(m)) for m in contenders}, reps, on_sample=note)
        med = {m: median(v) for m, v in samples.items()}
        oracle = max(med.values())
        c.update({"samples": {m: [round(x, 1) for x in v] for m, v in samples.items()},
                  "median": {m: round(v, 1) for m, v in med.items()},
                  "oracle": max(med, key=med.get), "ratio": {m: round(v / oracle, 4) for m, v in med.items()},
                  "auto_plans": sorted(used)})
    return summarize(cells, contenders, time.monotonic() - t0)


def summarize(cells: list[dict], contenders, elapsed: float) -> dict:
    per = {}
    for m in contenders:
        ratios = [c["ratio"][m] for c in cells]
        per[m] = {"geomean": round(geomean(ratios), 4), "worst": round(min(ratios), 4),
                  "cells_within_10pct": sum(r >= 0.9 for r in ratios)}
    fixed = [m for m in contenders if m != "auto"]
    best_fixed = max(fixed, key=lambda m: per[m]["geomean"]) if fixed else None
    verdict = {}
    if "auto" in per and best_fixed:
        verdict = {
            "auto_within_10pct_every_cell": per["auto"]["worst"] >= 0.9,
            "auto_within_5pct_geomean": per["auto"]["geomean"] >= 0.95,
            "best_fixed": best_fixed,
            "best_fixed_worst": per[best_fixed]["worst"],
            "best_fixed_over_20pct_off_somewhere": per[best_fixed]["worst"] < 0.8,
        }
    return {"cells": cells, "contenders": list(contenders), "summary": per, "verdict": verdict,
            "elapsed_s": round(elapsed, 1)}


def render(result: dict) -> str:
    cont = result["contenders"]
    rows = [("op", "cache", "thr", "file", "xfer", *cont, "auto/best", "auto plan")]
    for c in result["cells"]:
        rows.append((c["op"], c["cache"], str(c["threads"]), fmt(c["file_size"]), fmt(c["transfer"]),
                     *[f"{c['median'][m]:.0f}" + ("*" if m == c["oracle"] else "") for m in cont],
                     f"{c['ratio'].get('auto', float('nan')):.2f}", ", ".join(c.get("auto_plans", []))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = ["median MiB/s per cell (* = the cell's best, the oracle)"]
    out += ["  ".join(v.rjust(w) if 4 < i < len(r) - 1 else v.ljust(w) for i, (v, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]
    out.append("")
    out.append("ratio to the oracle (1.00 = the best in every cell):")
    for m, s in result["summary"].items():
        out.append(f"  {m:9s} geomean {s['geomean']:.3f}  worst {s['worst']:.3f}  "
                   f"within 10%: {s['cells_within_10pct']}/{len(result['cells'])} cells")
    v = result.get("verdict")
    if v:
        out.append(f"best single fixed mechanism: {v['best_fixed']} (worst cell {v['best_fixed_worst']:.3f}, "
                   f"{'more' if v['best_fixed_over_20pct_off_somewhere'] else 'not more'} than 20% off somewhere)")
        out.append(f"auto within 10% in every cell: {'yes' if v['auto_within_10pct_every_cell'] else 'no'}; "
                   f"within 5% on the geometric mean: {'yes' if v['auto_within_5pct_geomean'] else 'no'}")
    if "decision_ns" in result:
        d = result["decision_ns"]
        out.append("auto decision cost: " + ", ".join(f"{k} {v:.0f} ns" for k, v in d.items()))
    return "\n".join(out)
