"""What `accio bench` writes: the stdout table (rows by preset, mechanisms as columns, MiB/s), the
--vs-fio table, JSON (schema accio.bench/1, see schema.json), CSV, and `accio bench compare`."""
from __future__ import annotations

import contextlib
import csv
import math
import os
from typing import Iterable

from .._system import fmt_size
from .._usage import output_file, write_json as _write_json
from .spec import TESTS

SCHEMA = "accio.bench/1"
FIO_TOLERANCE = 0.10

# Row dimensions of the table for each layout (a dimension is shown only if it varies).
ROW_DIMS = {
    "generic": ("directory", "layout", "processes", "threads", "file_size", "record_size", "iodepth", "test"),
    "veaccio": ("record_size", "threads", "test"),
    "ior": ("layout", "processes", "threads", "file_size", "record_size", "iodepth", "test"),
    "xeonphi": ("directory", "test"),
}
HEAD = {"directory": "directory", "layout": "layout", "processes": "procs", "threads": "threads",
        "file_size": "file", "record_size": "record", "iodepth": "iodepth", "test": "test"}




def _cell_value(dim: str, v) -> str:
    return fmt_size(v) if dim in ("file_size", "record_size") else str(v)


def _columns(results: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["mechanism"] for r in results))


def spread_pct(r: dict) -> float | None:
    """Half the range of a result's iterations in % of their median; None for a single iteration."""
    return (r["max"] - r["min"]) / 2 / r["mib_s"] * 100 if r["mib_s"] and len(r["samples"]) > 1 else None


def _spread(r: dict) -> str:
    return "" if (p := spread_pct(r)) is None else f"±{p:.0f}%"


