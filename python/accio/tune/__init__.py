"""`accio tune`: profile the filesystem holding PATH so that the `auto` mechanism picks the fastest
plan for every request, into host memory and, where a GPU is present, into GPU memory (the device
table of the GPU's model); `--show` prints a profile's decisions, `--evaluate` measures how close
`auto` comes to the best fixed mechanism of every cell. How it works: docs/tuning.md.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from datetime import datetime, timezone

from .. import File, __version__, _ext, stats
from .._progress import Progress
from .._system import drop_pages, interrupted_status, seconds_arg, sigterm_interrupts
from .._usage import UsageError, check_creatable, check_output_path, write_json
from . import evaluate as evaluate_mod
from . import prefetch as prefetch_mod
from . import profile as profile_mod
from .measure import MiB, Bench, fmt
from .search import Search, base_plans, builtin_model, device_plans

MIN_FILE_SIZE = 8 * MiB  # --file-size: smaller files leave most of the search's request sizes unmeasured


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", default=".", help="a directory (or file) on the filesystem to tune (default .)")
    p.add_argument("--target", default="host", help="where the bytes go: host (GPU memory is measured with --device)")
    p.add_argument("--budget", type=seconds_arg, metavar="SECONDS",
                   help="wall-clock limit of the calibration, the GPU's share included (default 120)")
    p.add_argument("--device", metavar="GPU", help="the GPU whose device table is measured and evaluated (cuda:N or N; "
                   "default: cuda:0 when the CUDA driver reports a GPU); its table serves every GPU of its model")
    p.add_argument("--no-device", action="store_true", help="measure and evaluate host memory only")
    p.add_argument("--device-budget", type=seconds_arg, metavar="SECONDS",
                   help="the GPU's share of --budget (default a third of it)")
    p.add_argument("--file-size", metavar="SIZE",
                   help="scratch file size for the calibration (default 256m, at least 8m; two such files are written in PATH)")
    p.add_argument("--threads", type=int, metavar="N",
                   help="the N of the 'several requests in flight' cells (default 0: the online CPUs)")
    p.add_argument("--profile", metavar="FILE",
                   help="profile file to write, show or evaluate with (default: the key's file in the profile directory)")
    p.add_argument("--show", action="store_true", help="print the profile of PATH's filesystem as a table and exit")
    p.add_argument("--evaluate", action="store_true",
                   help="measure auto and every fixed mechanism on a grid and report auto's regret against the "
                   "per-cell best (uses the existing profile)")
    p.add_argument("--file-sizes", metavar="LIST", help="--evaluate file sizes (default 8m,128m)")
    p.add_argument("--transfers", metavar="LIST",
                   help="--evaluate transfer sizes (default 4k,256k,8m)")
    p.add_argument("--ops", metavar="LIST",
                   help="--evaluate: the operations of the grid, read and/or write (default read,write)")
    p.add_argument("--caches", metavar="LIST",
                   help="--evaluate: the cache states of the grid, hot and/or cold (default hot,cold)")
    p.add_argument("-i", "--reps", type=int,
                   help=f"--evaluate samples per contender and cell (default {stats.MIN_SAMPLES}, the fewest that make "
                   "a result)")
    p.add_argument("--max-reps", type=int, metavar="N",
                   help="--evaluate: where auto vs the cell's best is undecided, more rounds up to N samples "
                   f"(default {evaluate_mod.MAX_SAMPLES})")
    p.add_argument("--json", metavar="FILE", help="--evaluate: write the results as JSON ('-' for stdout; "
                   "the table then goes to stderr)")
    p.add_argument("--vs-profile", action="append", default=[], metavar="PROFILE",
                   help="--evaluate: also measure auto with this profile file ('off': the built-in model), in the "
                   "same rounds, and compare auto with it cell by cell (repeatable)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress (a bar on a terminal, else a line at most every 10 s)")


def _directory(path: str) -> str:
    if not os.path.exists(path):
        raise FileNotFoundError(2, "No such file or directory", path)
    return path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))


def _sizes(option: str, text: str) -> list[int]:
    from .._system import parse_sizes
    try:
        sizes = parse_sizes(text)
    except ValueError as e:
        raise UsageError(f"{option}: {e}") from None
    if not sizes:
        raise UsageError(f"{option} {text!r}: no sizes given")
    return sizes


def _choices(option: str, text: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """A comma-separated subset of `allowed`, in allowed's order."""
    given = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in given if w not in allowed]
    if bad or not given:
        raise UsageError(f"{option} {text!r}: expected one or more of {','.join(allowed)}")
    return tuple(w for w in allowed if w in given)


