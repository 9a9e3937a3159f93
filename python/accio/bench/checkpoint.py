"""`accio bench safetensors`: loading a checkpoint with accio and with the peers installed here.

    accio bench safetensors model.safetensors                         # host memory, NumPy
    accio bench safetensors model.safetensors.index.json --device cuda:0 --framework torch --json out.json
    accio bench safetensors shard1.safetensors shard2.safetensors --cold

Contenders, interleaved in rotating order (accio.stats: >= 7 rounds after one untimed, checked
warm-up; median ratios with 95% bootstrap intervals):

  accio.safetensors   accio.safetensors.load_file (one read of each whole file, header included, from
                      offset 0 into the target memory, tensors as views; shards in parallel)
  accio raw read      accio.read of each whole file into the same memory: the bytes alone, no
                      parsing (the storage limit a loader can reach)
  safetensors         safetensors.numpy.load_file, or safetensors.torch.load_file(device=) for torch
                      (one file after another, as transformers loads shards)
  fastsafetensors     fastsafetensors' fastsafe_open (torch only; its default settings, no GDS
                      unless nvidia-fs is loaded)

Every contender's first result is compared with accio's (names, dtypes, shapes, bytes) before any
sample counts. --cold drops the files' pages before every sample (posix_fadvise DONTNEED, checked
with a residency query). Rates are GB/s (10^9 bytes) of the files' total size.
"""
from __future__ import annotations

import datetime
import os
import platform
import sys
import time

from .. import stats
from .._usage import UsageError

PEERS = ("safetensors", "fastsafetensors")


def add_arguments(p) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="a .safetensors file, a model.safetensors.index.json, "
                   "or several shard files")
    p.add_argument("--device", default="cpu",
                   help="cpu (default) or cuda:N (needs torch, or cupy with --framework cupy)")
    p.add_argument("--framework", choices=("numpy", "torch", "cupy"), help="what the tensors are "
                   "(default: numpy on the host, torch on a GPU); it must be installed, or the command stops "
                   "with what to pip install (exit 2)")
    p.add_argument("-i", "--rounds", type=int, default=7, help="interleaved rounds (default 7, the minimum for a ratio; "
                   "-i as accio bench's iterations)")
    p.add_argument("--cold", action="store_true", help="drop the files' pages from the page cache before every sample")
    p.add_argument("--peers", default=",".join(PEERS), help=f"peers to try: {','.join(PEERS)} or none")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="an accio setting for accio's contenders, e.g. --set threads=8 (repeatable)")
    p.add_argument("--json", metavar="FILE", help="write the samples, ratios and machine here "
                   "('-' for stdout; the table then goes to stderr)")


def _files(paths: list[str]) -> tuple[object, list[str]]:
    """(what load_file takes, the files it reads)."""
    from ..safetensors import _index_files
    if len(paths) == 1 and paths[0].endswith(".json"):
        return paths[0], _index_files(paths[0])[0]
    return (paths[0] if len(paths) == 1 else list(paths)), list(paths)


def _sync(framework: str, device):
    if device == "cpu":
        return lambda: None
    if framework == "torch":
        import torch
        return lambda: torch.cuda.synchronize(device)
    if framework == "cupy":
        import cupy
        return lambda: cupy.cuda.Device(int(str(device).rpartition(":")[2] or 0)).synchronize()
    return lambda: None


def _as_bytes(t, framework: str) -> tuple[str, tuple, bytes]:
    if framework == "torch":
        import torch
        shape = tuple(t.shape)
        flat = t.detach().reshape(-1).view(torch.uint8) if t.numel() else t.detach().reshape(-1)
        return str(t.dtype).split(".")[-1], shape, flat.cpu().numpy().tobytes() if t.numel() else b""
    if framework == "cupy":
        import cupy
        return t.dtype.name, tuple(t.shape), cupy.asnumpy(t).tobytes()
    return t.dtype.name, tuple(t.shape), t.tobytes()


def differs(a: dict, b: dict, fa: str, fb: str) -> str | None:
    """None when two loads hold the same names, dtypes, shapes and bytes, else what differs."""
    if set(a) != set(b):
        return f"{len(set(a) ^ set(b))} tensor names differ"
    for k in a:
        x, y = _as_bytes(a[k], fa), _as_bytes(b[k], fb)
        if x != y:
            return f"tensor {k!r}: " + ("bytes" if x[:2] == y[:2] else f"{x[:2]} vs {y[:2]}") + " differ"
    return None


