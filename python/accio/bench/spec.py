"""What `accio bench` measures: tests, parameter lists and ranges, mechanisms, presets.

A *configuration* is one point of the parameter space (directory, layout, processes, threads, file
size, record size, mechanism); a *result* is one test (write, read, ...) at one configuration, with
every iteration's sample. Tests run in IOzone's order within a configuration, so `read` follows
`write` just as `iozone -i 0 -i 1` does.
"""
from __future__ import annotations

import functools
import json
import os
import tempfile
from dataclasses import dataclass, field, replace

from .. import _ext
from .. import settings as effective_settings
from .._system import online_cpus, parse_sizes

# Execution order within one configuration (IOzone -i 0, -e, -i 1, -i 2 semantics).
TESTS = ("write", "write+sync", "rewrite", "read", "reread", "cold-read", "random-read", "random-write")
WRITE_TESTS = frozenset({"write", "write+sync", "rewrite", "random-write"})
READ_TESTS = frozenset(TESTS) - WRITE_TESTS
LAYOUTS = ("fpp", "shared")






def parse_counts(text: str, n_max: int) -> list[int]:
    """Thread or process counts: '1,2,4', '1:8' (doubling), 'N' or 'max' for n_max, '1..N' for every count."""
    out: list[int] = []

    def one(tok: str) -> int:
        tok = tok.strip().lower()
        try:
            v = n_max if tok in ("n", "max") else int(tok)
        except ValueError:
            raise ValueError(f"{tok!r} is not a count (e.g. 1,2,4 or 1:8 or 1..N)") from None
        if v < 1:
            raise ValueError(f"'{tok}': counts must be at least 1")
        return v

    for item in filter(None, (t.strip() for t in text.split(","))):
        sep = ".." if ".." in item else ":" if ":" in item else None
        if sep:
            lo, hi = (one(x) for x in item.split(sep, 1))
            if hi < lo:  # `-t 3:1` said "'3:1': no counts"
                raise ValueError(f"{item!r} is not a range of counts: need low <= high (e.g. 1:{max(lo, 2)} "
                                 f"doubling, or 1..{max(lo, 2)} every count)")
        if sep == "..":
            out.extend(range(lo, hi + 1))
        elif sep:
            while lo <= hi:
                out.append(lo)
                lo *= 2
        else:
            out.append(one(item))
    if not out:
        raise ValueError(f"{text!r} names no count (e.g. 1,2,4 or 1:8 or 1..N)")
    return sorted(set(out))