# The options that only one way of running reads, with their defaults: given to another (`--budget`
# with --show or --evaluate) they were ignored without a word. --threads is the calibration's and
# the evaluation's; --json and --vs-profile, the evaluation's, are said below.
_CALIBRATION = {"budget": 120.0, "device_budget": None, "file_size": "256m"}
_EVALUATION = {"file_sizes": "8m,128m", "transfers": "4k,256k,8m", "ops": "read,write", "caches": "hot,cold",
               "reps": stats.MIN_SAMPLES, "max_reps": evaluate_mod.MAX_SAMPLES}


def _check_modes(args) -> None:
    """UsageError for an option that the chosen way of running does not read; then the defaults of
    the options not given."""
    mode = "--show" if args.show else "--evaluate" if args.evaluate else None
    foreign = {**({} if mode is None else _CALIBRATION), **({} if mode == "--evaluate" else _EVALUATION),
               **({"threads": 0} if mode == "--show" else {})}
    given = [f"--{k.replace('_', '-')}" for k in foreign if getattr(args, k) is not None]
    if given:
        many = len(given) > 1
        what = {"--show": "not read with --show, which prints the profile",
                "--evaluate": f"a calibration's option{'s' * many}, not read with --evaluate",
                None: f"--evaluate's option{'s' * many}, not read by a calibration"}[mode]
        raise UsageError(f"{', '.join(given)}: {what}; leave {'them' if many else 'it'} out")
    for k, v in {**_CALIBRATION, **_EVALUATION, "threads": 0}.items():
        if getattr(args, k) is None:
            setattr(args, k, v)


def _check_usage(args) -> None:
    """Usage errors, all before the path is looked at or anything is measured (exit 2)."""
    if args.show and args.evaluate:
        raise UsageError("--show and --evaluate do not go together")
    _check_modes(args)
    if args.target != "host":
        raise UsageError(f"target {args.target!r}: --target is host; a GPU's device table is measured with "
                         "--device cuda:N (by default, cuda:0 when a GPU is present)")
    if args.device is not None and args.no_device:
        raise UsageError("--device and --no-device do not go together")
    if args.device_budget is not None and args.no_device:
        raise UsageError("--device-budget and --no-device do not go together (--no-device measures no GPU)")
    if args.device is not None:
        _ordinal(args.device)
    if args.device_budget is not None and not 0 < args.device_budget < args.budget:
        raise UsageError(f"--device-budget {args.device_budget:g}: must be above 0 and below --budget ({args.budget:g})")
    if args.json and not args.evaluate:
        raise UsageError("--json goes with --evaluate (a calibration writes its profile; see --profile)")
    if args.vs_profile and not args.evaluate:
        raise UsageError("--vs-profile goes with --evaluate")
    if args.profile == "-":
        raise UsageError("--profile takes a file name: a profile is a file that auto reads, not stdout")
    if args.evaluate:  # every profile the evaluation names, checked before its scratch files are written
        if args.profile:
            _check_profile_file("--profile", args.profile)
        elif _env_profile() not in ("auto", "off"):
            _check_profile_file("ACCIO_PROFILE", _env_profile(), " (correct the variable or unset it)")
    for v in args.vs_profile:
        if v != "off":
            _check_profile_file("--vs-profile", v, " (or 'off' for the built-in model)")
    if len(set(map(_vs_label, args.vs_profile))) != len(args.vs_profile):
        raise UsageError("--vs-profile: two profiles with the same file name (auto[NAME] names each by it)")
    if args.threads < 0:
        raise UsageError(f"--threads {args.threads}: must be at least 1 (0: online CPUs)")
    if args.reps < 1:
        raise UsageError("--reps must be at least 1")
    if args.max_reps < args.reps:
        raise UsageError(f"--max-reps {args.max_reps}: must be at least --reps ({args.reps})")
    if not args.evaluate and not args.show and not 5 <= args.budget < float("inf"):  # nan fails both
        raise UsageError(f"--budget {args.budget:g}: must be a number of seconds, at least 5")
    if args.evaluate:
        fs, xs = _sizes("--file-sizes", args.file_sizes), _sizes("--transfers", args.transfers)
        _choices("--ops", args.ops, evaluate_mod.OPS)
        _choices("--caches", args.caches, evaluate_mod.CACHES)
        if min(xs) > max(fs):
            raise UsageError(f"--transfers {args.transfers} --file-sizes {args.file_sizes}: no cell to measure "
                             "(every transfer is larger than every file)")
        check_output_path("--json", args.json)


