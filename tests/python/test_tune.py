"""accio tune and the auto mechanism from Python: a tiny budgeted calibration end to end (profile
written under its key, loaded by the engine, shown), --evaluate on a small grid, explain() and
statistics saying which plan ran and why, hot/cold decisions, and the error paths."""
import json
import mmap
import os
import time
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import accio
from accio import _ext, stats
from accio.info import filesystem

ACCIO = [sys.executable, "-m", "accio.cli"]

PROFILE = {
    "schema": "accio.profile/1",
    "key": {"filesystem": "testfs", "device": "/dev/test"},
    "plans": [{"mechanism": "posix"}, {"mechanism": "parallel", "task_size": 262144},
              {"mechanism": "direct"}],
    "decisions": {
        "read": {"1": {"hot": [{"max_size": 65535, "plans": [0]}, {"max_size": None, "plans": [1, 0]}],
                       "cold": [{"max_size": 65535, "plans": [0]}, {"max_size": None, "plans": [2, 1]}]},
                 "N": {"hot": [{"max_size": None, "plans": [0]}], "cold": None}},
        "write": {"1": {"hot": [{"max_size": None, "plans": [0]}]},
                  "N": {"hot": [{"max_size": None, "plans": [0]}]}},
    },
}


def tune(*args, check=True, env=None):
    r = subprocess.run([*ACCIO, "tune", *args], capture_output=True, text=True, env={**os.environ, **(env or {})})
    if check and r.returncode != 0:
        raise AssertionError(f"accio tune {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def can_be_cold(path) -> bool:
    return filesystem(str(path))["fstype"] not in ("tmpfs", "ramfs")


@pytest.fixture(autouse=True)
def profile_dir(tmp_path, monkeypatch):
    """Each test its own profile directory (tune writes there; the engine looks there)."""
    d = tmp_path / "profiles"
    monkeypatch.setenv("ACCIO_PROFILE_DIR", str(d))
    return d


@pytest.fixture
def profile_file(tmp_path):
    p = tmp_path / "profile.json"
    p.write_text(json.dumps(PROFILE))
    return str(p)


@pytest.fixture
def data(tmp_path):
    p = tmp_path / "data.bin"
    arr = np.random.default_rng(1).integers(0, 255, 4 << 20, dtype=np.uint8)
    arr.tofile(p)
    return str(p), arr


def test_explain_follows_the_profile_table(profile_file, data):
    path, arr = data
    with accio.open(path, "r", profile=profile_file) as f:
        buf = np.empty_like(arr)
        assert f.read_into(buf) == arr.size  # the pages are now cached: hot
        assert (buf == arr).all()
        e = f.explain(4096)
        assert e["plan"] == "posix" and "testfs on /dev/test: read, one request in flight" in e["why"]
        e = f.explain(1 << 20)
        assert e["plan"] == "parallel(task=256KiB)" and e["mechanism"] == "parallel"
        st = f.stats()
        assert [p["plan"] for p in st["plans"]] == ["parallel(task=256KiB)"]
        assert st["plans"][0]["calls"] == 1 and st["plans"][0]["bytes"] == arr.size


def test_cold_ranges_take_the_cold_plan_and_unaligned_requests_fall_back(profile_file, data, tmp_path):
    path, arr = data
    if not can_be_cold(tmp_path):
        pytest.skip("the test directory is on tmpfs: pages cannot be dropped")
    if not _ext.probe("o_direct", str(tmp_path))[0]:
        pytest.skip("no O_DIRECT here")
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    for probe in ("auto", "cachestat", "nowait", "mincore"):
        with accio.open(path, "r", profile=profile_file, cache_probe=probe) as f:
            e = f.explain(1 << 20)
            assert e["plan"] == "direct(even)" and "range cold" in e["why"], (probe, e)
            e = f.explain(1 << 20, aligned=False)
            assert e["plan"] == "parallel(task=256KiB)" and "needs alignment" in e["why"], (probe, e)
            assert f.explain(1 << 20, offset=512)["plan"] == "parallel(task=256KiB)"
    with accio.open(path, "r", profile=profile_file) as f:
        buf = mmap.mmap(-1, arr.size)  # page-aligned, as O_DIRECT wants
        assert f.read_into(buf) == arr.size
        assert (np.frombuffer(buf, dtype=np.uint8) == arr).all()
        assert f.stats()["plans"][0]["plan"] == "direct(even)"
        assert f.explain(1 << 20)["plan"] == "direct(even)"  # O_DIRECT left the cache cold
        with open(path, "rb") as plain:
            plain.read()
        # The handle's next requests reuse its cold verdict for 4 MiB (questions move nothing); a
        # handle opened now probes: cached.
        assert f.explain(1 << 20)["plan"] == "direct(even)"
    with accio.open(path, "r", profile=profile_file) as f:
        assert f.explain(1 << 20)["plan"] == "parallel(task=256KiB)"  # now cached


def test_fixed_mechanism_and_builtin_model_say_why(data):
    path, arr = data
    with accio.open(path, "r", mechanism="posix") as f:
        f.read_into(np.empty_like(arr))
        st = f.stats()["plans"]
        assert st[0]["plan"] == "posix" and st[0]["why"] == "mechanism=posix is set"
        assert f.explain(1 << 20)["why"] == "mechanism=posix is set"
    with accio.open(path, "r", profile="off") as f:
        e = f.explain(4 << 20)
        assert e["plan"] == "parallel(even)" and "built-in model" in e["why"] and "accio tune" in e["why"]
        assert f.explain(4096)["plan"] == "posix"


def test_bad_profiles_are_clear_errors_and_lose_nothing(tmp_path, data):
    path, arr = data
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "accio.profile/1", "plans": []}')
    with pytest.raises(OSError) as e:
        accio.open(path, "w", profile=str(bad))
    assert e.value.errno == 22 and "bad.json" in str(e.value) and "plans" in str(e.value)
    with pytest.raises(OSError) as e:  # a bad value of the setting (EINVAL, as every other), named
        accio.open(path, "w", profile=str(tmp_path / "none.json"))
    assert e.value.errno == 22 and f"profile='{tmp_path / 'none.json'}' is not valid: no such file" in str(e.value)
    assert (np.fromfile(path, dtype=np.uint8) == arr).all()  # never truncated
    os.mkfifo(tmp_path / "fifo")  # opening it waited for a writer: every open hung (tune audit, session 26)
    # ...and a calibration saving onto it (or onto a device) would have replaced the node: refused first
    r = tune(str(tmp_path), "--budget", "5", "--profile", str(tmp_path / "fifo"), check=False)
    assert r.returncode == 2 and "not a regular file" in r.stderr and (tmp_path / "fifo").is_fifo(), r.stderr
    r = subprocess.run([*ACCIO, "tune", str(tmp_path), "--show"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "ACCIO_PROFILE": str(tmp_path / "fifo")})  # it waited for a writer
    assert r.returncode == 2 and "not a regular file" in r.stderr, r.stderr
    with pytest.raises(OSError) as e:
        accio.open(path, profile=str(tmp_path / "fifo"))
    assert e.value.errno == 22 and "not a regular file" in str(e.value)
    with pytest.raises(OSError):
        accio.settings(cache_probe="sometimes")
    # A broken profile in the profile directory: one warning, the built-in model, the open works.
    key = _ext.profile_key(str(tmp_path))
    os.makedirs(os.path.dirname(key["file"]), exist_ok=True)
    with open(key["file"], "w") as f:
        f.write("{not json")
    code = "import accio, sys; f = accio.open(sys.argv[1]); print(f.explain(1 << 20)['why'])"
    try:
        r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True,
                           env={**os.environ, "ACCIO_QUIET": "0"})
        assert r.returncode == 0, r.stderr
        assert "built-in model" in r.stdout
        assert "invalid JSON" in r.stderr and key["file"] in r.stderr
    finally:
        os.unlink(key["file"])
    # A FIFO there: the same, at once (the engine, and the launcher reading the directory, hung).
    os.mkfifo(key["file"])
    try:
        r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "ACCIO_QUIET": "0"})
        assert r.returncode == 0 and "built-in model" in r.stdout, r.stderr
        assert "not a regular file" in r.stderr and key["file"] in r.stderr
        r = subprocess.run([str(Path(sys.executable).with_name("accio")), "run", "--", "true"], capture_output=True,
                           text=True, timeout=60,
                           env={**os.environ, "ACCIO_PROFILE_DIR": os.path.dirname(key["file"])})
        assert r.returncode == 0, r.stderr
    finally:
        os.unlink(key["file"])


