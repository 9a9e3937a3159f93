"""Profiles: what a search measured, turned into the decision table the engine's `auto` reads
(src/planner/profile.cpp parses the same format), saved under the key of the filesystem, and shown
as a readable table. Format: docs/tuning.md.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import sys
import tempfile

from .. import _ext, stats
from . import prefetch as prefetch_mod
from .measure import Plan, fmt
from .search import COARSE_SIZES, Group, Search, builtin_cells, builtin_model


SCHEMA = builtin_model()["schema"]  # the format the engine reads


def _boundary(a: int, b: int) -> int:
    """Where the decision switches between measured sizes a < b: the power of two in (a, b] nearest
    their geometric mean (rounding up), or b when no power of two lies in between."""
    p = 1 << math.ceil((math.log2(a) + math.log2(b)) / 2)
    return p if a < p <= b else b


def _builtin_cells(search: Search, op: str, conc: str, cache: str, index) -> list[dict]:
    """The built-in model's (device: device rule's) cells for op, concurrency and cache state, for
    the device the search measured, its plans added to this profile's."""
    device = search.device >= 0
    where = None if device else search.bench.directory
    plans = [Plan.from_json(p) for p in builtin_model(device, where)["plans"]]
    return [{"max_size": c["max_size"], "plans": [index(plans[i]) for i in c["plans"]]}
            for c in builtin_cells(op, conc, cache, device, where)]


def _covering(cells: list[dict], hi: int | None) -> dict:
    """The cell of `cells` that holds the sizes up to hi (None: unbounded)."""
    return next(c for c in cells if c["max_size"] is None or (hi is not None and hi <= c["max_size"]))


def _model_cold_start(op: str, conc: str, cold: list[dict], index, where: str | None = None) -> list[dict] | None:
    """The built-in model's cold_start rule over this profile's measured cold cells. The search
    measures cold streams, not a cold read that starts a stream and runs to the end of the file (a
    whole file read in one request), so that rule stays the model's: the plans the model puts first
    there (direct, from 8 MiB) come first, then the profile's cold plans. None where the model has
    no such rule for op and concurrency."""
    model = builtin_model(False, where)
    entry = model["decisions"][op][conc]
    if not entry.get("cold_start"):
        return None
    mplans = [Plan.from_json(p) for p in model["plans"]]
    key = lambda v: math.inf if v is None else v  # noqa: E731
    bounds = sorted({c["max_size"] for c in entry["cold_start"]} | {c["max_size"] for c in cold}, key=key)
    cells: list[dict] = []
    for hi in bounds:
        hot = _covering(entry["hot"], hi)["plans"]
        first = [index(mplans[i]) for i in _covering(entry["cold_start"], hi)["plans"] if i not in hot]
        plans = first + [i for i in _covering(cold, hi)["plans"] if i not in first]
        if cells and cells[-1]["plans"] == plans:
            cells[-1]["max_size"] = hi
        else:
            cells.append({"max_size": hi, "plans": plans, **({"builtin": True} if first else {})})
    return cells if any(c.get("builtin") for c in cells) else None


def _tables(search: Search) -> dict:
    """What a search measured as a table the engine reads: plans, decisions, and every sample."""
    plans: list[Plan] = []

    def index(p: Plan) -> int:
        if p not in plans:
            plans.append(p)
        return plans.index(p)

    index(Plan(_last_resort(search)))
    decisions: dict = {"read": {}, "write": {}}
    groups = {(g.op, g.concurrency, g.cache): g for g in search.groups()}
    for op in ("read", "write"):
        for conc in ("1", "N"):
            entry = {}
            for cache in ("hot", "cold"):
                g = groups.get((op, conc, cache))
                if g is None and groups.get((op, "1", cache)) is not None:
                    # --threads 1: no group of several requests in flight was measured. Those cells
                    # are the model's (its rule for them differs: posix on 2 CPUs, where a split
                    # ran at 0.88-0.93x), not copies of the one-thread winners (audit s26 #14).
                    entry[cache] = [{**c, "builtin": True} for c in _builtin_cells(search, op, conc, cache, index)]
                    continue
                if g is None:
                    entry[cache] = None  # not measurable (cold reads on tmpfs): hot applies
                    continue
                entry[cache] = _cells(search, g, index) or [
                    {**c, "builtin": True} for c in _builtin_cells(search, op, conc, cache, index)]
            if search.device < 0 and entry.get("cold") is not None:
                start = _model_cold_start(op, conc, entry["cold"], index, search.bench.directory)
                if start:
                    entry["cold_start"] = start
            decisions[op][conc] = entry
    measurements = []
    for (g, size, plan), mibps in sorted(search.samples.items(),
                                         key=lambda kv: (kv[0][0].op, kv[0][0].threads, kv[0][0].cache, kv[0][1])):
        measurements.append({"op": g.op, "cache": g.cache, "threads": g.threads, "size": size,
                             "plan": index(plan), "mibps": [round(x, 1) for x in mibps],
                             "median": round(statistics.median(mibps), 1)})
    return {"plans": [p.to_json() for p in plans], "decisions": decisions, "measurements": measurements}


