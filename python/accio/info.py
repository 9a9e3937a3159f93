"""`accio info`: what this machine offers for file I/O, and what accio will do on it."""
from __future__ import annotations

import os
import platform
import resource

from . import _ext
from ._system import cpu_model, fmt_size, meminfo, online_cpus






def _thp_mode() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            s = f.read()
        return s[s.index("[") + 1:s.index("]")]
    except (OSError, ValueError):
        return "unknown"


def filesystem(path: str) -> dict:
    """Mount point, filesystem type and device holding path (from /proc/self/mountinfo)."""
    path = os.path.realpath(path)
    best = {"mount_point": "/", "fstype": "unknown", "device": "unknown"}
    best_len = -1
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, right = line.split(" - ", 1)
                mnt = left.split()[4].replace("\\040", " ")
                fstype, dev = right.split()[:2]
                inside = path == mnt or path.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) >= best_len:
                    best = {"mount_point": mnt, "fstype": fstype, "device": dev}
                    best_len = len(mnt)
    except OSError:
        pass
    return best


def offload_venodes() -> dict[int, str]:
    """The venodes the offload runtime binds: veo_proc_create(N) runs its worker on the CPUs of NUMA
    node N where that node has CPUs (node -> CPU list); any other venode >= 0 is only a name."""
    nodes = {}
    base = "/sys/devices/system/node"
    try:
        names = os.listdir(base)
    except OSError:
        return nodes
    for n in names:
        if n.startswith("node") and n[4:].isdigit():
            try:
                with open(f"{base}/{n}/cpulist") as f:
                    cpus = f.read().strip()
            except OSError:
                continue
            if cpus:
                nodes[int(n[4:])] = cpus
    return dict(sorted(nodes.items()))


def _limit(v: int) -> str | int:
    return "unlimited" if v == resource.RLIM_INFINITY else v


def path_info(path: str) -> dict:
    """The filesystem holding path (mount point, type, device) and whether it takes O_DIRECT."""
    try:
        od_ok, od_detail = _ext.probe("o_direct", path)
    except OSError as e:
        od_ok, od_detail = False, str(e)
    return {"path": os.path.realpath(path), **filesystem(path), "o_direct": {"supported": od_ok, "detail": od_detail}}


def _load_offload_settings() -> None:
    """libaccio_offload adds its rows (offload_*) to the settings table when it is loaded: load it,
    so that the table below has them. A package without it lists the I/O settings only."""
    try:
        from . import offload
        offload.load()
    except OSError:
        pass


def gather(path: str = ".") -> dict:
    _load_offload_settings()
    mi = meminfo()
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    uring_ok, uring_detail = _ext.probe("io_uring")
    cs_ok, cs_detail = _ext.probe("cachestat")
    mc_ok, mc_detail = _ext.probe("mincore")
    slow_copy, slow_copy_detail = _ext.probe("slow_misaligned_copy")
    u = platform.uname()
    return {
        "accio_version": _ext.version(),
        "kernel": f"{u.system} {u.release}",
        "machine": u.machine,
        "cpu": {"model": cpu_model(), "count": os.cpu_count(), "usable": online_cpus(),
                "slow_misaligned_copy": slow_copy, "realign_detail": slow_copy_detail},
        "memory": {"total_kib": mi.get("MemTotal", 0), "available_kib": mi.get("MemAvailable", 0)},
        "io_uring": {"available": uring_ok, "detail": uring_detail or "io_uring_setup works"},
        "huge_pages": {
            "reserved": mi.get("HugePages_Total", 0), "free": mi.get("HugePages_Free", 0),
            "size_kib": mi.get("Hugepagesize", 0), "thp": _thp_mode(),
        },
        "rlimit_memlock": {"soft": _limit(soft), "hard": _limit(hard)},
        "path": path_info(path),
        "residency_query": {"cachestat": cs_ok, "mincore": mc_ok,
                            "method": "cachestat" if cs_ok else ("mincore" if mc_ok else "none"),
                            "detail": cs_detail if cs_ok else mc_detail},
        "tuning_profile": _profile(path),
        "gpus": _gpus(path),
        "offload_venodes": offload_venodes(),
        "mechanisms": _ext.mechanisms(),
        "settings": _settings_now(),
    }


def _settings_now() -> list[dict]:
    """Each row with the value a file opened now gets from the defaults and ACCIO_* ("value"), or, where
    the row's variable holds a bad value, None and the engine's error ("error")."""
    now = {n: (v, e) for n, v, e in _ext.env_settings()}
    return [{**row, "value": now[row["name"]][0], "error": now[row["name"]][1]} for row in settings_table()]


# The ACCIO_* variables accio reads that are not settings rows (those are in the settings table):
# accio run's launcher and shim, the profile lookup, the quiet switch, the drivers' library paths,
# and the test suite's. One list (src/base/variables.h), which accio run's launcher checks too.
OTHER_VARIABLES = frozenset(_ext.other_variables())