def test_tune_writes_a_profile_that_auto_uses(tmp_path):
    budget = 8
    # ACCIO_PROFILE=off set in the caller's environment: the calibration measures fixed plans either
    # way, and its last line warns that auto will not use what it saved while the variable is set
    # (it said "`auto` uses it for files on ...", audit s26 #1).
    r = tune(str(tmp_path), "--budget", str(budget), "--file-size", "16m", "-q", env={"ACCIO_PROFILE": "off"})
    key = _ext.profile_key(str(tmp_path))
    assert f"saved {key['file']}" in r.stdout
    assert r.stdout.splitlines()[-1].startswith("accio tune: warning: ACCIO_PROFILE=off is set here"), r.stdout
    doc = json.loads(open(key["file"]).read())
    assert doc["schema"] == "accio.profile/1"
    assert doc["key"] == {k: key[k] for k in ("filesystem", "device", "kernel", "accio")}
    assert doc["elapsed_s"] <= budget * 1.25 + 2, doc["elapsed_s"]  # the budget bounds the calibration
    assert doc["cpus"] == os.sysconf("SC_NPROCESSORS_ONLN")  # a machine of another size that finds it is told
    assert doc["measurements"] and all(m["median"] > 0 for m in doc["measurements"])
    assert {m["op"] for m in doc["measurements"]} == {"read", "write"}
    assert not [p for p in os.listdir(tmp_path) if p.startswith("accio-tune")]  # scratch files removed
    # The depth measurement behind the shim's prefetch takes a tenth of the budget: 0.8 s is too
    # little, so it says so and leaves the prefetch off.
    assert doc["prefetch"]["window"] == 0 and "under 2 s" in doc["prefetch"]["note"], doc["prefetch"]
    # The engine loads it for files on this filesystem, and --show renders it.
    with accio.open(tmp_path / "x.bin", "w+") as f:
        why = f.explain(1 << 20)["why"]
        assert why.startswith(f"{key['filesystem']} on {key['device']}:"), why
    shown = tune(str(tmp_path), "--show").stdout
    assert key["file"] in shown and "read, 1 request in flight" in shown and "hot (cached) range" in shown
    assert "prefetch: off (depth gain not measured" in shown
    # Cold reads are measured where pages can be dropped, and declared impossible where not.
    if can_be_cold(tmp_path):
        assert any(m["cache"] == "cold" and m["op"] == "read" for m in doc["measurements"])
    else:
        assert doc["cold_reads"] is False and doc["decisions"]["read"]["1"]["cold"] is None