def _env_profile() -> str:
    """The profile setting as the environment gives it: auto (also when unset or empty), off, or a file."""
    return os.environ.get("ACCIO_PROFILE") or "auto"


def _vs_label(v: str) -> str:
    return "built-in" if v == "off" else os.path.basename(v).removesuffix(".json")


def _check_profile_file(option: str, path: str, hint: str = "") -> dict:
    """UsageError (exit 2, naming the option) unless path is a profile the engine loads; else the
    engine's description of it. Found before anything is written or measured: the evaluation's auto
    handles refused a bad one only after its scratch files were written, and blamed ACCIO_PROFILE
    for a --profile."""
    what = f"ACCIO_PROFILE={path}" if option == "ACCIO_PROFILE" else f"{option} {path}"
    if not os.path.exists(path):
        raise UsageError(f"{what}: no such profile file{hint}")
    if not os.path.isfile(path):
        raise UsageError(f"{what}: not a regular file{hint}")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        return json.loads(_ext.profile_describe(text, path))
    except OSError as e:
        raise UsageError(f"{what}: " + ("not a profile: " if e.errno == 22 else "cannot read it: ")
                         + _engine_detail(e) + hint) from None


def _engine_detail(e: OSError) -> str:
    """The engine's reason without its "load profile 'PATH': ... (errno N)" frame."""
    from .._usage import describe
    text = describe(e)
    if "': " in text:
        text = text.split("': ", 1)[1]
    return text.removesuffix(f" (errno {e.errno})")


def resolve_profile(args, key: dict) -> tuple[str, str]:
    """The profile `auto` uses for files on the tuned filesystem, resolved as the engine resolves the
    profile setting: --profile, else ACCIO_PROFILE where it names a file, else the key's file in the
    profile directory. Returns (path, how): how is "--profile", "ACCIO_PROFILE", "off" (ACCIO_PROFILE=off:
    the built-in model; path is then the key's file, which auto does not read) or "directory"."""
    env = _env_profile()
    if args.profile:
        return args.profile, "--profile"
    if env == "off":
        return key["file"], "off"
    if env != "auto":
        return env, "ACCIO_PROFILE"
    return key["file"], "directory"


def _ordinal(device: str) -> int:
    from .. import _ordinal as ordinal
    try:
        return ordinal(device if not device.isdigit() else int(device))
    except ValueError as e:
        raise UsageError(f"--device {device!r}: expected cuda:N or N") from e


def _gpu(args, directory: str) -> dict | None:
    """The GPU whose device table this run measures: its facts (name, ordinal, PCI bus id, link) and
    cuFile's mode for the directory; None (and one line saying why) where none is measured. An
    explicit --device that names no GPU here is an error."""
    if args.no_device:
        return None
    from ..info import _gpus
    found = _gpus(directory)
    want = None if args.device is None else _ordinal(args.device)
    if not found["available"] or not found["devices"]:
        why = found["detail"] or "the driver reports no GPU"
        if want is not None:
            raise UsageError(f"--device cuda:{want}: no GPU here ({why})")
        print(f"accio tune: no GPU ({why}): host memory only", file=sys.stderr)
        return None
    gpus = {g["ordinal"]: g for g in found["devices"]}
    if want is not None and want not in gpus:
        raise UsageError(f"--device cuda:{want}: no such GPU (the driver reports {len(gpus)}: "
                         + ", ".join(f"cuda:{o} {g['name']}" for o, g in sorted(gpus.items())) + ")")
    return dict(gpus[min(gpus) if want is None else want], cufile=found["cufile"])


