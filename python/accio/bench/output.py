"""What `accio bench` writes: the stdout table (rows by preset, mechanisms as columns, MiB/s), the
--vs-fio table, JSON (schema accio.bench/1, see schema.json), CSV, and `accio bench compare`."""
from __future__ import annotations

import csv
import math
import statistics
from typing import Iterable

from .._system import fmt_size
from .._usage import output_file, write_json as _write_json
from .spec import TESTS

SCHEMA = "accio.bench/1"
FIO_TOLERANCE = 0.10

# Row dimensions of the table for each layout (a dimension is shown only if it varies).
ROW_DIMS = {
    "generic": ("directory", "layout", "processes", "threads", "file_size", "record_size", "test"),
    "veaccio": ("record_size", "threads", "test"),
    "ior": ("layout", "processes", "threads", "file_size", "record_size", "test"),
    "xeonphi": ("directory", "test"),
}
HEAD = {"directory": "directory", "layout": "layout", "processes": "procs", "threads": "threads",
        "file_size": "file", "record_size": "record", "test": "test"}




def _cell_value(dim: str, v) -> str:
    return fmt_size(v) if dim in ("file_size", "record_size") else str(v)


def _columns(results: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["mechanism"] for r in results))


def _spread(r: dict) -> str:
    return f"±{(r['max'] - r['min']) / 2 / r['mib_s'] * 100:.0f}%" if r["mib_s"] and len(r["samples"]) > 1 else ""