def _last_resort(search: Search) -> str:
    """Every cell's last resort in the engine (the planner appends it): posix, staged for a GPU."""
    return "staged" if search.device >= 0 else "posix"


def build(search: Search, meta: dict) -> dict:
    t = _tables(search)
    return {"schema": SCHEMA, **meta, "threads": search.threads, "cold_reads": search.bench.cold_reads,
            "notes": search.notes + ([search.bench.cold_note] if search.bench.cold_note else []),
            "plans": t["plans"], "decisions": t["decisions"], "measurements": t["measurements"]}


def build_device(search: Search, gpu: dict, meta: dict) -> dict:
    """A device table: what a search over one GPU measured, for every GPU of its model."""
    t = _tables(search)
    return {"model": gpu["name"], "measured_on": {k: gpu[k] for k in ("ordinal", "pci_bus_id", "link") if k in gpu},
            **meta, "threads": search.threads, "notes": list(search.notes),
            "plans": t["plans"], "decisions": t["decisions"], "measurements": t["measurements"]}


def _model_raw(search: Search, g: Group) -> list[dict]:
    """The built-in model's cells for the group (indexes into the model's own plans)."""
    device = search.device >= 0
    return builtin_cells(g.op, g.concurrency, g.cache, device, None if device else search.bench.directory)


def _cells(search: Search, g: Group, index) -> list[dict]:
    """Size cells of one group. Between two measured sizes that decide alike, or where the model
    plans alike, a measured size decides up to the power of two nearest the geometric mean with the
    next (_boundary). Where the two decide differently and the built-in model changes its plan in
    between, each decision reaches only as far as the model keeps the plan of the size it was
    measured at, and the model's cells in between apply, marked builtin: nothing measured there
    says otherwise (where both keep the model's plans, this is the model's own boundary). (A decision extended over the whole gap to the
    geometric mean: a profile measured at 1 MiB and 8 MiB ran 2-3 MiB hot reads posix, where the
    model splits them, at 0.57x of the model (audit s26 #5).) Neighbours that decide the same
    (best plan and best plan without alignment needs) merge. Where the budget ran out before the
    largest size was measured, the largest measured size decides only for itself and the built-in
    model's cells apply above it."""
    cells: list[dict] = []
    sizes = search.sizes(g)
    raw = _model_raw(search, g)
    model_plans = [Plan.from_json(p) for p in builtin_model(search.device >= 0,
                                                            None if search.device >= 0 else search.bench.directory)["plans"]]
    decided = []
    for size in sizes:
        r = search.ranking(g, size)
        if not r:
            continue
        ranked = [p for p, _ in r]
        # The winner, and the best plan without alignment needs (unaligned requests), each only
        # where it beats the built-in plan by more than the noise measured (Search.decide).
        builtin = search.builtin(g, size)
        first, guard = search.decide(g, size, ranked)
        unaligned = [p for p in ranked if not p.needs_alignment]
        fallback, fguard = search.decide(g, size, unaligned) if unaligned else (Plan(_last_resort(search)), {})
        measured = {"size": size, "mibps": round(r[0][1], 1),
                    "next": r[1][0].label if len(r) > 1 else None,
                    "next_mibps": round(r[1][1], 1) if len(r) > 1 else None}
        if guard.get("kept") and unaligned and fallback != builtin:
            # The winner needs alignment and was set aside; the best plan without alignment needs
            # was confirmed faster than the built-in plan: it serves aligned requests as well. As
            # [built-in, fallback] the planner took the built-in plan for both (audit s26 #4).
            keep = [fallback]
            rest = [(p, m) for p, m in r if p != fallback]
            measured = {"size": size, "mibps": round(dict(r)[fallback], 1),
                        "next": rest[0][0].label if rest else None, "next_mibps": round(rest[0][1], 1) if rest else None,
                        "guard": {k: v for k, v in fguard.items() if k != "winner"},
                        "fallback": {"set_aside": guard["winner"], **{k: v for k, v in guard.items() if k != "kept"}}}
        else:
            keep = list(dict.fromkeys([first, fallback]))
            if guard.get("kept"):  # the winner that did not beat the built-in plan beyond the noise
                measured["kept_builtin"] = {k: v for k, v in guard.items() if k != "kept"}
            elif guard:             # how far the winner beat the built-in plan, in how many paired rounds
                measured["guard"] = {k: v for k, v in guard.items() if k != "winner"}
        decided.append((size, [index(p) for p in keep], measured))
    for i, (size, keep, measured) in enumerate(decided):
        gap: list[dict] = []
        if i + 1 < len(decided):
            nxt, keep_next = decided[i + 1][:2]
            ca, cb = _covering(raw, size), _covering(raw, nxt)
            if ca is cb or keep == keep_next:
                max_size = _boundary(size, nxt) - 1
            else:  # the model changes its plan in between: this decision reaches its first change
                max_size = ca["max_size"]
                gap = [{"max_size": c["max_size"], "plans": [index(model_plans[j]) for j in c["plans"]], "builtin": True}
                       for c in raw[raw.index(ca) + 1:raw.index(cb)]]
        else:
            max_size = None
        cell = {"max_size": max_size, "plans": keep, "measured": measured}
        if cells and not cells[-1].get("builtin") and cells[-1]["plans"] == cell["plans"]:
            cells[-1]["max_size"] = cell["max_size"]
            cells[-1].setdefault("also_measured", []).append(cell["measured"])
        else:
            cells.append(cell)
        cells += gap
    if not cells:
        return cells
    largest = max((x for x in COARSE_SIZES if x * g.threads <= search.bench.file_size), default=0)
    if sizes[-1] >= largest:
        cells[-1]["max_size"] = None
        return cells
    cells[-1]["max_size"] = sizes[-1]
    cells += [{**c, "builtin": True} for c in _builtin_cells(search, g.op, g.concurrency, g.cache, index)
              if c["max_size"] is None or c["max_size"] > sizes[-1]]
    return cells


