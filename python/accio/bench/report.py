"""The self-contained HTML report of `accio bench` (tables, SVG plots, summary, environment) and
the PNG plots of --plot (matplotlib).

The report: the results table (a column per mechanism, the best of every row marked, the ratio to
posix, noisy cells flagged), IOPS and latency percentiles, what auto chose, a bar chart per slice of
the table (the row without its test: one bar group per test, one bar per mechanism, MiB/s from
zero, each mechanism in the same colour in every report), a summary paragraph, the environment
(with the block device and the tuning profile in effect) and the parameters.

PNG figures (--plot DIR): bandwidth vs record size per mechanism (one per test), speedup vs threads
(one per test, when threads vary), and file size x transfer size heat maps (one per test, layout and
process count, a panel per mechanism, when both sizes vary).
"""
from __future__ import annotations

import html
import math
import os
import statistics
import zlib
from collections import defaultdict

from .._system import fmt_size
from .._usage import UsageError, output_file
from .latency import PERCENTILES
from .output import (LATENCY_HEADS, MARKS_LEGEND, cell_marks, latency_cells, noisy, render_fio, sig3, spread_pct,
                     table_model)


NEEDS_MATPLOTLIB = "--plot needs matplotlib: pip install 'accio-io[plot]' (or pip install matplotlib)"