def contenders(args, target, files: list[str], framework: str, settings: dict, peers: set[str]):
    """{name: load()} for every contender that can run here, and {name: why not} for the others."""
    import accio
    import accio.safetensors as st
    device = args.device
    run, skipped = {}, {}
    run["accio.safetensors"] = lambda: st.load_file(target, device, framework, **settings)
    ordinal = None if device == "cpu" else accio._ordinal(device)
    fw = None if framework == "numpy" else framework
    run["accio raw read"] = lambda: {p: accio.read(p, device=ordinal, framework=fw, **settings) for p in files}
    if "safetensors" in peers:
        try:
            if framework == "torch":
                import safetensors.torch as peer
                run["safetensors"] = lambda: {k: v for p in files for k, v in peer.load_file(p, device=device).items()}
            elif framework == "numpy":
                import safetensors.numpy as peer
                run["safetensors"] = lambda: {k: v for p in files for k, v in peer.load_file(p).items()}
            else:
                skipped["safetensors"] = "safetensors has no CuPy loader"
        except ImportError as e:
            skipped["safetensors"] = f"not installed ({e})"
    else:
        skipped["safetensors"] = "not asked for (--peers)"
    if "fastsafetensors" not in peers:
        skipped["fastsafetensors"] = "not asked for (--peers)"
    elif framework != "torch":
        skipped["fastsafetensors"] = "measured with --framework torch only"
    else:
        try:
            import fastsafetensors
            nogds = not (os.path.exists("/proc/driver/nvidia-fs/stats") or os.path.isdir("/sys/module/nvidia_fs"))

            def fst():
                with fastsafetensors.fastsafe_open(filenames=files, framework="pt", device=device, nogds=nogds) as fo:
                    return {k: fo.get_tensor(k) for k in fo.keys()}
            run["fastsafetensors"] = fst
        except ImportError as e:
            skipped["fastsafetensors"] = f"not installed ({e})"
    return run, skipped


