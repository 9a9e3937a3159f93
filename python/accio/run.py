"""`accio run -- program args...`: run an unmodified program with the preload shim.

The launcher is native (src/preload/launcher.c): the `accio` command on PATH (front.c) runs it in
its own process, `accio-run` is the same launcher alone, and `python -m accio run` execs its copy
in the package (accio/lib/accio-run). It puts the shim (lib/libaccio_preload.so) in LD_PRELOAD and
execs the program, so no Python runs in front of the program. Its options and exit statuses are
defined once, in src/preload/run_cli.h, which the extension exports (accio._ext.RUN_OPTIONS,
RUN_*). With --stats or --stats-json every process of the run writes its per-file counters to a
private directory; the launcher waits for the program and then runs the Python CLI of the same
installation (`accio-py --run-report DIR ...`, or `python -m accio.cli --run-report ...`:
report_main below), which merges and renders them. See docs/preload.md.
"""
from __future__ import annotations

import os
import sys

STATS_SCHEMA = "accio.run-stats/1"


def default_threshold() -> int:
    """The shim's threshold without ACCIO_PRELOAD_THRESHOLD (the planner's model may raise it per file)."""
    from . import _ext
    return _ext.PRELOAD_THRESHOLD_DEFAULT


def usage_line() -> str:
    """`accio run`'s synopsis from the launcher's own option table (run_cli.h, via the extension)."""
    from . import _ext
    opts = " ".join(f"[{name}{' ' + metavar if metavar else ''}]" for name, _, metavar, _ in _ext.RUN_OPTIONS
                    if name != "--help")
    return f"accio run {opts} -- PROGRAM ARGS..."


def package_dir() -> str:
    """Where the compiled parts are installed (_ext, lib/, include/): the package's folder, except in
    an editable install, whose Python sources are elsewhere."""
    from . import _ext
    return os.path.dirname(os.path.realpath(_ext.__file__))


def launcher_path() -> str:
    return os.path.join(package_dir(), "lib", "accio-run")


def shim_path() -> str:
    return os.path.join(package_dir(), "lib", "libaccio_preload.so")


def launch(argv: list[str]) -> int:
    """`accio run ARGS`: becomes the native launcher with ARGS, unread. Returns only if it cannot."""
    from . import _ext
    exe = launcher_path()
    env = dict(os.environ, ACCIO_RUN_PYTHON=sys.executable)  # for the --stats report
    sys.stdout.flush()
    sys.stderr.flush()
    # CPython starts with SIGPIPE and SIGXFSZ ignored, and an ignored signal survives exec: without
    # this, `accio run -- yes | head -1` would print "Broken pipe" where `yes | head -1` dies quietly.
    # Reset here, not in the launcher, so that a user's own ignore through `accio-run` is kept.
    import signal
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    try:
        os.execve(exe, ["accio-run", *argv], env)
    except OSError as e:
        print(f"accio run: the launcher {exe} cannot be run: {(e.strerror or str(e)).lower()} (errno {e.errno}); "
              "reinstall accio", file=sys.stderr)
    return _ext.RUN_OWN_ERROR


