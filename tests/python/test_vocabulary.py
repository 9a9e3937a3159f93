"""One owner per fact: the plan vocabulary, the built-in model, the mechanism registry and the settings
table are the engine's; the Python tuner, `accio run`, `accio bench`, `accio info` and the docs read
them through accio._ext. A profile written by the Python tuner round-trips through the engine's
parser with the same plans, labels and decisions; the docs' settings table is the engine's."""
import json
import os
import pathlib
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

import accio
from accio import _ext, info
from accio.bench import spec
from accio.tune import profile, search
from accio.tune.measure import MiB, Plan
from accio.tune.search import Group, Search

ROOT = pathlib.Path(__file__).resolve().parents[2]
KiB = 1 << 10


def fake_search(cold_reads=True) -> Search:
    """A finished search with made-up medians: the tuner's build() turns it into a profile."""
    bench = SimpleNamespace(cold_reads=cold_reads, cold_note="", file_size=256 * MiB,
                            directory=None)  # the model of a device that is not rotational
    s = Search(bench=bench, threads=4, budget=1.0, plans=[])
    winners = {  # size -> ranked plans (MiB/s), per group
        4 * KiB: [(Plan("posix"), 900), (Plan("parallel"), 500)],
        # 2 MiB: above the built-in model's crossing point on any machine of 2 CPUs or more (its plan
        # there, parallel(even), is not measured, so the winner is kept without a noise guard)
        2 * MiB: [(Plan("parallel", task_size=256 * KiB, threads=2), 3000), (Plan("posix"), 1200)],
        64 * MiB: [(Plan("uring", queue_depth=16, direct=True), 6000), (Plan("direct"), 5800),
                   (Plan("uring", queue_depth=64), 4000)],
    }
    for g in s.groups():
        for size, ranked in winners.items():
            for plan, mibps in ranked:
                s.samples[(g, size, plan)] = [mibps * (0.9 if g.cache == "cold" else 1.0)]
    return s


def cell_plans(cells, size):
    return next(c["plans"] for c in cells if c["max_size"] is None or size <= c["max_size"])


def test_tuner_profile_round_trips_through_the_engine_parser(tmp_path):
    doc = profile.build(fake_search(), {"key": {"filesystem": "testfs", "device": "/dev/test"}})
    path = tmp_path / "p.json"
    profile.save(doc, str(path))
    seen = json.loads(_ext.profile_describe(path.read_text(), str(path)))
    assert seen["name"] == "testfs on /dev/test" and not seen["builtin"]
    # Every field the tuner writes is read by the engine: the plans come back field for field.
    assert len(seen["plans"]) == len(doc["plans"])
    for written, read in zip(doc["plans"], seen["plans"]):
        assert {k: v for k, v in read.items() if k not in ("label", "needs_alignment")} == written
        p = Plan.from_json(written)
        assert (read["label"], read["needs_alignment"]) == (p.label, p.needs_alignment)
    assert {"posix", "parallel(task=256KiB, threads=2)", "uring+direct(even, qd=16)"} <= {
        p["label"] for p in seen["plans"]}
    # The decisions: the engine's cells choose what the document says, size by size.
    for op in ("read", "write"):
        for conc in ("1", "N"):
            for cache in ("hot", "cold"):
                mine, theirs = doc["decisions"][op][conc][cache], seen["decisions"][op][conc][cache]
                for size in (1, 4 * KiB, 64 * KiB, 512 * KiB, MiB, 16 * MiB, 64 * MiB, 1 << 40):
                    assert cell_plans(mine, size) == cell_plans(theirs, size), (op, conc, cache, size)
    # And the engine, given the file, plans what the document says (hot range, one request in flight).
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(2 * MiB))
    with accio.open(str(data), "r", profile=str(path)) as f:
        f.read_into(bytearray(2 * MiB))  # the range is cached: hot
        first = cell_plans(doc["decisions"]["read"]["1"]["hot"], MiB)[0]
        assert f.explain(MiB)["plan"] == seen["plans"][first]["label"]
    # `accio tune --show` prints the engine's labels.
    shown = profile.render(doc, str(path))
    assert "uring+direct(even, qd=16)" in shown and "parallel(task=256KiB, threads=2)" in shown


def test_builtin_model_is_the_engines():
    model = profile.builtin_model()
    assert model["builtin"] and model["schema"] == profile.SCHEMA
    labels = [p["label"] for p in model["plans"]]
    for op in ("read", "write"):
        for conc in ("1", "N"):
            cells = profile._builtin_cells(fake_search(), op, conc, "hot", lambda p: p.label)
            engine = model["decisions"][op][conc]["hot"]
            assert [c["max_size"] for c in cells] == [c["max_size"] for c in engine]
            assert [c["plans"] for c in cells] == [[labels[i] for i in c["plans"]] for c in engine]
    # Cold reads that start a stream and read to the end of the file (cold_start) run direct from
    # 8 MiB; --show gives them a column.
    start = model["decisions"]["read"]["1"]["cold_start"]
    big = next(c for c in start if c["max_size"] is None)
    assert labels[big["plans"][0]] == "direct(even)" and "cold_start" not in model["decisions"]["write"]["1"]
    shown = profile.render(model, "built-in model")
    assert "cold, starts a stream and reads to the end" in shown and "direct(even)" in shown
    # A search that measured nothing falls back to the engine's built-in cells.
    s = fake_search()
    s.samples.clear()
    doc = profile.build(s, {})
    seen = json.loads(_ext.profile_describe(json.dumps(doc), "empty"))
    for conc in ("1", "N"):
        small = model["decisions"]["read"][conc]["hot"][0]["max_size"]
        assert seen["decisions"]["read"][conc]["hot"][0]["max_size"] == small