def _plt():
    """matplotlib.pyplot; UsageError without it (bench's check_outputs looks for it before the run)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError(NEEDS_MATPLOTLIB) from None
    return plt


def _largest_slice(rs: list[dict], keep: tuple[str, ...]) -> list[dict]:
    """Results of the first directory/layout/process count and the largest file size and thread
    count, except in the dimensions listed in keep."""
    pick = {}
    for d, best in (("directory", None), ("layout", None), ("processes", max), ("threads", max), ("file_size", max),
                    ("record_size", max)):
        if d in keep:
            continue
        vals = [r[d] for r in rs]
        pick[d] = best(vals) if best else vals[0]
    return [r for r in rs if all(r[d] == v for d, v in pick.items())]


def figures(results: list[dict]) -> list[tuple[str, object]]:
    """(file name, matplotlib figure) for every plot the results support."""
    plt = _plt()
    out = []
    by_test = defaultdict(list)
    for r in results:  # one set of plots per queue depth (-Q): depths drawn on one line were one curve
        by_test[(r["test"], r.get("iodepth", 1))].append(r)
    depths = {qd for _t, qd in by_test}
    for (name, qd), rs in by_test.items():
        test = name if len(depths) == 1 else f"{name}, qd {qd}"
        slug = name.replace("+", "-") + ("" if len(depths) == 1 else f"-qd{qd}")
        sl = _largest_slice(rs, ("record_size",))
        if len({r["record_size"] for r in sl}) > 1:
            fig, ax = plt.subplots(figsize=(7, 4.2))
            for m in dict.fromkeys(r["mechanism"] for r in sl):
                pts = sorted((r["record_size"], r["mib_s"], r["min"], r["max"]) for r in sl if r["mechanism"] == m)
                x = [p[0] for p in pts]
                ax.errorbar(x, [p[1] for p in pts], yerr=[[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]],
                            marker="o", capsize=3, label=m, color=colour(m))
            ax.set_xscale("log", base=2)
            ax.set_xticks(x, [fmt_size(v) for v in x], rotation=30)
            ax.set(xlabel="record size", ylabel="MiB/s (median, min..max)",
                   title=f"{test}: bandwidth vs record size ({_caption(sl, 'record_size')})")
            ax.set_ylim(bottom=0)
            ax.grid(alpha=.3)
            ax.legend()
            fig.tight_layout()
            out.append((f"bw-vs-record-{slug}.png", fig))
        sl = _largest_slice(rs, ("threads",))
        if len({r["threads"] for r in sl}) > 1:
            fig, ax = plt.subplots(figsize=(7, 4.2))
            ts = sorted({r["threads"] for r in sl})
            ax.plot(ts, ts, "k:", label="linear")
            for m in dict.fromkeys(r["mechanism"] for r in sl):
                pts = sorted((r["threads"], r["mib_s"]) for r in sl if r["mechanism"] == m)
                base = dict(pts).get(min(ts))
                if base:
                    ax.plot([p[0] for p in pts], [p[1] / base for p in pts], marker="o", label=m, color=colour(m))
            ax.set(xlabel="threads", ylabel=f"speedup over {min(ts)} thread(s)",
                   title=f"{test}: speedup vs threads ({_caption(sl, 'threads')})")
            ax.set_xticks(ts)
            ax.set_ylim(bottom=0)
            ax.grid(alpha=.3)
            ax.legend()
            fig.tight_layout()
            out.append((f"speedup-{slug}.png", fig))
        groups = defaultdict(list)
        for r in rs:
            groups[(r["layout"], r["processes"], r["threads"], r["directory"])].append(r)
        for (layout, procs, threads, d), g in groups.items():
            fsz, rsz = sorted({r["file_size"] for r in g}), sorted({r["record_size"] for r in g})
            if len(fsz) < 2 or len(rsz) < 2:
                continue
            mechs = list(dict.fromkeys(r["mechanism"] for r in g))
            fig, axes = plt.subplots(1, len(mechs), figsize=(0.55 * len(rsz) * len(mechs) + 2.5, 0.5 * len(fsz) + 2),
                                     squeeze=False, sharey=True, layout="constrained")
            vmax = max(r["mib_s"] for r in g) / 1024
            for ax, m in zip(axes[0], mechs):
                grid = [[float("nan")] * len(rsz) for _ in fsz]
                for r in g:
                    if r["mechanism"] == m:
                        grid[fsz.index(r["file_size"])][rsz.index(r["record_size"])] = r["mib_s"] / 1024
                im = ax.imshow(grid, origin="lower", cmap="viridis", vmin=0, vmax=vmax, aspect="auto")
                for i, row in enumerate(grid):
                    for j, v in enumerate(row):
                        if v == v:
                            ax.text(j, i, f"{v:.1f}", ha="center", va="center", fontsize=7,
                                    color="white" if v < vmax * .6 else "black")
                ax.set_xticks(range(len(rsz)), [fmt_size(v) for v in rsz], rotation=45, fontsize=7)
                ax.set(title=m, xlabel="transfer size")
            axes[0][0].set_yticks(range(len(fsz)), [fmt_size(v) for v in fsz], fontsize=7)
            axes[0][0].set_ylabel("file size (per writer)")
            fig.colorbar(im, ax=axes[0].tolist(), label="GiB/s (median)")
            fig.suptitle(f"{test}: {layout}, {procs} process(es) x {threads} thread(s)")
            out.append((f"heatmap-{slug}-{layout}-p{procs}-t{threads}-{_dir_slug(d)}.png", fig))
    return out


def _caption(rs: list[dict], varying: str) -> str:
    r = rs[0]
    parts = [f"file {fmt_size(r['file_size'])}", f"record {fmt_size(r['record_size'])}", f"{r['threads']} thr",
             r["layout"], r["directory"]]
    return ", ".join(p for p, d in zip(parts, ("file_size", "record_size", "threads", "layout", "directory"))
                     if d != varying)


def _dir_slug(d: str) -> str:
    return d.strip("/").replace("/", "_") or "root"


def write_plots(results: list[dict], directory: str) -> list[str]:
    plt = _plt()
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, fig in figures(results):
        p = os.path.join(directory, name)
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


# One colour per mechanism, the same in every report (Tableau 10); a +direct column is its
# mechanism's colour, hatched; any other name gets a colour from its name's hash.
COLOURS = {"posix": "#4e79a7", "parallel": "#f28e2b", "direct": "#e15759", "uring": "#76b7b2", "auto": "#59a14f",
           "naive": "#edc948", "staged": "#b07aa1", "gds": "#ff9da7", "host": "#9c755f", "pinned-copy": "#bab0ac"}
_SPARE = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666")


def colour(mechanism: str) -> str:
    base = mechanism.split("+")[0]
    return COLOURS.get(base) or _SPARE[zlib.crc32(base.encode()) % len(_SPARE)]


def nice_ticks(top: float, n: int = 5) -> list[float]:
    """0 and round steps (1, 2 or 5 x 10^k) up to the first tick at or above top."""
    if not top > 0 or not math.isfinite(top):
        return [0.0, 1.0]
    raw = top / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    ticks = [0.0]
    while ticks[-1] < top - 1e-9 * top:
        ticks.append(ticks[-1] + step)
    return ticks


def svg_bars(title: str, groups: list[str], series: list[str], values: dict, unit: str = "MiB/s") -> str:
    """A grouped bar chart: a group per entry of groups, a bar per series; values[(group, series)] =
    (median, low, high) or absent. The y axis starts at zero; whiskers show low..high."""
    esc = html.escape
    w, h, left, right, top, bottom = 760, 320, 64, 130, 34, 46
    pw, ph = w - left - right, h - top - bottom
    peak = max((v[2] for v in values.values() if math.isfinite(v[2])), default=0.0)
    ticks = nice_ticks(peak)
    ymax = ticks[-1]
    y = lambda v: top + ph - (min(v, ymax) / ymax * ph if ymax else 0)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
           f'role="img" aria-label="{esc(title)}" font-family="system-ui,sans-serif" font-size="11">',
           f'<title>{esc(title)}</title>',
           f'<text x="{left}" y="18" font-size="13" font-weight="600">{esc(title)}</text>']
    for t in ticks:
        out.append(f'<line class="grid" x1="{left}" x2="{left + pw}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#ddd"/>')
        out.append(f'<text class="ytick" x="{left - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{t:.6g}</text>')
    out.append(f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{top + ph}" stroke="#333"/>')
    out.append(f'<line class="axis" x1="{left}" x2="{left + pw}" y1="{top + ph}" y2="{top + ph}" stroke="#333"/>')
    out.append(f'<text x="16" y="{top + ph / 2:.0f}" transform="rotate(-90 16 {top + ph / 2:.0f})" '
               f'text-anchor="middle">{esc(unit)}</text>')
    gw = pw / max(len(groups), 1)
    bw = gw * 0.8 / max(len(series), 1)
    for gi, g in enumerate(groups):
        x0 = left + gi * gw + gw * 0.1
        out.append(f'<text x="{left + (gi + 0.5) * gw:.1f}" y="{top + ph + 16}" text-anchor="middle">{esc(g)}</text>')
        for si, m in enumerate(series):
            v = values.get((g, m))
            if v is None:
                continue
            med, lo, hi = v
            x = x0 + si * bw
            hatch = ' fill-opacity="0.55"' if "+" in m else ""
            out.append(f'<rect class="bar" data-mechanism="{esc(m)}" data-value="{med:.6g}" x="{x:.1f}" '
                       f'y="{y(med):.1f}" width="{bw * 0.92:.1f}" height="{top + ph - y(med):.1f}" '
                       f'fill="{colour(m)}"{hatch}><title>{esc(m)} {esc(g)}: {sig3(med)} {esc(unit)}</title></rect>')
            if hi > lo:
                cx = x + bw * 0.46
                out.append(f'<line class="whisker" x1="{cx:.1f}" x2="{cx:.1f}" y1="{y(hi):.1f}" y2="{y(lo):.1f}" '
                           'stroke="#222"/>')
    for si, m in enumerate(series):
        ly = top + 4 + si * 17
        hatch = ' fill-opacity="0.55"' if "+" in m else ""
        out.append(f'<rect x="{left + pw + 14}" y="{ly}" width="12" height="12" fill="{colour(m)}"{hatch}/>'
                   f'<text x="{left + pw + 31}" y="{ly + 10}">{esc(m)}</text>')
    out.append("</svg>")
    return "".join(out)


def slice_plots(model: dict) -> list[str]:
    """A bar chart per slice of the table (its row labels but the test): tests as groups."""
    slices: dict[tuple, list[dict]] = {}
    for row in model["rows"]:
        slices.setdefault(row["slice"], []).append(row)
    heads = [h for h in model["heads"] if h != "test"]
    out = []
    for sl, rows in slices.items():
        title = ", ".join(f"{h} {v}" for h, v in zip(heads, sl)) or "all results"
        values = {(row["test"], m): (r["mib_s"], r["min"], r["max"]) for row in rows for m, r in row["by"].items()}
        out.append(svg_bars(f"Bandwidth: {title}", [row["test"] for row in rows], model["cols"], values))
    return out


def _plan_of(r: dict) -> str:
    """The plan that served most of a result's requests (what auto chose)."""
    plans = r.get("plans") or []
    return plans[0]["plan"] if plans else r["ran"]