def _gpu_notes(gpu: dict, plans) -> list[str]:
    cf = gpu["cufile"]
    names = [p.mechanism for p in plans]
    notes = [f"measured {', '.join(names)}"]
    if "gds" not in names:
        notes.append(f"gds not measured: cuFile does not load ({cf.get('detail', '')})")
    elif cf.get("path") == "compat":
        notes.append("gds ran in cuFile's compatibility mode (no nvidia-fs for this filesystem): its POSIX path, "
                     "not direct DMA from storage")
    if "pagecache" not in names:
        notes.append("pagecache not measured: not available with this driver")
    return notes


def _check_space(directory: str, need: int) -> None:
    free = shutil.disk_usage(directory).free
    if free < need + 64 * MiB:
        raise OSError(28, f"{directory}: {fmt(free)} free, the calibration needs {fmt(need)} "
                      "(choose a smaller --file-size)")


def main(args) -> int:
    _check_usage(args)
    try:
        file_size = _ext.parse_size(args.file_size)
    except OSError:
        raise UsageError(f"--file-size {args.file_size!r} is not a size") from None
    directory = _directory(args.path)
    key = profile_mod.key(directory)
    if args.show:
        return show(*resolve_profile(args, key), key, directory)
    with sigterm_interrupts():  # killed: the scratch files go, as at Ctrl-C (exit 143; 130 for Ctrl-C)
        if args.evaluate:
            return evaluate(args, directory, *resolve_profile(args, key))
        # A calibration writes --profile or the key's file (never the file ACCIO_PROFILE names: its
        # last line says when that variable keeps auto from using what it wrote).
        path = args.profile or key["file"]
        if os.path.exists(path) and not (os.path.isfile(path) or os.path.isdir(path)):  # a device or FIFO:
            # saving would replace the node (a directory is check_creatable's to refuse)
            raise UsageError(f"{'--profile' if args.profile else 'the profile'} {path}: not a regular file (a profile "
                             "is a file that auto reads)")
        check_creatable("--profile" if args.profile else "the profile", path)  # before minutes of calibration
        if file_size < MIN_FILE_SIZE:
            raise UsageError(f"--file-size {args.file_size}: the calibration needs at least {fmt(MIN_FILE_SIZE)} "
                             f"(it measures requests up to 64 MiB on files of this size; the default is 256m)")
        # The calibration measures fixed plans: the profile ACCIO_PROFILE names plays no part, and
        # may be the one this run is to write (not there yet: every open would refuse it).
        saved = os.environ.pop("ACCIO_PROFILE", None)
        try:
            with profile_mod.calibration_lock(path):  # one calibration per profile at a time (exit 1)
                return tune(args, directory, key, path, file_size, saved)
        finally:
            if saved is not None:
                os.environ["ACCIO_PROFILE"] = saved


