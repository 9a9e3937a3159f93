"""What `accio bench` shows a storage engineer: the HTML report (parsed: its table, best and noisy
cells, SVG axes from zero, colours), compare's verdicts by the project's statistics rule, the
latency percentile math, IOPS, queue depth and time-based runs, the JSON kept after SIGINT and
SIGKILL, `accio bench report` and `accio bench run`."""
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser

import pytest

from accio import stats
from accio.bench import latency, output, report

ACCIO = [sys.executable, "-m", "accio.cli"]


def run(*args, check=True):
    r = subprocess.run([*ACCIO, *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"accio {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


# ---- latency percentiles ----

def test_percentiles_of_exact_buckets_match_the_projects_quantile():
    # Below 64 ns every bucket holds one value: percentiles are exact, by the inverted CDF.
    values = [3, 7, 7, 10, 12, 20, 21, 33, 40, 63] * 37 + [1, 2]
    hist = latency.merge([[[v, v + 1, 1]] for v in values])
    assert sum(c for _l, _h, c in hist) == len(values)
    ordered = sorted(values)
    for p in (1, 25, 50, 90, 99, 99.9, 100):
        assert latency.percentile(hist, p) == stats._quantile(ordered, p / 100), p
    # p99.9 of 1000 requests is the 999th, not the 1000th (no floating-point rank creep)
    thousand = [[i, i + 1, 1] for i in range(1000)]
    assert latency.percentile(thousand, 99.9) == 998
    assert latency.percentile(thousand, 50) == 499


def test_percentiles_of_wide_buckets_are_their_middle_and_merge_adds_counts():
    a = [[64, 65, 3], [1 << 20, (1 << 20) + (1 << 14), 1]]
    b = [[64, 65, 1], [4096, 4160, 96]]
    m = latency.merge([a, b])
    assert m == [[64, 65, 4], [4096, 4160, 96], [1 << 20, (1 << 20) + (1 << 14), 1]]
    s = latency.summary(m)
    assert s["requests"] == 101
    assert s["p50_ns"] == 4128  # the middle of [4096, 4160)
    assert s["p99_ns"] == 4128 and s["p99.9_ns"] == (1 << 20) + (1 << 13)
    assert s["max_ns"] == (1 << 20) + (1 << 13) and 64 < s["mean_ns"] < s["max_ns"]
    assert latency.summary([]) == {"requests": 0, "histogram": []}
    with pytest.raises(ValueError, match="no requests"):
        latency.percentile([], 50)
    with pytest.raises(ValueError, match="not in"):
        latency.percentile(m, 0)
    with pytest.raises(ValueError, match="not a latency bucket"):
        latency.merge([[[10, 5, 1]]])


def test_small_figures_keep_three_significant_digits():
    assert [output.sig3(x) for x in (0.4123, 0.0567, 1.9, 12.34, 99.94, 99.96, 812.4, 23456.7, 0.0)] == \
        ["0.412", "0.0567", "1.90", "12.3", "99.9", "100", "812", "23457", "0.00"]
    assert latency.fmt_ns(812) == "812 ns" and latency.fmt_ns(12345) == "12.3 us"
    assert latency.fmt_ns(4.56e6) == "4.56 ms" and latency.fmt_ns(2.5e9) == "2.50 s"


# ---- compare ----

def _result(test, mech, samples, record=1 << 20, threads=1, plans=None, ran=None, **extra):
    samples = [float(s) for s in samples]
    return {"test": test, "mechanism": mech, "engine_mechanism": mech.split("+")[0], "ran": ran or mech.split("+")[0],
            "target": "host", "record_size": record, "file_size": 4 << 20, "threads": threads, "processes": 1,
            "layout": "fpp", "directory": "/tmp", "iodepth": 1, "runtime_s": 0.0, "cache": None,
            "mib_s": sorted(samples)[len(samples) // 2], "min": min(samples), "max": max(samples), "stddev": 0.0,
            "iops": sorted(samples)[len(samples) // 2] * (1 << 20) / record,
            "plans": plans or [], "latency": latency.summary([[900, 901, 5], [12000, 12160, 2]]),
            "samples": [{"mib_s": s, "seconds": 1.0, "bytes": 1, "ran": "x", "ops": 1, "iops": 1.0}
                        for s in samples], **extra}


def _doc(results, **extra):
    return {"schema": "accio.bench/1", "accio": {"version": "0.1.0", "git_commit": "abc"},
            "command": ["accio", "bench"], "preset": None, "table": "generic", "started": "2026-11-23T10:00:00+00:00",
            "duration_s": 12.0, "complete": True,
            "environment": {"kernel": "Linux 6.1", "machine": "x86_64", "cpu": {"model": "Test CPU", "count": 2,
                                                                               "usable": 2},
                            "memory": {"total_kib": 24 << 20}, "hostname": "h", "processes": 1,
                            "paths": {"/tmp": {"fstype": "ext4", "device": "/dev/vda1", "mount_point": "/",
                                               "o_direct": {"detail": "supported"},
                                               "block_device": {"name": "vda1", "disk": "vda", "rotational": False,
                                                                "scheduler": "mq-deadline", "nr_requests": "256"},
                                               "tuning_profile": {"file": "/p/ext4.json", "exists": False}}},
                            "settings": {"threads": "2", "task_size": "4194304"}, "mechanisms": []},
            "parameters": {"tests": ["write", "read"], "mechanisms": ["posix", "uring", "auto"],
                           "file_sizes": [4 << 20], "records": [4096, 1 << 20], "threads": [1], "iterations": 7,
                           "drop_caches": False, "files": [], "runtime_s": 0.0, "iodepths": [1]},
            "warnings": [], "results": results, **extra}


def test_compare_command_prints_ratios_and_no_verdict(tmp_path):
    """Two runs are not interleaved: compare gives each result's ratio and interval and their geometric
    mean, and calls nothing faster or slower (bench audit, session 25: an A/A rerun, same build,
    command and machine, had 5 of 16 cells and the geometric mean called "faster")."""
    tight = [100, 101, 99, 100, 100, 99, 101]
    a = _doc([_result("write", "posix", tight), _result("read", "posix", tight)])
    b = _doc([_result("write", "posix", [x * 1.3 for x in tight]), _result("read", "posix", tight[:3])])
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    r = run("bench", "compare", str(pa), str(pb))
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.startswith(("write", "read"))}
    assert "1.300" in lines["write"] and lines["write"].rstrip().endswith("7/7")
    assert lines["read"].rstrip().endswith("7/3")
    assert "2 results in both; geometric mean of B/A over 2 results 1.14x [" in r.stdout
    assert not any(w in r.stdout for w in ("faster", "slower", "within noise", "undecided", "too few")), r.stdout
    assert "Descriptive: A and B are separate runs, not interleaved" in r.stdout
    # each run's machine, filesystem and build head the table; a result measured under other conditions
    # (a cold read that was not cold, a time-based run) is marked (bench audit, session 25)
    assert r.stdout.startswith("A: 2026-11-23T10:00:00+00:00, host h, ext4 on /dev/vda1, accio abc\nB: "), r.stdout
    assert "conditions A/B" not in r.stdout
    b["results"][1] = _result("read", "posix", tight, cache={"method": "fadvise", "residency": 0.9, "cold": False},
                              runtime_s=10.0)
    a["results"][1] = _result("read", "posix", tight, cache={"method": "fadvise", "residency": 0.0, "cold": True})
    b["complete"] = False
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    r = run("bench", "compare", str(pa), str(pb))
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.startswith(("write", "read"))}
    assert lines["read"].rstrip().endswith("cold True/False, runtime 0/10 s") and "conditions A/B" in r.stdout
    assert "1 result(s) measured under different conditions" in r.stdout and "INCOMPLETE (interrupted)" in r.stdout
    b["complete"] = True
    a["results"][1] = _result("read", "posix", tight)
    b["results"][1] = _result("read", "posix", tight[:3])
    # A result whose B has a sample of 0 MiB/s (a complete regression) keeps its row, without a ratio,
    # and is counted: it was dropped (statistics audit, session 24).
    b["results"][1] = _result("read", "posix", tight[:-1] + [0])
    pb.write_text(json.dumps(b))
    r = run("bench", "compare", str(pa), str(pb))
    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.startswith(("write", "read"))}
    assert "no ratio: ratio needs positive, finite samples" in lines["read"]
    assert "2 results in both (1 without a ratio); geometric mean of B/A over 1 result 1.30x [" in r.stdout
    (tmp_path / "junk.json").write_text("{not json")
    bad = run("bench", "compare", str(pa), str(tmp_path / "junk.json"), check=False)
    assert bad.returncode == 1 and "is not JSON" in bad.stderr and "Traceback" not in bad.stderr


def test_the_fio_tables_mark_follows_the_verdict():
    """Bench audit, session 25: "!" (more than 10% from fio) stood beside "undecided" and "too few
    samples": a judgement the samples did not make."""
    def row(ratio, verdict):
        return _result("read", "posix", [100.0] * 7, fio={"mib_s": 100.0 / ratio, "ratio": ratio,
                                                          "interval": [ratio * 0.9, ratio * 1.1], "verdict": verdict,
                                                          "job": "psync bs=1048576 direct=0 x1", "samples": []})
    lines = output.render_fio([row(1.3, "faster"), row(1.3, "undecided"), row(1.3, "too few samples (3 < 7)"),
                               row(1.05, "within noise")]).splitlines()[1:5]
    assert [("!" in ln) for ln in lines] == [True, False, False, False], lines
    # fio phases under 200 ms (fio times in whole ms) are marked ~, and the legend says why
    short = row(1.05, "within noise")
    short["fio"]["samples"] = [{"seconds": 0.05}] * 7
    text = output.render_fio([short, row(1.05, "within noise")])
    assert "1.05~" in text and "~ = fio's phases took under 200 ms (1 row(s))" in text, text


def test_plots_draw_each_queue_depth_apart():
    """Bench audit, session 25: with -Q 1,8 both depths were one line per mechanism (a vertical jump at
    each record size), and the heat maps kept whichever depth came last."""
    pytest.importorskip("matplotlib")
    from accio.bench import report
    rs = [_result("read", m, [100.0 * qd + rec / 4096] * 3, record=rec, iodepth=qd, file_size=fs)
          for m in ("posix", "uring") for qd in (1, 8) for rec in (65536, 1 << 20) for fs in (4 << 20, 8 << 20)]
    figs = dict(report.figures(rs))
    try:
        for qd in (1, 8):
            ax = figs[f"bw-vs-record-read-qd{qd}.png"].axes[0]
            assert ax.get_title().startswith(f"read, qd {qd}: bandwidth vs record size")
            for line in ax.get_lines():
                if line.get_label() in ("posix", "uring"):
                    assert all(100 * qd <= y < 100 * qd + 100 for y in line.get_ydata())  # this depth's points only
            assert f"heatmap-read-qd{qd}-fpp-p1-t1-" in " ".join(figs)
        assert not any(n.startswith("bw-vs-record-read.png") for n in figs)
        one = dict(report.figures([r for r in rs if r["iodepth"] == 1]))  # one depth: names as before
        assert "bw-vs-record-read.png" in one
    finally:
        import matplotlib.pyplot as plt
        plt.close("all")


# ---- the HTML report, parsed ----

class Page(HTMLParser):
    """The parts of the report the tests look at: the results table's cells, the SVG plots' bars and
    y-axis labels, the summary paragraph, and the key-value tables."""

    def __init__(self, text):
        super().__init__()
        self.stack, self.cells, self.svgs, self.summary, self.kv = [], [], [], "", {}
        self._cell = self._kv_key = None
        self._in = {"results": False, "summary": False, "ytick": False, "kv": False}
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        if tag == "table" and "results" in cls:
            self._in["results"] = True
        if tag == "table" and "kv" in cls:
            self._in["kv"] = True
        if self._in["results"] and tag == "td":
            self._cell = {"class": cls, "mechanism": a.get("data-mechanism"), "mib_s": a.get("data-mib-s"),
                          "text": ""}
        if self._in["results"] and tag == "tr":
            self.cells.append([])
        if tag == "svg":
            self.svgs.append({"bars": [], "yticks": []})
        if tag == "rect" and "bar" in cls:
            self.svgs[-1]["bars"].append((a["data-mechanism"], a["fill"], float(a["height"]), float(a["y"]),
                                          float(a["data-value"])))
        if tag == "text" and "ytick" in cls:
            self._in["ytick"] = True
        if tag == "p" and "summary" in cls:
            self._in["summary"] = True

    def handle_endtag(self, tag):
        if tag == "table":
            self._in["results"] = self._in["kv"] = False
        if tag == "td" and self._cell is not None:
            self.cells[-1].append(self._cell)
            self._cell = None
        if tag == "text":
            self._in["ytick"] = False
        if tag == "p":
            self._in["summary"] = False

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data
        if self._in["ytick"]:
            self.svgs[-1]["yticks"].append(data)
        if self._in["summary"]:
            self.summary += data
        if self._in["kv"]:
            if self.lasttag == "th":
                self._kv_key = data
            elif self.lasttag == "td" and self._kv_key:
                self.kv[self._kv_key] = data


def _report(doc, tmp_path, name="r.html"):
    p = tmp_path / name
    report.write_html(str(p), doc, doc.get("table", "generic"))
    return p.read_text()


def _sample_doc():
    tight = [100, 101, 99, 100, 100, 99, 101]
    auto_plan = [{"plan": "uring(qd=4)", "why": "built-in: write, one request in flight, >= 64 KiB", "calls": 7}]
    return _doc([
        _result("write", "posix", [0.41, 0.41, 0.42, 0.41, 0.40, 0.41, 0.41], record=4096),
        _result("write", "uring", [0.9, 1.0, 0.95, 0.97, 0.96, 0.95, 0.97], record=4096),
        _result("write", "auto", [0.5, 0.9, 1.2, 0.8, 0.7, 0.6, 0.9], record=4096, plans=auto_plan, ran="uring"),
        _result("write", "posix", tight),
        _result("write", "uring", [x * 1.5 for x in tight]),
        _result("write", "auto", [x * 1.45 for x in tight], plans=auto_plan, ran="uring"),
        _result("read", "posix", [x * 3 for x in tight]),
        _result("read", "uring", [40, 260, 150, 100, 90, 200, 120]),  # noisy: ±73%
        _result("read", "auto", [x * 3 for x in tight], ran="posix"),
    ])


def test_report_table_marks_the_best_flags_noise_and_gives_ratios(tmp_path):
    doc = _sample_doc()
    page = _report(doc, tmp_path)
    assert "<pre>" not in page.split("<h2>Results</h2>")[1].split("</table>")[0]  # a real table, not text
    p = Page(page)
    rows = [r for r in p.cells if r]
    assert len(rows) == 3  # write at 4 KiB; write and read at 1 MiB
    for row in rows:
        best = [c for c in row if "best" in c["class"]]
        assert len(best) == 1, row
        assert float(best[0]["mib_s"]) == max(float(c["mib_s"]) for c in row)
        for c in row:
            if c["mechanism"] != "posix":
                assert "× posix" in c["text"], c
    small = rows[0]  # 4 KiB writes at 0.41 MiB/s: three significant digits, not 0
    assert small[0]["text"].startswith("0.41") and small[0]["mechanism"] == "posix"
    assert "noisy" in small[2]["class"] and "noisy" not in small[0]["class"]
    noisy_read = next(c for row in rows for c in row if c["mechanism"] == "uring" and "noisy" in c["class"]
                      and float(c["mib_s"]) > 100)
    assert "±" in noisy_read["text"]
    # auto: in every row, with the plan it chose
    assert all(any(c["mechanism"] == "auto" for c in row) for row in rows)
    assert "uring(qd=4)" in next(c for c in rows[1] if c["mechanism"] == "auto")["text"]
    assert "What auto chose" in page and "64 KiB" in page
    # the summary names the fastest per test and auto against the best
    assert "write: uring highest in 2 of 2 rows (up to 2.34× posix)" in p.summary, p.summary
    assert p.summary.startswith("Highest median per test in this run (the mechanisms ran one after another: a description, not a verdict)"), p.summary
    assert "auto reached a median 97% of the best" in p.summary
    assert "(lowest 83%, record 4 KiB, write, where it ran uring(qd=4) and uring was best)" in p.summary
    # the latency table: IOPS and percentiles
    assert "IOPS and latency" in page and "p99.9" in page and "12.1 us" in page
    # environment: block device and tuning profile; parameters as values, not reprs
    assert "mq-deadline" in p.kv["  block device"] and "non-rotational" in p.kv["  block device"]
    assert "accio tune" in p.kv["  tuning profile"]
    # a run under ACCIO_PROFILE=off says so, as `accio info` does (it said "none measured")
    from accio.bench.report import environment_rows
    off = json.loads(json.dumps(doc))
    for v in off["environment"]["paths"].values():
        v["tuning_profile"] = {"file": None, "exists": False, "source": "ACCIO_PROFILE"}
    assert ("  tuning profile", "off (ACCIO_PROFILE): auto uses the built-in model") in environment_rows(off)
    assert p.kv["records"] == "4 KiB, 1 MiB" and p.kv["drop_caches"] == "no" and p.kv["files"] == "none"
    assert p.kv["runtime_s"] == "once over the range"
    assert p.kv["settings"] == "threads=2, task_size=4 MiB"
    assert not any(v.startswith("[") or v in ("True", "False", "None") for v in p.kv.values()), p.kv


def test_report_plots_are_svg_from_zero_with_a_fixed_colour_per_mechanism(tmp_path):
    p = Page(_report(_sample_doc(), tmp_path))
    assert "data:image/png" not in _report(_sample_doc(), tmp_path)
    assert len(p.svgs) == 2  # one per slice of the table: record 4 KiB and record 1 MiB
    for svg in p.svgs:
        assert svg["yticks"][0] == "0", svg["yticks"]  # the axis starts at zero
        ticks = [float(t) for t in svg["yticks"]]
        assert ticks == sorted(ticks) and ticks[-1] >= max(b[4] for b in svg["bars"])
        # From zero: every bar stands on the same baseline, its height proportional to its value.
        assert len({round(y + h, 1) for _m, _f, h, y, _v in svg["bars"]}) == 1
        scale = [h / v for _m, _f, h, _y, v in svg["bars"]]
        assert max(scale) <= min(scale) * 1.01, scale
        colours = {}
        for mech, fill, *_rest in svg["bars"]:
            assert colours.setdefault(mech, fill) == fill
    # the same colour for a mechanism in another report, whatever the order of the columns
    other = _doc([_result("write", "uring", [5] * 7), _result("write", "auto", [4] * 7),
                  _result("write", "posix", [3] * 7)])
    q = Page(_report(other, tmp_path, "other.html"))
    first = {m: f for svg in p.svgs for m, f, *_rest in svg["bars"]}
    second = {m: f for svg in q.svgs for m, f, *_rest in svg["bars"]}
    assert first == second and len(set(first.values())) == 3
    assert report.colour("uring+direct") == report.colour("uring")  # its mechanism's colour, hatched
    assert report.nice_ticks(87) == [0, 20, 40, 60, 80, 100] and report.nice_ticks(0) == [0.0, 1.0]


def test_bench_report_redraws_from_the_json(tmp_path):
    doc = _sample_doc()
    doc["complete"] = False
    js = tmp_path / "run.json"
    js.write_text(json.dumps(doc))
    r = run("bench", "report", str(js))
    assert (tmp_path / "run.html").exists() and "posix" in r.stdout.splitlines()[0]
    page = (tmp_path / "run.html").read_text()
    assert "Incomplete run" in page and len(Page(page).svgs) == 2
    out = tmp_path / "elsewhere.html"
    run("bench", "report", str(js), "-o", str(out))
    assert out.read_text() == page
    (tmp_path / "other.json").write_text('{"schema": "accio.profile/1"}')
    for bad, msg in ((tmp_path / "other.json", "not an accio bench JSON file"),
                     (tmp_path / "missing.json", "no such file or directory")):
        r = run("bench", "report", str(bad), check=False)
        assert r.returncode == 1 and msg in r.stderr and "Traceback" not in r.stderr
    r = run("bench", "report", check=False)
    assert r.returncode == 2 and "RUN.json" in r.stderr
    r = run("bench", "report", str(js), "-o", str(tmp_path), check=False)  # a directory: refused, page kept
    assert r.returncode == 1 and "is a directory" in r.stderr and (tmp_path / "run.html").read_text() == page
    # a file from before the report's fields (no table, iodepth, latency, plans): the preset's layout
    old = os.path.join(os.path.dirname(__file__), "..", "..", "results", "presets", "xeonphi.json")
    r = run("bench", "report", old, "-o", str(tmp_path / "old.html"))
    assert r.stdout.splitlines()[0].split()[:3] == ["directory", "test", "threads"]
    assert "IOPS and latency" not in (tmp_path / "old.html").read_text()
    # a run interrupted before its first cell: a report that says so, not a crash
    empty = _doc([], complete=False)
    (tmp_path / "empty.json").write_text(json.dumps(empty))
    r = run("bench", "report", str(tmp_path / "empty.json"))
    assert "(no results)" in r.stdout and "No results." in (tmp_path / "empty.html").read_text()


# ---- end to end: IOPS, latency, queue depth, time-based, auto ----

def test_queue_depth_sweep_and_time_based_runs_report_iops_and_latency(tmp_path):
    js = tmp_path / "qd.json"
    r = run("bench", "run", "-T", "write,random-read", "-m", "posix,auto", "-s", "256k", "-r", "4k", "-Q", "1,4",
            "--runtime", "0.2", "-i", "1", "-q", "-d", str(tmp_path), "--json", str(js))
    doc = json.loads(js.read_text())
    assert doc["complete"] is True and doc["parameters"]["iodepths"] == [1, 4]
    assert sorted({(x["mechanism"], x["iodepth"]) for x in doc["results"]}) == \
        [("auto", 1), ("auto", 4), ("posix", 1), ("posix", 4)]
    for x in doc["results"]:
        s = x["samples"][0]
        assert s["seconds"] >= 0.2 and s["ops"] > (256 << 10) // 4096  # time-based: round the range again
        assert s["bytes"] == s["ops"] * 4096 and math.isclose(s["iops"], s["ops"] / s["seconds"])
        lat = x["latency"]
        assert lat["requests"] == s["ops"]
        assert 0 < lat["p50_ns"] <= lat["p99_ns"] <= lat["p99.9_ns"] <= lat["max_ns"]
    assert all(x["plans"] for x in doc["results"] if x["mechanism"] == "auto")
    assert "iodepth" in r.stdout.splitlines()[0] and "p99.9" in r.stdout
    bad = run("bench", "--runtime", "soon", check=False)
    assert bad.returncode == 2 and "is not a time" in bad.stderr
    bad = run("bench", "-Q", "0", check=False)
    assert bad.returncode == 2 and "at least 1" in bad.stderr


# ---- a run cut off keeps what it measured ----

def _start_long_run(tmp_path, js):
    return subprocess.Popen([*ACCIO, "bench", "-T", "write,read", "-m", "posix", "-s", "1m", "-r", "64k",
                             "-t", "1", "-i", "2", "-Q", "1,2,4,8,16,32,64,128,256,512", "--runtime", "0.3",
                             "-q", "-d", str(tmp_path), "--json", str(js), "--report", str(tmp_path / "r.html")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # SIGINT as a terminal gives it: where the tests run as a background job
                            # (`make test &`), the shell made the tests ignore SIGINT, the bench inherits
                            # that, and Python then installs no handler (as it should: Ctrl-C is not for
                            # background jobs); the fresh-Debian check failed that way
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for_results(js, n, proc, timeout=120):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        assert proc.poll() is None, proc.communicate()
        try:
            doc = json.loads(js.read_text())
            if len(doc["results"]) >= n:
                return doc
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError("no results written while the run went on")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_run_keeps_every_finished_cell(tmp_path, sig):
    js = tmp_path / "run.json"
    proc = _start_long_run(tmp_path, js)
    during = _wait_for_results(js, 2, proc)
    assert during["complete"] is False
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err  # 130 for Ctrl-C, 143 for SIGTERM, as a shell reports them
    doc = json.loads(js.read_text())
    assert doc["complete"] is False and 2 <= len(doc["results"]) < 20
    assert doc["results"][:2] == during["results"][:2]
    assert "interrupted after" in err and "Traceback" not in err
    assert "Incomplete run" in (tmp_path / "r.html").read_text()  # the report of what was measured
    assert "posix" in out  # and the table
    assert not list(tmp_path.glob("accio-bench.*"))  # files under test removed


def test_ctrl_c_ends_a_long_phase_at_once(tmp_path):
    """Bench audit, session 25: Ctrl-C took effect when the native phase ended (16 s into a 20 s
    --runtime). The phase now ends after the requests in flight."""
    js = tmp_path / "run.json"
    proc = subprocess.Popen([*ACCIO, "bench", "-T", "write", "-m", "posix", "-s", "8m", "-r", "1m", "-i", "1",
                             "--runtime", "20s", "-d", str(tmp_path), "--json", str(js)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("accio-bench.*")) and time.monotonic() < deadline:
        time.sleep(0.05)  # the phase has begun
    time.sleep(1)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 10 and proc.returncode == 130, err  # the phase had 19 s to go
    assert json.loads(js.read_text())["complete"] is False and "interrupted after 0 result(s)" in err
    assert not list(tmp_path.glob("accio-bench.*"))


def test_an_interrupted_configuration_keeps_the_iterations_it_finished(tmp_path):
    """An interrupted configuration was dropped whole: the iterations every test finished are kept,
    as results of fewer samples (Ctrl-C here in the third iteration's read)."""
    code = """
import sys
from accio.bench import runner
phase, calls = runner.Runner.phase, [0]
def interrupted(self, *args, **kwargs):
    calls[0] += 1
    if calls[0] == 6:
        raise KeyboardInterrupt
    return phase(self, *args, **kwargs)
runner.Runner.phase = interrupted
from accio.cli import main
sys.exit(main(["bench", *sys.argv[1:]]))
"""
    js = tmp_path / "run.json"
    r = subprocess.run([sys.executable, "-c", code, "-T", "write,read", "-m", "posix,parallel", "-s", "1m", "-r", "256k",
                        "-i", "7", "-d", str(tmp_path), "--json", str(js)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 130, r.stderr
    doc = json.loads(js.read_text())
    assert doc["complete"] is False
    assert [(x["test"], x["mechanism"], len(x["samples"])) for x in doc["results"]] == [("write", "posix", 2), ("read", "posix", 2)]


def test_killed_run_leaves_a_valid_json_of_the_cells_it_finished(tmp_path):
    js = tmp_path / "run.json"
    proc = _start_long_run(tmp_path, js)
    _wait_for_results(js, 3, proc)
    proc.kill()
    proc.communicate(timeout=30)
    doc = json.loads(js.read_text())  # never half-written: replaced atomically after every cell
    assert doc["complete"] is False and len(doc["results"]) >= 3
    assert all(x["samples"] and x["latency"]["requests"] for x in doc["results"])
    r = run("bench", "report", str(js), "-o", str(tmp_path / "again.html"))
    assert "Incomplete run" in (tmp_path / "again.html").read_text() and r.returncode == 0
    for f in tmp_path.glob("accio-bench.*"):
        os.unlink(f)


def test_text_table_marks_the_best_and_names_autos_plan(tmp_path):
    doc = _sample_doc()
    text = output.render_table(doc["results"])
    lines = text.splitlines()
    assert lines[0].split() == ["record", "test", "posix", "uring", "auto"]
    first = lines[2].split()  # 4 KiB write: 0.41 for posix (three digits, not 0), uring the best
    assert first[:4] == ["4", "KiB", "write", "0.410"] and "0.960 ±5%<" in lines[2] and lines[2].count("<") == 1
    assert "*1 auto chose uring(qd=4)" in text and "*2 auto ran as posix" in text
    lat = output.render_latency(doc["results"])
    assert lat.splitlines()[0].split()[-6:] == ["IOPS", "requests", "p50", "p99", "p99.9", "max"] and "12.1 us" in lat
    # 7 requests: p99 and p99.9 would be the maximum; shown as "-" beside the max (bench audit, session 25)
    assert lat.splitlines()[2].split()[-7:] == ["7", "900", "ns", "-", "-", "12.1", "us"], lat
    csv_path = tmp_path / "r.csv"
    output.write_csv(str(csv_path), doc["results"])
    import csv
    rows = list(csv.DictReader(csv_path.open()))
    assert rows[0]["iodepth"] == "1" and float(rows[0]["p99.9_ns"]) == 12080 and float(rows[0]["iops"]) > 0


def _marked_doc():
    doc = _sample_doc()
    cold = {"method": "fadvise", "residency": 0.4, "cold": False}
    doc["results"] += [_result("cold-read", "posix", [50] * 7, cache=cold),
                       _result("cold-read", "uring", [60] * 7, cache={**cold, "residency": 0.0, "cold": True}),
                       _result("cold-read", "auto", [55] * 7, cache=cold, ran="posix")]
    return doc


def test_every_mark_in_the_text_table_names_its_own_note():
    # One '*' for every auto cell left the notes ("auto chose posix", "auto chose parallel") matched
    # to no row: each note has its number, and every mark in a cell is the number of a note about it.
    text = output.render_table(_marked_doc()["results"])
    lines = text.splitlines()
    legend = next(i for i, x in enumerate(lines) if x.startswith("*N: "))
    assert "ran as another" in lines[legend] and "!N: a cold read that was not cold" in lines[legend]
    notes = {x.split()[0]: x.split(None, 1)[1] for x in lines[legend + 1:]}
    assert notes == {"*1": "auto chose uring(qd=4)", "*2": "auto ran as posix",
                     "!1": "cold-read posix in /tmp: not cold, 40% resident after fadvise: a cached read",
                     "!2": "cold-read auto in /tmp: not cold, 40% resident after fadvise: a cached read"}
    heads = lines[0].split()
    seen = set()
    for row in lines[2:legend - 1]:
        cells = [c for c in row.split("  ") if c.strip()][-len(heads) + 2:]  # the mechanisms' cells
        for mech, cell in zip(heads[2:], cells):
            for mark in re.findall(r"[*!][0-9]+", cell):
                assert mech in notes[mark], (mech, cell, notes[mark])
                seen.add(mark)
    assert seen == set(notes)  # every note is used, every mark explained
    assert lines[legend - 2].endswith("55.0 ±0%!2*2"), lines[legend - 2]  # both marks on auto's cold read


def test_every_mark_in_the_report_names_its_own_note(tmp_path):
    page = _report(_marked_doc(), tmp_path)
    p = Page(page)
    notes = re.findall(r"<li>([*!][0-9]+) ([^<]*)</li>", page)
    assert ("*1", "auto chose uring(qd=4)") in notes and ("!2", notes[-1][1]) in notes
    marks = {(c["mechanism"], m) for row in p.cells for c in row for m in re.findall(r"[*!][0-9]+", c["text"])}
    assert marks == {("auto", "*1"), ("auto", "*2"), ("posix", "!1"), ("auto", "!2")}
    assert "*N: the mechanism ran as another" in page  # the legend explains the marks


def test_a_note_names_each_plan_once():
    plans = [{"plan": "posix", "why": "hot", "calls": 5}, {"plan": "posix", "why": "small", "calls": 2},
             {"plan": "parallel(task=4MiB)", "why": "large", "calls": 1}]
    text = output.render_table([_result("write", "auto", [100] * 7, plans=plans, ran="posix/parallel")])
    assert "  *1 auto chose posix, parallel(task=4MiB)" in text.splitlines()


def test_json_onto_a_fifo_or_device_is_written_through_not_replaced(tmp_path):
    """write_json wrote PATH.partial and renamed it over PATH whatever PATH was: `--json /dev/null`
    as root replaced /dev/null with a regular file (audit s26 #8). A private FIFO and, as root, a
    private null device made here (never a real one) are written through and kept."""
    import stat
    import threading
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
    reader.start()
    output.write_json(str(fifo), {"a": 1})
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    reader.join(60)  # a guard against a hang only: the write has finished and closed its end
    assert got and json.loads(got[0]) == {"a": 1}
    if os.geteuid() == 0:
        node = tmp_path / "nulldev"
        try:
            os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            return
        output.write_json(str(node), {"a": 1})
        assert stat.S_ISCHR(os.lstat(node).st_mode) and os.lstat(node).st_rdev == os.makedev(1, 3)
    assert sorted(os.listdir(tmp_path)) == sorted(["pipe"] + (["nulldev"] if (tmp_path / "nulldev").exists() else []))