def results_table(model: dict) -> str:
    """<table class="results">: cells hold the median MiB/s, the spread, the ratio to the baseline;
    class best (the row's fastest), noisy (spread above ±5%), notcold/fellback (the marks)."""
    esc = html.escape
    base = model["baseline"]
    head = "".join(f"<th>{esc(h)}</th>" for h in model["heads"])
    head += "".join(f'<th class="mech"><span class="swatch" style="background:{colour(m)}"></span>{esc(m)}</th>'
                    for m in model["cols"])
    body = []
    for row in model["rows"]:
        cells = "".join(f'<th scope="row">{esc(c)}</th>' for c in row["cells"])
        b = row["by"].get(base) if base else None
        for m in model["cols"]:
            r = row["by"].get(m)
            if r is None:
                cells += '<td class="none">-</td>'
                continue
            cls = [c for c, on in (("best", m == row["best"]), ("noisy", noisy(r)),
                                   ("notcold", "!" in cell_marks(r)), ("fellback", "*" in cell_marks(r))) if on]
            spread = spread_pct(r)
            parts = [f'<span class="v">{sig3(r["mib_s"])}</span>']
            if spread is not None:
                parts.append(f'<span class="spread" title="half the range of {len(r["samples"])} iterations">'
                             f'±{spread:.0f}%</span>')
            if b is not None and m != base and b["mib_s"]:
                parts.append(f'<span class="ratio">{r["mib_s"] / b["mib_s"]:.2f}× {esc(base)}</span>')
            if r["engine_mechanism"] == "auto":
                parts.append(f'<span class="plan" title="the plan that served most requests">{esc(_plan_of(r))}</span>')
            if row["marks"].get(m):  # '*1', '!2*1': the numbered notes under the table
                parts.append(f'<sup class="mark">{esc(row["marks"][m])}</sup>')
            title = "best of the row" if m == row["best"] else ""
            if "noisy" in cls:
                title = (title + "; " if title else "") + "noisy: the iterations spread more than ±5%"
            tip = f' title="{esc(title)}"' if title else ""
            cells += (f'<td class="{" ".join(cls)}" data-mechanism="{esc(m)}" data-mib-s="{r["mib_s"]:.6g}"{tip}>'
                      f'{" ".join(parts)}</td>')
        body.append(f"<tr>{cells}</tr>")
    return f'<table class="results"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def latency_table(results: list[dict]) -> str:
    rows = [r for r in results if (r.get("latency") or {}).get("requests")]
    if not rows:
        return ""
    esc = html.escape
    dims = [(d, h) for d, h in (("directory", "directory"), ("layout", "layout"), ("processes", "procs"),
                                ("threads", "threads"), ("file_size", "file"), ("record_size", "record"),
                                ("iodepth", "iodepth")) if len({r.get(d, 1) for r in rows}) > 1]
    head = "".join(f"<th>{h}</th>" for h in ["test", "mechanism"] + [h for _d, h in dims] + LATENCY_HEADS)
    body = []
    for r in rows:
        label = [r["test"], r["mechanism"]] + [fmt_size(r[d]) if d.endswith("_size") else str(r.get(d, 1))
                                               for d, _h in dims]
        body.append("<tr>" + "".join(f"<th>{esc(c)}</th>" for c in label) +
                    "".join(f"<td>{esc(c)}</td>" for c in latency_cells(r)) + "</tr>")
    return f'<table class="latency"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def summary(model: dict) -> str:
    """The paragraph a reader wants first: the fastest mechanism per test and how auto did."""
    by_test: dict[str, list[dict]] = defaultdict(list)
    for row in model["rows"]:
        by_test[row["test"]].append(row)
    base = model["baseline"]
    heads = [h for h in model["heads"] if h != "test"]
    parts = []
    for test, rows in by_test.items():
        wins: dict[str, int] = defaultdict(int)
        for row in rows:
            if row["best"]:
                wins[row["best"]] += 1
        if not wins:
            continue
        ranked = sorted(wins, key=lambda m: -wins[m])
        top = ranked[0]
        gains = [row["by"][top]["mib_s"] / row["by"][base]["mib_s"] for row in rows
                 if base and row["best"] == top and base in row["by"] and row["by"][base]["mib_s"]]
        gain = f" (up to {max(gains):.2f}× {base})" if gains and top != base else ""
        others = "".join(f", {html.escape(m)} in {wins[m]}" for m in ranked[1:])
        parts.append(f"<b>{html.escape(test)}</b>: {html.escape(top)} highest in {wins[top]} of {len(rows)} "
                     f"row{'s' if len(rows) > 1 else ''}{gain}{others}")
    # Which median was highest in this run, said as that: the mechanisms ran one after another, so no
    # verdict (bench audit, session 25: "fastest ... up to 1.50x" led the page beside 14 noisy cells).
    text = ("Highest median per test in this run (the mechanisms ran one after another: a description, not a "
            "verdict): " + "; ".join(parts) + "." if parts else "No row has two mechanisms to compare.")
    shares = []
    for row in model["rows"]:
        a, best = row["by"].get("auto"), row["best"]
        if a and best and row["by"][best]["mib_s"]:
            shares.append((a["mib_s"] / row["by"][best]["mib_s"], row))
    if shares:
        med = statistics.median(s for s, _r in shares)
        worst, wrow = min(shares, key=lambda x: x[0])
        where = ", ".join([f"{h} {v}" for h, v in zip(heads, wrow["slice"])] + [wrow["test"]])
        text += (f" auto reached a median {med * 100:.0f}% of the best mechanism of its row over {len(shares)} rows "
                 f"(lowest {worst * 100:.0f}%, {html.escape(where)}, where it ran "
                 f"{html.escape(_plan_of(wrow['by']['auto']))} and {html.escape(wrow['best'])} was best).")
    noisy_cells = sum(noisy(r) for row in model["rows"] for r in row["by"].values())
    if noisy_cells:
        text += (f" {noisy_cells} cell(s) are noisy (their iterations spread more than ±5%): differences "
                 "there need more iterations or a quieter machine.")
    return f'<p class="summary">{text}</p>'


