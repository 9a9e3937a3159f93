"""What the tuner's two noise guards decide from one profile's search (issue 19).

The search's own samples (the profile's "measurements") are taken one plan after the other. Until
the thirteenth session a measured winner replaced the built-in model's plan when an unpaired
bootstrap of those samples, three or more of each, put winner / built-in above 1.0. Now the guard
measures the two side by side in paired rounds (Search.guard; the profile records the result as
measured.guard or measured.kept_builtin). For every cell whose search winner is not the built-in
plan this prints both decisions: the old rule applied to the recorded search samples, and the
paired guard's ratio, interval and rounds.

    python benchmarks/guard_compare.py results/tune/profile_ext4_vda_s13.json [--json OUT]

The old rule's verdict here uses the search's final samples; in a run of the old tuner the polish
step would have had the guard's time too, so its sample counts would differ somewhat.
"""
from __future__ import annotations

import argparse
import json
import sys

from accio import stats
from accio.tune.measure import Plan
from accio.tune.search import TIE, builtin_plan, simplicity


def compare(profile: dict, where: str | None) -> list[dict]:
    plans = [Plan.from_json(x) for x in profile["plans"]]
    samples: dict = {}
    for m in profile["measurements"]:
        samples.setdefault((m["op"], m["cache"], m["threads"], m["size"]), {})[plans[m["plan"]]] = m["mibps"]
    guarded = {}
    for op, by_conc in profile["decisions"].items():
        for conc, by_cache in by_conc.items():
            for cache, cells in by_cache.items():
                for c in cells:
                    for m in [c.get("measured"), *c.get("also_measured", [])]:
                        if m:
                            guarded[(op, cache, conc, m["size"])] = m
    out = []
    for (op, cache, threads, size), got in sorted(samples.items()):
        conc = "1" if threads == 1 else "N"
        med = {p: stats.median(x) for p, x in got.items()}
        best = max(med.values())

        def key(pm):  # Search.ranking: ties within TIE go to the simpler plan
            tied = pm[1] >= best * (1 - TIE)
            return (not tied, simplicity(pm[0].mechanism) if tied else 0, -pm[1])
        winner = min(med.items(), key=key)[0]
        builtin = builtin_plan(op, conc, size, cache=cache, where=where)
        if winner == builtin:
            continue
        a, b = got.get(winner, []), got.get(builtin, [])
        old = len(a) >= 3 and len(b) >= 3 and stats.ratio(a, b, paired=False).low > 1.0
        m = guarded.get((op, cache, conc, size), {})
        info = m.get("guard") or m.get("kept_builtin") or {}
        out.append({"op": op, "cache": cache, "threads": threads, "size": size, "winner": winner.label,
                    "builtin": builtin.label, "old_rule_takes_winner": old, "guard_takes_winner": "guard" in m,
                    "guard_vs_builtin": info.get("vs_builtin"), "guard_rounds": info.get("rounds")})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--where", default="/var/tmp", help="a path on the profile's device (its built-in model)")
    ap.add_argument("--json", metavar="OUT")
    a = ap.parse_args(argv)
    with open(a.profile) as f:
        rows = compare(json.load(f), a.where)
    for r in rows:
        g = r["guard_vs_builtin"]
        paired = f"{g[0]:.3f} [{g[1]:.3f}-{g[2]:.3f}] in {r['guard_rounds']} rounds" if g else "not guarded"
        print(f"{r['op']:5s} {r['cache']:4s} {r['threads']}t {r['size'] >> 10:>6d}KiB  {r['winner']:24s} vs {r['builtin']:20s}"
              f"  old rule: {'takes it' if r['old_rule_takes_winner'] else 'keeps built-in':14s}"
              f"  paired guard: {'takes it' if r['guard_takes_winner'] else 'keeps built-in':14s} {paired}")
    old_only = sum(r["old_rule_takes_winner"] and not r["guard_takes_winner"] for r in rows)
    new_only = sum(r["guard_takes_winner"] and not r["old_rule_takes_winner"] for r in rows)
    print(f"{len(rows)} cells whose search winner is not the built-in plan: the old rule takes "
          f"{sum(r['old_rule_takes_winner'] for r in rows)}, the paired guard {sum(r['guard_takes_winner'] for r in rows)}; "
          f"{old_only} only by the old rule, {new_only} only by the guard")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"schema": "accio.guard-compare/1", "profile": a.profile, "cells": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
