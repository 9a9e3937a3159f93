#!/usr/bin/env python3
"""Instructions per offload round trip, counted by callgrind: deterministic evidence for issue 22's
"latency must not regress", which timings on a loaded machine cannot settle. For each build and
each metric of accio-offload-bench (tests 1-4, 1-byte read and write), benchmarks/offload_instr.c
runs the metric N1 and N2 times; the difference of the two counts divided by N2 - N1 is the work of
one round trip, setup and teardown cancelled. Two sides, each under callgrind alone while the other
runs at full speed:

- host: the program's instructions in the metric's timed part (callgrind's collection toggled
  around it), without Channel::wait_progress (waiting for the worker);
- worker: every instruction of the worker process (started through a wrapper that runs it under
  callgrind), without the polling and sleeping lines of wait_above (channel.hpp).

Waiting is left out on both sides because its length is the other side's speed, not this side's
work; what remains is the same from run to run (--repeat shows it). Both sides spin
(ACCIO_OFFLOAD_SPIN_US=forever), so no futex wake-up depends on timing.

    # builds with -g (code as without: -g changes no generated code), e.g. Release:
    cmake -S DIR -B DIR/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-g -DCMAKE_CXX_FLAGS=-g
    ninja -C DIR/build accio-offload-bench accio-offload-worker
    python benchmarks/offload_instr.py --build base=/tmp/offload-base/build --build new=build/rel \\
        [--n1 1000 --n2 3000] [--json FILE]

A build directory holds libaccio_offload.so and accio-offload-worker (CMake's build dir does).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

METRICS = ["test1", "test2", "test3", "test4", "read_1b", "write_1b"]
HERE = Path(__file__).resolve().parent
WHOLE_WAIT = ("Channel::wait_progress(", "wait_above<")  # functions that only wait


def waiting_addresses(obj: str, addrs: set[int]) -> set[int]:
    """Those of these addresses of obj whose inline chain passes through wait_above (addr2line -i)."""
    if not addrs:
        return set()
    order = sorted(addrs)
    r = subprocess.run(["addr2line", "-f", "-i", "-a", "-e", obj] + [hex(a) for a in order],
                       capture_output=True, text=True, check=True)
    waiting, cur = set(), None
    for line in r.stdout.splitlines():
        if line.startswith("0x"):
            cur = int(line, 16)
        elif cur is not None and "wait_above" in line:
            waiting.add(cur)
    return waiting


def count(out: Path) -> tuple[int, int]:
    """(all instructions, those spent waiting) of a callgrind output written with --dump-instr=yes
    --compress-pos=no --compress-strings=no: the calls of wait_progress (the host waiting for a
    result or for room) and every instruction whose inline chain passes through wait_above
    (channel.hpp: polling and sleeping on a counter), with what those instructions call."""
    total = 0
    ob = fn = target = ""
    in_call = False
    self_cost: dict[tuple[str, int], int] = {}   # (object, address) -> instructions there
    call_cost: dict[tuple[str, int], int] = {}   # (object, address) -> instructions of its calls
    whole = 0
    for raw in out.read_text(errors="replace").splitlines():
        if raw.startswith(("summary:", "totals:")):
            total = int(raw.split()[1])
            continue
        key, eq, val = raw.partition("=")
        if eq and key == "ob":
            ob = val
        elif eq and key == "fn":
            fn = val
        elif eq and key == "cfn":
            target = val
        elif eq and key == "calls":
            in_call = True
        elif raw.startswith("0x"):
            parts = raw.split()
            addr, cost = int(parts[0], 16), int(parts[2]) if len(parts) > 2 else 0
            inside = any(w in fn for w in WHOLE_WAIT)
            if in_call:
                if not inside and any(w in target for w in WHOLE_WAIT):
                    whole += cost
                elif not inside:
                    call_cost[(ob, addr)] = call_cost.get((ob, addr), 0) + cost
                in_call = False
            elif not inside:
                self_cost[(ob, addr)] = self_cost.get((ob, addr), 0) + cost
    by_obj: dict[str, set[int]] = {}
    for o, a in list(self_cost) + list(call_cost):
        if "accio" in Path(o).name:
            by_obj.setdefault(o, set()).add(a)
    waiting = whole
    for o, addrs in by_obj.items():
        for a in waiting_addresses(o, addrs):
            waiting += self_cost.get((o, a), 0) + call_cost.get((o, a), 0)
    return total, waiting


def compile_driver(build: Path, exe: Path) -> None:
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-O2", "-g", f"-I{HERE.parent / 'include'}", "-o", str(exe), str(HERE / "offload_instr.c"),
           f"-L{build}", "-laccio_offload", f"-Wl,-rpath,{build}"]
    subprocess.run(cmd, check=True)


def run(exe: Path, worker: Path, metric: str, n: int, tmp: Path) -> dict[str, int]:
    """Instructions of the host and of the worker in one run (both under callgrind), waiting left out."""
    vg = ["valgrind", "--tool=callgrind", "--dump-instr=yes", "--compress-pos=no", "--compress-strings=no"]
    out = {side: tmp / f"cg.{side}" for side in ("host", "worker")}
    wrapper = tmp / "worker.sh"
    wrapper.write_text(f'#!/bin/sh\nexec {" ".join(vg)} --callgrind-out-file={out["worker"]} -q "{worker}" "$@"\n')
    wrapper.chmod(0o755)
    env = dict(os.environ, ACCIO_OFFLOAD_SPIN_US="forever", ACCIO_OFFLOAD_WORKER=str(wrapper), ACCIO_QUIET="1")
    env.pop("VEORUN_BIN", None)
    cmd = vg + [f"--callgrind-out-file={out['host']}", "--collect-atstart=no", "-q", str(exe), metric, str(n)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    got = {}
    for side, f in out.items():
        total, waiting = count(f)
        f.unlink()
        got[side] = total - waiting
    return got


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", action="append", required=True, metavar="NAME=DIR",
                   help="a build directory (libaccio_offload.so, accio-offload-worker); repeatable")
    p.add_argument("--metrics", default=",".join(METRICS), help="comma-separated subset of " + ",".join(METRICS))
    p.add_argument("--n1", type=int, default=1000)
    p.add_argument("--n2", type=int, default=3000)
    p.add_argument("--repeat", type=int, default=1, help="runs of each count (they should agree)")
    p.add_argument("--json", metavar="FILE")
    a = p.parse_args(argv)
    if not shutil.which("valgrind"):
        raise SystemExit("offload_instr: valgrind is not installed")
    metrics = a.metrics.split(",")
    if unknown := [m for m in metrics if m not in METRICS]:
        raise SystemExit(f"offload_instr: unknown metric {', '.join(unknown)} (one of {', '.join(METRICS)})")
    if not 0 < a.n1 < a.n2:
        raise SystemExit("offload_instr: need 0 < --n1 < --n2")
    builds = []
    for b in a.build:
        label, sep, d = b.partition("=")
        d = Path(d).resolve()
        if not sep or not (d / "accio-offload-worker").exists() or not list(d.glob("libaccio_offload.so*")):
            raise SystemExit(f"offload_instr: {b}: not NAME=DIR with libaccio_offload.so and accio-offload-worker")
        builds.append((label, d))
    result: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        print(f"{'instructions per round trip':28s} " + " ".join(f"{l + ' host':>12s} {l + ' worker':>13s}"
                                                         for l, _ in builds))
        for label, d in builds:
            compile_driver(d, tmp / f"drv-{label}")
        for m in metrics:
            row = []
            for label, d in builds:
                per: dict[str, list[float]] = {"host": [], "worker": []}
                for _ in range(a.repeat):
                    hi = run(tmp / f"drv-{label}", d / "accio-offload-worker", m, a.n2, tmp)
                    lo = run(tmp / f"drv-{label}", d / "accio-offload-worker", m, a.n1, tmp)
                    for side in per:
                        per[side].append((hi[side] - lo[side]) / (a.n2 - a.n1))
                result.setdefault(m, {})[label] = per
                row.append(f"{min(per['host']):12.1f} {min(per['worker']):13.1f}")
                if a.repeat > 1:
                    row[-1] += " (" + "/".join(f"{v:.0f}" for v in per["host"] + per["worker"]) + ")"
            print(f"{m:28s} " + " ".join(row), flush=True)
    if a.json:
        doc = {"command": " ".join([sys.executable, *sys.argv]), "n1": a.n1, "n2": a.n2,
               "builds": {l: str(d) for l, d in builds}, "spin_us": "forever", "instructions_per_round_trip": result}
        Path(a.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
