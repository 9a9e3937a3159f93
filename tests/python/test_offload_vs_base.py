"""benchmarks/offload_vs_base.py: both builds in one process (benchmarks/offload_ab.cpp), paired
rounds, every metric with its ratio and verdict; the A/A run of the installed runtime against a copy
of itself; bad arguments refused before anything runs. Speeds are not checked (benchmarks are not
tests)."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import accio

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "offload_vs_base.py"
LIB = Path(accio.__file__).resolve().parent / "lib"
METRICS = ["test1", "test2", "test3", "test4", "read_1b", "write_1b"]
needs_cxx = pytest.mark.skipif(not shutil.which("c++"), reason="no C++ compiler")


def bench(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


@needs_cxx
def test_aa_run_pairs_every_metric(tmp_path):
    out = tmp_path / "aa.json"
    r = bench("--base", str(LIB), "--aa", "--rounds", "7", "--n", "300", "--lat-n", "300", "--json", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    assert doc["new"] == "copy of base (A/A)" and doc["rounds"] == 7 and doc["method"].startswith("in-process")
    for side in ("base", "new"):
        assert sorted(doc["samples_us"][side]) == sorted(METRICS)
        assert all(len(v) == 7 and min(v) > 0 for v in doc["samples_us"][side].values())
    for m in METRICS:
        got = doc["metrics"][m]
        assert got["ratio_base_over_new"]["n_a"] == 7 and got["ratio_base_over_new"]["method"] == "paired"
        assert got["verdict"] in ("faster", "slower", "within noise", "undecided")
        assert m in r.stdout


@needs_cxx
def test_two_builds_by_library_path(tmp_path):
    other = tmp_path / "other"
    shutil.copytree(LIB, other, symlinks=True)  # a second build: the same bytes at another path
    r = bench("--base", str(LIB / "libaccio_offload.so"), "--new", str(other / "accio-offload-bench"),
              "--rounds", "7", "--n", "100", "--lat-n", "100", "--json", str(tmp_path / "ab.json"))
    assert r.returncode == 0, r.stderr
    assert "test4" in r.stdout and "write_1b" in r.stdout
    doc = json.loads((tmp_path / "ab.json").read_text())
    assert doc["new"] == str(other / "libaccio_offload.so") and doc["checkout"]
    assert doc["command"].split()[2:4] == ["--base", str(LIB / "libaccio_offload.so")]


def test_bad_arguments_refused(tmp_path):
    r = bench("--base", str(LIB), "--aa", "--rounds", "3")
    assert r.returncode == 2 and "at least 7" in r.stderr
    r = bench("--base", str(LIB), "--aa", "--spin", "1000")
    assert r.returncode == 2 and "0..499" in r.stderr
    r = bench("--base", str(tmp_path))
    assert r.returncode != 0 and "no libaccio_offload.so there" in r.stderr
    # The same library twice is not an A/B (it once passed as one).
    r = bench("--base", str(LIB / "libaccio_offload.so"), "--new", str(LIB / "accio-offload-bench"))
    assert r.returncode == 2 and "the same library" in r.stderr