def kept_devices(path: str, measured: str | None) -> list[dict]:
    """The device tables of the profile at path (which a new one replaces) for GPU models other than
    `measured`: a table stays valid for its model on this filesystem, kernel and accio version. Only
    tables the engine accepts are kept (each is parsed alone, in a document with the built-in host
    table); a broken old profile, or a broken table in it, is said and replaced: the calibration
    saved an old profile's bad table into the new one, which every open then refused, or crashed
    after its whole run on an old profile of [] or devices: 5 (audit s26 #3)."""
    try:
        old = load(path)
        devices = old.get("devices")
        if devices is not None and not isinstance(devices, list):
            raise ValueError(f"devices is {type(devices).__name__}, not a list")
    except FileNotFoundError:
        return []
    except (OSError, ValueError, UnicodeError) as e:
        print(f"accio tune: {path}: its device tables are not kept ({e}); the new profile replaces it", file=sys.stderr)
        return []
    model = builtin_model()
    kept, dropped = [], []
    for i, d in enumerate(devices or []):
        name = d.get("model") if isinstance(d, dict) else None
        if name is not None and name == measured:
            continue  # measured again now
        if name is not None and name in (k.get("model") for k in kept):
            dropped.append(f"devices[{i}] ({name}): a second table for this model")
            continue
        try:
            _ext.profile_describe(json.dumps({"schema": SCHEMA, "plans": model["plans"],
                                              "decisions": model["decisions"], "devices": [d]}), path)
        except (OSError, TypeError, ValueError) as e:  # the engine's refusal (OSError), or not JSON at all
            detail = str(e).split("': ", 1)[-1]
            dropped.append(f"devices[{i}] ({name if isinstance(name, str) else '?'}): {detail}")
            continue
        kept.append(d)
    for why in dropped:
        print(f"accio tune: {path}: not kept, the engine refuses it: {why}", file=sys.stderr)
    if kept:
        print(f"accio tune: kept the device tables of {', '.join(str(d.get('model')) for d in kept)} from {path}",
              file=sys.stderr)
    return kept


def key(path: str) -> dict:
    return _ext.profile_key(path)


def _target(path: str) -> str:
    """The file a profile path names: a symbolic link's target (a shared profile linked from a
    profile directory is rewritten where it is, not replaced by a private file beside the link)."""
    return os.path.realpath(path)