def _grid(heads: list[str], rows: list[list[str]], left: int) -> list[str]:
    """A plain-text table: the first `left` columns left-aligned, the rest right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
    line = lambda cells: "  ".join(c.ljust(w) if i < left else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    return [line(heads), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]


def _row_key(r: dict, dims: Iterable[str]):
    return tuple(TESTS.index(r[d]) if d == "test" else r.get(d, 1) for d in dims)


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
    return ("staged against its ceilings (medians of this run, its mechanisms one after another: a description; "
            "benchmarks/gpu_bench.py takes the ceiling per interleaved round and judges it)\n" + "\n".join(lines)
            if lines else "")


def sig3(x: float) -> str:
    """Three significant digits, whole numbers from 100 up: 0.412, 1.90, 12.3, 812, 2345 (a 4 KiB write
    at 0.41 MiB/s must not read 0)."""
    if not math.isfinite(x):
        return str(x)
    if abs(x) >= 99.95:
        return f"{x:.0f}"
    t = f"{x:#.3g}"  # '#' keeps the trailing zeros of 1.90
    return t[:-1] if t.endswith(".") else t


# Columns that are ceilings of a device target, not contenders: never the best of a row.
CEILINGS = ("host", "pinned-copy")
# The column others are compared with: posix for host memory, naive for GPU memory.
BASELINES = ("posix", "naive")


def noisy(r: dict) -> bool:
    """A cell whose iterations spread more than the project's noise band (accio.stats.NOISE: half the
    range above 5% of the median); its figure says little about small differences."""
    from ..stats import NOISE
    return (p := spread_pct(r)) is not None and p > NOISE * 100


def table_model(results: list[dict], kind: str = "generic") -> dict:
    """The results table that the text and the HTML report both show: rows by the dimensions that
    vary (test last), a column per mechanism. {'heads': row heads, 'cols': mechanisms, 'baseline':
    the column ratios are taken against or None, 'rows': [{'cells': row labels, 'slice': the labels
    but the test, 'test', 'by': {mechanism: result}, 'best': mechanism or None, 'marks': {mechanism:
    '*1', '!2*1' or ''}}], 'notes': ['*1 auto chose posix', ...]}. Every note has its own number, so
    a cell's mark names the note that explains it."""
    cols = _columns(results)
    dims = [d for d in ROW_DIMS.get(kind, ROW_DIMS["generic"])
            if d == "test" or len({r.get(d, 1) for r in results}) > 1]
    rows: dict[tuple, dict] = {}
    for r in results:
        key = tuple(r.get(d, 1) for d in dims)
        if kind == "xeonphi":  # one thread, and the best of more threads (Xeon Phi study, Table 1)
            key += ("1" if r["threads"] == 1 else "best",)
        cur = rows.setdefault(key, {}).get(r["mechanism"])
        if cur is None or r["mib_s"] > cur["mib_s"]:
            rows[key][r["mechanism"]] = r
    heads = [HEAD[d] for d in dims] + (["threads"] if kind == "xeonphi" else [])
    notes: list[str] = []
    numbered: dict[tuple[str, str], str] = {}  # (symbol, note) -> its mark, '*1': a note per number

    def mark(symbol: str, text: str) -> str:
        if (symbol, text) not in numbered:
            numbered[(symbol, text)] = f"{symbol}{sum(k[0] == symbol for k in numbered) + 1}"
            notes.append(f"{numbered[(symbol, text)]} {text}")
        return numbered[(symbol, text)]
    out = []
    for key in sorted(rows, key=lambda k: _row_key(next(iter(rows[k].values())), dims) + k[len(dims):]):
        by = rows[key]
        cells = [_cell_value(d, v) for d, v in zip(dims, key)]
        if kind == "xeonphi":
            cells.append("1" if key[-1] == "1" else "best")
        marks = {}
        for m, r in by.items():
            symbols, marks[m] = cell_marks(r), ""
            if "!" in symbols:
                marks[m] += mark("!", f"{r['test']} {m} in {r['directory']}: not cold, "
                                      f"{r['cache']['residency'] * 100:.0f}% resident after {r['cache']['method']}: "
                                      "a cached read")
            if "*" in symbols:
                chose = list(dict.fromkeys(p["plan"] for p in r.get("plans") or [])) \
                    if r["engine_mechanism"] == "auto" else []  # a plan once, whatever the reasons it was chosen for
                marks[m] += mark("*", f"{m} chose {', '.join(chose)}" if chose else f"{m} ran as {r['ran']}")
        contenders = {m: r for m, r in by.items() if m not in CEILINGS}
        best = max(contenders, key=lambda m: contenders[m]["mib_s"]) if len(contenders) > 1 else None
        test_at = dims.index("test")
        out.append({"cells": cells, "slice": tuple(cells[:test_at] + cells[test_at + 1:]), "test": key[test_at],
                    "by": by, "best": best, "marks": marks})
    baseline = next((b for b in BASELINES if b in cols), None)
    caveats = [AS_FOUND] if any(r.get("as_found") for r in results) else []
    return {"heads": heads, "cols": cols, "baseline": baseline, "rows": out, "notes": notes, "caveats": caveats,
            "xeonphi": kind == "xeonphi"}


# Under the table when a read took a user's --files as they were (no write test before it in the run).
AS_FOUND = ("reads of the --files as they are (no write test before them in this run): the files' own bytes, "
            "not accio's stamps, so not verified")


def cell_marks(r: dict) -> str:
    """'!' a cold read that was not cold, '*' the mechanism ran as another (auto: always, its plan)."""
    return ("!" if r["cache"] and r["test"] == "cold-read" and not r["cache"]["cold"] else "") + \
        ("*" if r["ran"] != r["engine_mechanism"] else "")


# What the numbered marks of a cell mean (the table's legend and the HTML report's).
MARKS_LEGEND = ("*N: the mechanism ran as another (auto: as the plan it chose); !N: a cold read that was not "
                "cold; notes by mark")