def test_evaluate_reports_regret_against_the_oracle(tmp_path):
    out = tmp_path / "eval.json"
    r = tune(str(tmp_path), "--evaluate", "--file-sizes", "1m", "--transfers", "4k,512k", "-i", "1", "--max-reps", "2",
             "--threads", "2", "--json", str(out), "-q")
    doc = json.loads(out.read_text())
    assert doc["profile"].startswith("built-in model") and "no profile" in r.stderr
    # transfers x threads x (write hot/cold, read hot, read cold where pages can be dropped)
    assert len(doc["cells"]) == 2 * 2 * (3 + doc["cold_reads"])
    fixed = {"posix", "parallel", "direct", "uring"}
    for c in doc["cells"]:
        assert set(c["median"]) == {"auto"} | fixed
        # The oracle is the best fixed mechanism by median; the ratios are paired estimates, so auto's,
        # and another fixed mechanism's, may exceed 1 (posix at 1.0003 beside a parallel oracle whose
        # median was 0.05% higher, in two rounds: this test failed one run in three since session 24)
        assert c["oracle"] in fixed and c["ratio"][c["oracle"]] == 1.0
        assert all(c["median"][m] <= c["median"][c["oracle"]] for m in fixed)
        assert all(c["ratio"][m] > 0 for m in c["ratio"])
        assert set(c["auto_vs"]) == fixed
        assert all(v["low"] <= v["estimate"] <= v["high"] for v in c["auto_vs"].values())
        assert c["verdict"] in ("too few samples (1 < 7)", "too few samples (2 < 7)")  # never a result...
        assert len(c["samples"]["auto"]) == 2  # ...so one extra round, up to --max-reps
        assert c["auto_plans"], c
    assert set(doc["summary"]) == {"auto"} | fixed
    assert doc["verdict"]["best_fixed"] in fixed and set(doc["verdict"]["auto_geomean_vs"]) == fixed
    assert doc["rule"] == {"min_samples": 7, "confidence": 0.95, "noise": 0.05, "goal": 0.9}
    assert doc["command"].startswith("accio tune") and "--evaluate" in doc["command"]
    assert all(v > 0 for v in doc["decision_ns"].values())
    assert "ratio to the oracle" in r.stdout and "auto decision cost" in r.stdout and "auto/posix" in r.stdout


def test_evaluate_ops_and_caches_pick_the_cells(tmp_path):
    """--ops and --caches narrow the grid (the GPU machine's host-auto stage measures hot reads
    only); the record says which it measured."""
    out = tmp_path / "eval.json"
    tune(str(tmp_path), "--evaluate", "--file-sizes", "1m", "--transfers", "256k,512k", "--ops", "read",
         "--caches", "hot", "-i", "1", "--max-reps", "1", "--threads", "2", "--json", str(out), "-q")
    doc = json.loads(out.read_text())
    assert {(c["op"], c["cache"]) for c in doc["cells"]} == {("read", "hot")} and len(doc["cells"]) == 4
    assert doc["ops"] == ["read"] and doc["caches"] == ["hot"]
    # the order given does not matter, the grid's does; a word that is neither is refused before
    # anything is written
    tune(str(tmp_path), "--evaluate", "--file-sizes", "1m", "--transfers", "512k", "--ops", "write,read",
         "--caches", "hot", "-i", "1", "--max-reps", "1", "--threads", "1", "--json", str(out), "-q")
    assert json.loads(out.read_text())["ops"] == ["read", "write"]
    for opt, bad in (("--ops", "reads"), ("--caches", "warm"), ("--ops", ",")):
        r = tune(str(tmp_path), "--evaluate", opt, bad, check=False)
        assert r.returncode == 2 and f"{opt} {bad!r}" in r.stderr and "expected one or more of" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["eval.json"]
    # a grid with no cell: a usage error, not an empty report, before any file is written
    r = tune(str(tmp_path), "--evaluate", "--file-sizes", "1m", "--transfers", "2m", "--ops", "read", "--caches", "hot",
             "--json", str(out), check=False)
    assert r.returncode == 2 and "no cell to measure" in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["eval.json"]


def test_an_evaluation_of_reads_alone_writes_no_write_file(tmp_path):
    from accio.tune.measure import Bench
    with Bench(str(tmp_path), 1 << 20, writes=False) as b:
        assert os.path.exists(b.read_path) and not os.path.exists(b.write_path)
    with Bench(str(tmp_path), 1 << 20) as b:
        assert os.path.getsize(b.write_path) == 1 << 20
    assert os.listdir(tmp_path) == []


