"""Plots (PNG, matplotlib) and the self-contained HTML report of `accio bench`.

Figures: bandwidth vs record size per mechanism (one per test), speedup vs threads (one per test,
when threads vary), and file size x transfer size heat maps (one per test, layout and process
count, a panel per mechanism, when both sizes vary).
"""
from __future__ import annotations

import base64
import html
import io
import os
from collections import defaultdict

from .._system import fmt_size
from .._usage import output_file
from .output import render_fio, render_table


def _plt():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("plots need matplotlib: pip install 'accio-io[plot]' (or pip install matplotlib)") from None
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
    for r in results:
        by_test[r["test"]].append(r)
    for test, rs in by_test.items():
        slug = test.replace("+", "-")
        sl = _largest_slice(rs, ("record_size",))
        if len({r["record_size"] for r in sl}) > 1:
            fig, ax = plt.subplots(figsize=(7, 4.2))
            for m in dict.fromkeys(r["mechanism"] for r in sl):
                pts = sorted((r["record_size"], r["mib_s"], r["min"], r["max"]) for r in sl if r["mechanism"] == m)
                x = [p[0] for p in pts]
                ax.errorbar(x, [p[1] for p in pts], yerr=[[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]],
                            marker="o", capsize=3, label=m)
            ax.set_xscale("log", base=2)
            ax.set_xticks(x, [fmt_size(v) for v in x], rotation=30)
            ax.set(xlabel="record size", ylabel="MiB/s (median, min..max)",
                   title=f"{test}: bandwidth vs record size ({_caption(sl, 'record_size')})")
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
                    ax.plot([p[0] for p in pts], [p[1] / base for p in pts], marker="o", label=m)
            ax.set(xlabel="threads", ylabel=f"speedup over {min(ts)} thread(s)",
                   title=f"{test}: speedup vs threads ({_caption(sl, 'threads')})")
            ax.set_xticks(ts)
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


def write_html(path: str, doc: dict, table_kind: str) -> None:
    """One self-contained page: tables, plots (inline PNG), environment and parameters."""
    results = doc["results"]
    imgs, note = [], ""
    try:
        plt = _plt()
        for name, fig in figures(results):
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=100)
            plt.close(fig)
            imgs.append((name, base64.b64encode(buf.getvalue()).decode()))
    except RuntimeError as e:
        note = f"<p><em>No plots: {html.escape(str(e))}</em></p>"
    env, par = doc["environment"], doc["parameters"]
    esc = html.escape
    env_rows = [("accio", f"{doc['accio']['version']} ({doc['accio']['git_commit']})"),
                ("kernel", env["kernel"]), ("CPU", f"{env['cpu']['model']} ({env['cpu']['usable']} usable)"),
                ("memory", f"{env['memory']['total_kib'] / 2**20:.1f} GiB"), ("processes", env["processes"])]
    env_rows += [(f"path {p}", f"{v.get('fstype')} on {v.get('device')} (O_DIRECT: {v.get('o_direct', {}).get('detail', '?')})")
                 for p, v in env["paths"].items()]
    env_rows += [("settings", ", ".join(f"{k}={v}" for k, v in env["settings"].items()))]
    par_rows = [(k, ", ".join(fmt_size(x) if k in ("file_sizes", "records") else str(x) for x in v)
                 if isinstance(v, list) else str(v)) for k, v in par.items()]
    table = lambda rows: "<table>" + "".join(f"<tr><th>{esc(str(a))}</th><td>{esc(str(b))}</td></tr>"  # noqa: E731
                                            for a, b in rows) + "</table>"
    fio = render_fio(results)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>accio bench report</title>
<style>body{{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}}
pre{{background:#f6f6f6;padding:1em;overflow-x:auto}}th{{text-align:left;padding-right:1em;vertical-align:top}}
img{{max-width:100%;border:1px solid #ddd;margin:.5em 0}}</style></head><body>
<h1>accio bench{esc(' --preset ' + doc['preset']) if doc.get('preset') else ''}</h1>
<p>{esc(doc['started'])}, {doc['duration_s']:.0f} s. Command: <code>{esc(' '.join(doc['command']))}</code></p>
<h2>Results</h2><pre>{esc(render_table(results, table_kind))}</pre>
{f'<h2>Against fio</h2><pre>{esc(fio)}</pre>' if fio else ''}
<h2>Plots</h2>{note}{''.join(f'<figure><img alt="{esc(n)}" src="data:image/png;base64,{b}"></figure>' for n, b in imgs)}
<h2>How to read this</h2><p>Bandwidth is total bytes over (latest end - earliest start) of all threads and
processes, in MiB/s (2<sup>20</sup> bytes per second); cells give the median of the iterations and half
the range. A cold read is called cold only when the page-cache residency measured just before it is at
most 1%; cells marked ! were not cold. Open and close are not timed; write+sync includes fsync.
See docs/methodology.md.</p>
<h2>Environment</h2>{table(env_rows)}<h2>Parameters</h2>{table(par_rows)}
</body></html>"""
    with output_file(path) as f:  # '-' is stdout
        f.write(page)