def render_table(results: list[dict], kind: str = "generic") -> str:
    """The stdout table. Cells: median MiB/s and the spread (half of max - min, in % of the median).
    Marks, numbered, each with its note under the table: '!N' a cold read that the residency check
    shows was not cold; '*N' the mechanism fell back (or, for auto, ran as the plan it chose); '<'
    the best of the row."""
    if not results:
        return "(no results)"
    t = table_model(results, kind)
    lines = []
    for row in t["rows"]:
        cells = list(row["cells"])
        for m in t["cols"]:
            r = row["by"].get(m)
            if r is None:
                cells.append("-")
                continue
            best = f" ({r['threads']})" if t["xeonphi"] and row["cells"][-1] == "best" else ""
            win = "<" if m == row["best"] else ""
            cells.append(f"{sig3(r['mib_s'])}{best} {_spread(r)}{row['marks'][m]}{win}".strip())
        lines.append(cells)
    out = _grid(t["heads"] + t["cols"], lines, len(t["heads"]))
    out.append("MiB/s, median of the iterations ± half the range; < the best of the row"
               + ("; best: the best thread count (in parentheses)" if t["xeonphi"] else "")
               + "; the mechanisms ran one after another: a description of this run, not a verdict "
                 "(--vs-fio judges against fio by the statistics rule: contenders interleaved, at least 7 rounds)")
    if t["notes"]:
        out.append(MARKS_LEGEND + ":")
        out += ["  " + n for n in t["notes"]]
    return "\n".join(out + ["note: " + c for c in t["caveats"]])


LATENCY_HEADS = ["IOPS", "requests", "p50", "p99", "p99.9", "max"]


def latency_cells(r: dict) -> list[str]:
    """IOPS (median of the iterations) and the latency percentiles of every request of the cell."""
    from .latency import PERCENTILES, fmt_ns
    lat = r.get("latency") or {}
    if not lat.get("requests"):
        return [sig3(r["iops"]) if "iops" in r else "-", "-"] + ["-"] * (len(PERCENTILES) + 1)
    # A tail percentile is shown where at least 10 requests lie above it (p99 from 1000 requests, p99.9
    # from 10000); below that it is the maximum, or nearly: "-" (bench audit, session 25: p99.9 of 112).
    n = lat["requests"]
    return [sig3(r["iops"]), str(n)] + [fmt_ns(lat[f"p{p:g}_ns"]) if p < 99 or n * (100 - p) >= 1000 - 1e-6 else "-"
                                        for p in PERCENTILES] + [fmt_ns(lat["max_ns"])]


def render_latency(results: list[dict]) -> str:
    """IOPS and request latency percentiles per result (fio's clat percentiles)."""
    rows = [r for r in results if (r.get("latency") or {}).get("requests")]
    if not rows:
        return ""
    dims = [d for d in ("directory", "layout", "processes", "threads", "file_size", "record_size", "iodepth")
            if len({r.get(d, 1) for r in rows}) > 1]  # every dimension that varies, or rows repeat
    heads = ["test", "mechanism"] + [HEAD.get(d, d) for d in dims] + LATENCY_HEADS
    body = [[r["test"], r["mechanism"]] + [_cell_value(d, r.get(d, 1)) for d in dims] + latency_cells(r)
            for r in rows]
    return "\n".join(_grid(heads, body, 2 + len(dims)) +
                     ["IOPS: requests per second (median); p50..max: latency of single requests, submission "
                      "to completion, over every request of every iteration; p99 and p99.9 are - where fewer than 10 "
                      "requests lie above them (p99 needs 1000 requests, p99.9 10000)"])


FIO_MIN_SECONDS = 0.2  # fio's runtime is whole milliseconds: shorter phases are marked