def test_evaluate_with_profile_off_says_built_in_model(tmp_path):
    """A profile saved for this filesystem and ACCIO_PROFILE=off: the auto handles run the built-in
    model, and the record says so (not the profile's path)."""
    key = _ext.profile_key(str(tmp_path))
    os.makedirs(os.path.dirname(key["file"]), exist_ok=True)
    with open(key["file"], "w") as f:
        f.write(_ext.profile_describe(json.dumps(PROFILE)))
    out = tmp_path / "eval.json"
    r = tune(str(tmp_path), "--evaluate", "--file-sizes", "1m", "--transfers", "512k", "-i", "1", "--max-reps", "1",
             "--threads", "1", "--json", str(out), "-q", env={"ACCIO_PROFILE": "off"})
    assert json.loads(out.read_text())["profile"].startswith("built-in model") and "ACCIO_PROFILE=off" in r.stderr
    tune(str(tmp_path), "--evaluate", "--file-sizes", "1m", "--transfers", "512k", "-i", "1", "--max-reps", "1",
         "--threads", "1", "--json", str(out), "-q")
    assert json.loads(out.read_text())["profile"] == key["file"]


def test_tune_error_paths(tmp_path):
    r = tune(str(tmp_path), "--show", check=False)
    assert r.returncode == 1 and "no profile" in r.stderr and "accio tune" in r.stderr
    r = tune(str(tmp_path), "--target", "cuda:0", check=False)
    assert r.returncode == 2 and "--device cuda:N" in r.stderr  # a GPU is measured with --device
    r = tune(str(tmp_path), "--file-size", "lots", check=False)
    assert r.returncode == 2 and "--file-size" in r.stderr
    r = tune(str(tmp_path), "--budget", "1", check=False)
    assert r.returncode == 2 and "budget" in r.stderr
    for endless in ("nan", "inf"):  # nan < 5 is False: a calibration without end
        r = tune(str(tmp_path), "--budget", endless, check=False)
        assert r.returncode == 2 and f"argument --budget: '{endless}': the time must be above 0" in r.stderr, r.stderr
    r = tune(str(tmp_path), "--budget", "10s", "--device-budget", "1m", check=False)  # bench's time grammar
    assert r.returncode == 2 and "--device-budget 60: must be above 0 and below --budget (10)" in r.stderr, r.stderr
    # a profile that could not be saved is refused before the calibration, not after its minutes
    (tmp_path / "plain").write_text("x")
    for bad, words in ((tmp_path, "is a directory"), (tmp_path / "plain" / "sub" / "p.json", "not a directory"),
                       ("/proc/nope/p.json", "cannot write in /proc")):
        t0 = time.monotonic()
        r = tune(str(tmp_path), "--budget", "60", "--file-size", "8m", "--profile", str(bad), check=False)
        assert r.returncode == 1 and words in r.stderr and f"--profile {bad}" in r.stderr, r.stderr
        assert time.monotonic() - t0 < 30 and "Traceback" not in r.stderr
    (tmp_path / "binary.json").write_bytes(bytes(range(256)))  # not text: one line naming it, no traceback
    r = tune(str(tmp_path), "--show", "--profile", str(tmp_path / "binary.json"), check=False)
    assert r.returncode == 1 and "binary.json" in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = tune(str(tmp_path), "--evaluate", "-i", "7", "--max-reps", "5", check=False)
    assert r.returncode == 2 and "--max-reps 5" in r.stderr
    r = tune(str(tmp_path), "--vs-profile", "off", check=False)
    assert r.returncode == 2 and "--vs-profile goes with --evaluate" in r.stderr
    r = tune(str(tmp_path), "--evaluate", "--vs-profile", str(tmp_path / "nope.json"), check=False)
    assert r.returncode == 2 and "no such profile file" in r.stderr
    r = tune(str(tmp_path / "missing"), check=False)
    assert r.returncode == 1 and "no such file" in r.stderr
    r = tune(str(tmp_path), "--file-size", "1t", "--budget", "10", check=False)
    assert r.returncode == 1 and "free" in r.stderr


def test_the_search_starts_from_every_host_mechanism_the_engine_registers(monkeypatch):
    """A new host mechanism (one file and its registration in C++) is measured by `accio tune`
    without an edit to the tuner, and the tie-break knows it (it loses ties to the built-in ones)."""
    from accio.tune import search
    registry = _ext.mechanisms()
    extra = {"name": "chunky", "available": True, "detail": "", "device": False, "knobs": ["task_size", "direct"]}
    monkeypatch.setattr(search._ext, "mechanisms", lambda: [*registry, extra])
    monkeypatch.setattr(search, "knobs", lambda m: tuple(extra["knobs"]) if m == "chunky" else ())
    names = [(p.mechanism, p.direct) for p in search.base_plans(True)]
    assert ("chunky", False) in names and ("chunky", True) in names
    assert ("chunky", True) not in [(p.mechanism, p.direct) for p in search.base_plans(False)]
    builtin = {m["name"] for m in registry if not m["device"]}
    assert builtin <= {n for n, _ in names}  # every registered host mechanism is a starting plan
    assert all(search.simplicity(m) < search.simplicity("chunky") for m in search.SIMPLICITY)