def main(argv: list[str]) -> int:
    import argparse
    from .._parser import Parser
    p = Parser(prog="accio bench safetensors", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    args = p.parse_args(argv)
    return run(args)


def _check_framework(args, framework: str) -> None:
    """The framework the tensors are made in must import, or the command is refused before it starts
    (exit 2, as bench's --vs-fio without fio) with the option that asked for it and what to install."""
    from .. import _FRAMEWORKS, _framework
    try:
        _framework(framework)  # the import accio.safetensors makes
    except ImportError:
        module, package = _FRAMEWORKS[framework]
        option = f"--framework {framework}" if args.framework else f"--device {args.device}"
        raise UsageError(f"{option} needs {module}, which does not import here: pip install {package}") from None


def run(args) -> int:
    import accio
    from .._system import drop_pages
    if args.rounds < 1:
        raise UsageError("--rounds must be at least 1")
    framework = args.framework or ("numpy" if args.device == "cpu" else "torch")
    settings = {}
    for kv in args.set:
        k, sep, v = kv.partition("=")
        if not sep:
            raise UsageError(f"--set {kv}: expected NAME=VALUE")
        settings[k] = v
    accio._ext.settings([])  # the environment's ACCIO_* first: a bad one is exit 1 (the CLI says what to do)
    try:  # then --set, with the engine's check, now rather than after the peers have run
        accio._ext.settings(list(settings.items()))
    except OSError as e:
        raise UsageError(f"--set: {e}") from None
    peers = set() if args.peers == "none" else {x.strip() for x in args.peers.split(",") if x.strip()}
    if peers - set(PEERS):
        raise UsageError(f"--peers {args.peers}: unknown peer {sorted(peers - set(PEERS))[0]!r} "
                         f"(peers: {','.join(PEERS)}, or none)")
    _check_framework(args, framework)
    target, files = _files(args.paths)
    total = sum(os.path.getsize(f) for f in files)
    loads, skipped = contenders(args, target, files, framework, settings, peers)
    sync = _sync(framework, args.device)

    def log(msg):
        print(f"[accio bench safetensors {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    residency: list[float] = []

    def cold():
        for f in files:
            drop_pages(f, 0, 0)
        cached = tot = 0
        for f in files:
            with accio.open(f, mechanism="posix") as h:
                r = h.residency()
            cached, tot = cached + r["cached"], tot + r["total"]
        residency.append(cached / tot if tot else 0.0)

    # warm-up: every contender once, untimed, its result checked against accio's
    failed: dict[str, str] = {}
    reference = None
    for name, load in list(loads.items()):
        try:
            got = load()
            sync()
        except Exception as e:  # noqa: BLE001 - a peer that cannot load this file is reported, not fatal
            failed[name] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            log(f"{name} failed: {failed[name]}")
            del loads[name]
            continue
        if name == "accio.safetensors":
            reference = got
        elif name != "accio raw read" and reference is not None:
            bad = differs(reference, got, framework, framework)
            if bad:
                failed[name] = f"DIFFERS from accio.safetensors: {bad}"
                log(f"{name}: {failed[name]}")
                del loads[name]
        del got
    reference = None
    if "accio.safetensors" not in loads:
        print(f"accio bench safetensors: accio.safetensors failed: {failed.get('accio.safetensors')}", file=sys.stderr)
        return 1

    def sample(load):
        def one() -> float:
            if args.cold:
                cold()
            t0 = time.perf_counter()
            r = load()
            sync()
            dt = time.perf_counter() - t0
            del r
            return total / dt / 1e9
        return one

    log(f"{len(files)} file(s), {total / 1e9:.2f} GB, {framework} on {args.device}, {args.rounds} rounds"
        + (", cold" if args.cold else ", hot"))
    if not args.cold:
        for f in files:  # hot: every page in the cache before the first sample
            with open(f, "rb", buffering=0) as fh:
                while fh.read(64 << 20):
                    pass
    load_before = os.getloadavg()
    samples = stats.interleave({n: sample(fn) for n, fn in loads.items()}, args.rounds,
                               on_round=lambda r, s: log(f"round {r + 1}: " + ", ".join(
                                   f"{n} {v[-1]:.2f}" for n, v in s.items()) + " GB/s") and False)
    comps = []
    goals = {("accio.safetensors", "accio raw read"): 0.95 if args.cold else None}
    for b in ("safetensors", "fastsafetensors", "accio raw read"):
        if b in samples:
            r = stats.ratio(samples["accio.safetensors"], samples[b], paired=True)
            c = {"a": "accio.safetensors", "b": b, **r.as_dict(), "verdict": stats.verdict(r)}
            g = goals.get(("accio.safetensors", b))
            if g:  # under 7 rounds both say "too few samples (N < 7)" (accio.stats' one rule)
                c["goal"], c["goal_verdict"] = g, stats.goal(r, g)
            comps.append(c)
    rows = {n: {"samples_gb_s": v, **stats.summary(v)} for n, v in samples.items()}
    doc = {"schema": "accio.safetensors-bench/1", "command": " ".join(["accio", "bench", "safetensors", *sys.argv[3:]])
           if sys.argv[1:3] == ["bench", "safetensors"] else None,
           "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "accio": {"version": accio.__version__, "git_commit": accio._ext.git_commit()},
           "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version(),
                       "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                       "gpus": [g.get("name") for g in accio.gpus()] if args.device != "cpu" else []},
           "params": {"files": files, "bytes": total, "device": args.device, "framework": framework,
                      "rounds": args.rounds, "cache": "cold" if args.cold else "hot", "settings": settings,
                      "residency_max": max(residency) if residency else None},
           "peers": _versions(), "contenders": rows, "skipped": skipped, "failed": failed, "comparisons": comps}
    print(render(doc), file=sys.stderr if args.json == "-" else sys.stdout)  # '-': stdout holds the JSON
    if args.json:
        from .._usage import write_json
        write_json(args.json, doc)
    return 0


def _versions() -> dict:
    out = {}
    for name in ("safetensors", "fastsafetensors", "torch", "numpy", "ml_dtypes", "cupy"):
        mod = sys.modules.get(name)
        if mod is not None:
            out[name] = getattr(mod, "__version__", "?")
    return out


def render(doc: dict) -> str:
    p = doc["params"]
    from .output import sig3  # three significant digits: a small file's 0.004 GB/s printed as 0.00
    lines = [f"safetensors load: {len(p['files'])} file(s), {sig3(p['bytes'] / 1e9)} GB, {p['framework']} on "
             f"{p['device']}, {p['cache']}, {p['rounds']} rounds",
             f"{'contender':<20} {'median GB/s':>11} {'min':>7} {'max':>7} {'n':>3}"]
    for n, r in doc["contenders"].items():
        lines.append(f"{n:<20} {sig3(r['median']):>11} {sig3(r['min']):>7} {sig3(r['max']):>7} {r['n']:>3}")
    for n, why in {**doc["skipped"], **doc["failed"]}.items():
        lines.append(f"{n:<20} {'-':>11}  {why}")
    if doc["comparisons"]:
        lines.append("")
        for c in doc["comparisons"]:
            goal = f"  goal >= {c['goal']}: {c['goal_verdict']}" if c.get("goal") else ""
            lines.append(f"{c['a']} / {c['b']}: {c['estimate']:.2f}x [{stats.bounds(c['low'], c['high'])}] "
                         f"{c['verdict']}{goal}")
    if p.get("residency_max") is not None and p["residency_max"] > 0.01:
        lines.append(f"note: up to {p['residency_max']:.0%} of the files stayed cached after the drop (not cold)")
    return "\n".join(lines)