def show(path: str, how: str, key: dict, directory: str) -> int:
    if how == "off":
        print(f"accio tune: ACCIO_PROFILE=off: auto uses the built-in model ({_model_words(directory)} for one "
              f"reader on this machine; a file's explain() gives a request's plan)"
              + (f"; the profile of this filesystem, {path}, is not used while it is set" if os.path.exists(path) else ""),
              file=sys.stderr)
        return 1
    if how == "ACCIO_PROFILE":
        if not os.path.exists(path):
            print(f"accio tune: ACCIO_PROFILE names {path}, which does not exist: every open with auto is refused "
                  "while it is set; correct the variable or unset it", file=sys.stderr)
            return 1
        print(f"accio tune: ACCIO_PROFILE names {path}: auto uses it for every file"
              + (f" (not {key['file']})" if os.path.abspath(path) != os.path.abspath(key["file"]) else ""),
              file=sys.stderr)
    if not os.path.exists(path):
        print(f"accio tune: no profile for {key['filesystem']} on {key['device']} (kernel {key['kernel']}, "
              f"accio {key['accio']}) at {path}: auto uses the built-in model ({_model_words(directory)} for one "
              f"reader on this machine; a file's explain() gives a request's plan).\n"
              f"accio tune: run `accio tune {directory}` to measure this filesystem.", file=sys.stderr)
        return 1
    if not os.path.isfile(path):  # a FIFO would wait for a writer for ever; the engine refuses it
        raise UsageError(f"{path}: not a regular file (a profile is a file that auto reads)")
    with open(path, encoding="utf-8", errors="replace") as f:  # not text: the engine names the file
        text = f.read()
    # The engine's own parse: what it refuses, --show refuses, naming it; its description gives the
    # plans' labels (the engine owns them).
    described = _ext.profile_describe(text, path)
    try:
        shown = profile_mod.render(json.loads(text), path, described)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:  # what the engine let pass
        raise RuntimeError(f"{path}: not a profile: --show cannot read it ({type(e).__name__}: {e})") from None
    print(shown)
    return 0


def _model_words(directory: str) -> str:
    """The built-in model's reads by one thread in words: 'posix below 1536KiB, parallel above'."""
    model = builtin_model(where=directory)
    plans = [p["mechanism"] for p in model["plans"]]
    cells = model["decisions"]["read"]["1"]["hot"]
    words, lo = [], 0
    for i, c in enumerate(cells):
        mech = plans[c["plans"][0]]
        if i + 1 < len(cells) and plans[cells[i + 1]["plans"][0]] == mech:
            continue  # the same mechanism in the next cell: one phrase for both
        hi = c["max_size"]
        words.append(f"{mech} " + ("above" if hi is None and lo else "at every size" if hi is None
                                   else f"below {fmt(hi + 1)}" if not lo else f"up to {fmt(hi)}"))
        lo = (hi or 0) + 1
    return ", ".join(words)


def tune(args, directory: str, key: dict, path: str, file_size: int, env_profile: str | None = None) -> int:
    t0 = time.monotonic()
    threads = args.threads or os.cpu_count() or 1
    gpu = _gpu(args, directory)
    device_budget = (args.device_budget or args.budget / 3) if gpu else 0.0
    _check_space(directory, 2 * file_size)
    progress = Progress("accio tune", not args.quiet, budget=args.budget, t0=t0)
    device = None
    try:
        with Bench(directory, file_size) as bench:
            takes_direct = _ext.probe("o_direct", directory)[0]
            # First, whether the device gains from depth (the shim's prefetch): a small share.
            prefetch = prefetch_mod.measure(bench, prefetch_mod.SHARE * (args.budget - device_budget), takes_direct)
            host_share = 1.0 - device_budget / args.budget  # of the progress shown
            search = Search(bench, threads, args.budget - device_budget - (time.monotonic() - t0) - 1.0,
                            base_plans(takes_direct), progress.stage(0.0, host_share))
            search.run()
            if gpu:
                t1 = time.monotonic()
                plans = device_plans()
                device = Search(bench, threads, args.budget - (t1 - t0) - 1.0, plans, progress.stage(host_share, 1.0),
                                device=gpu["ordinal"])
                device.notes += _gpu_notes(gpu, plans)
                device.run()
                device_elapsed = round(time.monotonic() - t1, 1)
    finally:
        progress.close()
    meta = {"key": {k: key[k] for k in ("filesystem", "device", "kernel", "accio")}, "target": "host",
            "path": os.path.abspath(directory), "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "command": "accio tune " + shlex.join(sys.argv[2:]) if sys.argv[1:2] == ["tune"] else "accio tune",
            "budget_s": args.budget, "elapsed_s": round(time.monotonic() - t0, 1), "file_size": file_size,
            "o_direct": takes_direct, "prefetch": prefetch,
            "cpus": os.sysconf("SC_NPROCESSORS_ONLN")}  # as the engine counts them: it says when a machine
    # of another size finds the profile
    doc = profile_mod.build(search, meta)
    if not doc["measurements"]:  # a profile of nothing would replace the one there with the built-in model
        raise RuntimeError(f"nothing was measured in {meta['elapsed_s']} s (--budget {args.budget}); "
                           f"{'the profile at ' + path + ' is kept' if os.path.exists(path) else 'no profile saved'}: "
                           "give the calibration more time with --budget")
    devices = profile_mod.kept_devices(path, gpu["name"] if gpu else None)
    if device is not None:
        devices.append(profile_mod.build_device(device, gpu, {"budget_s": round(device_budget, 1),
                                                              "elapsed_s": device_elapsed, "cufile": gpu["cufile"]}))
    if devices:
        doc["devices"] = devices
    described = profile_mod.save(doc, path)
    print(profile_mod.render(doc, path, described))
    where = key["filesystem"] if key["filesystem"] == key["device"] else f"{key['filesystem']} on {key['device']}"
    gpus = f" and for GPU buffers on {gpu['name']}" if gpu else ""
    if os.path.abspath(path) == os.path.abspath(key["file"]):
        print(f"\nsaved {path}; `auto` uses it for files on {where}{gpus}")
    else:  # `auto` looks profiles up in the profile directory only
        print(f"\nsaved {path}; `auto` uses it for files on {where}{gpus} where it is named: "
              f"ACCIO_PROFILE={shlex.quote(os.path.abspath(path))} (or the setting profile=FILE), or "
              f"copied to {key['file']}, where `auto` looks for this filesystem's profile")
    env = env_profile or "auto"
    if env == "off":
        print("accio tune: warning: ACCIO_PROFILE=off is set here: `auto` uses the built-in model, not this profile, "
              "while it is set")
    elif env != "auto" and os.path.realpath(env) != os.path.realpath(path):
        print(f"accio tune: warning: ACCIO_PROFILE={shlex.quote(env)} is set here: `auto` uses that file, not this "
              "profile, while it is set")
    return 0


