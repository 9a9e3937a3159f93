#!/usr/bin/env python3
"""Judges an `accio tune --evaluate` JSON again from the samples and rounds it keeps, with the
evaluation's current rules (accio.tune.evaluate.judge/summarize), and prints its table. For results
measured before a change of the rules: the samples stay what was measured, only the verdicts are
recomputed.

    python benchmarks/evaluate_rejudge.py IN.json [OUT.json] > OUT.txt
"""
import importlib
import json
import sys

evaluate = importlib.import_module("accio.tune.evaluate")  # accio.tune.evaluate is also a function's name


def rejudge(result: dict) -> dict:
    for c in result["cells"]:
        evaluate.judge(c, c["samples"], c["rounds"])
    again = evaluate.summarize(result["cells"], result["contenders"], result.get("elapsed_s", 0.0))
    result.update({k: again[k] for k in ("summary", "verdict", "rule")})
    if "device" in result:
        result["device"] = rejudge(result["device"])
    return result


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        result = rejudge(json.load(f))
    result["rejudged"] = "benchmarks/evaluate_rejudge.py"
    print(evaluate.render(result))
    if len(argv) == 3:
        with open(argv[2], "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
