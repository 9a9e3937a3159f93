"""`accio run -- program args...`: run an unmodified program with the preload shim.

The shim (lib/libaccio_preload.so) interposes the read/write family and sends requests at or above
the threshold on regular files through the engine; see docs/preload.md. With --stats or
--stats-json every process of the run (children and exec'd programs inherit the preload) writes its
per-file counters to a private directory, which is merged here after the program exits.

Exit status, as env(1) and nohup(1): the program's own; 127 when it is not found, 126 when it is
found but cannot be run; 125 for accio's own errors, a usage error of `accio run` included.
"""
from __future__ import annotations

import os
import signal
import sys

# The exec path (no statistics) imports nothing else: each millisecond here is paid per launch.

STATS_SCHEMA = "accio.run-stats/1"


def mechanisms() -> tuple[str, ...]:
    """What --mechanism takes: auto and the engine's mechanisms for host memory (the shim sees host
    buffers). The launcher's quick path asks only when --mechanism is given."""
    from . import _ext
    return ("auto", *(m["name"] for m in _ext.mechanisms() if not m["device"]))


def default_threshold() -> int:
    """The shim's threshold without ACCIO_PRELOAD_THRESHOLD (a tuning profile may raise it per file)."""
    from . import _ext
    return _ext.PRELOAD_THRESHOLD_DEFAULT


def add_arguments(p) -> None:
    import argparse

    from ._system import fmt_size
    p.add_argument("--mechanism", "-m", choices=mechanisms(),
                   help="mechanism for the requests the shim takes (default: ACCIO_MECHANISM or auto)")
    # -l (the lower limit of the requests taken), not -t: -t is the thread count in `accio bench`
    p.add_argument("--threshold", "-l", metavar="BYTES",
                   help="smallest request the shim takes, e.g. 64k (default: ACCIO_PRELOAD_THRESHOLD, "
                   f"else {fmt_size(default_threshold()).replace(' ', '')} raised to the tuning profile's "
                   "crossing point)")
    p.add_argument("--stats", action="store_true", help="print per-file counters to stderr when the program ends")
    p.add_argument("--stats-json", metavar="FILE", help="write the per-file counters as JSON ('-' for stdout)")
    p.add_argument("program", nargs=argparse.REMAINDER, help="-- program [args...]")


class _Args:
    mechanism = threshold = stats_json = None
    stats = False
    program: list = []


def quick_parse(argv: list[str]):
    """The options of `accio run` without argparse (whose import costs ~12 ms per launch). Returns
    None for anything unusual (--help, a bad value, an unknown option): argparse then handles it."""
    a, i = _Args(), 0
    takes = {"--mechanism": "mechanism", "-m": "mechanism", "--threshold": "threshold", "-l": "threshold",
             "--stats-json": "stats_json"}
    while i < len(argv):
        opt = argv[i]
        if opt == "--":
            i += 1
            break
        if opt == "--stats":
            a.stats = True
        elif opt in takes and i + 1 < len(argv):
            setattr(a, takes[opt], argv[i + 1])
            i += 1
        elif "=" in opt and opt.split("=", 1)[0] in takes and opt.startswith("--"):
            name, value = opt.split("=", 1)
            setattr(a, takes[name], value)
        elif opt.startswith("-"):
            return None
        else:
            break
        i += 1
    if a.mechanism is not None and a.mechanism not in mechanisms():
        return None
    a.program = argv[i:]
    return a


def shim_path() -> str:
    return os.path.join(os.path.dirname(os.path.realpath(__file__)), "lib", "libaccio_preload.so")