def render_fio(results: list[dict]) -> str:
    rows = [r for r in results if r.get("fio")]
    if not rows:
        return ""
    out = [f"{'test':<13}{'mechanism':<14}{'record':>9}{'threads':>8}{'accio':>9}{'fio':>9}{'ratio':>7}"
           f"  {'95% interval':<13} {'verdict':<23}  fio job"]
    shorts = 0
    for r in rows:
        f = r["fio"]
        # A difference the samples show (faster or slower, by the rule), of more than the tolerance: the
        # mark stood beside "undecided" and "too few samples" too (bench audit, session 25).
        off = f["ratio"] is not None and abs(f["ratio"] - 1) > FIO_TOLERANCE and f.get("verdict") in ("faster", "slower")
        ratio = f"{f['ratio']:>7.2f}" if f["ratio"] is not None else f"{'-':>7}"
        # fio reports its runtime in whole milliseconds: a phase under 200 ms is off by up to 0.5% a
        # sample (bench audit, session 25: 48-99 ms phases, 1-2%, said only in the docs)
        secs = sorted(s["seconds"] for s in f.get("samples") or [] if "seconds" in s)
        short = bool(secs) and secs[len(secs) // 2] < FIO_MIN_SECONDS
        shorts += short
        iv = f.get("interval")
        interval = f"{iv[0]:.2f}-{iv[1]:.2f}" if iv else "-"
        out.append(f"{r['test']:<13}{r['mechanism']:<14}{fmt_size(r['record_size']):>9}{r['threads']:>8}"
                   f"{r['mib_s']:>9.0f}{f['mib_s']:>9.0f}{ratio}{'!' if off else '~' if short else ' '} {interval:<13} "
                   f"{f.get('verdict', '-'):<23}  {f['job']}")
    out.append(f"MiB/s, medians; ratio: median of the per-iteration accio/fio ratios with its 95% bootstrap "
               f"interval; ! = differs from fio by more than {FIO_TOLERANCE:.0%}, and the verdict says the samples show "
               "it; the verdict says whether they can tell: none under 7 iterations (-i 7; docs/methodology.md)")
    if shorts:
        out.append(f"~ = fio's phases took under {FIO_MIN_SECONDS * 1000:.0f} ms ({shorts} row(s)): fio times them in "
                   "whole milliseconds, which costs the ratio up to 0.5% a sample; give larger files (-s 1g)")
    return "\n".join(out)


def write_json(path: str, doc: dict) -> None:
    """'-' is stdout; NaN is refused (schema.json has no such number). A file is replaced atomically
    (written beside it, then renamed), so that a run killed while writing keeps the previous version.
    A device or a FIFO (--json /dev/null) is written through: the rename replaced the node itself
    with a regular file (as root, /dev/null; audit s26 #8, as safetensors.save_file did)."""
    from .._replace import special
    if path == "-" or special(path) is not None:
        _write_json(path, doc, allow_nan=False)
        return
    tmp = f"{path}.partial"
    try:
        _write_json(tmp, doc, allow_nan=False)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


CSV_FIELDS = ("test", "mechanism", "ran", "target", "directory", "layout", "processes", "threads", "file_size",
              "record_size", "iodepth", "mib_s", "min", "max", "stddev", "iops", "p50_ns", "p99_ns", "p99.9_ns",
              "iterations", "cache_method", "residency", "cold", "fio_mib_s", "fio_ratio")


def write_csv(path: str, results: list[dict]) -> None:
    """'-' is stdout. Booleans as JSON writes them (true/false; Python's True/False before)."""
    with output_file(path, newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in results:
            c = r["cache"] or {}
            lat = {k: v for k, v in (r.get("latency") or {}).items() if k in CSV_FIELDS}
            w.writerow({**{k: r[k] for k in CSV_FIELDS if k in r}, **lat, "iterations": len(r["samples"]),
                        "cache_method": c.get("method", ""), "residency": c.get("residency", ""),
                        "cold": {True: "true", False: "false"}.get(c.get("cold"), ""), "fio_mib_s": (r.get("fio") or {}).get("mib_s", ""),
                        "fio_ratio": (r.get("fio") or {}).get("ratio", "")})


KEY = ("test", "mechanism", "target", "directory", "layout", "processes", "threads", "file_size", "record_size",
       "iodepth")


def _key(r: dict) -> tuple:
    return tuple(r.get(k, 1) if k == "iodepth" else r[k] for k in KEY)  # files from before iodepth: 1


COMPARE_NOTE = ("B/A: the median of B's samples over A's, with a 95% bootstrap interval of the two runs' own "
                "spread. Descriptive: A and B are separate runs, not interleaved, so drift between them (page "
                "cache, neighbours, the device) is in neither interval, and no row gets a verdict "
                "(an A/A rerun of one command on one machine showed ratios whose intervals left out 1). To judge a change, "
                "interleave the contenders, at least 7 rounds each (docs/methodology.md)")


def _conditions(old: dict, new: dict) -> str:
    """What differs between two results of one key that makes them measure different things: a cold
    read that was not cold, the cache method, a time-based run against one pass, verification (bench
    audit, session 25: compare matched them on the key alone)."""
    out = []
    ca, cb = old.get("cache") or {}, new.get("cache") or {}
    if ca.get("cold") != cb.get("cold"):
        out.append(f"cold {ca.get('cold')}/{cb.get('cold')}")
    if ca.get("method") != cb.get("method"):
        out.append(f"cache {ca.get('method')}/{cb.get('method')}")
    if old.get("runtime_s", 0) != new.get("runtime_s", 0):
        out.append(f"runtime {old.get('runtime_s', 0):g}/{new.get('runtime_s', 0):g} s")
    if old.get("verified") != new.get("verified"):
        out.append(f"verified {old.get('verified')}/{new.get('verified')}")
    return ", ".join(out)


def _run_line(name: str, d: dict) -> str:
    env = d.get("environment") or {}
    fs = sorted({f"{p.get('fstype', '?')} on {p.get('device', '?')}" for p in (env.get("paths") or {}).values()})
    return (f"{name}: {d.get('started', '?')}, host {env.get('hostname', '?')}, {', '.join(fs) or '?'}, accio "
            f"{(d.get('accio') or {}).get('git_commit', '?')}" + ("" if d.get("complete", True) else ", INCOMPLETE (interrupted)"))


def compare(a: dict, b: dict) -> str | None:
    """`accio bench compare A.json B.json`: B / A for every result present in both, each with its
    unpaired interval, and their geometric mean; no verdict (COMPARE_NOTE). None when no result is
    in both."""
    for d, name in ((a, "A"), (b, "B")):
        if not str(d.get("schema", "")).startswith("accio.bench/"):
            raise ValueError(f"{name} is not an accio bench JSON file (schema {d.get('schema')!r})")
    index = {_key(r): r for r in a["results"]}
    both = [(index[_key(r)], r) for r in b["results"] if _key(r) in index]
    qd = len({r.get("iodepth", 1) for _o, r in both}) > 1
    from .. import stats
    rows, cells, missing, unlike = [], [], 0, 0
    for old, r in both:
        sa, sb = [s["mib_s"] for s in old["samples"]], [s["mib_s"] for s in r["samples"]]
        try:
            ratio = stats.ratio(sb, sa, paired=False)
            cells.append((sb, sa, False))
            shown = [f"{ratio.estimate:.3f}", stats.bounds(ratio.low, ratio.high), f"{len(sa)}/{len(sb)}"]
        except ValueError as e:
            # A sample of 0 MiB/s (a complete regression) or none: the row stays, without a ratio.
            # It was dropped, and left out of the count below (statistics audit, session 24).
            missing += 1
            shown = ["-", f"no ratio: {e}", f"{len(sa)}/{len(sb)}"]
        differs = _conditions(old, r)
        unlike += bool(differs)
        rows.append([r["test"], r["mechanism"], fmt_size(r["record_size"]), str(r["threads"]), str(r["processes"]),
                     r["layout"]] + ([str(r.get("iodepth", 1))] if qd else []) +
                    [sig3(old["mib_s"]), sig3(r["mib_s"])] + shown + [differs])
    if not rows:
        return None
    heads = ["test", "mechanism", "record", "threads", "procs", "layout"] + (["iodepth"] if qd else []) + \
        ["A MiB/s", "B MiB/s", "B/A", "95% interval", "samples A/B", "conditions A/B"]
    if not unlike:  # no column of empty cells
        heads, rows = heads[:-1], [row[:-1] for row in rows]
    out = [_run_line("A", a), _run_line("B", b)] + _grid(heads, rows, 7 if qd else 6)
    geo = ""
    if cells:
        g = stats.geomean_ratio(cells)
        geo = f"; geometric mean of B/A over {len(cells)} {'result' if len(cells) == 1 else 'results'} {stats.describe(g)}"
    out.append(f"{len(rows)} results in both" + (f" ({missing} without a ratio)" if missing else "") + geo)
    if unlike:
        out.append(f"{unlike} result(s) measured under different conditions (the last column): their ratio compares "
                   "different things")
    out.append(COMPARE_NOTE)
    return "\n".join(out)
