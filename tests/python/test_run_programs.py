"""benchmarks/run_programs.py's profile contenders (issue 20): each --profile is one shim contender
in the same interleaved rounds, and bad input is refused before anything is measured."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
import run_programs  # noqa: E402


def test_one_contender_per_profile(tmp_path):
    env = run_programs.shim_contenders(None)
    assert list(env) == ["shim"]  # the environment's profile
    p = tmp_path / "fs.json"
    p.write_text("{}")
    one = run_programs.shim_contenders([str(p)])
    assert list(one) == ["shim"] and one["shim"]["ACCIO_PROFILE"] == str(p.resolve())
    two = run_programs.shim_contenders(["off", str(p)])
    assert list(two) == ["shim[off]", "shim[fs.json]"]
    assert two["shim[off]"]["ACCIO_PROFILE"] == "off" and two["shim[fs.json]"]["ACCIO_PROFILE"] == str(p.resolve())
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "fs.json").write_text("{}")
    with pytest.raises(SystemExit, match="same name"):
        run_programs.shim_contenders([str(p), str(tmp_path / "d" / "fs.json")])


def test_compare_gives_every_contender_its_ratio(capsys):
    rates = {"plain": itertools.cycle([100.0, 102.0]), "a": itertools.cycle([50.0, 51.0]),
             "b": itertools.cycle([200.0, 204.0])}
    rec = run_programs.compare("case", {n: (lambda it=it: next(it)) for n, it in rates.items()}, 7, 0.98)
    assert set(rec["others"]) == {"a", "b"} and len(rec["samples"]["b"]) == 7
    assert rec["ratio"] == rec["others"]["a"]["ratio"] and rec["goal_result"] == "missed"  # the first other's
    assert rec["others"]["a"]["verdict"] == "slower" and rec["others"]["b"]["verdict"] == "faster"
    assert rec["others"]["b"]["goal_result"] == "met"


def test_a_missing_profile_is_refused_before_measuring(tmp_path):
    p = subprocess.run([sys.executable, str(BENCH / "run_programs.py"), "--dir", str(tmp_path), "--profile",
                        str(tmp_path / "nope.json"), "--quick"], capture_output=True, text=True)
    assert p.returncode == 2 and "no such file" in p.stderr, p.stderr
    assert not list(tmp_path.iterdir())  # no test file was made


def test_each_case_reads_its_own_file(tmp_path):
    """gzip -1 (45 MB/s) reads a 64 MiB file of its own once the test file is larger; torch.load
    its saved tensor: each case's file is the one made hot or cold before a run and whose size
    gives its rate (a cold torch.load whose tensor stayed cached measured nothing cold)."""
    big, work = tmp_path / "big.bin", tmp_path
    c = run_programs.cases(big, work, 1 << 30)
    assert c["cat"][1] == big and c["dd-64m"][1] == big and c["gzip-1"][1] == work / "gzip-input.bin"
    assert str(work / "gzip-input.bin") in c["gzip-1"][0][-1]
    if "torch.load" in c:
        assert c["torch.load"][1] == work / "tensor.pt" and str(work / "tensor.pt") in c["torch.load"][0]
    assert run_programs.cases(big, work, run_programs.GZIP_SIZE)["gzip-1"][1] == big  # small enough as it is


def test_an_unknown_case_is_refused_before_measuring(tmp_path):
    p = subprocess.run([sys.executable, str(BENCH / "run_programs.py"), "--dir", str(tmp_path), "--cases", "cat,zip",
                        "--quick"], capture_output=True, text=True)
    assert p.returncode == 2 and "no case zip" in p.stderr and "dd-64m" in p.stderr, p.stderr
    assert not list(tmp_path.iterdir())


def test_a_forced_prefetch_is_one_more_contender(tmp_path):
    """--prefetch SIZE: the shim once more with ACCIO_PRELOAD_PREFETCH=SIZE (what a profile's window
    would give where no profile is tuned); nothing without it, and a window of 0 or a typo is refused
    before anything is measured."""
    assert run_programs.prefetch_contender(None) == {}
    c = run_programs.prefetch_contender("32m")
    assert list(c) == ["shim[prefetch=32m]"] and c["shim[prefetch=32m]"]["ACCIO_PRELOAD_PREFETCH"] == "32m"
    for bad in ("0", "lots"):
        p = subprocess.run([sys.executable, str(BENCH / "run_programs.py"), "--dir", str(tmp_path), "--prefetch", bad,
                            "--quick"], capture_output=True, text=True)
        assert p.returncode == 2 and "--prefetch" in p.stderr and "32m" in p.stderr, p.stderr
    assert not list(tmp_path.iterdir())


def test_the_forced_prefetch_runs_end_to_end_on_a_cold_file(tmp_path):
    """The third contender on a small cold file: its own ratio, its verdict against the 1.5x goal, and
    what the shim did (windows asked for); refused for hot runs, where there is nothing to read ahead."""
    from accio._system import drop_pages, residency
    probe = tmp_path / "probe.bin"
    probe.write_bytes(os.urandom(1 << 20))
    drop_pages(str(probe))
    if residency(str(probe)) > 0.05:
        pytest.skip("this filesystem keeps the file's pages (tmpfs?): nothing cold to read")
    p = subprocess.run([sys.executable, str(BENCH / "run_programs.py"), "--dir", str(tmp_path), "--prefetch", "32m",
                        "--cache", "hot", "--quick"], capture_output=True, text=True)
    assert p.returncode == 2 and "--cache cold" in p.stderr, p.stderr
    out = tmp_path / "rp.json"
    p = subprocess.run([sys.executable, str(BENCH / "run_programs.py"), "--dir", str(tmp_path), "--size", "40m",
                        "--cache", "cold", "--cases", "cat,dd-1m", "--prefetch", "32m", "--json", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["prefetch_forced"] == "32m"
    assert "block_device" in doc["machine"]  # rotational or not: which cold plans the model has
    cat, dd = doc["runs"][0]["cases"]
    assert set(cat["samples"]) == {"plain", "shim", "shim[prefetch=32m]"} and "prefetch_forced" not in dd
    forced = cat["prefetch_forced"]
    assert forced["contender"] == "shim[prefetch=32m]" and forced["goal"] == 1.5
    assert forced["goal_result"] in ("met", "missed") and forced["served"]["prefetch_windows"] >= 1, forced
    assert cat["goal"] == 0.98 and cat["ratio"] == cat["others"]["shim"]["ratio"]  # the default settings' verdict


def test_the_readinto_program_times_its_own_loop(tmp_path):
    """readinto's program appends the seconds of its own reading (the open and the loop) to the file
    its last argument names, and program_loop gives the loop's ratio and what the rest of each run
    took (the whole run's median time less the loop's), so that a Python start-up is not read as the
    shim's (the H100 machine's torch venv takes about 90 ms to start). The buffer is allocated before
    the clock starts, as in engine_ratio: zeroing 64 MiB took 32 ms on the 2-CPU VM, and the H200's
    shim read 2 GiB in 75 ms."""
    src = run_programs.READINTO
    assert src.index("bytearray(n)") < src.index("t0 = time.perf_counter()") < src.index("readinto")
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * (3 << 20))
    argv = run_programs.cases(big, tmp_path, 3 << 20)["readinto-64k"][0]
    subprocess.run(argv, check=True)
    subprocess.run(argv, check=True)
    times = [float(x) for x in (tmp_path / "loop-seconds").read_text().split()]
    assert len(times) == 2 and all(0 < t < 5 for t in times)
    # whole runs of 0.2 s (plain) and 0.1 s (shim) over 10 MiB; loops of 0.1 s and 0.02 s
    rec = {"samples": {"plain": [50.0] * 7, "shim": [100.0] * 7}}
    loop = run_programs.program_loop(rec, {"plain": [100.0] * 7, "shim": [500.0] * 7}, 10.0)
    assert loop["ratio"]["estimate"] == pytest.approx(5.0) and loop["verdict"] == "faster"
    assert loop["rest_ms"] == {"plain": pytest.approx(100.0), "shim": pytest.approx(80.0)}


FAKE_TORCH = '''
__version__ = "0.0-fake"
float32 = "float32"


class _T:
    def __init__(self, n):
        self.n = n

    def numel(self):
        return self.n

    def element_size(self):
        return 4


def zeros(n, dtype=None):
    return _T(n)


def save(t, path):
    with open(path, "wb") as f:
        f.write(bytes(t.n * 4))


def load(f):
    if isinstance(f, (str, bytes)) or hasattr(f, "__fspath__"):
        with open(f, "rb") as g:
            return _T(len(g.read()) // 4)
    buf, n = bytearray(1 << 20), 0
    while (k := f.readinto(buf)):
        n += k
    f.seek(0)
    f.read(16)
    return _T(n // 4)
'''


def test_torch_load_reads_counts_what_torch_asks_of_the_file(tmp_path):
    """benchmarks/torch_load_reads.py (the H100's torch.load was not served: which call reads the
    tensor?): against a stand-in torch that reads through readinto in 1 MiB pieces, the counts and
    sizes it reports are those; without torch it says so and writes "torch": null."""
    fake = tmp_path / "fake"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text(FAKE_TORCH)
    out = tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, str(BENCH / "torch_load_reads.py"), "--dir", str(tmp_path), "--size", "3m",
                        "--json", str(out)], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    seen = doc["through_a_file_object"]
    assert doc["torch"] == "0.0-fake" and seen["tensor_bytes"] == 3 << 20
    assert seen["calls"]["readinto"] == 4 and seen["bytes"]["readinto"] == 3 << 20  # three pieces and EOF
    assert seen["calls"]["read"] == 1 and seen["bytes"]["read"] == 16 and seen["largest"] == 1 << 20
    assert seen["calls"]["seek"] == 1 and seen["mapped_after"] is False and doc["by_path"]["mapped_after"] is False
    assert not list(tmp_path.glob("accio-torch-load.*"))  # the saved tensor is removed
    import importlib.util
    if importlib.util.find_spec("torch") is not None:
        return  # the real torch is here: the branch without it cannot be shown
    env["PYTHONPATH"] = str(tmp_path / "nothing")
    p = subprocess.run([sys.executable, str(BENCH / "torch_load_reads.py"), "--dir", str(tmp_path), "--json",
                        str(out)], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and "torch is not installed" in p.stdout and json.loads(out.read_text())["torch"] is None


def test_shim_ab_compares_two_builds_of_the_shim(tmp_path):
    """benchmarks/shim_ab.py with one build on both sides: every contender sampled each round, the
    three paired ratios with intervals kept, the scratch file gone; fewer than 7 rounds refused."""
    from accio.run import shim_path
    out = tmp_path / "ab.json"
    r = subprocess.run([sys.executable, str(BENCH / "shim_ab.py"), "--old", shim_path(), "--size", "64m",
                        "--rounds", "7", "--dir", str(tmp_path), "--json", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert {k: len(v) for k, v in doc["samples_mib_s"].items()} == {"plain": 7, "old": 7, "new": 7}
    assert set(doc["ratios"]) == {"old/plain", "new/plain", "new/old"}
    assert all(v["low"] <= v["estimate"] <= v["high"] for v in doc["ratios"].values())
    assert [p.name for p in tmp_path.iterdir()] == ["ab.json"]
    bad = subprocess.run([sys.executable, str(BENCH / "shim_ab.py"), "--old", shim_path(), "--rounds", "6"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--rounds must be at least 7" in bad.stderr