def unknown_variables(info: dict) -> list[str]:
    """The ACCIO_* variables set here that accio does not read (a typo such as ACCIO_THREAD is
    otherwise ignored without a word), each with the nearest name it reads, if one is close."""
    import difflib
    known = {s["env"] for s in info["settings"] if s.get("env")} | OTHER_VARIABLES
    out = []
    for name in sorted(k for k in os.environ if k.startswith("ACCIO_") and k not in known):
        near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
        out.append(f"{name} is not a variable accio reads" + (f" (did you mean {near[0]}?)" if near else ""))
    return out


def setting_errors(info: dict) -> list[str]:
    """The engine's errors for the ACCIO_* variables that hold bad values (accio refuses to open files
    with them; the offload runtime, with a bad ACCIO_OFFLOAD_*, refuses to start)."""
    return [s["error"] for s in info["settings"] if s.get("error")]


def settings_table() -> list[dict]:
    """The engine's settings table (name, env, doc, kind, default, min, max, choices), with the
    mechanisms that read each knob (their registrations name them) under "read_by"; the offload
    runtime's rows (offload_*, registered by libaccio_offload, loaded here first) say "offload"."""
    _load_offload_settings()
    readers: dict = {}
    for m in _ext.mechanisms():
        for k in m["knobs"]:
            readers.setdefault(k, []).append(m["name"])
    return [{**row, "read_by": readers.get(row["name"]) or (["offload"] if row["name"].startswith("offload_") else [])}
            for row in _ext.setting_specs()]


def _values(row: dict) -> str:
    k = row["kind"]
    if k in ("count", "size"):
        f = (lambda v: fmt_size(v).replace(" ", "")) if k == "size" else str
        if row["max"] < (1 << 63) - 1:
            return f"{f(row['min'])} .. {f(row['max'])}"
        return f">= {f(row['min'])}" if row["min"] else "any " + k
    return {"bool": "on, off", "choice": row["choices"].replace("|", ", "), "text": "text"}[k]


SETTINGS_BEGIN = "<!-- settings table: generated by `python -m accio.info --settings-markdown`; do not edit -->"
SETTINGS_END = "<!-- end of settings table -->"


def settings_markdown() -> str:
    """The settings table as docs/api.md shows it (tests/python/test_vocabulary.py compares)."""
    out = [SETTINGS_BEGIN, "", "| setting | environment | values | default | read by | meaning |", "|---|---|---|---|---|---|"]
    for r in settings_table():
        out.append(f"| `{r['name']}` | `{r['env']}` | {_values(r)} | `{r['default']}` | "
                   f"{', '.join(r['read_by']) or 'engine'} | {r['doc']} |")
    return "\n".join(out + ["", SETTINGS_END])


def _gpus(path: str) -> dict:
    """The CUDA back end: driver, GPUs with their PCIe/NUMA placement, and cuFile (GDS) for path."""
    ok, why = _ext.cuda_available()
    if not ok:
        return {"available": False, "devices": [], "detail": why, "cufile": {"loaded": False, "detail": why}}
    cf_ok, cf_detail = _ext.gds_info()
    cufile = {"loaded": cf_ok, "detail": cf_detail}
    if cf_ok:
        probe = path if os.path.isfile(path) else None
        try:
            if probe is None:  # the mode depends on the filesystem: ask for a file under path
                import tempfile
                with tempfile.NamedTemporaryFile(dir=path if os.path.isdir(path) else None) as t:
                    cufile["path"], cufile["mode"] = _ext.gds_mode(_ext.File(t.name, "r", [("mechanism", "posix")]))
            else:
                cufile["path"], cufile["mode"] = _ext.gds_mode(_ext.File(probe, "r", [("mechanism", "posix")]))
        except OSError as e:
            cufile["path"], cufile["mode"] = "unknown", str(e)
        cufile["direct"] = cufile["path"] == "direct"
    return {"available": True, "devices": _ext.gpus(), "detail": "", "cufile": cufile}


def _profile(path: str) -> dict:
    """The tuning profile that `auto` uses for files under path, as the engine decides: the file the
    `profile` setting (ACCIO_PROFILE) names, none with off (the built-in model), else the profile
    directory's for path's filesystem if there is one. "source" says which; "error" is the engine's
    refusal of a bad ACCIO_PROFILE (a missing or malformed file), with which it opens no file."""
    setting, error = next((v, e) for n, v, e in _ext.env_settings() if n == "profile")
    if error:
        return {"file": os.environ.get("ACCIO_PROFILE"), "exists": False, "source": "ACCIO_PROFILE", "error": error}
    if setting != "auto":
        return {"file": None if setting == "off" else setting, "exists": setting != "off", "source": "ACCIO_PROFILE"}
    try:
        key = _ext.profile_key(path)
    except OSError as e:
        return {"file": None, "exists": False, "detail": str(e), "source": "profile directory"}
    return {"file": key["file"], "exists": os.path.exists(key["file"]), "source": "profile directory"}