def test_decision_cost_benchmark_runs_and_reports_every_size(tmp_path):
    """benchmarks/decision_cost.py with tiny settings: every size, every contender, the shares."""
    out = tmp_path / "dc.json"
    bench = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "decision_cost.py")
    r = subprocess.run([sys.executable, bench, "--dir", str(tmp_path), "--rounds", "7", "--decisions", "64",
                        "--sizes", "4k,1m", "--json", str(out)], capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr  # 1: a goal missed (timings on a loaded machine)
    doc = json.loads(out.read_text())
    assert [row["size"] for row in doc["rows"]] == [4096, 1 << 20]
    for row in doc["rows"]:
        assert set(row["median_ns"]) == {"decide", "decide/noprobe", "decide/model", "fixed", "request"}
        assert all(len(v) == 7 and min(v) > 0 for v in row["samples_ns"].values())
        assert row["goal"] == ("met" if row["added_over_request"] <= doc["goal"] else "missed")
        # the added share is the median of the rounds' own shares, with its interval
        per_round = [(d - f) / q for d, f, q in zip(*(row["samples_ns"][k] for k in ("decide", "fixed", "request")))]
        low, high = row["added_interval"]
        assert row["added_over_request"] == pytest.approx(stats.median(per_round)) and low <= row["added_over_request"] <= high
    assert r.stdout.count("decide/request") == 2
    assert [p for p in os.listdir(tmp_path) if p != "dc.json"] == []  # its scratch files are gone
    bad = subprocess.run([sys.executable, bench, "--rounds", "6"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--rounds must be at least 7" in bad.stderr


def test_cold_split_benchmark_runs_and_reports_what_auto_ran(tmp_path):
    """benchmarks/cold_split.py with tiny settings: every contender against pread, the device's
    facts, the plans auto ran with their reasons, and no scratch file left; bad sizes are refused."""
    out = tmp_path / "cs.json"
    bench = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "cold_split.py")
    r = subprocess.run([sys.executable, bench, "--dir", str(tmp_path), "--size", "8m", "--request", "2m",
                        "--rounds", "7", "--json", str(out)], capture_output=True, text=True)
    if r.returncode and "stay cached" in r.stderr:
        pytest.skip("this filesystem keeps pages cached: no cold reads")
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert [x["what"] for x in doc["ratios"]] == ["posix / pread", "parallel(task=4MiB) / pread",
                                                  "auto (built-in model) / pread"]
    assert all(len(v) == 7 for v in doc["samples"].values())
    assert sum(doc["auto_plans"].values()) == 7 * 4, doc["auto_plans"]  # 4 requests a sample
    notes = [why for why in doc["auto_plans"] if "rotational device" in why]
    if doc["model_rotational"] and len(os.sched_getaffinity(0)) > 1:  # 2 MiB is split hot: posix when cold
        assert notes and all(why.startswith("posix | ") for why in notes), doc["auto_plans"]
    else:
        assert not notes, doc["auto_plans"]
    assert [p for p in os.listdir(tmp_path) if p != "cs.json"] == []
    bad = subprocess.run([sys.executable, bench, "--size", "1m", "--request", "2m"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--request" in bad.stderr


def test_tune_never_replaces_a_profile_with_one_of_nothing(tmp_path, monkeypatch):
    """A --file-size too small to measure anything is refused before anything runs, and a search
    that measured nothing (here: stubbed out) saves nothing: the profile there is kept. Both once
    wrote a profile of no measurements over a real one, silently turning the tuning off."""
    prof = tmp_path / "mine.json"
    prof.write_text(json.dumps(PROFILE))
    r = tune(str(tmp_path), "--file-size", "1k", "--profile", str(prof), check=False)
    assert r.returncode == 2 and "--file-size 1k" in r.stderr and "at least 8MiB" in r.stderr, r.stderr
    assert json.loads(prof.read_text()) == PROFILE and not list(tmp_path.glob("accio-tune.*"))

    import accio.tune as t
    class Nothing:  # a search whose budget ran out before its first sample
        def __init__(self, bench, threads, *a, **k):
            self.bench, self.threads, self.notes, self.samples, self.device = bench, threads, [], {}, -1
        def run(self):
            pass
    monkeypatch.setattr(t, "Search", Nothing)
    monkeypatch.setattr(t.prefetch_mod, "measure", lambda *a, **k: {})
    monkeypatch.setattr(t.profile_mod, "build", lambda search, meta: {"measurements": [], **meta})
    import argparse
    parser = argparse.ArgumentParser()
    t.add_arguments(parser)
    args = parser.parse_args([str(tmp_path), "--budget", "30", "--file-size", "8m", "--profile", str(prof), "-q"])
    with pytest.raises(RuntimeError, match=f"nothing was measured .*the profile at {prof} is kept"):
        t.main(args)
    assert json.loads(prof.read_text()) == PROFILE and not list(tmp_path.glob("accio-tune.*"))


def test_sigterm_removes_the_scratch_files(tmp_path):
    """`kill` (a batch system's time limit) ends accio tune as Ctrl-C does, with exit 143: its 256 MiB
    scratch files removed, the profile untouched. SIGTERM used to kill it on the spot, files left."""
    import signal
    import time
    prof = tmp_path / "mine.json"
    prof.write_text(json.dumps(PROFILE))
    p = subprocess.Popen([*ACCIO, "tune", str(tmp_path), "--budget", "60", "--file-size", "64m", "--profile", str(prof),
                          "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("accio-tune.*")) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert list(tmp_path.glob("accio-tune.*")), "the calibration never wrote its files"
    p.send_signal(signal.SIGTERM)
    _out, err = p.communicate(timeout=60)
    assert p.returncode == 143, err  # 128 + SIGTERM, as a shell reports it (130 until the nineteenth session)
    assert not list(tmp_path.glob("accio-tune.*"))
    assert json.loads(prof.read_text()) == PROFILE


def test_show_without_a_profile_states_the_models_own_crossing(tmp_path):
    """--show with no profile describes the built-in model as the engine has it on this machine
    (it said 'posix below 1 MiB' while the model crossed at 1536 KiB on 2 CPUs)."""
    from accio.tune.search import builtin_model
    from accio.tune.measure import fmt
    model = builtin_model(where=str(tmp_path))
    first = model["decisions"]["read"]["1"]["hot"][0]
    r = tune(str(tmp_path), "--show", check=False)
    assert r.returncode == 1 and all(line.startswith("accio tune: ") for line in r.stderr.splitlines()), r.stderr
    assert f"below {fmt(first['max_size'] + 1)}" in r.stderr, r.stderr


def test_profile_ranges_are_written_in_round_sizes():
    from accio.tune.profile import _range
    assert _range(0, 8 * 2**20) == "<= 8MiB"  # was '< 8388609B'
    assert _range(8 * 2**20 + 1, 64 * 2**20 - 1) == "> 8MiB .. < 64MiB"
    assert _range(8 * 2**20 + 1, None) == "> 8MiB"
    assert _range(1536 * 1024, None) == ">= 1536KiB" and _range(0, None) == "any size"
    assert _range(0, 1536 * 1024 - 1) == "< 1536KiB" and _range(1536 * 1024, 8 * 2**20 - 1) == "1536KiB .. < 8MiB"


def test_tune_writes_the_profile_that_accio_profile_names(tmp_path):
    """ACCIO_PROFILE=X set for the programs, then `accio tune --profile X` to make X: the calibration
    measures fixed plans, so the profile named (missing until this run writes it) must not refuse
    its opens."""
    prof = tmp_path / "mine.json"
    r = tune(str(tmp_path), "--budget", "8", "--file-size", "16m", "--profile", str(prof), "-q",
             env={"ACCIO_PROFILE": str(prof)}, check=False)
    assert r.returncode == 0, r.stderr
    assert json.loads(prof.read_text())["measurements"]
    # Saved outside the profile directory, where `auto` does not look: the message says how to use it
    # (it said "`auto` uses it for files on ...", and auto went on with the built-in model).
    key = _ext.profile_key(str(tmp_path))
    assert f"saved {prof}; `auto` uses it for files on" in r.stdout and f"ACCIO_PROFILE={prof}" in r.stdout, r.stdout
    assert f"copied to {key['file']}" in r.stdout, r.stdout


def test_a_broken_old_profile_is_reported_and_replaced_and_nothing_refused_is_saved(tmp_path, capsys):
    """The device tables of the profile a calibration replaces are kept only where the engine accepts
    them; an old profile of [] or `devices: 5` is said and replaced (it crashed the calibration after
    its whole run); save() refuses a document the engine refuses rather than write it (audit s26 #3)."""
    from accio.tune import profile
    old = tmp_path / "old.json"
    for text in ("[]", '{"schema": "accio.profile/1", "devices": 5}', "{not json", '"a string"'):
        old.write_text(text)
        assert profile.kept_devices(str(old), None) == []
        assert "not kept" in capsys.readouterr().err
    good = {"model": "GPU A", "plans": [{"mechanism": "staged"}],
            "decisions": {op: {n: {"hot": [{"max_size": None, "plans": [0]}]} for n in ("1", "N")}
                          for op in ("read", "write")}}
    old.write_text(json.dumps({**PROFILE, "devices": [{"model": ["x"]}, good, {**good, "plans": [{"mechanism": "posix"}]},
                                                       dict(good), {**good, "model": "GPU B"}]}))
    kept = profile.kept_devices(str(old), "GPU B")
    assert kept == [good], kept
    err = capsys.readouterr().err
    assert "devices[0] (?)" in err and "devices[2] (GPU A)" in err and "devices[3] (GPU A): a second table" in err, err
    # what the engine refuses is not saved, and the file there stays as it was
    before = old.read_text()
    with pytest.raises(RuntimeError, match="not saved: the engine refuses"):
        profile.save({**PROFILE, "devices": [{"model": ["x"]}]}, str(old))
    assert old.read_text() == before and not list(tmp_path.glob(".profile.*"))
    with pytest.raises(ValueError, match="not an accio profile"):
        old.write_text("[]")
        profile.load(str(old))


def test_a_saved_profile_keeps_the_files_mode_and_a_link_keeps_pointing_at_it(tmp_path):
    """A profile rewritten keeps its permissions; a new one gets 0o666 less the umask (mkstemp's
    0o600 locked a group out of a shared profile directory); a symbolic link is followed, its target
    rewritten (it was replaced by a private file beside the link) (audit s26 #10)."""
    from accio.tune import profile
    old_umask = os.umask(0o022)
    try:
        new = tmp_path / "new.json"
        profile.save(PROFILE, str(new))
        assert new.stat().st_mode & 0o777 == 0o644
        new.chmod(0o664)
        profile.save(PROFILE, str(new))
        assert new.stat().st_mode & 0o777 == 0o664
        shared = tmp_path / "shared"
        shared.mkdir()
        target = shared / "t.json"
        target.write_text("{}")
        target.chmod(0o640)
        link = tmp_path / "link.json"
        link.symlink_to(target)
        profile.save(PROFILE, str(link))
        assert link.is_symlink() and os.readlink(link) == str(target)
        assert json.loads(target.read_text())["plans"] == PROFILE["plans"]
        assert target.stat().st_mode & 0o777 == 0o640
        assert not list(tmp_path.glob(".profile.*")) and not list(shared.glob(".profile.*"))
    finally:
        os.umask(old_umask)


def test_a_second_calibration_of_one_profile_exits_naming_the_first(tmp_path):
    """Two calibrations writing one profile measured under each other's load, and the last to save won
    without a word (audit s26 #12): the second now exits 1 at once, naming the first's pid."""
    from accio.tune import profile
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(PROFILE))
    with profile.calibration_lock(str(prof)) as lock:
        assert os.path.basename(lock) == ".p.json.lock" and open(lock).read().strip() == str(os.getpid())
        r = tune(str(tmp_path), "--budget", "30", "--file-size", "8m", "--profile", str(prof), "-q", check=False)
        assert r.returncode == 1 and f"another `accio tune` (pid {os.getpid()}) is calibrating" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and not list(tmp_path.glob("accio-tune.*"))
        with pytest.raises(RuntimeError, match=f"pid {os.getpid()}"):
            with profile.calibration_lock(str(prof)):
                pass
    with profile.calibration_lock(str(prof)):  # released at the end of the first
        pass
    assert json.loads(prof.read_text()) == PROFILE


def test_show_and_evaluate_use_and_name_the_profile_accio_profile_names(tmp_path, profile_file):
    """ACCIO_PROFILE names the profile auto uses: --show shows it and --evaluate evaluates it and names
    it (both said "no profile ... built-in model" while auto ran the variable's profile, audit s26 #1).
    The command recorded is quoted so that it can be run again (a path with a space, #20)."""
    import shlex
    d = tmp_path / "with space"
    d.mkdir()
    r = tune(str(d), "--show", env={"ACCIO_PROFILE": profile_file})
    assert f"ACCIO_PROFILE names {profile_file}" in r.stderr and f"profile {profile_file}" in r.stdout, r
    out = tmp_path / "ev.json"
    r = tune(str(d), "--evaluate", "--file-sizes", "1m", "--transfers", "512k", "--ops", "read", "--caches", "hot",
             "-i", "1", "--max-reps", "1", "--threads", "1", "--json", str(out), "-q", env={"ACCIO_PROFILE": profile_file})
    doc = json.loads(out.read_text())
    assert doc["profile"] == profile_file and f"ACCIO_PROFILE names {profile_file}" in r.stderr, r.stderr
    assert doc["cells"][0]["auto_plans"] == ["parallel(task=256KiB)"]  # the profile's plan for 512 KiB hot reads
    assert shlex.quote(str(d)) in doc["command"] and shlex.split(doc["command"])[2] == str(d), doc["command"]
    # ACCIO_PROFILE=off: --show says auto uses the built-in model
    r = tune(str(d), "--show", env={"ACCIO_PROFILE": "off"}, check=False)
    assert r.returncode == 1 and "ACCIO_PROFILE=off: auto uses the built-in model" in r.stderr, r.stderr


def test_evaluate_refuses_a_bad_profile_by_its_option_before_writing_anything(tmp_path):
    """A malformed --profile, --vs-profile or ACCIO_PROFILE is refused up front, exit 2, by the name
    the user gave it (it was found after the scratch files were written, and a --profile was
    blamed on ACCIO_PROFILE, audit s26 #18); --json that cannot be written is refused before the
    grid runs (as root os.access said yes, and the results were lost at the end, #9)."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "accio.profile/1", "plans": []}')
    small = ["--file-sizes", "1m", "--transfers", "512k", "--ops", "read", "--caches", "hot", "-i", "1",
             "--max-reps", "1", "--threads", "1", "-q"]
    for args, env, words in ((["--profile", str(bad)], {}, f"--profile {bad}: not a profile: plans must be"),
                             (["--vs-profile", str(bad)], {}, f"--vs-profile {bad}: not a profile"),
                             ([], {"ACCIO_PROFILE": str(bad)}, f"ACCIO_PROFILE={bad}: not a profile"),
                             (["--profile", str(tmp_path / "none.json")], {}, "no such profile file"),
                             (["--vs-profile", str(tmp_path / "a" / "x.json"), "--vs-profile",
                               str(tmp_path / "b" / "x.json")], {}, "two profiles with the same file name")):
        for sub in "ab":
            (tmp_path / sub).mkdir(exist_ok=True)
            (tmp_path / sub / "x.json").write_text(json.dumps(PROFILE))
        r = tune(str(tmp_path), "--evaluate", *small, *args, env=env, check=False)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        assert "correct the variable" not in r.stderr or env, r.stderr
        assert not list(tmp_path.glob("accio-tune.*"))
    if os.geteuid() == 0:  # root passes os.access everywhere: the file is tried
        r = tune(str(tmp_path), "--evaluate", *small, "--json", "/proc/x.json", check=False)
        assert r.returncode == 1 and "--json /proc/x.json: cannot write in /proc" in r.stderr, r.stderr
        assert r.stdout == "" and not list(tmp_path.glob("accio-tune.*"))
    # --device-budget says how long the GPU is measured: with --no-device it was ignored (#20)
    r = tune(str(tmp_path), "--no-device", "--device-budget", "3", "--budget", "6", check=False)
    assert r.returncode == 2 and "--device-budget and --no-device" in r.stderr, r.stderr


def test_show_takes_the_engines_labels_and_survives_what_the_engine_ignores(tmp_path):
    """--show on profiles the engine accepts: its labels are the engine's (a knob Python's Plan did not
    know was dropped from the label), and fields the engine does not read (measured, prefetch, notes)
    are shown where they have their shape and skipped where not, never a traceback (audit s26 #8)."""
    from accio.tune.measure import Plan
    p = {"mechanism": "parallel", "task_size": 4 << 20, "realign": "on"}
    engine = json.loads(_ext.profile_describe(json.dumps({**PROFILE, "plans": [*PROFILE["plans"], p]})))
    label = engine["plans"][3]["label"]
    assert "realign" in label and Plan.from_json(p).label == label and Plan.from_json(p).to_json() == p
    hot = PROFILE["decisions"]["read"]["1"]["hot"]
    staged = {"model": "GPU A", "plans": [{"mechanism": "staged"}, {"mechanism": "pagecache", "pagecache_min": "4k"}],
              "decisions": {op: {n: {"hot": [{"max_size": None, "plans": [1, 0]}]} for n in ("1", "N")}
                            for op in ("read", "write")}}
    for extra, cell, words in (
            ({"plans": [*PROFILE["plans"], p]}, {"max_size": None, "plans": [3, 0]}, label),
            ({}, {"max_size": None, "plans": [1, 0], "measured": {"size": 4096, "mibps": "fast"}}, "parallel(task=256KiB)"),
            ({}, {"max_size": None, "plans": [1, 0], "measured": 5}, "parallel(task=256KiB)"),
            ({"prefetch": {"window": 0, "gain": "abc"}}, hot[1], "prefetch: off"),
            ({"notes": "a note"}, hot[1], "note: a note"),
            ({"notes": 7, "key": "k", "devices": [staged]}, hot[1], "pagecache"),
            ({}, {"max_size": None, "plans": [1, 0], "measured": {"size": 4096, "mibps": 9.0, "kept_builtin":
                                                                  {"winner": "uring", "rounds": 0, "vs_builtin": None}}},
             "built-in kept: uring 9 MiB/s at 4KiB not guarded: the budget ran out before the guard")):
        doc = json.loads(json.dumps(PROFILE))
        doc.update(extra)
        doc["decisions"]["read"]["1"]["hot"] = [hot[0], cell]
        f = tmp_path / "p.json"
        f.write_text(json.dumps(doc))
        _ext.profile_describe(f.read_text(), str(f))  # the engine accepts each
        r = tune(str(tmp_path), "--show", "--profile", str(f), check=False)
        assert r.returncode == 0 and words in r.stdout and "Traceback" not in r.stderr, (extra, cell, r.stdout, r.stderr)
        assert "note: a\n" not in r.stdout


def test_a_profile_that_could_not_be_read_for_a_moment_is_read_again(tmp_path, data):
    """The engine keeps a profile's refusal (per mtime and size) so as not to parse a bad one at every
    open, but a read that failed for a moment (no descriptor left: EMFILE) kept the profile refused
    for the rest of the process (review, session 26)."""
    path, _ = data
    good = tmp_path / "p.json"
    good.write_text(json.dumps({"schema": "accio.profile/1", "plans": [{"mechanism": "posix"}], "decisions": {
        op: {n: {"hot": [{"max_size": None, "plans": [0]}]} for n in ("1", "N")} for op in ("read", "write")}}))
    code = f"""
import os, resource, accio
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
fds = []
try:
    while True:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    pass
os.utime({str(good)!r}, ns=(1, 1))  # a new mtime: the profile is read again
try:
    accio.open({path!r}, profile={str(good)!r})
    print("opened")
except OSError as e:
    print("refused", e.errno)
for fd in fds:
    os.close(fd)
with accio.open({path!r}, profile={str(good)!r}) as f:
    print("then", f.explain(1 << 20)["plan"])
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["refused 22", "then posix"], r.stdout