def auto_plans(results: list[dict]) -> str:
    rows = [r for r in results if r["engine_mechanism"] == "auto" and r.get("plans")]
    if not rows:
        return ""
    esc = html.escape
    items = []
    for r in rows:
        total = sum(p["calls"] for p in r["plans"]) or 1
        plans = "; ".join(f"{esc(p['plan'])} for {p['calls'] * 100 / total:.0f}% of requests ({esc(p['why'])})"
                          for p in r["plans"])
        qd = "" if r.get("iodepth", 1) == 1 else f", iodepth {r['iodepth']}"
        items.append(f"<li>{esc(r['test'])}, record {fmt_size(r['record_size'])}, {r['threads']} thread(s)"
                     f"{qd}: {plans}</li>")
    return "<h2>What auto chose</h2><ul class=\"plans\">" + "".join(items) + "</ul>"


def param_value(name: str, v) -> str:
    """A parameter as a value a person reads: sizes in units, lists joined, yes/no, no Python reprs."""
    if name in ("file_sizes", "records") and isinstance(v, list):
        return ", ".join(fmt_size(x) for x in v)
    if name == "runtime_s":
        return f"{sig3(v)} s per phase" if v else "once over the range"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v is None or v == []:
        return "none"
    if isinstance(v, list):
        return ", ".join(str(x) for x in v)
    return str(v)