def _mode(path: str) -> int:
    """The permissions of the profile a save replaces, else those of a new file (0o666 less the
    umask): mkstemp's 0o600 made a profile in a group's profile directory unreadable to the group."""
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def save(profile: dict, path: str) -> str:
    """Writes atomically (a process opening files meanwhile sees the old or the new profile), with
    "engine_from" as the engine reads the profile: per direction, the smallest request (one in
    flight) it runs with anything but posix, or null. The launcher of `accio run` reads it without
    loading the engine, so that the shim passes smaller requests straight to libc
    (src/planner/model_floor.h). The engine itself ignores the field: it derives it from the table.

    A document the engine refuses is never written: RuntimeError (a bug of the tuner: kept_devices
    keeps only tables the engine accepts). It was written with a warning, and every open refused it.
    A symbolic link is followed (its target is replaced); the file keeps the old one's permissions,
    a new one gets 0o666 less the umask. Returns the engine's description of what was saved."""
    try:
        described = _ext.profile_describe(json.dumps(profile), path)
    except OSError as e:
        raise RuntimeError(f"{path}: not saved: the engine refuses the profile this calibration made ({e}); "
                           "this is a bug of accio tune, please report it") from None
    profile = {**profile, "engine_from": json.loads(described)["engine_from"]}
    path = _target(path)
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    mode = _mode(path)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".profile.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w") as f:
            json.dump(profile, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return described


@contextlib.contextmanager
def calibration_lock(path: str):
    """Holds an exclusive flock(2) on the profile's lock file for a calibration, or raises
    RuntimeError at once, naming the pid of the calibration that holds it: two runs measured under
    each other's load and the last to save won without a word (audit s26 #12). The lock file is
    `.NAME.lock` beside the profile (of a symbolic link: beside its target), a dot file because the
    launcher of `accio run` reads every other file of the profile directory; it stays after the run
    (removing it would let a third run lock a new file while a second holds the old one)."""
    import fcntl
    target = _target(path)
    d = os.path.dirname(target) or "."
    os.makedirs(d, exist_ok=True)
    lock = os.path.join(d, "." + os.path.basename(target) + ".lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, _mode(lock))
    except PermissionError:  # another user's lock file: a read-only descriptor locks as well
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise RuntimeError(f"another `accio tune` (pid {pid}) is calibrating for {path} (it holds {lock}): "
                               "two calibrations would measure each other's load; run again when it has "
                               "finished") from None
        with contextlib.suppress(OSError):  # read-only: the pid is not written, the lock holds
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield lock
    finally:
        os.close(fd)


def load(path: str) -> dict:
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not an accio profile (a JSON {type(doc).__name__}, not an object)")
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not an accio profile (schema {doc.get('schema')!r})")
    return doc


def _range(lo: int, hi: int | None) -> str:
    """A size range [lo, hi] in round sizes: '< 1536KiB', '1536KiB .. <= 8MiB', '> 8MiB' (a cell that
    ends at 8 MiB inclusive is not written '< 8388609B')."""
    low = ("> " + fmt(lo - 1)) if lo % 1024 else fmt(lo)
    if hi is None:
        return ("" if lo % 1024 else ">= ") + low if lo else "any size"
    high = f"< {fmt(hi + 1)}" if (hi + 1) % 1024 == 0 else f"<= {fmt(hi)}"
    return high if lo == 0 else f"{low} .. {high}"


def _num(x) -> bool:
    """A finite number (not a bool): what --show formats; anything else in a field the engine does
    not read (measured, prefetch, notes) is left out rather than crash the table."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _notes(x) -> list[str]:
    """A profile's notes: a list of lines (a single string is one note, not one per character)."""
    if isinstance(x, str):
        return [x]
    return [str(n) for n in x] if isinstance(x, list) else []


def _labels(described: dict) -> tuple[list[str], dict]:
    """The engine's labels of the host table's plans, and of each device table's, by model."""
    return ([p["label"] for p in described["plans"]],
            {d["model"]: [p["label"] for p in d["plans"]] for d in described.get("devices") or []})


def render(doc: dict, source: str, described: str | dict | None = None) -> str:
    """The decisions as a table: per operation and concurrency, size ranges with the hot and cold
    plan; then each GPU model's device table, or the rule GPUs get without one. The plans' labels
    are the engine's (`described`, accio_profile_describe's output for doc; asked for here when not
    given): the engine owns the plan vocabulary, and Python's Plan rebuilt them without a knob it
    did not know (`parallel(task=4MiB)` for the engine's `parallel(task=4MiB, realign=on)`)."""
    if described is None:
        described = _ext.profile_describe(json.dumps(doc), source)
    if isinstance(described, str):
        described = json.loads(described)
    host, devices = _labels(described)
    k = doc.get("key") if isinstance(doc.get("key"), dict) else {}
    out = [f"profile {source}",
           f"  {k.get('filesystem')} on {k.get('device')}, kernel {k.get('kernel')}, accio {k.get('accio')}; "
           f"measured {doc.get('created', '?')} in {doc.get('elapsed_s', '?')} s (budget {doc.get('budget_s', '?')} s), "
           f"N = {doc.get('threads')} threads"]
    for n in _notes(doc.get("notes")):
        out.append(f"  note: {n}")
    out.append("  " + prefetch_mod.render(doc.get("prefetch")))
    out += _render_decisions(doc, "", host)
    for d in doc.get("devices") or []:
        on = d.get("measured_on") if isinstance(d.get("measured_on"), dict) else {}
        out.append(f"\nGPU buffers on {d['model']} (measured on cuda:{on.get('ordinal', '?')} {on.get('pci_bus_id', '')}, "
                   f"{d.get('elapsed_s', '?')} s, N = {d.get('threads')} threads; every GPU of this model uses it):")
        for n in _notes(d.get("notes")):
            out.append(f"  note: {n}")
        out += _render_decisions(d, "GPU ", devices[d["model"]])
    if not doc.get("devices"):
        out.append("\nGPU buffers: no device table measured: reads and writes run staged. `accio tune` on a "
                   "machine with a GPU measures it.")
    return "\n".join(out)


def _measured_text(c: dict, labels: list[str]) -> str:
    """What a cell says beside its plan: the model's, or what was measured and guarded (fields the
    engine does not read: each shown only where it has the expected shape)."""
    if c.get("builtin"):
        return "  (built-in model: not measured)"
    m = c.get("measured")
    if not isinstance(m, dict) or not _num(m.get("mibps")) or not _num(m.get("size")):
        return ""
    at = f"{m['mibps']:.0f} MiB/s at {fmt(int(m['size']))}"
    k = m.get("kept_builtin")
    if isinstance(k, dict):
        winner = k.get("winner", "?")
        rounds = k.get("rounds") if _num(k.get("rounds")) else 0
        if k.get("vs_builtin") is None or rounds < stats.MIN_SAMPLES:  # never compared: no statistical claim
            return (f"  (built-in kept: {winner} {at} not guarded: the budget ran out "
                    + (f"after {rounds:.0f} of the {stats.MIN_SAMPLES} rounds)" if rounds else "before the guard)"))
        return (f"  (built-in kept: {winner} {at} "
                + (f"was faster in only {rounds:.0f} rounds, unconfirmed)" if k.get("unconfirmed")
                   else "did not win beyond the noise)"))
    text = f"  {at}"
    if m.get("next") and _num(m.get("next_mibps")):
        text += f" (next {m['next']} {m['next_mibps']:.0f})"
    g = m.get("guard")
    v = g.get("vs_builtin") if isinstance(g, dict) else None
    if isinstance(v, list) and len(v) == 3 and all(map(_num, v)):
        text += f", {v[0]:.2f}x [{stats.bounds(v[1], v[2])}] the built-in"
    f = m.get("fallback")
    if isinstance(f, dict) and f.get("set_aside"):
        text += f" (the winner, {f['set_aside']}, needs alignment and was not confirmed: the best plan without it runs)"
    return text


def _render_decisions(doc: dict, prefix: str, labels: list[str]) -> list[str]:
    out = []
    for op in ("read", "write"):
        for conc in ("1", "N"):
            entry = doc["decisions"][op][conc]
            caches = ("hot", "cold") + (("cold_start",) if entry.get("cold_start") else ())
            bounds = sorted({c["max_size"] for cache in caches for c in (entry.get(cache) or [])},
                            key=lambda v: math.inf if v is None else v)
            who = "1 request in flight" if conc == "1" else "several requests in flight"
            out.append(f"\n{prefix}{op}, {who}:")
            rows = [("size", "hot (cached) range", "cold range") + (("cold, starts a stream and reads to the end",) if len(caches) > 2 else ())]
            lo = 0
            prev: dict = {}
            for hi in bounds:
                cols = []
                for cache in caches:
                    cells = entry.get(cache)
                    if not cells:
                        cols.append("as hot" if cache == "cold" else "-")
                        continue
                    c = _covering(cells, hi)
                    if prev.get(cache) is c:
                        cols.append('  "')
                        continue
                    prev[cache] = c
                    cols.append(labels[c["plans"][0]] + _measured_text(c, labels))
                rows.append((_range(lo, hi), *cols))
                lo = (hi or 0) + 1
            widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
            for r in rows:
                out.append("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    return out
