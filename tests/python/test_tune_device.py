"""accio tune for GPU buffers, against the fake CUDA driver (tests/fake_cuda): the tuner writes a
device table for the GPU's model, the planner reads it back and `auto` runs the mechanism it names
for each size and direction (statistics and explain() say so), a profile without the section keeps
the built-in device rule, a corrupt section is a clear error that loses nothing, and without a GPU
the tuner says so and writes the host profile only. The fake does not model speed: nothing here
asserts which mechanism is faster."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import fake_cuda

ACCIO = [sys.executable, "-m", "accio.cli"]
MODEL = "accio fake GPU 0"  # the fake's cuDeviceGetName for ordinal 0
KiB, MiB = 1 << 10, 1 << 20


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory):
    return fake_cuda(tmp_path_factory)


def env_for(lib: str | None, tmp_path, **extra) -> dict:
    e = dict(os.environ, ACCIO_QUIET="1", ACCIO_PROFILE_DIR=str(tmp_path / "profiles"), **extra)
    e.pop("ACCIO_PROFILE", None)
    if lib is not None:
        e["ACCIO_LIBCUDA"] = e["ACCIO_LIBCUFILE"] = lib
    return e


def run_py(code: str, env: dict, cwd) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def tune(env: dict, *args, check=True) -> subprocess.CompletedProcess:
    r = subprocess.run([*ACCIO, "tune", *args], capture_output=True, text=True, env=env, timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"accio tune {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def cell(max_size, *plans):
    return {"max_size": max_size, "plans": list(plans)}


def host_part() -> dict:
    one = {"hot": [cell(None, 0)]}
    return {"schema": "accio.profile/1", "key": {"filesystem": "testfs", "device": "/dev/test"},
            "plans": [{"mechanism": "posix"}],
            "decisions": {"read": {"1": one, "N": one}, "write": {"1": one, "N": one}}}


# A device table where naive wins small reads, pagecache large hot ones, gds large cold ones, and
# writes go naive below 1 MiB and staged above.
DEVICE = {
    "model": MODEL,
    "plans": [{"mechanism": "staged"}, {"mechanism": "naive"}, {"mechanism": "pagecache", "pagecache_min": 4096},
              {"mechanism": "gds"}],
    "decisions": {
        "read": {c: {"hot": [cell(MiB - 1, 1), cell(None, 2, 0)], "cold": [cell(MiB - 1, 1), cell(None, 3, 0)]}
                 for c in ("1", "N")},
        "write": {c: {"hot": [cell(MiB - 1, 1), cell(None, 0)]} for c in ("1", "N")},
    },
}


def write_profile(tmp_path, devices=None, name="profile.json") -> str:
    doc = host_part()
    if devices is not None:
        doc["devices"] = devices
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return str(p)


# Reads and writes device arrays of each size through auto; prints, per size, the mechanism that ran
# and the plans statistics. argv: the data file, the profile, sizes...; DEVICE_ORDINAL picks the GPU.
PROBE = '''
import json, os, sys, accio, numpy as np
path, profile, sizes = sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3:]]
dev = int(os.environ.get("DEVICE_ORDINAL", "0"))
data = np.fromfile(path, dtype=np.uint8)
out = {}
for n in sizes:
    a = accio.device_array(n, dev)
    with accio.open(path, "r", profile=profile) as f:
        assert f.read_into(a) == n
        st = f.stats()
        e = f.explain(n)  # host buffer: the host table's choice, for contrast
    assert a.to_bytes() == data[:n].tobytes(), n
    with accio.open("out.bin", "w", profile=profile) as f:
        assert f.write_from(a) == n
        wst = f.stats()
    assert open("out.bin", "rb").read() == data[:n].tobytes(), n
    out[n] = {"read": st["last_mechanism"], "read_plans": st["plans"], "write": wst["last_mechanism"],
              "write_plans": wst["plans"], "host_plan": e["plan"]}
print(json.dumps(out))
'''


def probe(env, tmp_path, profile, sizes, **extra):
    data = np.random.default_rng(7).integers(0, 256, max(sizes), dtype=np.uint8)
    path = tmp_path / "data.bin"
    data.tofile(path)
    r = subprocess.run([sys.executable, "-c", PROBE, str(path), profile, *map(str, sizes)], env={**env, **extra},
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return {int(k): v for k, v in json.loads(r.stdout).items()}


def plan_names(plans):
    return [p["plan"] for p in plans]


def test_auto_runs_the_device_table_of_the_gpus_model(fake_lib, tmp_path):
    env = env_for(fake_lib, tmp_path)
    prof = write_profile(tmp_path, [DEVICE])
    got = probe(env, tmp_path, prof, [64 * KiB, 4 * MiB])
    small, large = got[64 * KiB], got[4 * MiB]
    # 64 KiB: naive for reads and writes, as the table says (the built-in rule would run staged).
    assert small["read"] == "naive" and small["write"] == "naive", small
    assert plan_names(small["read_plans"]) == ["naive"], small["read_plans"]
    why = small["read_plans"][0]["why"]
    assert why.startswith(f"{MODEL} (testfs on /dev/test): read, one request in flight"), why
    assert "accio tune" not in why  # a measured table does not ask to be measured
    # 4 MiB, hot: pagecache, as the table says (the built-in rule would run staged); writes staged.
    assert large["read"] == "pagecache" and large["write"] == "staged", large
    assert "pagecache(pagecache_min=4KiB)" in plan_names(large["read_plans"]), large["read_plans"]
    assert plan_names(large["write_plans"]) == ["staged(even)"], large["write_plans"]
    # Host buffers still get the host table.
    assert small["host_plan"] == "posix"


def test_a_gpu_of_another_model_gets_the_built_in_device_rule(fake_lib, tmp_path):
    # Two fake GPUs have two names ("accio fake GPU 1"): the table of GPU 0's model does not apply.
    env = env_for(fake_lib, tmp_path, FAKE_CUDA_DEVICES="2", DEVICE_ORDINAL="1")
    prof = write_profile(tmp_path, [DEVICE])
    got = probe(env, tmp_path, prof, [64 * KiB, 16 * MiB])
    small, large = got[64 * KiB], got[16 * MiB]
    assert small["read"] == "staged" and small["write"] == "staged", small
    assert large["read"] == "staged" and large["write"] == "staged", large
    why = [p for p in small["read_plans"] if p["plan"].startswith("staged")][0]["why"]
    assert why.startswith("built-in device rule: read") and "accio tune" in why, why


def test_a_profile_without_the_device_section_keeps_the_built_in_rule(fake_lib, tmp_path):
    env = env_for(fake_lib, tmp_path)
    for prof in (write_profile(tmp_path), write_profile(tmp_path, [], name="empty.json")):
        got = probe(env, tmp_path, prof, [64 * KiB, 16 * MiB])
        assert got[64 * KiB]["read"] == "staged" and got[16 * MiB]["read"] == "staged", got
        assert got[64 * KiB]["write"] == "staged" and got[16 * MiB]["write"] == "staged", got


def test_cold_ranges_take_the_tables_cold_plan(fake_lib, tmp_path):
    from accio._system import COLD_MAX_RESIDENCY, drop_pages, residency
    path = tmp_path / "cold.bin"
    np.zeros(4 * MiB, dtype=np.uint8).tofile(path)
    drop_pages(str(path), 0, 4 * MiB)
    if residency(str(path), 0, 4 * MiB) > COLD_MAX_RESIDENCY:
        pytest.skip("the page cache keeps this filesystem's pages (tmpfs): no cold range to read")
    env = env_for(fake_lib, tmp_path)
    prof = write_profile(tmp_path, [DEVICE])
    r = run_py(f'''
        import accio
        from accio._system import drop_pages
        a = accio.device_array(4 << 20)
        drop_pages("{path}", 0, 4 << 20)
        with accio.open("{path}", profile="{prof}") as f:
            f.read_into(a)
            print(f.stats()["last_mechanism"])
            print([p["why"] for p in f.stats()["plans"]][0])
    ''', env, tmp_path)
    ran, why = r.stdout.split("\n")[:2]
    assert ran in ("gds", "staged"), ran  # gds, or staged where the fake cuFile refuses the file
    assert "range cold" in why, why


BAD_SECTIONS = [
    ({"devices": {"model": MODEL}}, "devices must be an array"),
    ({"devices": [{"plans": DEVICE["plans"], "decisions": DEVICE["decisions"]}]}, "devices[0].model"),
    ({"devices": [dict(DEVICE, plans=[{"mechanism": "posix"}])]}, "posix does not serve GPU memory"),
    ({"devices": [dict(DEVICE, plans=[{"mechanism": "warp"}])]}, "warp"),
    ({"devices": [dict(DEVICE, decisions={"read": DEVICE["decisions"]["read"]})]}, "devices[0].decisions.write"),
    ({"devices": [dict(DEVICE, decisions=dict(DEVICE["decisions"], read={
        c: {"hot": [cell(None, 9)]} for c in ("1", "N")}))]}, "plan index 9 out of range"),
    ({"devices": [DEVICE, DEVICE]}, "appears twice"),
]


@pytest.mark.parametrize("bad,what", BAD_SECTIONS, ids=[w for _, w in BAD_SECTIONS])
def test_a_corrupt_device_section_is_a_clear_error_that_loses_nothing(fake_lib, tmp_path, bad, what):
    doc = dict(host_part(), **bad)
    prof = tmp_path / "bad.json"
    prof.write_text(json.dumps(doc))
    before = prof.read_bytes()
    data = tmp_path / "data.bin"
    data.write_bytes(b"keep" * 1024)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(f'''
        import accio
        try:
            accio.open("{data}", "w", profile="{prof}")
        except OSError as e:
            print(e.errno, e)
    ''')], env=env_for(fake_lib, tmp_path), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("22 ") and str(prof) in r.stdout and what in r.stdout, r.stdout
    assert prof.read_bytes() == before and data.read_bytes() == b"keep" * 1024  # nothing lost or truncated
    # --show names the file and the fault too, and exits nonzero.
    s = tune(env_for(fake_lib, tmp_path), str(tmp_path), "--show", "--profile", str(prof), check=False)
    assert s.returncode != 0 and str(prof) in s.stderr and what in s.stderr, s.stderr


def test_tune_measures_the_device_table_and_auto_reads_it_back(fake_lib, tmp_path):
    env = env_for(fake_lib, tmp_path)
    prof = str(tmp_path / "tuned.json")
    d = tmp_path / "fs"
    d.mkdir()
    r = tune(env, str(d), "--budget", "16", "--device-budget", "8", "--file-size", "16m", "--threads", "2",
             "--device", "cuda:0", "--profile", prof, "-q")
    doc = json.loads(open(prof).read())
    assert [t["model"] for t in doc["devices"]] == [MODEL]
    t = doc["devices"][0]
    assert t["measured_on"]["ordinal"] == 0 and t["elapsed_s"] <= 8 * 1.25 + 3, t["elapsed_s"]
    assert doc["elapsed_s"] <= 16 * 1.25 + 3, doc["elapsed_s"]  # the device share is inside --budget
    mechs = {p["mechanism"] for p in t["plans"]}
    assert mechs <= {"naive", "staged", "gds", "pagecache"} and "staged" in mechs, t["plans"]
    measured = {(m["op"], t["plans"][m["plan"]]["mechanism"]) for m in t["measurements"]}
    assert ("read", "pagecache") in measured and ("write", "naive") in measured, measured
    assert ("write", "pagecache") not in measured  # pagecache does not write
    assert all(m["median"] > 0 for m in t["measurements"])
    assert t["cufile"]["loaded"] is True and any("gds" in n for n in t["notes"]), t["notes"]
    assert f"GPU buffers on {MODEL}" in r.stdout and "for GPU buffers on" in r.stdout
    # The engine reads it back: every device read is planned from the table (its plans' why names
    # the model), whatever the fake's timings made it choose.
    got = probe(env, tmp_path, prof, [64 * KiB])
    why = [p["why"] for p in got[64 * KiB]["read_plans"]]
    assert why and all(w.startswith(MODEL) for w in why if "read" in w), why
    # Tuning again with --no-device keeps the measured table (same filesystem, kernel, accio).
    r = tune(env, str(d), "--budget", "6", "--file-size", "16m", "--no-device", "--profile", prof, "-q")
    assert [t["model"] for t in json.loads(open(prof).read())["devices"]] == [MODEL]
    assert "kept the device tables" in r.stderr


def test_without_a_gpu_tune_says_so_and_writes_the_host_profile_only(tmp_path):
    env = env_for(str(tmp_path / "no-libcuda.so"), tmp_path)
    prof = str(tmp_path / "host.json")
    r = tune(env, str(tmp_path), "--budget", "6", "--file-size", "16m", "--profile", prof, "-q")
    assert "no GPU" in r.stderr and "host memory only" in r.stderr, r.stderr
    doc = json.loads(open(prof).read())
    assert "devices" not in doc and doc["measurements"]
    assert "no device table measured" in r.stdout
    # Asking for a GPU that is not there is an error before anything is measured or written.
    prof2 = tmp_path / "none.json"
    r = tune(env, str(tmp_path), "--budget", "6", "--device", "0", "--profile", str(prof2), check=False)
    assert r.returncode == 2 and "--device cuda:0: no GPU here" in r.stderr, r.stderr  # as bench --target cuda:0
    assert not prof2.exists()


def test_device_options_are_checked_before_anything_runs(fake_lib, tmp_path):
    env = env_for(fake_lib, tmp_path)
    for args, what in ((["--device", "gpu0"], "expected cuda:N or N"),
                       (["--device", "0", "--no-device"], "do not go together"),
                       (["--device-budget", "200"], "below --budget"),
                       (["--target", "cuda:0"], "--device cuda:N")):
        r = tune(env, str(tmp_path), *args, check=False)
        assert r.returncode == 2 and what in r.stderr, (args, r.stderr)
    r = tune(env, str(tmp_path), "--device", "cuda:3", "--budget", "6", check=False)
    assert r.returncode != 0 and "no such GPU" in r.stderr and MODEL in r.stderr, r.stderr
    assert not [p for p in os.listdir(tmp_path) if p.startswith("accio-tune")]


def test_evaluate_prints_the_device_cells_beside_the_host_ones(fake_lib, tmp_path):
    env = env_for(fake_lib, tmp_path)
    out = tmp_path / "eval.json"
    r = tune(env, str(tmp_path), "--evaluate", "--device", "0", "--file-sizes", "1m", "--transfers", "256k",
             "--threads", "1", "-i", "1", "--max-reps", "1", "--json", str(out), "-q")
    doc = json.loads(out.read_text())
    dev = doc["device"]
    assert dev["gpu"]["ordinal"] == 0 and dev["gpu"]["name"] == MODEL
    assert dev["contenders"][0] == "auto" and {"staged", "naive", "pagecache"} <= set(dev["contenders"])
    assert "posix" not in dev["contenders"] and "posix" in doc["contenders"]
    assert {(c["op"], c["cache"]) for c in dev["cells"]} == {(c["op"], c["cache"]) for c in doc["cells"]}
    for c in dev["cells"]:
        assert set(c["median"]) == set(dev["contenders"]) and all(v > 0 for v in c["median"].values()), c
        assert c["auto_plans"], c  # the plans auto ran, from the engine's statistics
        assert c["oracle"] in dev["contenders"] and c["oracle"] != "auto"
    assert f"GPU buffers on cuda:0 ({MODEL})" in r.stdout and "auto/staged" in r.stdout


def test_a_device_plan_that_cannot_take_managed_memory_runs_staged_quietly(fake_lib, tmp_path):
    # The table says gds for cold reads of 1 MiB and more; cuFile does not take managed memory.
    table = dict(DEVICE, decisions=dict(DEVICE["decisions"], read={
        c: {"hot": [cell(None, 3, 0)]} for c in ("1", "N")}))
    prof = write_profile(tmp_path, [table])
    (tmp_path / "in.bin").write_bytes(bytes(range(256)) * 8192)
    r = run_py(f'''
        import warnings, accio
        warnings.simplefilter("error")  # no warning: auto was not told to run gds
        a = accio.device_array(2 << 20, 0, managed=True)
        with accio.open("in.bin", profile="{prof}") as f:
            assert f.read_into(a) == 2 << 20
            print(f.stats()["last_mechanism"])
        with open("in.bin", "rb") as g:
            assert a.to_bytes() == g.read()
    ''', {**env_for(fake_lib, tmp_path), "ACCIO_QUIET": "0"}, tmp_path)
    assert r.stdout.split("\n")[0] == "staged", r.stdout
    assert "cannot serve" not in r.stderr and "warning" not in r.stderr.lower(), r.stderr


def test_the_device_search_guards_against_the_built_in_rule_as_it_runs():
    from accio.tune.measure import Plan
    from accio.tune.search import Group, Search, as_run, builtin_plan
    # The built-in device rule: staged, reads and writes, every size.
    assert builtin_plan("read", "1", 4 * KiB, device=True) == Plan("staged")
    assert builtin_plan("read", "N", 16 * MiB, device=True) == Plan("staged")
    assert builtin_plan("write", "1", 64 * MiB, device=True) == Plan("staged")
    assert as_run(Plan("pagecache", pagecache_min=4 * KiB), 4 * KiB) == Plan("pagecache", pagecache_min=4 * KiB)
    assert as_run(Plan("pagecache"), 4 * MiB) == Plan("staged")  # measured once, as staged
    # pagecache is not a write contender; the built-in plan always is.
    plans = [Plan("staged"), Plan("naive"), Plan("pagecache", pagecache_min=4 * KiB)]
    s = Search(bench=None, threads=2, budget=0, plans=plans, device=0)
    assert s.contenders(Group("write", "hot", 1), MiB) == [Plan("staged"), Plan("naive")]
    assert s.contenders(Group("read", "hot", 1), 16 * MiB) == plans