def _which(name: str) -> str | None:
    """shutil.which, without importing shutil (about 6 ms of the launcher: fnmatch, bz2, lzma)."""
    if "/" in name:
        return name
    for d in os.environ.get("PATH", os.defpath).split(os.pathsep):
        cand = os.path.join(d or ".", name)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def _environment(args, stats_dir: str | None) -> dict[str, str]:
    env = dict(os.environ)
    shim = shim_path()
    rest = [p for p in env.get("LD_PRELOAD", "").replace(" ", ":").split(":") if p and p != shim]
    env["LD_PRELOAD"] = ":".join([shim] + rest)
    if args.threshold is not None:
        from . import _ext
        from ._usage import UsageError
        try:
            env["ACCIO_PRELOAD_THRESHOLD"] = str(max(1, _ext.parse_size(args.threshold.strip())))
        except OSError as e:
            raise UsageError(f"--threshold {args.threshold!r}: {e.strerror or e}") from None
    if args.mechanism:
        env["ACCIO_MECHANISM"] = args.mechanism
    if stats_dir:
        env["ACCIO_PRELOAD_STATS_DIR"] = stats_dir
    else:
        env.pop("ACCIO_PRELOAD_STATS_DIR", None)
    return env


def _status(returncode: int) -> int:
    """The shell's convention for the report: a program killed by signal N has status 128+N."""
    return 128 - returncode if returncode < 0 else returncode


def _exit_like(returncode: int) -> int:
    """Returns the program's exit status; if a signal killed it, dies of the same signal (as the
    exec'd program would have, without --stats)."""
    if returncode < 0:
        sig = -returncode
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    return _status(returncode)


RUN_OWN_ERROR, RUN_CANNOT_EXECUTE, RUN_NOT_FOUND = 125, 126, 127  # as accio._usage (not imported: launch cost)


def _cannot_run(name: str, e: OSError) -> int:
    """exec failed: 127 if the file is not there, 126 otherwise (permission, format, ...), as env."""
    import errno
    print(f"accio run: exec {name}: {(e.strerror or str(e)).lower()} (errno {e.errno})", file=sys.stderr)
    return RUN_NOT_FOUND if e.errno in (errno.ENOENT, errno.ENOTDIR) else RUN_CANNOT_EXECUTE


def main(args) -> int:
    from ._usage import UsageError
    prog = list(args.program)
    if prog[:1] == ["--"]:
        prog = prog[1:]
    if not prog:
        raise UsageError("no program given (usage: accio run [options] -- program [args...])")
    if not os.path.isfile(shim_path()):
        print(f"accio run: the preload library is missing ({shim_path()}); reinstall accio", file=sys.stderr)
        return RUN_OWN_ERROR
    exe = _which(prog[0])
    if not exe or not os.path.exists(exe):
        print(f"accio run: {prog[0]}: command not found", file=sys.stderr)
        return RUN_NOT_FOUND
    if os.path.isdir(exe):
        print(f"accio run: {prog[0]}: is a directory", file=sys.stderr)
        return RUN_CANNOT_EXECUTE
    if not os.access(exe, os.X_OK):
        print(f"accio run: {prog[0]}: permission denied", file=sys.stderr)
        return RUN_CANNOT_EXECUTE

    want_stats = args.stats or args.stats_json
    if not want_stats:  # nothing to do afterwards: become the program (signals and status are its own)
        env = _environment(args, None)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            os.execve(exe, prog, env)
        except OSError as e:
            return _cannot_run(prog[0], e)
    from ._usage import check_output_path
    check_output_path("--stats-json", args.stats_json)  # before the program runs, not after (125)

    import json
    import subprocess
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory(prefix="accio-run.") as stats_dir:
        env = _environment(args, stats_dir)
        try:
            child = subprocess.Popen(prog, executable=exe, env=env)
        except OSError as e:
            return _cannot_run(prog[0], e)
        forwarded = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
        old = {s: signal.signal(s, lambda sig, _f: child.send_signal(sig)) for s in forwarded}
        old[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal sends it to the child too
        try:
            rc = child.wait()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        report = collect(stats_dir, prog, _status(rc), env)
    if args.stats:
        print(render(report), file=sys.stderr)
    if args.stats_json:
        text = json.dumps(report, indent=2) + "\n"
        try:
            if args.stats_json == "-":
                sys.stdout.write(text)
            else:
                Path(args.stats_json).write_text(text)
        except OSError as e:  # the program ran, its report could not be written: accio's own error
            print(f"accio run: write --stats-json {args.stats_json}: {(e.strerror or str(e)).lower()} "
                  f"(errno {e.errno}); the program's exit status was {_status(rc)}", file=sys.stderr)
            return RUN_OWN_ERROR
    return _exit_like(rc)


def _add_side(into: dict, side: dict) -> None:
    for k in ("calls", "bytes", "ns", "accelerated_calls", "accelerated_bytes", "fallbacks"):
        into[k] = into.get(k, 0) + side[k]
    hist = into.setdefault("size_histogram", [0] * len(side["size_histogram"]))
    for i, v in enumerate(side["size_histogram"]):
        hist[i] += v


def collect(stats_dir: str, prog: list[str], status: int, env: dict[str, str]) -> dict:
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
        "threshold": int(env.get("ACCIO_PRELOAD_THRESHOLD", default_threshold())),
        "threshold_given": "ACCIO_PRELOAD_THRESHOLD" in env,
        "mechanism": env.get("ACCIO_MECHANISM", "auto"),
        "size_buckets": buckets or [],
        "processes": processes,
        "files": sorted(files.values(), key=lambda m: -(m["read"].get("bytes", 0) + m["write"].get("bytes", 0))),
    }


