"""benchmarks/uring_vs_fio.py at its --quick setting: every cell it is asked for runs both tools on
the same file, the ratio is the paired median of the per-round ratios, the goal follows from it, and
bad arguments are refused before anything runs; accio's window buffer aliases one window of memory.
Speeds are not checked (benchmarks are not tests)."""
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "uring_vs_fio.py"
needs_fio = pytest.mark.skipif(not shutil.which("fio"), reason="fio not installed")


def bench(*args, check=True):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=check,
                          timeout=600)


@needs_fio
def test_quick_cells(tmp_path):
    out = tmp_path / "r" / "u.json"
    r = bench("--quick", "--dir", str(tmp_path), "--bs", "4k,64k", "--rw", "write,read", "--buffering",
              "buffered,direct", "--cache", "cold", "--json", str(out))
    doc = json.loads(out.read_text())
    assert doc["quick"] and doc["goal"] == 0.9 and doc["command"][1] == "benchmarks/uring_vs_fio.py"
    assert doc["warmup"] == 1
    assert "window of qd x bs" in doc["accio_buffer"]  # which accio side made these figures
    cells = doc["cells"]
    assert [(c["bs"], c["rw"], c["buffering"]) for c in cells] == [
        (bs, rw, b) for bs in (4096, 65536) for rw in ("write", "read") for b in ("buffered", "direct")]
    for c in cells:
        assert c["size"] == 16 << 20 and c["qd"] == 16 and c["cache"] == "cold"
        a, f = c["accio"]["samples"], c["fio"]["samples"]
        assert len(a) == len(f) == 3 and min(a + f) > 0
        assert c["ratio"]["estimate"] == pytest.approx(statistics.median(x / y for x, y in zip(a, f)))
        assert c["ratio"]["low"] <= c["ratio"]["estimate"] <= c["ratio"]["high"]
        assert c["goal"] == c["verdict"] == "too few samples (3 < 7)"  # --quick's 3 rounds: no goal (accio.stats)
        if c["rw"] == "read":  # dropped before every sample, on both sides
            assert c["residency"][1] <= 0.01
        if c["rw"] == "write" and c["buffering"] == "buffered":  # small writes: uring against posix
            u, p = c["uring_requests"]["samples"], c["posix_requests"]["samples"]
            assert len(u) == len(p) == 3
            assert c["vs_posix"]["ratio"]["estimate"] == pytest.approx(statistics.median(x / y for x, y in zip(u, p)))
        else:
            assert "vs_posix" not in c and "posix_requests" not in c
    assert f"0 of {len(cells)} cells meet accio/fio >= 0.9 ({len(cells)} with too few samples to say)" in r.stdout
    assert not any(p.name.startswith("accio-uring-fio-") for p in tmp_path.iterdir())  # its file is gone


@needs_fio
@pytest.mark.parametrize("args, message", [
    (["--rounds", "3"], "at least 7"),
    (["--quick", "--rw", "append"], "unknown cell"),
    (["--quick", "--warmup", "-1"], "--warmup must be 0 or more"),
    (["--quick", "--bs", "8m", "--max-size", "4m"], "smaller than the block size"),
    (["--quick", "--bs", "4k", "--qd", "1", "--size", "1g", "--max-size", "1g"], "262144 mappings"),
])
def test_bad_arguments(tmp_path, args, message):
    r = bench("--dir", str(tmp_path), *args, check=False)
    assert r.returncode == 2 and message in r.stderr
    assert os.listdir(tmp_path) == []


def load_bench():
    spec = importlib.util.spec_from_file_location("uring_vs_fio", SCRIPT)
    bench_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_mod)
    return bench_mod


@pytest.mark.parametrize("warmup", [0, 1, 2])
def test_warmup_samples_are_untimed(tmp_path, monkeypatch, warmup):
    """Each contender runs `warmup` times before the timed rounds, the file prepared as for a sample,
    and none of those runs is in the samples or the ratio."""
    bench_mod = load_bench()
    calls = []

    def fake(name):
        def sample(*args, **kwargs):
            calls.append(name)
            return float(len(calls))  # a value per call: the samples show which calls they were
        return sample
    monkeypatch.setattr(bench_mod, "fio_sample", fake("fio"))
    # the whole-file request passes no mechanism; the per-block ones pass "uring" or "posix"
    monkeypatch.setattr(bench_mod, "accio_sample", lambda *a, **k: fake(a[6] if len(a) > 6 else "accio")())
    cell = bench_mod.run_cell(str(tmp_path / "f"), 1 << 20, 64 << 10, 4, "write", "buffered", "cold", 7, warmup)
    names = ["accio", "fio", "uring", "posix"]
    assert calls[:4 * warmup] == [n for n in names for _ in range(warmup)]
    assert len(calls) == 4 * (warmup + 7)
    timed = {n: cell[k]["samples"] for n, k in zip(names, ["accio", "fio", "uring_requests", "posix_requests"])}
    for n, got in timed.items():
        assert got == [float(i + 1) for i, c in enumerate(calls) if c == n][warmup:]


def test_window_buffer_aliases_one_window(tmp_path):
    """The whole-file buffer touches qd x bs bytes of memory, as fio's iodepth buffers: every window of
    its address space is the same memory, the last one cut short, and accio writes it whole."""
    bench_mod = load_bench()
    import accio
    window, size = 64 << 10, 3 * (64 << 10) + 4096 + 100
    w = bench_mod.WindowBuffer(size, window)
    try:
        view = memoryview(w.view).cast("B")
        assert len(view) == size
        first = bytes(view[:window])
        assert len(set(first)) > 200  # random bytes, not zeros
        for off in range(window, size, window):
            assert bytes(view[off:off + window]) == first[:min(window, size - off)]
        view[5] = first[5] ^ 0xFF  # one store, seen in every window
        assert view[window + 5] == view[2 * window + 5] == view[5] != first[5]
        first = bytes(view[:window])
        path = tmp_path / "w"
        with accio.File(path, "w", "uring", task_size="4k", queue_depth=4) as f:
            assert f.write_from(w.view, 0) == size
        assert path.read_bytes() == (first * 4)[:size]
        view.release()
    finally:
        w.close()
        w.close()  # closing twice is harmless