def _grid(heads: list[str], rows: list[list[str]], left: int) -> list[str]:
    """A plain-text table: the first `left` columns left-aligned, the rest right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
    line = lambda cells: "  ".join(c.ljust(w) if i < left else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    return [line(heads), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]


def _row_key(r: dict, dims: Iterable[str]):
    return tuple(TESTS.index(r[d]) if d == "test" else r[d] for d in dims)


def device_ratios(results: list[dict]) -> str:
    """For a device target: per row, staged against the lower of its two ceilings (host, pinned-copy),
    against naive, and gds against staged, all from medians of the same run."""
    rows: dict[tuple, dict] = {}
    for r in results:
        key = tuple(r[d] for d in ("directory", "layout", "processes", "threads", "file_size", "record_size", "test"))
        rows.setdefault(key, {})[r["mechanism"]] = r["mib_s"]
    lines = []
    for key in sorted(rows, key=lambda k: k[:-1] + (TESTS.index(k[-1]),)):
        m = rows[key]
        if "staged" not in m:
            continue
        parts = []
        ceil = [m[c] for c in ("host", "pinned-copy") if c in m]
        if ceil:
            parts.append(f"{m['staged'] / min(ceil) * 100:.0f}% of min(host {m.get('host', float('nan')):.0f}, "
                         f"pinned-copy {m.get('pinned-copy', float('nan')):.0f})")
        if m.get("naive"):
            parts.append(f"{m['staged'] / m['naive']:.2f}x naive")
        if m.get("gds"):
            parts.append(f"gds {m['gds'] / m['staged']:.2f}x staged")
        _d, _l, _p, t, fs, rec, test = key
        lines.append(f"  {test} {fmt_size(fs)} record {fmt_size(rec)} x{t}: staged {m['staged']:.0f} MiB/s = " +
                     ", ".join(parts))
    return "staged against its ceilings (medians of this run)\n" + "\n".join(lines) if lines else ""


def render_table(results: list[dict], kind: str = "generic") -> str:
    """The stdout table. Cells: median MiB/s and the spread (half of max - min, in % of the median).
    Marks: '!' a cold read that the residency check shows was not cold; '*' the mechanism fell back."""
    if not results:
        return "(no results)"
    cols = _columns(results)
    dims = [d for d in ROW_DIMS.get(kind, ROW_DIMS["generic"])
            if d == "test" or len({r[d] for r in results}) > 1]
    rows: dict[tuple, dict] = {}
    for r in results:
        key = tuple(r[d] for d in dims)
        if kind == "xeonphi":  # one thread, and the best of more threads (Xeon Phi study, Table 1)
            key += ("1" if r["threads"] == 1 else "best",)
        cur = rows.setdefault(key, {}).get(r["mechanism"])
        if cur is None or r["mib_s"] > cur["mib_s"]:
            rows[key][r["mechanism"]] = r
    heads = [HEAD[d] for d in dims] + (["threads"] if kind == "xeonphi" else [])
    notes: list[str] = []
    lines = []
    for key in sorted(rows, key=lambda k: _row_key(next(iter(rows[k].values())), dims) + k[len(dims):]):
        cells = [_cell_value(d, v) for d, v in zip(dims, key)]
        if kind == "xeonphi":
            cells.append("1" if key[-1] == "1" else "best")
        for m in cols:
            r = rows[key].get(m)
            if r is None:
                cells.append("-")
                continue
            mark = ""
            if r["cache"] and r["test"] == "cold-read" and not r["cache"]["cold"]:
                mark += "!"
                note = (f"! {r['test']} {m} in {r['directory']}: not cold, {r['cache']['residency'] * 100:.0f}% "
                        f"resident after {r['cache']['method']}: a cached read")
                if note not in notes:
                    notes.append(note)
            if r["ran"] != r["engine_mechanism"]:
                mark += "*"
                note = f"* {m} ran as {r['ran']}"
                if note not in notes:
                    notes.append(note)
            best = f" ({r['threads']})" if kind == "xeonphi" and key[-1] == "best" else ""
            cells.append(f"{r['mib_s']:.0f}{best} {_spread(r)}{mark}".strip())
        lines.append(cells)
    out = _grid(heads + cols, lines, len(heads))
    out.append("MiB/s, median of the iterations ± half the range"
               + ("; best: the best thread count (in parentheses)" if kind == "xeonphi" else ""))
    return "\n".join(out + notes)


def render_fio(results: list[dict]) -> str:
    rows = [r for r in results if r.get("fio")]
    if not rows:
        return ""
    out = [f"{'test':<13}{'mechanism':<14}{'record':>9}{'threads':>8}{'accio':>9}{'fio':>9}{'ratio':>7}"
           f"  {'95% interval':<13} {'verdict':<12}  fio job"]
    for r in rows:
        f = r["fio"]
        off = f["ratio"] is not None and abs(f["ratio"] - 1) > FIO_TOLERANCE
        ratio = f"{f['ratio']:>7.2f}" if f["ratio"] is not None else f"{'-':>7}"
        iv = f.get("interval")
        interval = f"{iv[0]:.2f}-{iv[1]:.2f}" if iv else "-"
        out.append(f"{r['test']:<13}{r['mechanism']:<14}{fmt_size(r['record_size']):>9}{r['threads']:>8}"
                   f"{r['mib_s']:>9.0f}{f['mib_s']:>9.0f}{ratio}{'!' if off else ' '} {interval:<13} "
                   f"{f.get('verdict', '-'):<12}  {f['job']}")
    out.append(f"MiB/s, medians; ratio: median of the per-iteration accio/fio ratios with its 95% bootstrap "
               f"interval; ! = differs from fio by more than {FIO_TOLERANCE:.0%}; the verdict says whether the "
               "samples can tell (see docs/methodology.md)")
    return "\n".join(out)


def write_json(path: str, doc: dict) -> None:
    """'-' is stdout; NaN is refused (schema.json has no such number)."""
    _write_json(path, doc, allow_nan=False)


CSV_FIELDS = ("test", "mechanism", "ran", "target", "directory", "layout", "processes", "threads", "file_size",
              "record_size", "mib_s", "min", "max", "stddev", "iterations", "cache_method", "residency", "cold",
              "fio_mib_s", "fio_ratio")


def write_csv(path: str, results: list[dict]) -> None:
    """'-' is stdout."""
    with output_file(path, newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in results:
            c = r["cache"] or {}
            w.writerow({**{k: r[k] for k in CSV_FIELDS if k in r}, "iterations": len(r["samples"]),
                        "cache_method": c.get("method", ""), "residency": c.get("residency", ""),
                        "cold": c.get("cold", ""), "fio_mib_s": (r.get("fio") or {}).get("mib_s", ""),
                        "fio_ratio": (r.get("fio") or {}).get("ratio", "")})


KEY = ("test", "mechanism", "target", "directory", "layout", "processes", "threads", "file_size", "record_size")


def compare(a: dict, b: dict) -> str:
    """`accio bench compare A.json B.json`: B / A for every result present in both."""
    for d, name in ((a, "A"), (b, "B")):
        if not str(d.get("schema", "")).startswith("accio.bench/"):
            raise ValueError(f"{name} is not an accio bench JSON file (schema {d.get('schema')!r})")
    index = {tuple(r[k] for k in KEY): r for r in a["results"]}
    rows, ratios = [], []
    for r in b["results"]:
        old = index.get(tuple(r[k] for k in KEY))
        if old is None or not old["mib_s"]:
            continue
        ratio = r["mib_s"] / old["mib_s"]
        ratios.append(ratio)
        rows.append((r["test"], r["mechanism"], fmt_size(r["record_size"]), str(r["threads"]), str(r["processes"]),
                     r["layout"], f"{old['mib_s']:.0f}", f"{r['mib_s']:.0f}", f"{ratio:.2f}"))
    if not rows:
        return "no result appears in both files"
    heads = ["test", "mechanism", "record", "threads", "procs", "layout", "A MiB/s", "B MiB/s", "B/A"]
    out = _grid(heads, rows, 6)
    geo = math.exp(statistics.fmean(math.log(x) for x in ratios))
    out.append(f"{len(rows)} results in both; geometric mean of B/A {geo:.3f} "
               f"(A: {a.get('accio', {}).get('git_commit', '?')}, B: {b.get('accio', {}).get('git_commit', '?')})")
    return "\n".join(out)