def test_labels_and_alignment_come_from_the_engine():
    assert Plan("posix", task_size=MiB, threads=3).label == "posix"  # posix reads neither
    assert Plan("uring", queue_depth=4, threads=8).label == "uring(even, qd=4)"  # uring reads no threads
    assert Plan("direct").needs_alignment and Plan("uring", direct=True).needs_alignment
    assert not Plan("parallel").needs_alignment
    with pytest.raises(OSError, match="plan mechanism must name a mechanism"):
        _ext.plan_describe(json.dumps({"mechanism": "warp"}))
    with pytest.raises(OSError):
        _ext.profile_describe("{}", "nothing.json")
    assert search.MIN_EVEN_TASK == _ext.MIN_EVEN_TASK > 0


def test_mechanism_lists_come_from_the_registry():
    ms = _ext.mechanisms()
    host = [m["name"] for m in ms if not m["device"]]
    # accio run's launcher (C) asks the same registry: its refusal lists auto and the host mechanisms
    p = subprocess.run([sys.executable, "-m", "accio.cli", "run", "-m", "warp", "--", "true"], capture_output=True,
                       text=True)
    assert p.returncode == 125 and p.stderr.strip().endswith("not one of " + ", ".join(("auto", *host))), p.stderr
    assert spec.host_mechanisms() == tuple(host)
    assert {"posix", "parallel", "direct", "uring"} <= set(host)
    assert {"naive", "staged", "gds"} <= {m["name"] for m in ms if m["device"]}
    names = {r["name"] for r in _ext.setting_specs()}
    for m in ms:
        assert set(m["knobs"]) <= names, m
    assert "queue_depth" in next(m for m in ms if m["name"] == "uring")["knobs"]
    assert [c.label for c in spec.parse_mechanisms("all")] == [*host, "auto"]  # auto beside the fixed ones
    assert spec.Column("direct", "direct").o_direct() and not spec.Column("parallel", "parallel").o_direct()
    assert spec.Column("uring+direct", "uring", (("direct", "on"),)).o_direct()


def test_docs_settings_table_is_the_engines():
    """docs/api.md's settings table is generated: regenerate with python -m accio.info --settings-markdown."""
    text = (ROOT / "docs" / "api.md").read_text()
    assert info.settings_markdown() in text, "docs/api.md's settings table differs from the engine's table: " \
        "regenerate it with `python -m accio.info --settings-markdown`"
    rows = [r for r in info.settings_table()]
    assert {r["name"] for r in rows} >= {"threads", "queue_depth", "ring_depth", "cache_probe"}
    threads = next(r for r in rows if r["name"] == "threads")
    assert {"parallel", "direct", "staged", "gds"} <= set(threads["read_by"])  # the doc is not stale


def test_docs_worked_example_is_the_compiled_one():
    """docs/architecture.md's mechanism-with-a-knob example is the code tests/cpp/test_example_mechanism.cpp compiles."""
    src = (ROOT / "tests" / "cpp" / "test_example_mechanism.cpp").read_text()
    example = re.search(r"// BEGIN example: \S+\n(.*?)// END example", src, re.S).group(1)
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert example.strip() in doc


def test_info_shows_the_table(tmp_path):
    r = subprocess.run([sys.executable, "-m", "accio.cli", "info", "--json", str(tmp_path)], capture_output=True,
                       text=True, check=True)
    ring = next(s for s in json.loads(r.stdout)["settings"] if s["name"] == "ring_depth")
    assert ring["value"] == "3" and ring["read_by"] == ["staged"] and ring["kind"] == "count"
    r = subprocess.run([sys.executable, "-m", "accio.cli", "info", str(tmp_path)], capture_output=True, text=True,
                       check=True)
    assert re.search(r"ring_depth +3 +ACCIO_RING_DEPTH .*\(staged\)", r.stdout), r.stdout


def test_long_setting_values_are_not_cut(tmp_path):
    from conftest import POSIX_PROFILE
    folder = tmp_path.joinpath(*["p" * 200] * 5)  # a profile must exist: one at a path of over 1000 bytes
    folder.mkdir(parents=True)
    (folder / "p.json").write_text(POSIX_PROFILE)
    long = str(folder / "p.json")
    assert len(long) > 1000 and accio.settings(profile=long)["profile"] == long
    data = tmp_path / "d"
    data.write_bytes(b"x")
    with accio.open(str(data), "r", mechanism="posix", profile=long) as f:
        assert f.setting("profile") == long


def test_tuner_varies_what_each_mechanism_reads():
    """search.variants takes its parameters from the mechanisms' knobs (the engine's registry)."""
    assert search.variants(Plan("posix"), 64 * MiB) == []
    assert search.variants(Plan("parallel"), 64 * MiB) == [Plan("parallel", task_size=MiB),
                                                           Plan("parallel", task_size=4 * MiB)]
    assert search.variants(Plan("direct"), 2 * MiB) == [Plan("direct", task_size=MiB)]
    u = Plan("uring", queue_depth=16, direct=True)
    assert search.variants(u, 64 * MiB) == [
        Plan("uring", queue_depth=4, direct=True), Plan("uring", queue_depth=64, direct=True),
        Plan("uring", task_size=MiB, queue_depth=16, direct=True),
        Plan("uring", task_size=4 * MiB, queue_depth=16, direct=True)]
    assert "direct" in Plan("uring").settings() and "direct" not in Plan("parallel").settings()