def report_main(argv: list[str]) -> int:
    """`accio-py --run-report DIR --status N [--stats] [--stats-json FILE] [--threshold B]
    [--mechanism M] -- program...`: what the launcher runs after the program when asked for
    statistics. Exit 0, or 1 when the report cannot be written (the launcher then exits 125);
    141 (cli.main) when stdout's reader went away, which the launcher does not count as an error."""
    import argparse
    p = argparse.ArgumentParser(prog="accio --run-report")
    p.add_argument("--run-report", dest="report", required=True)
    p.add_argument("--status", type=int, required=True)
    p.add_argument("--stats", action="store_true")
    p.add_argument("--stats-json")
    p.add_argument("--threshold", type=int)
    p.add_argument("--mechanism")
    p.add_argument("program", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    prog = a.program[1:] if a.program[:1] == ["--"] else a.program
    report = collect(a.report, prog, a.status, threshold=a.threshold, mechanism=a.mechanism)
    if a.stats:
        print(render(report), file=sys.stderr)
    if a.stats_json:
        from ._usage import write_json
        try:  # ensure_ascii: a name's escaped bytes stay \udcXX
            write_json(a.stats_json, report)
        except OSError as e:  # the program ran, its report could not be written: accio's own error
            if a.stats_json == "-" and isinstance(e, BrokenPipeError):
                raise  # stdout's reader went away: cli.main exits quietly, the launcher keeps the status
            print(f"accio run: write --stats-json {a.stats_json}: {(e.strerror or str(e)).lower()} "
                  f"(errno {e.errno}); the program's exit status was {a.status}", file=sys.stderr)
            return 1
    return 0


def _add_side(into: dict, side: dict) -> None:
    for k in ("calls", "bytes", "ns", "accelerated_calls", "accelerated_bytes", "fallbacks", "declined_calls",
              "remembered_calls"):
        into[k] = into.get(k, 0) + side.get(k, 0)
    hist = into.setdefault("size_histogram", [0] * len(side["size_histogram"]))
    for i, v in enumerate(side["size_histogram"]):
        hist[i] += v


def collect(stats_dir: str, prog: list[str], status: int, threshold: int | None = None,
            mechanism: str | None = None) -> dict:
    """Merges the per-process files into one report: processes, and files summed over processes."""
    import json
    from pathlib import Path
    processes, files, buckets = [], {}, None
    for f in sorted(Path(stats_dir).glob("*.json")):
        try:
            p = json.loads(f.read_text())
        except (OSError, ValueError):
            continue  # a process killed while writing leaves only its .tmp; a torn file is skipped
        processes.append(p)
        buckets = p.get("size_buckets", buckets)
        for fr in p["files"]:
            m = files.setdefault(fr["path"], {"path": fr["path"], "read": {}, "write": {}, "plans": []})
            for op in ("read", "write"):
                _add_side(m[op], fr[op])
            for pl in fr["plans"]:
                same = next((x for x in m["plans"] if x["plan"] == pl["plan"] and x["why"] == pl["why"]), None)
                if same:
                    same["calls"] += pl["calls"]
                    same["bytes"] += pl["bytes"]
                else:
                    m["plans"].append(dict(pl))
    return {
        "schema": STATS_SCHEMA,
        "command": prog,
        "exit_status": status,
        # the launcher passes the threshold whenever one is set (option or ACCIO_PRELOAD_THRESHOLD)
        "threshold": threshold if threshold is not None else default_threshold(),
        "threshold_given": threshold is not None or "ACCIO_PRELOAD_THRESHOLD" in os.environ,
        "mechanism": mechanism or os.environ.get("ACCIO_MECHANISM", "auto"),
        # [read, write]: below it a buffered descriptor's calls went to libc without the engine
        # (docs/preload.md, the floor); the lowest over the processes, None for "every size"
        "floor": _lowest_floor(processes),
        "size_buckets": buckets or [],
        # calls on files beyond the records a process keeps (docs/preload.md): counted, not itemised
        "dropped": {k: sum(p.get(f"dropped_{k}", 0) for p in processes) for k in ("calls", "bytes")},
        "processes": processes,
        "files": sorted(files.values(), key=lambda m: -(m["read"].get("bytes", 0) + m["write"].get("bytes", 0))),
    }


def _lowest_floor(processes: list[dict]) -> list:
    out = []
    for d in range(2):
        seen = [p["floor"][d] for p in processes if "floor" in p]
        out.append(None if seen and all(v is None for v in seen) else min((v for v in seen if v is not None), default=0))
    return out


def _bucket_label(buckets: list[int], i: int) -> str:
    """Darshan's buckets: 0-100, 100-1K, ... (each up to and including its upper bound)."""
    from ._system import fmt_size
    lo = fmt_size(buckets[i - 1]) if i else "0"
    return f"{lo}-{fmt_size(buckets[i])}" if i < len(buckets) else f">{fmt_size(buckets[-1])}"


def _floor_text(report: dict) -> str:
    """Where the floor passed calls to libc without asking the engine (reads and writes), if above the threshold."""
    from ._system import fmt_size
    parts = []
    for op, v in zip(("reads", "writes"), report.get("floor") or [0, 0]):
        if v is None:
            parts.append(f"{op} at every size")
        elif v > report["threshold"]:
            parts.append(f"{op} below {fmt_size(v)}")
    return ("; posix without asking (this machine's model and profiles): " + ", ".join(parts)) if parts else ""


SHOWN_FILES = 20  # rows of files the table shows; --stats-json keeps them all


def _engine_bytes(f: dict) -> int:
    return f["read"].get("accelerated_bytes", 0) + f["write"].get("accelerated_bytes", 0)


def render(report: dict) -> str:
    """A Darshan-like per-file table: calls, bytes, time and bandwidth, request sizes, plans. The files
    the engine served first, then by bytes; past SHOWN_FILES, one line for the rest (a Python
    program's table had 127 rows, one per module it imported: new-user audit, session 25)."""
    from ._system import fmt_amount, fmt_size
    procs = report["processes"]
    files = sorted(report["files"], key=lambda f: (-_engine_bytes(f), -(f["read"].get("bytes", 0) + f["write"].get("bytes", 0))))
    tot = {op: sum(f[op].get("bytes", 0) for f in files) for op in ("read", "write")}
    eng = {op: sum(f[op].get("accelerated_bytes", 0) for f in files) for op in ("read", "write")}
    lines = [f"accio run: {len(procs)} process{'es' if len(procs) != 1 else ''}, {len(files)} file"
             f"{'s' if len(files) != 1 else ''}; read {fmt_amount(tot['read'])} ({fmt_amount(eng['read'])} through "
             f"the engine), wrote {fmt_amount(tot['write'])} ({fmt_amount(eng['write'])} through the engine); "
             f"threshold {fmt_size(report['threshold'])}, mechanism {report['mechanism']}" + _floor_text(report)]
    rest = files[SHOWN_FILES:]
    files = files[:SHOWN_FILES]
    if not files:
        lines.append("  (no reads or writes on regular files; copies made inside the kernel, with copy_file_range, "
                     "sendfile or splice as cp and cat use between files, are not seen: docs/preload.md)")
        return "\n".join(lines)
    # engine: calls the engine served; passed: large calls the planner sent back to libc (it would
    # have run posix there: hot pages, or a size where the engine does not win on this machine)
    rows = [("file", "op", "calls", "engine", "passed", "bytes", "time", "MiB/s", "request sizes (calls)")]
    for f in files:
        for op in ("read", "write"):
            s = f[op]
            if not s.get("calls"):
                continue
            secs = s["ns"] / 1e9
            sizes = ", ".join(f"{_bucket_label(report['size_buckets'], i)}: {n}"
                              for i, n in enumerate(s["size_histogram"]) if n)
            rows.append((shown(f["path"]), op, str(s["calls"]), str(s["accelerated_calls"]),
                         str(s.get("declined_calls", 0)), fmt_size(s["bytes"]),
                         f"{secs:.3f}s", f"{s['bytes'] / 2**20 / secs:.0f}" if secs > 0 else "-", sizes))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        lines.append("  " + "  ".join(c.ljust(w) if i in (0, 1) else c.rjust(w)
                                      for i, (c, w) in enumerate(zip(r, widths))) + "  " + r[-1])
    if rest:
        r_bytes = {op: sum(f[op].get("bytes", 0) for f in rest) for op in ("read", "write")}
        r_eng = sum(_engine_bytes(f) for f in rest)
        lines.append(f"  ... and {len(rest)} more file{'s' if len(rest) != 1 else ''}: read {fmt_amount(r_bytes['read'])}, "
                     f"wrote {fmt_amount(r_bytes['write'])}, "
                     + (f"{fmt_amount(r_eng)} through the engine" if r_eng else "none through the engine")
                     + " (--stats-json FILE keeps every file)")
    plans = [(f["path"], p) for f in files for p in f["plans"]]
    if plans:
        lines.append("  plans the engine ran:")
        for path, p in plans:
            lines.append(f"    {shown(path)}: {p['plan']}, {p['calls']} calls, {fmt_size(p['bytes'])}: {p['why']}")
    windows = sum(p.get("prefetch_windows", 0) for p in procs)
    if windows:
        lines.append(f"  {windows} prefetch window(s) asked of the kernel ahead of sequential readers")
    dropped = report.get("dropped") or {}
    if dropped.get("calls"):
        keep = max((p.get("max_files", 0) for p in procs), default=0)
        lines.append(f"  {dropped['calls']} call(s), {fmt_size(dropped['bytes'])}, on files past the rows a process keeps"
                     + (f" ({keep}; ACCIO_PRELOAD_STATS_FILES, docs/preload.md)" if keep else "")
                     + " are counted in no row above and not in the totals")
    fb = sum(f[op].get("fallbacks", 0) for f in files + rest for op in ("read", "write"))
    if fb:
        lines.append(f"  {fb} request(s) failed in the engine and were redone by libc (their result is the kernel's)")
    return "\n".join(lines)


def shown(path: str) -> str:
    """A file name for the table: bytes that are not UTF-8 (kept as surrogateescape gives them) as \\xNN."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")