def decision_cost(bench: Bench, profile: str | None, sizes: list[int]) -> dict:
    """Mean ns per auto decision (residency probe included where the profile needs one), hot and cold."""
    out = {}
    settings = {"profile": profile} if profile else {}
    with File(bench.read_path, "r", **settings) as f:
        for cache in ("hot", "cold"):
            if cache == "cold":
                if not bench.cold_reads:
                    continue
                drop_pages(bench.read_path, 0, bench.file_size)
            else:
                bench._warm(bench.read_path, bench.file_size)
            for size in sizes:
                reqs = [(size, (i * size) % max(size, bench.file_size - size)) for i in range(64)]
                out[f"{fmt(size)} {cache}"] = round(f._f.decision_ns(reqs, False, 500), 1)
    return out


def evaluate(args, directory: str, path: str, how: str) -> int:
    file_sizes, transfers = _sizes("--file-sizes", args.file_sizes), _sizes("--transfers", args.transfers)
    ops, caches = _choices("--ops", args.ops, evaluate_mod.OPS), _choices("--caches", args.caches, evaluate_mod.CACHES)
    threads = args.threads or os.cpu_count() or 1
    # The profile auto uses (resolve_profile: --profile, ACCIO_PROFILE, the key's file), named the
    # same way in the printed line, the table and the JSON; the auto handles get it through
    # ACCIO_PROFILE, set here (--profile and ACCIO_PROFILE were checked by _check_usage).
    off = how == "off"
    have = not off and os.path.exists(path)
    model = "built-in model" + (" (rotational device)" if builtin_model(where=directory).get("rotational") else "")
    if off:
        print("accio tune: ACCIO_PROFILE=off: auto is evaluated with the built-in model", file=sys.stderr)
    elif how == "ACCIO_PROFILE":
        print(f"accio tune: ACCIO_PROFILE names {path}: auto is evaluated with it", file=sys.stderr)
    elif not have:
        print(f"accio tune: no profile at {path}: auto is evaluated with the built-in model "
              f"(run `accio tune {directory}` first to evaluate a measured profile)", file=sys.stderr)
    elif how == "directory":  # the engine would warn and use the model: so is it evaluated, and named
        try:
            _check_profile_file("the profile", path)
        except UsageError as e:
            print(f"accio tune: {e}: auto is evaluated with the built-in model", file=sys.stderr)
            have = False
    big = max(file_sizes)
    gpu = _gpu(args, directory)
    writes = "write" in ops
    # the read file of every size, and the write file where writes are measured
    _check_space(directory, (1 + writes) * big + sum(s for s in set(file_sizes) if s != big))
    progress = Progress("accio tune", not args.quiet)
    saved = os.environ.get("ACCIO_PROFILE")
    try:
        with Bench(directory, big, writes=writes) as bench:
            def cells() -> list[dict]:  # a fresh grid for each run (run() writes its results into the cells)
                return evaluate_mod.grid(file_sizes, transfers, threads, bench.cold_reads, ops, caches)
            if not cells():  # cold reads alone, where they cannot be made (_check_usage caught the sizes)
                raise UsageError(f"--ops {','.join(ops)} --caches {','.join(caches)}: no cell to measure "
                                 f"({bench.cold_note})")
            os.environ["ACCIO_PROFILE"] = path if have else "off"  # the auto handles of the run use this
            others = {_vs_label(v): v for v in args.vs_profile}
            grid_size = len(cells())
            result = evaluate_mod.run(bench, cells(), args.reps, progress=progress.stage(0.0, 0.5 if gpu else 1.0),
                                      max_reps=args.max_reps, profiles=others)
            if not result.get("interrupted"):
                try:
                    result["decision_ns"] = decision_cost(bench, path if have else "off", transfers)
                except KeyboardInterrupt as e:  # the cells are measured: they are kept (review, session 27)
                    result["interrupted"] = interrupted_status(e)
            result["cold_reads"] = bench.cold_reads
            result["notes"] = [bench.cold_note] if bench.cold_note else []
            if gpu and not result.get("interrupted"):
                # The same grid into the GPU's memory: auto (the profile's device table for this
                # GPU's model, or the built-in device rule) against every device mechanism.
                fixed = [p.mechanism for p in device_plans()]
                dev = evaluate_mod.run(bench, cells(), args.reps, contenders=("auto", *fixed),
                                       progress=progress.stage(0.5, 1.0), max_reps=args.max_reps, device=gpu["ordinal"])
                dev["gpu"] = {k: gpu[k] for k in ("ordinal", "name", "pci_bus_id", "cufile") if k in gpu}
                result["device"] = dev
                if dev.get("interrupted"):
                    result["interrupted"] = dev["interrupted"]
    finally:
        progress.close()
        os.environ.pop("ACCIO_PROFILE", None)
        if saved is not None:
            os.environ["ACCIO_PROFILE"] = saved
    from ..info import gather
    info = gather(directory)
    result.update({"schema": "accio.tune-evaluate/1", "profile": path if have else model,
                   "path": os.path.abspath(directory), "threads": threads, "ops": list(ops),
                   "caches": list(caches), "reps": args.reps, "vs_profiles": list(args.vs_profile),
                   "max_reps": args.max_reps, "command": "accio " + shlex.join(sys.argv[1:]),
                   "machine": {k: info[k] for k in ("kernel", "cpu", "memory")}, "accio": __version__,
                   "git_commit": _ext.git_commit(), "filesystem": info.get("filesystem"),
                   "created": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    text = evaluate_mod.render(result)
    if "device" in result:
        g = result["device"]["gpu"]
        text += (f"\n\nGPU buffers on cuda:{g['ordinal']} ({g['name']}): auto against every device mechanism\n"
                 + evaluate_mod.render(result["device"]))
    interrupted = result.pop("interrupted", 0)
    result["complete"] = not interrupted
    print(text, file=sys.stderr if args.json == "-" else sys.stdout)
    if args.json:
        write_json(args.json, result)
    if interrupted:  # as `accio bench`: the finished cells are reported, and the exit says the signal
        print(f"accio tune: interrupted after {len(result['cells'])} of {grid_size} cell(s)"
              + (f" (and {len(result['device']['cells'])} with GPU buffers)" if "device" in result else "")
              + ("; the output holds those" if args.json else ""), file=sys.stderr)
    return interrupted