def _profile_text(p: dict) -> str:
    if p.get("error"):
        return f"invalid: {p['error']}"
    if p["source"] == "ACCIO_PROFILE":
        return f"{p['file']} (ACCIO_PROFILE)" if p["exists"] else "off (ACCIO_PROFILE): auto uses the built-in model"
    return p["file"] if p["exists"] else "none: auto uses the built-in model (run `accio tune PATH`)"


def _kib(v) -> str:
    if isinstance(v, str):
        return v
    return f"{v / 1024 / 1024:.1f} GiB" if v >= 1024 * 1024 else f"{v} KiB"


def render(info: dict) -> str:
    hp = info["huge_pages"]
    ml = info["rlimit_memlock"]
    p = info["path"]
    lines = [
        f"accio {info['accio_version']}",
        f"kernel        {info['kernel']} ({info['machine']})",
        f"cpu           {info['cpu']['model']}, {info['cpu']['usable']} of {info['cpu']['count']} CPUs usable",
        f"realign       {'yes' if info['cpu']['slow_misaligned_copy'] else 'no'} ({info['cpu']['realign_detail']})",
        f"memory        {_kib(info['memory']['total_kib'])} total, {_kib(info['memory']['available_kib'])} available",
        f"io_uring      {'yes' if info['io_uring']['available'] else 'no'} ({info['io_uring']['detail']})",
        f"huge pages    {hp['reserved']} reserved, {hp['free']} free ({hp['size_kib']} KiB each); THP {hp['thp']}",
        f"memlock limit soft {ml['soft'] if isinstance(ml['soft'], str) else _kib(ml['soft'] // 1024)}, "
        f"hard {ml['hard'] if isinstance(ml['hard'], str) else _kib(ml['hard'] // 1024)}"
        + (" (not enforced: running as root with CAP_IPC_LOCK)" if os.geteuid() == 0 else ""),
        f"path          {p['path']}: {p['fstype']} on {p['device']} (mounted at {p['mount_point']})",
        f"O_DIRECT      {'yes' if p['o_direct']['supported'] else 'no'} ({p['o_direct']['detail']})",
        f"residency     {info['residency_query']['method']} ({info['residency_query']['detail']})",
        f"tune profile  {_profile_text(info['tuning_profile'])}",
    ]
    g = info["gpus"]
    if not g["available"]:
        lines.append(f"gpus          none ({g['detail']})")
    for d in g["devices"]:
        where = ", ".join(x for x in (d["pci_bus_id"], d["link"],
                                      f"NUMA node {d['numa_node']}" if d["numa_node"] >= 0 else "NUMA node unknown",
                                      f"CPUs {d['cpus']}" if d["cpus"] else "") if x)
        lines.append(f"gpu {d['ordinal']:<9} {d['name']}, {d['memory'] / 2**30:.0f} GiB, sm {d['compute_capability']}, "
                     f"{d['copy_engines']} copy engines; {where}")
    if g["available"]:
        cf = g["cufile"]
        lines.append(f"cufile        {cf['detail']}")
        if cf.get("mode"):
            lines.append(f"gds here      {cf['mode']}")
    vn = info["offload_venodes"]
    lines.append("offload venodes " + (", ".join(f"{n} (CPUs {c})" for n, c in vn.items()) or "none") +
                 " bound to their NUMA node; others run unbound")
    lines.append("mechanisms")
    for m in info["mechanisms"]:
        serves = "GPU memory " if m["device"] else "host memory"
        lines.append(f"  {m['name']:<10} {serves}  {'available' if m['available'] else 'unavailable: ' + m['detail']}")
    lines.append("settings (ACCIO_<NAME> or the API, same names)")
    rows = [{**s, "value": "invalid" if s.get("error") else s["value"]} for s in info["settings"]]
    wn, wv, we = (max((len(str(s[k])) for s in rows), default=0) for k in ("name", "value", "env"))
    for s in rows:  # columns as wide as their longest entry (offload_* rows are long)
        doc = s["doc"] + (f" ({', '.join(s['read_by'])})" if s["read_by"] else "")
        lines.append(f"  {s['name']:<{wn}}  {s['value']:<{wv}}  {s['env']:<{we}}  {doc}")
        if s.get("error"):  # the engine's reason, under the row
            lines.append(f"  {'':<{wn}}  {s['error']}")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m accio.info --settings-markdown: the table for docs/api.md
    import sys
    if sys.argv[1:] != ["--settings-markdown"]:
        raise SystemExit("usage: python -m accio.info --settings-markdown")
    print(settings_markdown())
