"""benchmarks/prefetch_ab.py: a cold reader plainly and under shim builds with the prefetch forced
on, interleaved; bad input is refused before anything is measured."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import accio
from accio._system import drop_pages, residency

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "prefetch_ab.py"
SHIM = Path(accio.__file__).parent / "lib" / "libaccio_preload.so"


def run(*args):
    return subprocess.run([sys.executable, str(BENCH), *map(str, args)], capture_output=True, text=True, timeout=300)


def test_bad_input_is_refused_before_measuring(tmp_path):
    f = tmp_path / "f.bin"
    f.write_bytes(b"x" * 4096)
    for args, says in (([], "--file"), (["--file", tmp_path / "none", "--shim", f"a={SHIM}"], "no such file"),
                       (["--file", f, "--shim", "a"], "NAME=PATH"), (["--file", f, "--shim", f"plain={SHIM}"], "NAME=PATH"),
                       (["--file", f, "--shim", f"a={SHIM}", "--shim", f"a={SHIM}"], "each name once"),
                       (["--file", f, "--shim", f"a={SHIM}", "--rounds", "3"], "at least 7")):
        p = run(*args)
        assert p.returncode == 2 and says in p.stderr, (args, p.stderr)


def test_two_shims_and_plain_each_get_their_ratio(tmp_path):
    if not SHIM.is_file():
        pytest.skip("the installed package has no preload shim")
    f = tmp_path / "f.bin"
    f.write_bytes(os.urandom(8 << 20))
    drop_pages(str(f))
    if residency(str(f)) > 0.05:
        pytest.skip("this filesystem keeps the file's pages (tmpfs?): nothing cold to read")
    out = tmp_path / "ab.json"
    p = run("--file", f, "--shim", f"a={SHIM}", "--shim", f"b={SHIM}", "--rounds", 7, "--json", out)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert set(doc["ratios"]) == {"a/plain", "b/plain", "b/a"} and all(len(v) == 7 for v in doc["samples"].values())
    assert doc["window"] == "32m" and doc["shims"]["a"] == str(SHIM.resolve())
    assert doc["shim_sha256"]["a"] == doc["shim_sha256"]["b"] and len(doc["shim_sha256"]["a"]) == 64