def _bucket_label(buckets: list[int], i: int) -> str:
    """Darshan's buckets: 0-100, 100-1K, ... (each up to and including its upper bound)."""
    from ._system import fmt_size
    lo = fmt_size(buckets[i - 1]) if i else "0"
    return f"{lo}-{fmt_size(buckets[i])}" if i < len(buckets) else f">{fmt_size(buckets[-1])}"


def render(report: dict) -> str:
    """A Darshan-like per-file table: calls, bytes, time and bandwidth, request sizes, plans."""
    from ._system import fmt_size
    procs, files = report["processes"], report["files"]
    tot = {op: sum(f[op].get("bytes", 0) for f in files) for op in ("read", "write")}
    eng = {op: sum(f[op].get("accelerated_bytes", 0) for f in files) for op in ("read", "write")}
    lines = [f"accio run: {len(procs)} process{'es' if len(procs) != 1 else ''}, {len(files)} file"
             f"{'s' if len(files) != 1 else ''}; read {fmt_size(tot['read'])} ({fmt_size(eng['read'])} through "
             f"the engine), wrote {fmt_size(tot['write'])} ({fmt_size(eng['write'])} through the engine); "
             f"threshold {fmt_size(report['threshold'])}, mechanism {report['mechanism']}"]
    if not files:
        lines.append("  (no reads or writes on regular files)")
        return "\n".join(lines)
    rows = [("file", "op", "calls", "engine", "bytes", "time", "MiB/s", "request sizes (calls)")]
    for f in files:
        for op in ("read", "write"):
            s = f[op]
            if not s.get("calls"):
                continue
            secs = s["ns"] / 1e9
            sizes = ", ".join(f"{_bucket_label(report['size_buckets'], i)}: {n}"
                              for i, n in enumerate(s["size_histogram"]) if n)
            rows.append((f["path"], op, str(s["calls"]), str(s["accelerated_calls"]), fmt_size(s["bytes"]),
                         f"{secs:.3f}s", f"{s['bytes'] / 2**20 / secs:.0f}" if secs > 0 else "-", sizes))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        lines.append("  " + "  ".join(c.ljust(w) if i in (0, 1) else c.rjust(w)
                                      for i, (c, w) in enumerate(zip(r, widths))) + "  " + r[-1])
    plans = [(f["path"], p) for f in files for p in f["plans"]]
    if plans:
        lines.append("  plans the engine ran:")
        for path, p in plans:
            lines.append(f"    {path}: {p['plan']}, {p['calls']} calls, {fmt_size(p['bytes'])}: {p['why']}")
    fb = sum(f[op].get("fallbacks", 0) for f in files for op in ("read", "write"))
    if fb:
        lines.append(f"  {fb} request(s) failed in the engine and were redone by libc (their result is the kernel's)")
    return "\n".join(lines)
