"""accio offload-bench: AVEO's call-latency tests 1-4, 1-byte transfer latency and transfer
bandwidth, over the shared-memory transport and over the socket transport, side by side.

The timing is done by lib/accio-offload-bench (C); this module runs it once per configuration,
takes medians over the repetitions, prints AVEO-style tables and writes the JSON:

    {"summary": {"shm": {"test1": us, ..., "read_1b": us, "write_1b": us}, "socket": {...}},
     "ratio_socket_over_shm": {...}, "runs": {...every repetition...}, ...}
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time

from ._system import cpu_model, fmt_size, parse_size
from ._usage import UsageError, check_output_path, write_json

SCHEMA = "accio.offload-bench/1"
FULL_NS = [1, 5, 10, 50, 100, 500, 1000, 5000, 10000, 50000, 100000]
QUICK_NS = [1, 10, 100, 1000, 10000]
SUMMARY_N = 10000
# (name, transport, spin): the default waiting (spin, then futex), pure spinning, the socket baseline
CONFIGS = [("shm", "shm", None), ("shm-spin", "shm", "forever"), ("socket", "socket", None)]
TARGETS_US = {"test1": 0.5, "test2": 1.0, "test3": 0.5, "test4": 1.0, "read_1b": 1.0, "write_1b": 1.0}


def add_arguments(p) -> None:
    p.add_argument("--json", metavar="FILE", help="write every measurement and the summary as JSON ('-' for "
                   "stdout; the tables then go to stderr)")
    p.add_argument("--quick", action="store_true",
                   help=f"N up to {QUICK_NS[-1]}, 3 repetitions, transfers up to 64 MiB (about 20 s)")
    p.add_argument("--reps", type=int, help="repetitions per point (default 5; --quick 3)")
    p.add_argument("--max-bytes", default=None, help="largest transfer (default 1g; --quick 64m)")
    p.add_argument("--transports", default=",".join(c[0] for c in CONFIGS),
                   help="configurations to run, of shm, shm-spin, socket (default all)")


def _bench_binary() -> str:
    return os.path.join(os.path.dirname(os.path.realpath(__file__)), "lib", "accio-offload-bench")




def run_config(transport: str, spin: str | None, ns: list[int], reps: int, max_bytes: int) -> dict:
    cmd = [_bench_binary(), "--transport", transport, "--ns", ",".join(map(str, ns)), "--reps", str(reps),
           "--max-bytes", str(max_bytes)]
    if spin is not None:
        cmd += ["--spin", spin]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)


def summarize(run: dict, n: int) -> dict:
    out = {}
    for row in run["latency"]:
        if row["n"] == n:
            out[row["test"]] = statistics.median(row["us_per_call"])
    for row in run["memory_latency"]:
        out[row["op"]] = statistics.median(row["us"])
    return out


def _spread(v: list[float]) -> str:
    return f"{min(v):.3g}-{max(v):.3g}"


def render(doc: dict, out=sys.stdout) -> None:
    runs = doc["runs"]
    names = list(runs)
    ns = sorted({row["n"] for r in runs.values() for row in r["latency"]})
    w = 9
    print(f"Call latency, microseconds per call (median of {doc['reps']}; kernel: accio_offload_echo)", file=out)
    head = "  #calls " + "".join(f"| {name:<{4 * w - 1}}" for name in names)
    print(head, file=out)
    print("         " + "".join("| " + "".join(f"{'Test ' + str(t):>{w}}" for t in range(1, 5))[1:] + " "
                                for _ in names), file=out)
    for n in ns:
        line = f"  {n:>6} "
        for name in names:
            vals = {row["test"]: statistics.median(row["us_per_call"]) for row in runs[name]["latency"] if row["n"] == n}
            line += "| " + "".join(f"{vals.get(f'test{t}', float('nan')):>{w}.3f}" for t in range(1, 5))[1:] + " "
        print(line, file=out)
    print("", file=out)
    print("1-byte transfers (30000 each), microseconds:", file=out)
    for name in names:
        s = doc["summary"][name]
        print(f"  {name:<9} read {s['read_1b']:.3f}   write {s['write_1b']:.3f}", file=out)
    print("", file=out)
    print("Transfer bandwidth, GB/s (median; veo_read_mem / veo_write_mem):", file=out)
    sizes = sorted({row["bytes"] for r in runs.values() for row in r["bandwidth"]})
    print("  bytes      " + "".join(f"| {name + ' read':>13} {name + ' write':>14} " for name in names), file=out)
    for b in sizes:
        line = f"  {fmt_size(b):<10} "
        for name in names:
            vals = {row["op"]: statistics.median(row["gbps"]) for row in runs[name]["bandwidth"] if row["bytes"] == b}
            line += f"| {vals.get('read', float('nan')):>13.2f} {vals.get('write', float('nan')):>14.2f} "
        print(line, file=out)
    print("", file=out)
    print("Idle worker CPU (1 s after a burst of calls): " +
          ", ".join(f"{name} {runs[name]['idle_worker_cpu_percent']:.1f}%" for name in names), file=out)
    if "ratio_socket_over_shm" in doc:
        r = doc["ratio_socket_over_shm"]
        print(f"Socket transport / shm at N={doc['summary_n']}: " +
              ", ".join(f"{k} {v:.1f}x" for k, v in r.items()), file=out)
    if "targets" in doc:
        missed = [k for k, v in doc["targets"].items() if not v["met"]]
        print("Targets (shm, us per call): " + ", ".join(
            f"{k} {v['measured']:.3f} <= {v['target']}" + ("" if v["met"] else " MISSED")
            for k, v in doc["targets"].items()) + ("" if not missed else f"  ({len(missed)} missed)"), file=out)
    m = doc.get("machine", {})
    load = max(m.get("loadavg_start", 0.0), m.get("loadavg_end", 0.0))
    if m.get("cpus") and load > 0.5 * m["cpus"]:  # a caller's latency is the runtime's only on an idle machine
        print(f"note: the machine was busy (load average {load:.1f} on {m['cpus']} CPUs): the latencies include "
              "waiting for a CPU; measure on an idle machine to compare with the targets", file=out)
    print("(the configurations ran one after another, medians of their repetitions: a description of this run; "
          "benchmarks/offload_vs_base.py compares builds by the statistics rule, docs/methodology.md)", file=out)


def main(args) -> int:
    ns = QUICK_NS if args.quick else FULL_NS
    if args.reps is not None and args.reps < 1:
        raise UsageError(f"--reps {args.reps}: must be at least 1")
    reps = args.reps or (3 if args.quick else 5)
    try:
        max_bytes = parse_size(args.max_bytes or ("64m" if args.quick else "1g"))
    except ValueError as e:
        raise UsageError(f"--max-bytes: {e}") from None
    if max_bytes < 1:
        raise UsageError(f"--max-bytes {args.max_bytes!r}: must be at least 1 byte")
    wanted = [t.strip() for t in args.transports.split(",") if t.strip()]
    configs = [c for c in CONFIGS if c[0] in wanted]
    unknown = set(wanted) - {c[0] for c in CONFIGS}
    if unknown or not configs:
        raise UsageError(f"unknown configuration(s) {', '.join(sorted(unknown)) or '(none)'}; "
                         f"choose from {', '.join(c[0] for c in CONFIGS)}")
    check_output_path("--json", args.json)
    if not os.access(_bench_binary(), os.X_OK):
        print(f"accio offload-bench: {_bench_binary()} is missing (reinstall accio)", file=sys.stderr)
        return 1
    doc = {"schema": SCHEMA, "command": "accio offload-bench " + " ".join(sys.argv[2:]),
           "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "machine": {"hostname": platform.node(), "kernel": platform.release(), "cpus": os.cpu_count(),
                       "cpu": cpu_model(), "loadavg_start": os.getloadavg()[0]},
           "reps": reps, "ns": ns, "max_bytes": max_bytes, "runs": {}}
    for name, transport, spin in configs:
        print(f"accio offload-bench: {name} ...", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        try:
            doc["runs"][name] = run_config(transport, spin, ns, reps, max_bytes)
        except RuntimeError as e:
            print(f"accio offload-bench: {e}", file=sys.stderr)
            return 1
        print(f"accio offload-bench: {name} done in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    doc["machine"]["loadavg_end"] = os.getloadavg()[0]
    n = SUMMARY_N if SUMMARY_N in ns else max(ns)
    doc["summary_n"] = n
    doc["summary"] = {name: summarize(r, n) for name, r in doc["runs"].items()}
    if "shm" in doc["summary"] and "socket" in doc["summary"]:
        shm, sock = doc["summary"]["shm"], doc["summary"]["socket"]
        doc["ratio_socket_over_shm"] = {k: sock[k] / shm[k] for k in shm if shm[k] > 0}
    if "shm" in doc["summary"]:
        shm = doc["summary"]["shm"]
        doc["targets"] = {k: {"target": t, "measured": shm[k], "met": shm[k] <= t} for k, t in TARGETS_US.items()}
    render(doc, out=sys.stderr if args.json == "-" else sys.stdout)  # stdout holds the JSON then
    if args.json:
        write_json(args.json, doc)
        if args.json != "-":
            print(f"accio offload-bench: wrote {args.json}", file=sys.stderr)
    return 0