def parse_tests(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if names == ["all"]:
        return list(TESTS)
    bad = [t for t in names if t not in TESTS]
    if bad or not names:
        raise ValueError(f"unknown test(s) {', '.join(bad) or text!r}; choose from {', '.join(TESTS)} or all")
    return [t for t in TESTS if t in names]


@functools.lru_cache(maxsize=None)
def host_mechanisms() -> tuple[str, ...]:
    """The engine's mechanisms for host memory, in display order (the engine's registry says which)."""
    return tuple(m["name"] for m in _ext.mechanisms() if not m["device"])


@dataclass(frozen=True)
class Column:
    """A column of the results: an engine mechanism plus settings, e.g. 'uring+direct' is uring with
    direct=on (or a ceiling: host, pinned-copy)."""
    label: str
    name: str
    settings: tuple[tuple[str, str], ...] = ()
    host: bool = False  # on a device target: this column reads into host memory (a ceiling)

    def o_direct(self, run: dict | None = None) -> bool:
        """Whether the file side is O_DIRECT, with the run's settings (--set) under the column's own
        (+direct): the planner says for a mechanism (accio._ext.plan_describe), by whether it reads
        `direct` (uring, staged) or always is (direct)."""
        direct = effective_settings(**{**(run or {}), **dict(self.settings)})["direct"] == "on"
        try:
            return _ext.plan_describe(json.dumps({"mechanism": self.name, "direct": direct}))[1]
        except OSError:  # not a mechanism a plan can name: auto, the ceilings
            return direct


# The two ceilings of a device target, measured in the same run as its mechanisms: column `host`, the
# same test with host memory (parallel, same threads: on a re-read, the hot-file host read), and the pinned host-to-device copy (device-to-host
# for write tests) with the same threads and chunk size, no file involved.
HOST_CEILING = Column("host", "parallel", host=True)
COPY_CEILING = Column("pinned-copy", "pinned-copy")


def parse_mechanisms(text: str, target: str = "host") -> list[Column]:
    """Columns for `target`: 'all' means every mechanism that serves it (the engine's registry says
    which serve host and which GPU memory), device targets add the two ceilings."""
    device = target != "host"
    mechs = _ext.mechanisms()
    known = {m["name"] for m in mechs} | {"auto"}
    knobs = {m["name"]: m["knobs"] for m in mechs}
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        if item == "all":  # every mechanism that can run, and auto (the planner's choice) beside them
            found = [Column(m["name"], m["name"]) for m in mechs
                     if m["device"] == device and (m["available"] or not device)]
            out += found + [Column("auto", "auto")] * bool(found)
            continue
        name, *flags = item.split("+")
        if name not in known:
            serve = [m["name"] for m in mechs if m["device"] == device] + ["auto"]
            raise ValueError(f"unknown mechanism '{name}'; choose from {', '.join(serve)}, all"
                             + ("" if device else " (GPU memory, --target cuda:N: " +
                                ", ".join(m["name"] for m in mechs if m["device"]) + ")"))
        if any(f != "direct" for f in flags):
            raise ValueError(f"'{item}': the only suffix is +direct (O_DIRECT file side)")
        if flags and "direct" not in knobs.get(name, ("direct",)):  # auto takes it as a setting
            if Column(name, name).o_direct():
                raise ValueError(f"'{item}': {name} is always O_DIRECT; write it without +direct")
            ways = [m["name"] + "+direct" if "direct" in m["knobs"] else m["name"] for m in mechs
                    if m["device"] == device and ("direct" in m["knobs"] or Column(m["name"], m["name"]).o_direct())]
            raise ValueError(f"'{item}': {name} does no O_DIRECT I/O (it has no direct setting, so +direct would "
                             f"measure buffered I/O); for O_DIRECT use {' or '.join(ways)}")
        out.append(Column(item, name, (("direct", "on"),) if flags else ()))
    if not out:
        raise ValueError("no mechanisms given" if not device else "no device mechanism can run here")
    if device:
        out += [HOST_CEILING, COPY_CEILING]
    return list(dict.fromkeys(out))


@dataclass
class Spec:
    """Everything one `accio bench` run measures."""
    tests: list[str]
    mechanisms: list[Column]
    file_sizes: list[int]
    records: list[int]
    threads: list[int]
    processes: list[int]
    layouts: list[str]
    dirs: list[str]
    iterations: int = 3
    target: str = "host"
    files: list[str] = field(default_factory=list)  # explicit names (IOzone -F), else generated in dirs
    settings: dict[str, str] = field(default_factory=dict)
    drop_caches: bool = False
    vs_fio: bool = False
    keep: bool = False
    verify: bool = True
    preset: str | None = None
    table: str = "generic"  # how rows are laid out: generic, veaccio, xeonphi, ior
    iodepths: list[int] = field(default_factory=lambda: [1])  # requests in flight per thread (a sweep)
    runtime: float = 0.0  # > 0: every phase runs this many seconds, round its range again if need be

    def configurations(self):
        """(dir, layout, processes, threads, file_size, record, iodepth, mechanism) in execution order;
        records larger than the file are skipped (IOR: transfer size <= block size)."""
        for d in self.dirs:
            for layout in self.layouts:
                for p in self.processes:
                    for t in self.threads:
                        if layout == "shared" and p * t == 1 and "fpp" in self.layouts:
                            continue  # one writer: shared is the same as file-per-process
                        for fs in self.file_sizes:
                            for r in self.records:
                                if r > fs:
                                    continue
                                for qd in self.iodepths:
                                    for m in self.mechanisms:
                                        yield d, layout, p, t, fs, r, qd, m




def default_tmpfs() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def apply_preset(spec: Spec, name: str, world: int, explicit: set[str]) -> Spec:
    """Fill in the preset's parameters, except those the user gave explicitly on the command line."""
    n = online_cpus()
    mech = parse_mechanisms("all", spec.target)
    doubling_to_n = parse_counts(f"1:{n}", n) if n & (n - 1) == 0 else sorted(set(parse_counts(f"1:{n}", n) + [n]))
    presets = {
        # SX-Aurora accelerated-I/O table: iozone -s 1g -r {1m,16m} -t {1..N} -i 0 -i 1 in /dev/shm.
        "veaccio": dict(tests=["write", "read"], file_sizes=[1 << 30], records=[1 << 20, 16 << 20],
                        threads=doubling_to_n, dirs=[default_tmpfs()], layouts=["fpp"], iterations=3,
                        table="veaccio"),
        # Xeon Phi study, Table 1: write, write+sync, cold read, re-read; 32 MiB file, 4 MiB records;
        # one thread and the best of 2..N threads; one row group per directory.
        "xeonphi": dict(tests=["write", "write+sync", "cold-read", "reread"], file_sizes=[32 << 20],
                        records=[4 << 20], threads=parse_counts(f"1..{n}", n),
                        dirs=list(dict.fromkeys([default_tmpfs(), tempfile.gettempdir()])), layouts=["fpp"], iterations=5,
                        table="xeonphi"),
        # SX-Aurora I/O evaluation: IOR file size x transfer size, 1 and N processes, fpp and shared.
        "ior": dict(tests=["write", "read"], file_sizes=parse_sizes("16m:256m"), records=parse_sizes("1m:64m"),
                    processes=sorted({1, world}), threads=[1] if world > 1 else sorted({1, n}),
                    layouts=["fpp", "shared"], dirs=[tempfile.gettempdir()], iterations=3, table="ior"),
        # Under a minute on a small machine: what `make demo` runs.
        "quick": dict(tests=["write", "write+sync", "cold-read", "reread"], file_sizes=[128 << 20],
                      records=[1 << 20, 16 << 20], threads=sorted({1, min(n, 2)}), dirs=[tempfile.gettempdir()],
                      layouts=["fpp"], iterations=3, table="generic"),
    }
    if name not in presets:
        raise ValueError(f"unknown preset '{name}'; choose from {', '.join(presets)}")
    values = {"mechanisms": mech, **presets[name], "preset": name}
    return replace(spec, **{k: v for k, v in values.items() if k not in explicit})