def _device_text(bd: dict | None) -> str:
    if not bd:
        return "no block device (a memory or network filesystem)"
    kind = {True: "rotational", False: "non-rotational"}.get(bd.get("rotational"), "")
    facts = [bd.get("model"), kind, f"scheduler {bd['scheduler']}" if bd.get("scheduler") else None,
             f"nr_requests {bd['nr_requests']}" if bd.get("nr_requests") else None,
             f"logical block {bd['logical_block_size']} B" if bd.get("logical_block_size") else None,
             f"max request {bd['max_sectors_kb']} KiB" if bd.get("max_sectors_kb") else None,
             f"read-ahead {bd['read_ahead_kb']} KiB" if bd.get("read_ahead_kb") else None]
    return f"{bd.get('disk', bd.get('name'))}: " + ", ".join(f for f in facts if f)


def environment_rows(doc: dict) -> list[tuple[str, str]]:
    env = doc["environment"]
    rows = [("accio", f"{doc['accio']['version']} ({doc['accio']['git_commit']})"),
            ("host", env.get("hostname", "?")), ("started", doc.get("started", "?")), ("kernel", env["kernel"]), ("CPU", f"{env['cpu']['model']} ({env['cpu']['usable']} usable)"),
            ("memory", f"{env['memory']['total_kib'] / 2**20:.1f} GiB"), ("processes", str(env["processes"]))]
    for p, v in env["paths"].items():
        rows.append((f"path {p}", f"{v.get('fstype')} on {v.get('device')} "
                                  f"(O_DIRECT: {v.get('o_direct', {}).get('detail', '?')})"))
        if "block_device" in v:
            rows.append(("  block device", _device_text(v["block_device"])))
        prof = v.get("tuning_profile")
        if prof and "source" in prof:  # as `accio info` says it (ACCIO_PROFILE's file, off, or its error)
            from ..info import _profile_text
            rows.append(("  tuning profile", _profile_text(prof)))
        elif prof:  # a JSON from before the source was recorded
            rows.append(("  tuning profile", prof["file"] if prof.get("exists") else
                         "none measured: auto plans from the built-in profile (run `accio tune` on it)"))
    from ..info import settings_table
    sizes = {row["name"] for row in settings_table() if row["kind"] == "size"}
    rows.append(("settings", ", ".join(f"{k}={fmt_size(int(v)) if k in sizes and str(v).isdigit() else v}"
                                       for k, v in env["settings"].items())))
    return rows


STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
pre{background:#f6f6f6;padding:1em;overflow-x:auto}table{border-collapse:collapse;margin:.5em 0}
th,td{padding:.25em .6em;border-bottom:1px solid #e4e4e4;vertical-align:top}th{text-align:left}
table.results td,table.latency td{text-align:right;white-space:nowrap}
td .v{font-variant-numeric:tabular-nums}td .spread,td .ratio,td .plan{display:block;font-size:.8em;color:#666}
td.best{background:#e6f4ea}td.best .v{font-weight:700}td.best .v::after{content:" \\2605";color:#2e7d32}
td.noisy .spread{color:#b00020;font-weight:600}td.noisy .v::before{content:"~";color:#b00020}
td.notcold .mark{color:#b00020}.swatch{display:inline-block;width:.8em;height:.8em;margin-right:.3em}
svg{display:block;margin:.8em 0;max-width:100%;height:auto}.summary{font-size:1.05em;line-height:1.5}"""


def write_html(path: str, doc: dict, table_kind: str) -> None:
    """One self-contained page (no script, no external file): summary, tables, SVG plots, what auto
    chose, environment and parameters."""
    results = doc["results"]
    esc = html.escape
    model = table_model(results, table_kind) if results else None
    kv = lambda rows: "<table class=\"kv\">" + "".join(  # noqa: E731
        f"<tr><th>{esc(a)}</th><td>{esc(b)}</td></tr>" for a, b in rows) + "</table>"
    fio = render_fio(results)
    notes = "".join(f"<li>{esc(n)}</li>" for n in (model["notes"] + model["caveats"] if model else []))
    incomplete = "" if doc.get("complete", True) else (
        '<p class="incomplete"><strong>Incomplete run</strong>: it was interrupted; these are the results it '
        "finished.</p>")
    body = (f"{summary(model)}<h2>Results</h2>{results_table(model)}"
            + (f"<ul class=\"notes\">{notes}</ul>" if notes else "")
            + "<p>MiB/s (2<sup>20</sup> bytes per second), the median of the iterations; below it half their range "
              "and the ratio to the baseline column. ★ the best of the row; ~ a noisy cell (spread above ±5%: "
              "small differences there are not measured); " + esc(MARKS_LEGEND) + " (the list above). The "
              "mechanisms of a row ran one after another, so the ★, the ratios and the summary describe this run; "
              "they are not verdicts of the statistics rule (docs/methodology.md), which <code>--vs-fio</code> "
              "applies against fio.</p>"
            + (f"<h2>IOPS and latency</h2>{latency_table(results)}<p>Latency of single requests, submission to "
               f"completion, over every request of every iteration; percentiles {', '.join(f'p{p:g}' for p in PERCENTILES)}"
               ".</p>" if latency_table(results) else "")
            + auto_plans(results)
            + (f"<h2>Against fio</h2><pre>{esc(fio)}</pre>" if fio else "")
            + "<h2>Plots</h2>" + "".join(slice_plots(model))) if model else "<p>No results.</p>"
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>accio bench report</title>
<style>{STYLE}</style></head><body>
<h1>accio bench{esc(' --preset ' + doc['preset']) if doc.get('preset') else ''}</h1>
<p>{esc(doc['started'])}, {doc['duration_s']:.0f} s. Command: <code>{esc(' '.join(doc['command']))}</code></p>
{incomplete}{body}
<h2>How to read this</h2><p>Bandwidth is total bytes over (latest end - earliest start) of all threads and
processes. A cold read is called cold only when the page-cache residency measured just before it is at
most 1%. Open and close are not timed; write+sync includes fsync. See docs/methodology.md.</p>
<h2>Environment</h2>{kv(environment_rows(doc))}<h2>Parameters</h2>{kv((k, param_value(k, v)) for k, v in doc["parameters"].items())}
</body></html>"""
    with output_file(path) as f:  # '-' is stdout
        f.write(page)
