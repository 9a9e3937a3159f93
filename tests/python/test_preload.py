"""accio run: unmodified programs give byte-identical results with and without the preload shim.

The threshold is lowered to 4 KiB so that the shim takes nearly every read and write on regular
files, and each test checks with --stats-json that the engine really served calls (where the
program uses read/write at all: cp and cat between files use copy_file_range, which is not
interposed, so they are run across filesystems or into a pipe to make them read and write;
stdio's reads are libc-internal: the shim serves a large fread itself (numpy.fromfile, and with
the 4 KiB threshold sha256sum's 32 KiB freads), and the rest of stdio is libc's).
"""
from __future__ import annotations

import hashlib
import json
import shlex
import signal
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ACCIO = [sys.executable, "-m", "accio.cli"]
THRESHOLD = "4k"


def accio_run(cmd, tmp_path: Path, *, threshold=THRESHOLD, mechanism=None, cwd=None, env=None, check=True,
              input=None, timeout=None):
    """Runs cmd under accio run with statistics; returns (CompletedProcess, stats report)."""
    stats = tmp_path / f"stats-{os.urandom(4).hex()}.json"
    args = ACCIO + ["run", "--stats-json", str(stats)]
    if threshold:
        args += ["--threshold", threshold]
    if mechanism:
        args += ["--mechanism", mechanism]
    p = subprocess.run(args + ["--"] + list(cmd), cwd=cwd, env=env, capture_output=True, input=input, timeout=timeout)
    if check:
        assert p.returncode == 0, p.stderr.decode()
    return p, json.loads(stats.read_text())


def plain(cmd, cwd=None, env=None, check=True, input=None):
    p = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, input=input)
    if check:
        assert p.returncode == 0, p.stderr.decode()
    return p


def engine_calls(report, op=None) -> int:
    return sum(f[o]["accelerated_calls"] for f in report["files"] for o in ((op,) if op else ("read", "write")))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): sha(p) for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("preload-data")
    rnd = os.urandom(6 * 2**20 + 12345)
    (d / "big.bin").write_bytes(rnd)
    (d / "text.txt").write_bytes(b"".join(b"line %d of some compressible text\n" % i for i in range(200000)))
    tree = d / "tree"
    for i, size in enumerate([0, 1, 4095, 4096, 4097, 65536, 300000, 2**20 + 7]):
        sub = tree / f"d{i % 3}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i}.bin").write_bytes(rnd[i * 1000:i * 1000 + size])
    return d


# ---- coreutils ----

def test_cat_into_a_pipe(data, tmp_path):
    want = plain(["cat", str(data / "big.bin")]).stdout
    p, rep = accio_run(["cat", str(data / "big.bin")], tmp_path)
    assert p.stdout == want
    assert engine_calls(rep, "read") > 0


@pytest.mark.parametrize("across", [False, True], ids=["same-fs", "across-fs"])
def test_cp(data, tmp_path, across):
    src = data / "big.bin"
    if across:  # copy_file_range cannot cross filesystems: cp falls back to read/write
        shm = Path("/dev/shm")
        if not shm.is_dir() or os.statvfs(shm).f_bavail * os.statvfs(shm).f_frsize < 16 * 2**20:
            pytest.skip("no /dev/shm with room for the source")
        src = shm / f"accio-test-{os.getpid()}.bin"
        shutil.copyfile(data / "big.bin", src)
    try:
        _, rep = accio_run(["cp", str(src), str(tmp_path / "copy.bin")], tmp_path)
        assert sha(tmp_path / "copy.bin") == sha(data / "big.bin")
        if across:
            assert engine_calls(rep, "read") > 0 and engine_calls(rep, "write") > 0
    finally:
        if across:
            src.unlink()


@pytest.mark.parametrize("bs", ["4k", "1M", "3M", "64M"])
@pytest.mark.parametrize("direct", [False, True], ids=["buffered", "iflag=direct"])
def test_dd(data, tmp_path, bs, direct):
    src = data / "big.bin"
    flags = ["iflag=direct"] if direct else []
    ref, out = tmp_path / "ref.bin", tmp_path / "out.bin"
    want = plain(["dd", f"if={src}", f"of={ref}", f"bs={bs}"] + flags, check=False)
    p, rep = accio_run(["dd", f"if={src}", f"of={out}", f"bs={bs}"] + flags, tmp_path, check=False)
    assert p.returncode == want.returncode, p.stderr.decode()
    if want.returncode != 0:
        pytest.skip(f"dd {' '.join(flags)} fails here without the shim too: {want.stderr.decode().strip()}")
    assert sha(out) == sha(ref) == sha(src)
    # The trailing partial block of an O_DIRECT read is unaligned: dd itself switches to buffered.
    assert engine_calls(rep, "read") > 0 and engine_calls(rep, "write") > 0


def test_dd_seek_and_notrunc(data, tmp_path):
    """Writes into the middle of an existing file at an offset dd reaches with lseek."""
    for run in ("ref", "out"):
        (tmp_path / f"{run}.bin").write_bytes(b"x" * (3 * 2**20))
    args = lambda of: ["dd", f"if={data / 'big.bin'}", f"of={of}", "bs=1M", "seek=1", "count=3", "conv=notrunc"]
    plain(args(tmp_path / "ref.bin"))
    _, rep = accio_run(args(tmp_path / "out.bin"), tmp_path)
    assert sha(tmp_path / "out.bin") == sha(tmp_path / "ref.bin")
    assert engine_calls(rep, "write") > 0


def test_sha256sum(data, tmp_path):
    files = [str(data / "big.bin"), str(data / "text.txt")]
    want = plain(["sha256sum"] + files).stdout
    p, rep = accio_run(["sha256sum"] + files, tmp_path)
    assert p.stdout == want
    # sha256sum reads through stdio, in 32 KiB freads: above the 4 KiB threshold, the shim serves
    # them (stdio's own reads are libc-internal calls that no preload library can interpose).
    assert engine_calls(rep, "read") > 0
    # below the gate (the default settings) every fread is libc's
    p, rep = accio_run(["sha256sum"] + files, tmp_path, threshold=None)
    assert p.stdout == want and engine_calls(rep) == 0


def test_gzip_roundtrip(data, tmp_path):
    want = plain(["gzip", "-c", "-n", str(data / "text.txt")]).stdout
    shutil.copyfile(data / "text.txt", tmp_path / "t.txt")
    _, rep = accio_run(["gzip", "-n", "-k", str(tmp_path / "t.txt")], tmp_path)
    assert (tmp_path / "t.txt.gz").read_bytes() == want
    (tmp_path / "t.txt").unlink()
    _, rep2 = accio_run(["gzip", "-d", str(tmp_path / "t.txt.gz")], tmp_path)
    assert sha(tmp_path / "t.txt") == sha(data / "text.txt")
    assert engine_calls(rep, "read") > 0 and engine_calls(rep2, "write") > 0


def test_tar_create_and_extract(data, tmp_path):
    env = dict(os.environ, TZ="UTC")
    args = lambda out: ["tar", "--sort=name", "--owner=0", "--group=0", "--numeric-owner", "-cf", str(out), "tree"]
    plain(args(tmp_path / "ref.tar"), cwd=data, env=env)
    _, rep = accio_run(args(tmp_path / "out.tar"), tmp_path, cwd=data, env=env)
    assert sha(tmp_path / "out.tar") == sha(tmp_path / "ref.tar")
    assert engine_calls(rep, "read") > 0 and engine_calls(rep, "write") > 0
    (tmp_path / "x").mkdir()
    _, rep = accio_run(["tar", "-xf", str(tmp_path / "out.tar"), "-C", str(tmp_path / "x")], tmp_path)
    assert tree_digest(tmp_path / "x" / "tree") == tree_digest(data / "tree")
    assert engine_calls(rep) > 0


# ---- Python ----

PY_SCRIPT = r"""
import shutil, sys, numpy as np
src, out = sys.argv[1], sys.argv[2]
shutil.copyfile(src, out + ".copy")
buf = bytearray(64 * 2**20)
with open(src, "rb", buffering=0) as f, open(out + ".readinto", "wb") as g:
    while (n := f.readinto(buf)):
        g.write(memoryview(buf)[:n])
a = np.fromfile(src, dtype=np.uint8)
a.tofile(out + ".numpy")
with open(src, "rb") as f:
    data = f.read()
with open(out + ".readall", "wb") as g:
    g.write(data)
"""


def test_python_io(data, tmp_path):
    pytest.importorskip("numpy")
    script = tmp_path / "io.py"
    script.write_text(PY_SCRIPT)
    _, rep = accio_run([sys.executable, str(script), str(data / "big.bin"), str(tmp_path / "o")], tmp_path)
    for suffix in ("copy", "readinto", "numpy", "readall"):
        assert sha(tmp_path / f"o.{suffix}") == sha(data / "big.bin"), suffix
    assert engine_calls(rep, "read") > 0 and engine_calls(rep, "write") > 0


FROMFILE_SCRIPT = r"""
import sys, numpy as np
src, out = sys.argv[1], sys.argv[2]
with open(src, "rb") as f:
    head = f.read(100)                                  # Python's buffered reader is ahead of it
    a = np.fromfile(f, dtype=np.uint8, count=3 << 20)   # a FILE on a dup of f's descriptor
    tail = f.read()                                     # numpy put f where its FILE ended: ftell
with open(out, "wb") as g:
    g.write(head + a.tobytes() + tail)
"""


def test_numpy_fromfile_is_served(data, tmp_path):
    """numpy.fromfile reads an array with one fread, which glibc reads with its own read() where no
    preload sees it: the shim serves it, and leaves the stream where glibc would (numpy hands the
    position back to the Python file through ftell)."""
    pytest.importorskip("numpy")
    script = tmp_path / "fromfile.py"
    script.write_text(FROMFILE_SCRIPT)
    out = tmp_path / "out.bin"
    _, rep = accio_run([sys.executable, str(script), str(data / "big.bin"), str(out)], tmp_path)
    assert sha(out) == sha(data / "big.bin")
    big = [f for f in rep["files"] if f["path"].endswith("big.bin")]
    assert big and big[0]["read"]["accelerated_bytes"] >= 3 << 20, rep["files"]


# ---- sqlite3 and git ----

SQL = """
PRAGMA journal_mode=DELETE;
CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, b BLOB);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
  INSERT INTO t(v, b) SELECT printf('row %d', i), zeroblob(i % 3000) FROM n;
CREATE INDEX tv ON t(v);
UPDATE t SET v = v || '!' WHERE id % 7 = 0;
DELETE FROM t WHERE id % 11 = 0;
PRAGMA integrity_check;
SELECT count(*), sum(length(v)), sum(length(b)) FROM t;
"""


def test_sqlite3(tmp_path):
    if not shutil.which("sqlite3"):
        pytest.skip("sqlite3 is not installed (make deps installs it as root)")
    want = plain(["sqlite3", str(tmp_path / "ref.db")], input=SQL.encode()).stdout
    p, rep = accio_run(["sqlite3", str(tmp_path / "out.db")], tmp_path, input=SQL.encode())
    assert p.stdout == want and b"ok" in p.stdout.splitlines()[1]
    dump = lambda db: plain(["sqlite3", str(db), ".dump"]).stdout
    assert dump(tmp_path / "out.db") == dump(tmp_path / "ref.db")
    assert engine_calls(rep, "read") > 0 and engine_calls(rep, "write") > 0


def test_git(data, tmp_path):
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    env = dict(os.environ, GIT_AUTHOR_NAME="a", GIT_AUTHOR_EMAIL="a@x", GIT_COMMITTER_NAME="a",
               GIT_COMMITTER_EMAIL="a@x", GIT_AUTHOR_DATE="2026-01-01T00:00:00Z",
               GIT_COMMITTER_DATE="2026-01-01T00:00:00Z", GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1")
    heads, calls = [], 0
    for name, run in (("ref", None), ("out", accio_run)):
        repo = tmp_path / name
        shutil.copytree(data / "tree", repo)
        shutil.copyfile(data / "big.bin", repo / "big.bin")
        for cmd in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"], ["git", "commit", "-q", "-m", "x"],
                    ["git", "fsck", "--full", "--strict"], ["git", "gc", "-q"], ["git", "fsck", "--full"]):
            if run:
                _, rep = run(cmd, tmp_path, cwd=repo, env=env)
                calls += engine_calls(rep)
            else:
                plain(cmd, cwd=repo, env=env)
        heads.append(plain(["git", "rev-parse", "HEAD"], cwd=repo, env=env).stdout)
    assert heads[0] == heads[1]
    assert calls > 0


# ---- the command itself ----

def test_exit_status_and_signals(tmp_path):
    assert accio_run(["sh", "-c", "exit 7"], tmp_path, check=False)[0].returncode == 7
    # A program killed by a signal: accio run dies of the same signal (a shell shows 128+N).
    p = subprocess.run(ACCIO + ["run", "--", "sh", "-c", "kill -TERM $$"])
    assert p.returncode == -15
    p = subprocess.run(ACCIO + ["run", "--stats", "--", "sh", "-c", "kill -TERM $$"], capture_output=True)
    assert p.returncode == -15


def test_errors(tmp_path):
    p = subprocess.run(ACCIO + ["run", "--", "no-such-program-xyz"], capture_output=True, text=True)
    assert p.returncode == 127 and "command not found" in p.stderr
    # accio's own errors, usage errors included, are 125 as in env(1) (the full table: test_cli.py)
    p = subprocess.run(ACCIO + ["run", "--"], capture_output=True, text=True)
    assert p.returncode == 125 and "no program" in p.stderr
    p = subprocess.run(ACCIO + ["run", "--threshold", "lots", "--", "true"], capture_output=True, text=True)
    assert p.returncode == 125 and "threshold" in p.stderr
    p = subprocess.run(ACCIO + ["run", "--mechanism", "warp", "--", "true"], capture_output=True, text=True)
    assert p.returncode == 125 and "warp" in p.stderr
    (tmp_path / "noexec").write_text("#!/bin/sh\n")
    p = subprocess.run(ACCIO + ["run", "--", str(tmp_path / "noexec")], capture_output=True, text=True)
    assert p.returncode == 126


NATIVE = [str(Path(sys.executable).with_name("accio"))]
BAD_SETTINGS = [
    ("ACCIO_MECHANISM", "bogus", "unknown mechanism (one of auto, posix, parallel"),
    ("ACCIO_THREADS", "abc", "not an integer"),
    ("ACCIO_PROFILE", "{tmp}/missing.json", "no such file (auto, off, or a profile file that `accio tune` wrote)"),
    ("ACCIO_PROFILE", "{tmp}/bad.json", "not a profile: plans must be a non-empty array"),
    # A FIFO: refused at once (opening it waited for a writer: every launch hung)
    ("ACCIO_PROFILE", "{tmp}/fifo", "not a profile: not a regular file"),
]


@pytest.mark.parametrize("var, value, why", BAD_SETTINGS, ids=[f"{v}={x}" for v, x, _ in BAD_SETTINGS])
def test_a_bad_setting_is_refused_before_the_program_runs(data, tmp_path, var, value, why):
    """A bad ACCIO_* value made every process's engine refuse to start, and the shim passed every call
    to libc ("0 B through the engine") without a word (ACCIO_QUIET; -v said only "bad ACCIO_*
    setting"). The launcher checks the settings as the engine does and refuses (125), once, before
    the program starts, naming the variable, its value and why, as it refuses --mechanism warp."""
    (tmp_path / "bad.json").write_text('{"schema": "accio.profile/1"}')
    os.mkfifo(tmp_path / "fifo")
    value = value.format(tmp=tmp_path)
    ran = tmp_path / "ran"
    for front in (ACCIO, NATIVE):
        for opts in ([], ["--stats", "-v"]):
            p = subprocess.run([*front, "run", *opts, "--", "sh", "-c", f"touch {ran}; cat {data / 'big.bin'} >/dev/null"],
                               env={**os.environ, var: value}, capture_output=True, text=True, timeout=60)
            assert p.returncode == 125, p.stderr
            assert p.stderr.startswith(f"accio run: read environment: {var}='{value}' is not valid: {why}"), p.stderr
            assert p.stderr.endswith("; correct the variable or unset it (`accio info` shows every setting)\n")
            assert p.stderr.count("\n") == 1 and not ran.exists(), p.stderr
    # --mechanism sets ACCIO_MECHANISM for the program: a bad one in the environment is then not used.
    if var == "ACCIO_MECHANISM":
        p, rep = accio_run(["cat", str(data / "big.bin")], tmp_path, mechanism="posix", env={**os.environ, var: value})
        assert engine_calls(rep) > 0


def test_a_device_mechanism_and_an_unknown_variable_are_said_before_the_program_runs(tmp_path):
    """New-user audit, session 25: -m staged was refused but ACCIO_MECHANISM=staged ran; and a typo such
    as ACCIO_THREAD=3 was ignored without a word (only `accio info` named it). The launcher refuses
    the first as it refuses -m staged, and warns once about the second (the program still runs)."""
    ran = tmp_path / "ran"
    for front in (ACCIO, NATIVE):
        p = subprocess.run([*front, "run", "--", "touch", str(ran)], env={**os.environ, "ACCIO_MECHANISM": "staged"},
                           capture_output=True, text=True)
        assert p.returncode == 125 and not ran.exists(), p.stderr
        assert p.stderr.startswith("accio run: ACCIO_MECHANISM='staged': not one of auto, posix"), p.stderr
        env = {**os.environ, "ACCIO_THREAD": "3", "ACCIO_NOTHING_LIKE_IT": "1", "ACCIO_QUIET": "0"}
        p = subprocess.run([*front, "run", "--", "sh", "-c", f"touch {ran}; echo out"], env=env,
                           capture_output=True, text=True)
        assert p.returncode == 0 and ran.exists() and p.stdout == "out\n", p
        assert p.stderr.count("warning: ACCIO_THREAD is not a variable accio reads (did you mean ACCIO_THREADS?)") == 1
        assert p.stderr.count("warning: ACCIO_NOTHING_LIKE_IT is not a variable accio reads\n") == 1
        assert p.stderr.count("\n") == 2, p.stderr
        p = subprocess.run([*front, "run", "--", "true"], env={**env, "ACCIO_QUIET": "1"}, capture_output=True, text=True)
        assert p.returncode == 0 and p.stderr == "", p.stderr
        # a typo of one of the shim's own names, with no setting set beside it (review, session 25:
        # the engine, and the check, were loaded only when a setting's variable was set)
        alone = {k: v for k, v in os.environ.items() if not k.startswith("ACCIO_")}
        p = subprocess.run([*front, "run", "--", "true"], env={**alone, "ACCIO_PRELOAD_TRESHOLD": "4k"},
                           capture_output=True, text=True)
        assert p.returncode == 0 and p.stderr == ("accio run: warning: ACCIO_PRELOAD_TRESHOLD is not a variable accio "
                                                  "reads (did you mean ACCIO_PRELOAD_THRESHOLD?)\n"), p.stderr
        ran.unlink()


def test_the_launcher_checks_settings_with_the_engine_the_shim_loads(data, tmp_path):
    """With the engine elsewhere (ACCIO_PRELOAD_ENGINE, docs/preload.md), the launcher checks the
    ACCIO_* settings with that engine, as the shim will load it: it looked only next to the shim,
    found none, and refused any setting (125)."""
    import accio
    from accio.run import launcher_path
    lib = Path(accio.__file__).parent / "lib"
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(launcher_path(), alone / "accio-run")
    shutil.copy(lib / "libaccio_preload.so", alone / "libaccio_preload.so")  # no libaccio.so beside it
    engine = next(lib.glob("libaccio.so*"))
    env = {**os.environ, "ACCIO_THREADS": "4", "ACCIO_PRELOAD_ENGINE": str(engine)}
    p = subprocess.run([str(alone / "accio-run"), "--", "true"], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    # and the shim loads that engine: it serves 4 MiB reads (accio_preload_counters, in the program)
    served = ("import ctypes, os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\nwhile os.read(fd, 4 << 20): pass\n"
              "t = ctypes.c_uint64()\nctypes.CDLL(None).accio_preload_counters(ctypes.byref(t), None)\nprint(t.value)")
    p = subprocess.run([str(alone / "accio-run"), "--", sys.executable, "-c", served, str(data / "big.bin")], env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0 and int(p.stdout) > 0, (p.stdout, p.stderr)
    p = subprocess.run([str(alone / "accio-run"), "--", "true"], env={**env, "ACCIO_THREADS": "abc"},
                       capture_output=True, text=True)
    assert p.returncode == 125 and "ACCIO_THREADS='abc' is not valid" in p.stderr, p.stderr


def test_the_shim_names_a_bad_setting(data, tmp_path):
    """Preloaded by hand (no launcher to check first), the shim says which variable is bad and why,
    then passes every call through (-v used to say only "bad ACCIO_* setting in the environment")."""
    import accio
    shim = next(Path(accio.__file__).parent.glob("lib/libaccio_preload.so"))
    env = {k: v for k, v in os.environ.items() if k != "ACCIO_QUIET"}
    p = subprocess.run(["dd", f"if={data / 'big.bin'}", "of=/dev/null", "bs=1M", "status=none"], capture_output=True, text=True,
                       env={**env, "LD_PRELOAD": str(shim), "ACCIO_THREADS": "abc"})
    assert p.returncode == 0, p.stderr
    assert ("accio preload: read environment: ACCIO_THREADS='abc' is not valid: not an integer (errno 22): every "
            "request passes through (correct the variable or unset it)") in p.stderr, p.stderr


def test_stats_report(data, tmp_path):
    """--stats prints the per-file table; the JSON holds every process (children, exec'd programs)."""
    src = data / "big.bin"
    cmd = ["sh", "-c", f"cat {src} | cat > /dev/null; dd if={src} of=/dev/null bs=2M 2>/dev/null; exit 0"]
    p = subprocess.run(ACCIO + ["run", "--stats", "--stats-json", str(tmp_path / "s.json"), "--", *cmd],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    rep = json.loads((tmp_path / "s.json").read_text())
    assert rep["schema"] == "accio.run-stats/1" and rep["exit_status"] == 0 and rep["threshold"] == 2**20
    commands = " ".join(pr["command"] for pr in rep["processes"])
    assert "dd if=" in commands and len(rep["processes"]) >= 3
    f = next(f for f in rep["files"] if f["path"] == str(src))
    assert f["read"]["accelerated_calls"] >= 3  # dd's 2 MiB reads; cat's 128 KiB ones are below 1 MiB
    assert f["read"]["bytes"] == 2 * src.stat().st_size
    assert f["plans"] and all(pl["plan"] and pl["why"] for pl in f["plans"])
    assert sum(f["read"]["size_histogram"]) == f["read"]["calls"]
    assert str(src) in p.stderr and "plans the engine ran" in p.stderr


def test_stats_of_a_run_without_file_io_says_what_is_not_seen():
    """A program whose copies happen inside the kernel (cp and cat between files: copy_file_range)
    shows no files; the table says why instead of a bare '0 files'."""
    from accio.run import render
    text = render({"processes": [{"pid": 1}], "files": [], "threshold": 2**20, "mechanism": "auto"})
    assert "0 files" in text and "copy_file_range" in text and "docs/preload.md" in text


def test_stats_table_shows_the_engines_files_first_and_sums_the_rest():
    """New-user audit, session 25: `accio run --stats -- python ...` printed 127 rows (every module the
    program imported), its one data file first only because it was the largest, and a header total
    of '540409112 B'. The files the engine served come first; after 20 rows one line sums the rest."""
    from accio.run import render

    def f(path, nbytes, engine=0):
        side = {"calls": 1, "bytes": nbytes, "accelerated_calls": int(engine > 0), "accelerated_bytes": engine,
                "declined_calls": 0, "ns": 10**6, "size_histogram": [1]}
        return {"path": path, "read": side, "write": {"calls": 0}, "plans": []}
    files = [f(f"/usr/lib/python3/m{i}.pyc", 4096 + i) for i in range(30)] + [f("/data/big.bin", 3 << 20, 3 << 20)]
    files.insert(0, f("/data/biggest-plain.bin", 900 << 20))
    text = render({"processes": [{"pid": 1}], "files": files, "threshold": 2**20, "mechanism": "auto",
                   "size_buckets": [2**20]})
    rows = [ln for ln in text.splitlines() if ln.startswith("  /")]
    assert rows[0].startswith("  /data/big.bin") and rows[1].startswith("  /data/biggest-plain.bin"), text
    assert len(rows) == 20
    assert "  ... and 12 more files: read 48.1 KiB, wrote 0 B, none through the engine (--stats-json FILE keeps every file)" \
        in text, text
    assert text.splitlines()[0].startswith("accio run: 1 process, 32 files; read 903 MiB (3 MiB through the engine)")


def test_mechanism_is_used(data, tmp_path):
    cmd = ["dd", f"if={data / 'big.bin'}", "of=/dev/null", "bs=2M"]
    _, rep = accio_run(cmd, tmp_path, mechanism="parallel", threshold=None)
    f = next(f for f in rep["files"] if f["path"].endswith("big.bin"))
    assert rep["mechanism"] == "parallel" and [p["plan"] for p in f["plans"]] == ["parallel"]
    # posix is what libc does already: the shim hands every call straight to libc.
    _, rep = accio_run(cmd, tmp_path, mechanism="posix", threshold=None)
    assert engine_calls(rep) == 0


def test_small_io_is_untouched(data, tmp_path):
    """Below the threshold nothing goes through the engine, and the engine is never even loaded."""
    _, rep = accio_run(["sha256sum", str(data / "text.txt")], tmp_path, threshold="64M")
    assert engine_calls(rep) == 0
    assert all(not pr["engine_loaded"] for pr in rep["processes"])


# ---- issue 20: the native launcher, silence, names that are not UTF-8, the planner's decision,
# prefetch ----

def test_launcher_is_native_and_on_path(tmp_path):
    """accio run execs the native launcher, which execs the program: no Python in between. The same
    launcher is installed as `accio-run` next to the interpreter (the scripts directory)."""
    from accio import _ext
    from accio.run import launcher_path
    assert open(launcher_path(), "rb").read(4) == b"\x7fELF"
    script = Path(sys.executable).with_name("accio-run")
    assert script.is_file(), "accio-run is not installed in the scripts directory"
    p = subprocess.run([str(script), "--", "sh", "-c", 'echo "$LD_PRELOAD"; exit 3'], capture_output=True, text=True)
    assert p.returncode == 3 and p.stdout.split(":")[0].strip().endswith("libaccio_preload.so"), p
    # the program is the launcher's direct exec: its parent is our process, not a Python in between
    p = subprocess.run([str(script), "--", "sh", "-c", "echo $PPID"], capture_output=True, text=True)
    assert int(p.stdout) == os.getpid()
    for form in (["-l64k"], ["-l", "64k"], ["--threshold=64k"], ["--threshold", "64KiB"]):
        p = subprocess.run([str(script), *form, "--", "sh", "-c", 'echo "$ACCIO_PRELOAD_THRESHOLD"'],
                           capture_output=True, text=True)
        assert p.stdout == "65536\n", (form, p)
    for argv, code in ((["--", "no-such-program-xyz"], _ext.RUN_NOT_FOUND), (["--", str(tmp_path)], _ext.RUN_CANNOT_EXECUTE),
                       (["--bogus", "--", "true"], _ext.RUN_OWN_ERROR)):
        assert subprocess.run([str(script), *argv], capture_output=True).returncode == code


def test_one_table_of_options():
    """The Python CLI's help for run and the launcher's own come from the same table (run_cli.h)."""
    from accio import _ext
    launcher_help = subprocess.run(ACCIO + ["run", "--help"], capture_output=True, text=True, check=True).stdout
    cli_help = " ".join(subprocess.run(ACCIO + ["--help"], capture_output=True, text=True, check=True).stdout.split())
    assert "accio run [--mechanism M] [--threshold BYTES] [--stats] [--stats-json FILE] [--verbose]" in cli_help
    for name, letter, metavar, help_text in _ext.RUN_OPTIONS:
        assert name in launcher_help and help_text.split()[0] in launcher_help
        if letter:
            assert letter in launcher_help
    assert (_ext.RUN_OWN_ERROR, _ext.RUN_CANNOT_EXECUTE, _ext.RUN_NOT_FOUND) == (125, 126, 127)


def test_silent_unless_verbose(data, tmp_path):
    """No profile: the engine has a warning to give. Under accio run the program's stderr stays its
    own; --verbose lets the notes through."""
    env = dict(os.environ, ACCIO_PROFILE_DIR=str(tmp_path / "no-profiles"))
    env.pop("ACCIO_QUIET", None)
    cmd = ["sh", "-c", f"dd if={data / 'big.bin'} of=/dev/null bs=4M 2>/dev/null; "
           f"dd if={data / 'big.bin'} of=/dev/null bs=4M 2>/dev/null; echo done >&2"]
    p = subprocess.run(ACCIO + ["run", "-l", "64k", "--", *cmd], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and p.stderr == "done\n", p.stderr
    cmd = ["dd", f"if={data / 'big.bin'}", "of=/dev/null", "bs=4M", "status=none"]
    p = subprocess.run(ACCIO + ["run", "--verbose", "-l", "64k", "--", *cmd], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and "no tuning profile" in p.stderr, p.stderr


def test_name_that_is_not_utf8(data, tmp_path):
    """A file name with byte 0xff keeps its statistics: written as \\udcff (surrogateescape), shown
    with the byte escaped, and os.fsencode gives the name's bytes back."""
    name = os.fsdecode(b"bad\xffname \xe2\x82\xac.bin")  # an invalid byte, then a valid euro sign
    path = tmp_path / name
    shutil.copyfile(data / "big.bin", path)
    stats = tmp_path / "s.json"
    p = subprocess.run(ACCIO + ["run", "-l", "64k", "--stats", "--stats-json", str(stats), "--", "dd",
                                f"if={path}", "of=/dev/null", "bs=1M", "status=none"], capture_output=True)
    assert p.returncode == 0, p.stderr
    raw = stats.read_bytes()
    assert b"\\udcff" in raw and "€".encode() not in raw  # json.dumps escapes every non-ASCII character
    rep = json.loads(raw)
    f = next(f for f in rep["files"] if f["path"].endswith(".bin"))
    assert os.fsencode(f["path"]) == os.fsencode(path)
    assert f["read"]["bytes"] == path.stat().st_size and engine_calls(rep) > 0
    assert b"bad\\xffname \xe2\x82\xac.bin" in p.stderr  # the table: the byte escaped, the valid name as is


def test_statistics_keep_every_file_and_count_what_they_cannot(data, tmp_path):
    """Every file a process reads gets its row, however many it opened before: Python importing
    torch reads about 1100 files, and until 2026-11-27 the shim kept rows for the first 1024, so
    the tensor torch.load read after the imports had none though the engine served it (only the
    process's dropped_calls counted it, which nothing showed). Past the rows a process keeps
    (max_files: 65536, or ACCIO_PRELOAD_STATS_FILES) calls and bytes are counted, and the table
    says so instead of leaving them out silently."""
    many = tmp_path / "many"
    many.mkdir()
    for i in range(1500):
        (many / str(i)).write_bytes(b"x" * (i % 7 + 1))
    big = data / "big.bin"
    reader = ("import sys\n"
              "for i in range(int(sys.argv[2])):\n"
              "    with open(f'{sys.argv[1]}/{i}', 'rb') as f: f.read()\n"
              "with open(sys.argv[3], 'rb', buffering=0) as f:\n"
              "    while f.read(2 << 20): pass\n")
    # 1500 files, then the large one: one row each in the reader's own record (rows are found
    # again, not made anew per call), every small file with the same calls, the large one served
    _, rep = accio_run([sys.executable, "-c", reader, str(many), "1500", str(big)], tmp_path, threshold="1m")
    proc = next(pr for pr in rep["processes"] if str(many) in pr["command"])
    paths = [f["path"] for f in proc["files"]]
    assert len(paths) == len(set(paths)) and proc["max_files"] == 65536 and proc["dropped_calls"] == 0
    small = [f for f in proc["files"] if f["path"].startswith(str(many) + "/")]
    assert len(small) == 1500 and len({f["read"]["calls"] for f in small}) == 1
    assert sum(f["read"]["bytes"] for f in small) == sum(i % 7 + 1 for i in range(1500))
    f = next(f for f in proc["files"] if f["path"] == str(big))
    assert f["read"]["bytes"] == big.stat().st_size and f["read"]["accelerated_calls"] > 0
    assert f["read"]["calls"] == -(-big.stat().st_size // (2 << 20)) + 1  # every call (and the one at EOF) in its row
    assert rep["dropped"] == {"calls": 0, "bytes": 0}
    # a process that keeps fewer rows: the large file's bytes are counted as dropped, and the
    # table says so
    stats = tmp_path / "s.json"
    env = dict(os.environ, ACCIO_PRELOAD_STATS_FILES="100")
    p = subprocess.run(ACCIO + ["run", "-l", "1m", "--stats", "--stats-json", str(stats), "--", sys.executable,
                                "-c", reader, str(many), "200", str(big)], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    rep = json.loads(stats.read_text())
    proc = next(pr for pr in rep["processes"] if str(many) in pr["command"])
    assert proc["max_files"] == 100 and len(proc["files"]) == 100 and str(big) not in {f["path"] for f in proc["files"]}
    assert proc["dropped_calls"] >= 100 and proc["dropped_bytes"] >= big.stat().st_size
    assert rep["dropped"]["calls"] >= proc["dropped_calls"]
    assert "on files past the rows a process keeps (100; ACCIO_PRELOAD_STATS_FILES" in p.stderr
    # a bad value: accio run refuses it before the program starts (125, named); the shim preloaded by
    # hand names it and keeps the default
    p = subprocess.run(ACCIO + ["run", "--stats-json", str(stats), "--", "true"], capture_output=True, text=True,
                       env=dict(os.environ, ACCIO_PRELOAD_STATS_FILES="lots"))
    assert p.returncode == 125 and "ACCIO_PRELOAD_STATS_FILES='lots' is not a count from 1 to 65536" in p.stderr
    from accio.run import shim_path
    sd = tmp_path / "stats-by-hand"
    sd.mkdir()
    loud = {k: v for k, v in os.environ.items() if k != "ACCIO_QUIET"}
    p = subprocess.run(["dd", f"if={big}", "of=/dev/null", "bs=2M", "status=none"], capture_output=True, text=True,
                       env=dict(loud, LD_PRELOAD=shim_path(), ACCIO_PRELOAD_STATS_DIR=str(sd),
                                ACCIO_PRELOAD_STATS_FILES="lots"))
    assert p.returncode == 0 and "ACCIO_PRELOAD_STATS_FILES='lots' is not a count from 1 to 65536" in p.stderr
    assert all(json.loads(x.read_text())["max_files"] == 65536 for x in sd.iterdir()) and any(sd.iterdir())


EXITS_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static char buf[4 << 20];
static long read_all(const char* p) {
  int fd = open(p, O_RDONLY);
  long n = 0, k;
  while ((k = read(fd, buf, sizeof buf)) > 0) n += k;
  close(fd);
  return n;
}
static void on_signal(int s) { (void)s; _exit(0); }
int main(int argc, char** argv) {
  const char* how = argv[1];
  if (!strcmp(how, "fork")) { /* fio's job processes: forked, ended with _exit */
    pid_t c = fork();
    if (c == 0) { read_all(argv[2]); _exit(0); }
    int st;
    waitpid(c, &st, 0);
    return !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  if (!strcmp(how, "vfork")) { /* a vfork child shares the parent's memory: it writes nothing */
    read_all(argv[2]);
    pid_t c = vfork();
    if (c == 0) _exit(7);
    int st;
    waitpid(c, &st, 0);
    printf("%d\n", (int)c);
    fflush(stdout);
    read_all(argv[2]);
    return !(WIFEXITED(st) && WEXITSTATUS(st) == 7);
  }
  if (!strcmp(how, "_Exit")) { read_all(argv[2]); _Exit(0); }
  if (!strcmp(how, "signal")) { /* _exit from a crash handler on a small alternate stack */
    static char alt[8192];
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_ONSTACK;
    sigaltstack(&ss, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    read_all(argv[2]);
    raise(SIGUSR1);
    return 2;
  }
  return 2;
}
"""


def test_processes_that_end_with_exit_keep_their_statistics(data, tmp_path):
    """_exit and _Exit run no atexit handler, so the statistics of processes that end with them were
    lost: fio's job processes (forked, ended with _exit) showed no calls on the GPU machine (`engine 0
    of 0 B` for fio's psync rows), as did os._exit and multiprocessing's forked workers. The shim's
    _exit and _Exit write them first: in a forked child, in a process ending with _Exit, and from a
    crash handler on a small alternate stack. A vfork child shares its parent's memory: it writes
    nothing and leaves the parent's statistics whole."""
    src = tmp_path / "exits.c"
    src.write_text(EXITS_C)
    exe = tmp_path / "exits"
    cc = subprocess.run(["cc", "-O1", "-o", str(exe), str(src)], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    big = data / "big.bin"
    size = big.stat().st_size

    def reads_of(proc):
        return next((f["read"] for f in proc["files"] if f["path"] == str(big)), None)

    _, rep = accio_run([str(exe), "fork", str(big)], tmp_path, threshold="1m")
    assert len(rep["processes"]) == 2
    child = next(pr for pr in rep["processes"] if reads_of(pr))
    assert reads_of(child)["bytes"] == size and reads_of(child)["accelerated_calls"] > 0
    assert child["ppid"] == next(pr["pid"] for pr in rep["processes"] if pr is not child)

    p, rep = accio_run([str(exe), "vfork", str(big)], tmp_path, threshold="1m")
    vchild = int(p.stdout.decode())
    assert [pr["pid"] for pr in rep["processes"] if pr["pid"] == vchild] == []
    (parent,) = rep["processes"]
    assert reads_of(parent)["bytes"] == 2 * size  # before and after the vfork: one record, whole

    _, rep = accio_run([str(exe), "_Exit", str(big)], tmp_path, threshold="1m")
    (proc,) = rep["processes"]
    assert reads_of(proc)["bytes"] == size

    # from a handler on an 8 KiB alternate stack (a crash handler's): the writer's buffers are
    # static (on the stack they were 21 KiB: SIGSEGV)
    _, rep = accio_run([str(exe), "signal", str(big)], tmp_path, threshold="1m", timeout=120)
    (proc,) = rep["processes"]
    assert reads_of(proc)["bytes"] == size

    # Python's os._exit, in a forked child and in the parent
    prog = ("import os, sys\n"
            "if os.fork() == 0:\n"
            "    with open(sys.argv[1], 'rb', buffering=0) as f:\n"
            "        while f.read(4 << 20): pass\n"
            "    os._exit(0)\n"
            "os.wait()\n"
            "os._exit(0)\n")
    _, rep = accio_run([sys.executable, "-c", prog, str(big)], tmp_path, threshold="1m")
    assert len(rep["processes"]) == 2 and sum(1 for pr in rep["processes"] if reads_of(pr)) == 1


FADVISE_RECORDER_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <sys/types.h>
#include <unistd.h>
/* Preloaded after the shim: sees the program's posix_fadvise (which the shim passes on) and the
 * shim's own, on the engine's descriptor. */
int posix_fadvise(int fd, off_t off, off_t len, int advice) {
  static int (*next)(int, off_t, off_t, int);
  if (!next) next = (int (*)(int, off_t, off_t, int))dlsym(RTLD_NEXT, "posix_fadvise");
  char link[64], path[PATH_MAX] = "";
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n > 0) path[n] = 0;
  dprintf(2, "fadvise %d %d %s\n", fd, advice, path);
  return next(fd, off, len, advice);
}
"""


def _fadvise_run(prog: str, args: list[str], tmp_path) -> tuple[list[tuple[int, int, str]], str]:
    """Runs the Python program prog under the shim with FADVISE_RECORDER_C preloaded after it (a
    1 MiB threshold, so that its 4 MiB preads are served); returns (descriptor, advice, path) of
    each posix_fadvise after the line `mark` on stderr (none may come before it), and stdout."""
    src = tmp_path / "rec.c"
    src.write_text(FADVISE_RECORDER_C)
    rec = tmp_path / "librec.so"
    cc = subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(rec), str(src), "-ldl"], capture_output=True,
                        text=True)
    assert cc.returncode == 0, cc.stderr
    from accio.run import shim_path
    plain([sys.executable, "-c", prog, *args])  # hot: the engine serves the reads
    env = dict(os.environ, LD_PRELOAD=f"{shim_path()} {rec}", ACCIO_PRELOAD_THRESHOLD="1m", ACCIO_QUIET="1")
    p = subprocess.run([sys.executable, "-c", prog, *args], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    before, after = p.stderr.split("mark\n")
    assert "fadvise" not in before, before
    return [(int(fd), int(advice), path) for _, fd, advice, path in
            (line.split() for line in after.splitlines() if line.startswith("fadvise "))], p.stdout


def _kcmp_works() -> bool:
    """Whether kcmp(KCMP_FILE) answers in this process (a seccomp filter, as Docker's default
    profile, refuses it: the shim then trusts its groups)."""
    import ctypes
    nr = {"x86_64": 312, "aarch64": 272}.get(os.uname().machine)
    if nr is None:
        return False
    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        return ctypes.CDLL(None, use_errno=True).syscall(nr, os.getpid(), os.getpid(), 0, fd, fd) == 0
    finally:
        os.close(fd)


_READ_ALL = ("def read_all(d):\n"
             "    for off in range(0, os.fstat(d).st_size, 4 << 20):\n"
             "        os.pread(d, 4 << 20, off)\n")


def test_the_engines_descriptor_takes_the_programs_fadvise_advice(data, tmp_path):
    """The engine reads through a descriptor of its own, whose readahead was the kernel's default
    whatever the program advised on its own: fio advises POSIX_FADV_SEQUENTIAL (twice the readahead),
    and its cold 4 MiB psync reads ran at 0.92x of plain on the H200's 16 CPUs, 0.72-0.85x on the 2-CPU
    VM. The shim now gives the engine's descriptor the advice of the descriptor it serves (SEQUENTIAL,
    RANDOM, NORMAL), once per change. Advice belongs to the open file description: given through one
    of the descriptors made from one another (dup2, dup3, dup, fcntl F_DUPFD, and fcntl64's
    F_DUPFD_CLOEXEC, which Python's os.dup uses), it holds for all of them; a number closed where
    the shim does not see it and then opened on another file does not carry the group's advice; a
    dup2 that fails leaves its target in its group."""
    big, other = data / "big.bin", tmp_path / "other.bin"
    other.write_bytes(b"x" * 4096)
    prog = ("import ctypes, os, sys\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "fd = os.open(sys.argv[1], os.O_RDONLY)\n" + _READ_ALL +
            "read_all(fd)\n"  # no advice: the engine's descriptor is left alone
            "print('mark', flush=True); os.write(2, b'mark\\n')\n"
            "os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL); read_all(fd); read_all(fd)\n"
            "os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM); read_all(fd)\n"
            "os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_NORMAL); os.dup2(fd, 77); read_all(77)\n"
            # advice through the copy, read through the original, and the other way round
            "os.posix_fadvise(77, 0, 0, os.POSIX_FADV_SEQUENTIAL); read_all(fd)\n"
            "d = os.dup(fd); os.posix_fadvise(d, 0, 0, os.POSIX_FADV_RANDOM); read_all(77)\n"
            "c = libc.dup(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL); read_all(c)\n"
            "e = libc.fcntl(fd, 0, 0); os.posix_fadvise(e, 0, 0, os.POSIX_FADV_NORMAL); read_all(fd)\n"  # F_DUPFD
            "os.dup2(fd, 78, inheritable=False); os.posix_fadvise(78, 0, 0, os.POSIX_FADV_RANDOM); read_all(fd)\n"  # dup3
            # c closed by a raw system call, its number then another file's: advice through it stays its own
            "assert libc.syscall(3, c) == 0; o = os.open(sys.argv[2], os.O_RDONLY); assert o == c, (o, c)\n"
            "os.posix_fadvise(o, 0, 0, os.POSIX_FADV_SEQUENTIAL); read_all(fd)\n"
            "os.posix_fadvise(77, 0, 0, os.POSIX_FADV_NORMAL); read_all(fd)\n"
            # a dup2 that fails (999 is not open) leaves its target as it was, in its group
            "try:\n    os.dup2(999, 77)\nexcept OSError:\n    pass\nelse:\n    raise SystemExit('dup2 of 999')\n"
            "os.posix_fadvise(77, 0, 0, os.POSIX_FADV_RANDOM); read_all(fd)\n")
    calls, _ = _fadvise_run(prog, [str(big), str(other)], tmp_path)
    engine_fd = calls[1][0]  # one handle per file: the engine reads through one descriptor
    got = [(fd != engine_fd, advice, path == str(big)) for fd, advice, path in calls]
    # (the program's own call, advice, of big.bin): each of the program's advice, then the engine's
    # descriptor taking it before the next read served; equal advice is not given twice
    assert got == [(True, 2, True), (False, 2, True), (True, 1, True), (False, 1, True), (True, 0, True),
                   (False, 0, True),
                   (True, 2, True), (False, 2, True), (True, 1, True), (False, 1, True),  # dup2, os.dup
                   (True, 2, True), (False, 2, True), (True, 0, True), (False, 0, True),  # dup, F_DUPFD
                   (True, 1, True), (False, 1, True),  # dup3
                   (True, 2, False),  # the other file's: nothing for big.bin's engine descriptor
                   *([] if _kcmp_works() else [(False, 2, True)]),  # (without kcmp the group is trusted)
                   (True, 0, True), (False, 0, True), (True, 1, True), (False, 1, True)], calls


def test_a_vfork_child_leaves_the_parents_records_alone(data, tmp_path):
    """CPython (3.10 on) starts a subprocess with vfork: until it execs, the child shares the
    parent's memory, and its close_range, dup2 and close reach the shim. The shim forgot the parent's
    descriptors there and closed its engine handles in the child's descriptor table: the parent kept
    their descriptors open with nothing referring to them (two more per subprocess.run, the review
    of session 22) and lost the advice it had given."""
    big = data / "big.bin"
    prog = ("import os, subprocess, sys\n"
            "path = sys.argv[1]\n"
            "fd = os.open(path, os.O_RDONLY)\n" + _READ_ALL +
            "def opened():\n"
            "    n = 0\n"
            "    for name in os.listdir('/proc/self/fd'):\n"
            "        try:\n"
            "            n += os.readlink('/proc/self/fd/' + name) == path\n"
            "        except OSError:\n"
            "            pass\n"
            "    return n\n"
            "read_all(fd)\n"
            "before = opened()\n"
            "print('mark', flush=True); os.write(2, b'mark\\n')\n"
            "os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)\n"
            "for _ in range(5):\n"
            "    subprocess.run(['true'], check=True, stdin=fd)\n"  # the child dup2s fd to 0, closes the rest
            "    read_all(fd)\n"
            "print('descriptors', before, opened())\n")
    calls, out = _fadvise_run(prog, [str(big)], tmp_path)
    before, after = (int(n) for n in out.split("descriptors")[1].split())
    assert before >= 2 and after == before, out  # the program's and the engine's
    # the advice reached the engine's descriptor once, after the subprocesses had run
    assert [(advice, path) for _, advice, path in calls] == [(2, str(big)), (2, str(big))], calls


def test_planner_decides_above_the_gate(data, tmp_path):
    """Without -l every large call is the planner's: served by the engine or passed back to libc
    (declined_calls) when it would run posix; never both, never lost."""
    cmd = ["dd", f"if={data / 'big.bin'}", "of=/dev/null", "bs=2M", "status=none"]
    plain(cmd)  # hot
    env = dict(os.environ, ACCIO_PROFILE_DIR=str(tmp_path / "none"))  # the built-in model: gate 1 MiB
    _, rep = accio_run(cmd, tmp_path, threshold=None, env=env)
    f = next(f for f in rep["files"] if f["path"].endswith("big.bin"))
    large = sum(f["read"]["size_histogram"][5:])  # buckets above 1 MiB
    assert large >= 3 and f["read"]["accelerated_calls"] + f["read"]["declined_calls"] == large
    # with -l, the threshold rules: every call at or above it goes to the engine
    _, rep = accio_run(cmd, tmp_path, threshold="1m")
    f = next(f for f in rep["files"] if f["path"].endswith("big.bin"))
    assert f["read"]["declined_calls"] == 0 and f["read"]["accelerated_calls"] >= 3


def _profile_hot_posix_cold_parallel(tmp_path: Path, of: Path) -> dict:
    """An environment whose profile for `of`'s filesystem runs posix on cached ranges at every size
    and parallel on cold ranges from 1 MiB: every 1 MiB request asks the planner (its crossing point
    is 1 MiB), which passes hot ones back."""
    from accio import _ext
    pdir = tmp_path / "profiles"
    pdir.mkdir(exist_ok=True)
    k = _ext.profile_key(str(of))
    group = {"hot": [{"max_size": None, "plans": [0]}],
             "cold": [{"max_size": 2**20 - 1, "plans": [0]}, {"max_size": None, "plans": [1, 0]}]}
    (pdir / os.path.basename(k["file"])).write_text(json.dumps({
        "schema": "accio.profile/1", "key": {"filesystem": k["filesystem"], "device": k["device"]},
        "plans": [{"mechanism": "posix"}, {"mechanism": "parallel"}],
        "decisions": {op: {"1": group, "N": group} for op in ("read", "write")}}))
    return dict(os.environ, ACCIO_PROFILE_DIR=str(pdir))


def test_the_memo_passes_equal_requests_back_without_asking(tmp_path):
    """dd bs=1M of a hot file whose planner runs posix there: every call is passed back, but the
    planner is asked once per window of equal requests (the memo), not once per call, and the window
    doubles (16, 32, 64 MiB ...) while the planner keeps passing that size back; a request of
    another size asks again; close() forgets the memo."""
    f = tmp_path / "hot.bin"
    f.write_bytes(os.urandom(64 << 20))
    env = _profile_hot_posix_cold_parallel(tmp_path, f)
    plain(["cat", str(f)], check=True)  # hot
    _, rep = accio_run(["dd", f"if={f}", "of=/dev/null", "bs=1M", "status=none"], tmp_path, threshold=None, env=env)
    r = next(x for x in rep["files"] if x["path"].endswith("hot.bin"))["read"]
    assert r["calls"] == 65 and r["accelerated_calls"] == 0 and r["declined_calls"] == 65, r  # 64 + EOF
    assert r["remembered_calls"] == 62, r  # asked at calls 1, 18 and 51 (16, then 32, then 64 MiB between)
    # Alternating sizes: neither is the last size passed back, so every call asks. (The script
    # leaves its descriptor open: the statistics are then read at exit, which once crashed.)
    alt = ("import os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\n"
           "for i in range(16):\n    os.read(fd, (1 << 20) + (i % 2) * 4096)\n")
    _, rep = accio_run([sys.executable, "-c", alt, str(f)], tmp_path, threshold=None, env=env)
    r = next(x for x in rep["files"] if x["path"].endswith("hot.bin"))["read"]
    assert r["declined_calls"] == 16 and r["remembered_calls"] == 0, r
    # close() forgets: each open asks once, the next two equal reads are remembered.
    reopen = ("import os, sys\nfor _ in range(2):\n    fd = os.open(sys.argv[1], os.O_RDONLY)\n"
              "    for i in range(3): os.read(fd, 1 << 20)\n    os.close(fd)\n")
    _, rep = accio_run([sys.executable, "-c", reopen, str(f)], tmp_path, threshold=None, env=env)
    r = next(x for x in rep["files"] if x["path"].endswith("hot.bin"))["read"]
    assert r["declined_calls"] == 6 and r["remembered_calls"] == 4, r


@pytest.mark.parametrize("how", ["tell", "lseek", "pread", "pread-jump"])
def test_the_memo_window_falls_back_when_the_program_moves(tmp_path, how):
    """The memo's window doubles while the program reads on in equal requests; when it moves (an
    lseek that moves the offset, a pread at another offset than where the last one ended), what is
    left of the window is cut to 16 MiB and the next one starts at 16 MiB again: the planner looks
    at the new place sooner. Asking where the offset is (lseek(fd, 0, SEEK_CUR)) is no move."""
    f = tmp_path / "hot.bin"
    f.write_bytes(os.urandom(64 << 20))
    env = _profile_hot_posix_cold_parallel(tmp_path, f)
    plain(["cat", str(f)])  # hot
    # 20 requests of 1 MiB, then (the move) 40 more from offset 0; all inside the file.
    read = {"tell": "os.read(fd, M)", "lseek": "os.read(fd, M)", "pread": "os.pread(fd, M, off)",
            "pread-jump": "os.pread(fd, M, off)"}[how]
    move = {"tell": "os.lseek(fd, 0, os.SEEK_CUR)", "lseek": "os.lseek(fd, 0, os.SEEK_SET)",
            "pread": "pass", "pread-jump": "pass"}[how]
    start = {"tell": 20, "lseek": 0, "pread": 20, "pread-jump": 0}[how]
    script = ("import os, sys\nM = 1 << 20\nfd = os.open(sys.argv[1], os.O_RDONLY)\n"
              f"for i in range(20):\n    off = i * M\n    {read}\n{move}\n"
              f"for i in range(40):\n    off = ({start} + i) * M\n    {read}\n")
    _, rep = accio_run([sys.executable, "-c", script, str(f)], tmp_path, threshold=None, env=env)
    r = next(x for x in rep["files"] if x["path"].endswith("hot.bin"))["read"]
    assert r["calls"] == 60 and r["accelerated_calls"] == 0 and r["declined_calls"] == 60, r
    if how in ("tell", "pread"):  # no move: asked at calls 1, 18 and 51 (windows of 16, 32, 64 MiB)
        assert r["remembered_calls"] == 57, r
    else:  # moved before call 21: 30 MiB of the 32 MiB window left, cut to 16; then 16, 32 MiB
        assert r["remembered_calls"] == 56, r  # asked at calls 1, 18, 37 and 54


@pytest.mark.parametrize("how", ["read", "pread"])
def test_the_memo_window_doubles_without_statistics(tmp_path, how):
    """The memo as programs run it, statistics off (the fast path asks the memo, and the slow path
    asks it again before the planner): 60 equal 1 MiB requests of a hot file, by read or by pread
    at the offsets read would use, reach the planner three times (calls 1, 18, 51: windows of 16, 32
    and 64 MiB), not once per 16 MiB."""
    f = tmp_path / "hot.bin"
    f.write_bytes(os.urandom(64 << 20))
    env = _profile_hot_posix_cold_parallel(tmp_path, f)
    plain(["cat", str(f)])  # hot
    read = {"read": "os.read(fd, M)", "pread": "os.pread(fd, M, i * M)"}[how]
    script = ("import ctypes, os, sys\nM = 1 << 20\nfd = os.open(sys.argv[1], os.O_RDONLY)\n"
              f"for i in range(60):\n    assert len({read}) == M\n"
              "asked = ctypes.CDLL(None).accio_preload_asked\nasked.restype = ctypes.c_uint64\nprint(asked())\n")
    p = plain(ACCIO + ["run", "--", sys.executable, "-c", script, str(f)], env=env)
    assert int(p.stdout) == 3, (p.stdout, p.stderr)


def test_after_a_window_the_planner_looks_at_the_page_cache_anew(tmp_path):
    """The memo passes 1 MiB reads of a hot file back in windows of 16, 32, ... MiB; the pages ahead
    are dropped (written back first) just before the third question (call 51). The planner, whose own residency verdict
    would serve 4 MiB of questions (four windows of 1 MiB calls), is asked to probe anew: the range
    is cold, the engine serves it with the profile's cold plan, and so on to the end."""
    f = tmp_path / "hot.bin"
    f.write_bytes(os.urandom(64 << 20))
    env = _profile_hot_posix_cold_parallel(tmp_path, f)
    plain(["cat", str(f)])  # hot
    script = ("import os, sys\nM = 1 << 20\nfd = os.open(sys.argv[1], os.O_RDONLY)\n"
              "for i in range(50):\n    os.read(fd, M)\n"
              "os.fsync(fd)\nos.posix_fadvise(fd, 50 * M, 14 * M, os.POSIX_FADV_DONTNEED)\n"
              "for i in range(10):\n    os.read(fd, M)\n")
    _, rep = accio_run([sys.executable, "-c", script, str(f)], tmp_path, threshold=None, env=env)
    r = next(x for x in rep["files"] if x["path"].endswith("hot.bin"))["read"]
    # Asked at calls 1 and 18 (passed back, then 16 and 32 remembered), then at 51: cold, served; the
    # engine serves the next ones too until its own buffered reads' readahead has made the range
    # ahead cached again (then hot: passed back and remembered). Without the fresh probe: none served.
    assert r["calls"] == 60 and r["declined_calls"] + r["accelerated_calls"] == 60, r
    assert r["accelerated_calls"] >= 1 and r["remembered_calls"] >= 48, r


@pytest.mark.parametrize("how", ["dup2", "dup3", "closerange", "syscall"])
def test_a_file_put_on_a_former_pipe_descriptor_is_not_passed_back(tmp_path, how):
    """A pipe read on descriptor N leaves an "any size" memo; a regular file put on N without
    close() (dup2, dup3, close_range then F_DUPFD, or a raw system call no preload sees) must not
    inherit it. With statistics (where every call reaches the slow path) its 8 MiB reads are asked
    about and served by the engine, none remembered; without, the interposed calls forget N at once
    (the engine serves every read of the file), while after a raw dup2 the first 64 MiB pass back."""
    import platform
    if how == "syscall" and platform.machine() != "x86_64":
        pytest.skip("SYS_dup2's number is x86_64's")
    f = tmp_path / "after-pipe.bin"
    data = os.urandom(64 << 20)
    f.write_bytes(data)
    put = {"dup2": "os.dup2(src, N)", "dup3": "os.dup2(src, N, inheritable=False)",
           "closerange": "os.closerange(N, N + 1)\nassert fcntl.fcntl(src, fcntl.F_DUPFD, N) == N",
           "syscall": "assert ctypes.CDLL(None, use_errno=True).syscall(33, src, N) == N"}[how]
    script = ("import ctypes, fcntl, hashlib, os, sys\nN = 100\nr, w = os.pipe()\nos.write(w, b'x' * 16384)\n"
              "os.dup2(r, N)\nos.close(r)\nassert len(os.read(N, 65536)) == 16384\n"
              "src = os.open(sys.argv[1], os.O_RDONLY)\n" + put + "\nos.close(src)\n"
              "taken, before = ctypes.c_uint64(), ctypes.c_uint64()\n"
              "counters = ctypes.CDLL(None).accio_preload_counters\ncounters(ctypes.byref(before), None)\n"
              "h = hashlib.sha256()\nwhile b := os.read(N, 8 << 20): h.update(b)\n"
              "counters(ctypes.byref(taken), None)\nprint(h.hexdigest(), taken.value - before.value)\n")
    p, rep = accio_run([sys.executable, "-c", script, str(f)], tmp_path, mechanism="parallel")  # any CPU count
    digest, _ = p.stdout.decode().split()
    assert digest == hashlib.sha256(data).hexdigest()
    r = next(x for x in rep["files"] if x["path"].endswith("after-pipe.bin"))["read"]
    assert r["remembered_calls"] == 0 and r["accelerated_calls"] > 0, r
    p = plain(ACCIO + ["run", "--threshold", THRESHOLD, "--mechanism", "parallel", "--", sys.executable, "-c", script,
                       str(f)])
    digest, taken = p.stdout.decode().split()  # the calls of the loop the engine served
    assert digest == hashlib.sha256(data).hexdigest()
    # 8 reads of 8 MiB and the one at the end of the file: a raw dup2 passes the first 64 MiB back
    assert int(taken) == (1 if how == "syscall" else 9), (how, taken)


def test_a_cold_whole_file_read_runs_direct_and_a_cold_stream_the_hot_plan(tmp_path):
    """Built-in model, a cold file: read in one call to its end (dd bs=64M of a 40 MiB file) it runs
    direct; read in 8 MiB calls (dd bs=8M) no call runs direct, the first neither (the kernel reads
    ahead of the stream that goes on), though the shim asks the planner before each call it runs:
    the calls it finds cold take the model's cold plan, the hot plan (parallel) on a device that is
    not rotational, posix (passed back to libc) on a rotational one; the bytes are the file's."""
    from accio import _ext
    from accio._system import drop_pages, residency
    f = tmp_path / "cold.bin"
    f.write_bytes(os.urandom(40 << 20))
    try:
        os.close(os.open(f, os.O_RDONLY | os.O_DIRECT))
    except OSError:
        pytest.skip("no O_DIRECT on this filesystem")
    env = dict(os.environ, ACCIO_PROFILE="off")

    def plans_of(bs):
        drop_pages(str(f))
        if residency(str(f)) > 0.1:
            pytest.skip("this filesystem keeps pages cached")
        p, rep = accio_run(["sh", "-c", f"dd if={f} bs={bs} status=none | sha256sum"], tmp_path, threshold=None, env=env)
        assert p.stdout.split()[0].decode() == sha(f)
        return next(x for x in rep["files"] if x["path"].endswith("cold.bin"))

    plans = plans_of("64M")["plans"]
    direct = [x for x in plans if x["plan"] == "direct(even)"]
    assert len(direct) == 1 and direct[0]["calls"] == 1, plans
    assert "starts a stream" in direct[0]["why"] and "reads to the end of the file" in direct[0]["why"], plans
    rec = plans_of("8M")
    assert not [x for x in rec["plans"] if x["plan"] == "direct(even)"], rec["plans"]
    read = rec["read"]
    assert read["accelerated_calls"] + read["declined_calls"] >= 5, rec  # asked before each call
    assert sum(x["calls"] for x in rec["plans"]) == read["accelerated_calls"], rec
    cold = [x for x in rec["plans"] if "range cold" in x["why"]]
    if json.loads(_ext.profile_describe(None, str(f))).get("rotational"):
        assert not cold and read["declined_calls"] >= 1, rec  # cold calls: posix, passed back
    else:
        assert cold and all(x["plan"] == "parallel(task=4MiB)" for x in cold), rec


@pytest.mark.parametrize("reader", ["cat", "sha256sum", "python"])
def test_prefetch_for_cold_sequential_readers(tmp_path, reader):
    """A sequential reader of small requests on a cold file gets its stream asked for ahead
    (prefetch_windows); on a hot file nothing is asked (the probe finds the pages); the
    output is the program's own either way."""
    from accio._system import drop_pages
    f = tmp_path / "stream.bin"
    f.write_bytes(os.urandom(24 * 2**20))
    cmds = {"cat": ["cat", str(f)], "sha256sum": ["sha256sum", str(f)],
            "python": [sys.executable, "-c", "import sys\nwith open(sys.argv[1], 'rb', buffering=0) as f:\n"
                       "    while f.read(65536): pass\nprint('ok')", str(f)]}
    cmd = cmds[reader]
    want = plain(cmd).stdout
    on = dict(os.environ, ACCIO_PRELOAD_PREFETCH="32m")  # off by default (docs/preload.md says why)
    drop_pages(str(f))
    p, rep = accio_run(cmd, tmp_path, threshold=None, env=on)
    assert p.stdout == want
    assert sum(pr["prefetch_windows"] for pr in rep["processes"]) >= 1
    p, rep = accio_run(cmd, tmp_path, threshold=None, env=on)  # now hot
    assert p.stdout == want and sum(pr["prefetch_windows"] for pr in rep["processes"]) == 0
    for env in (dict(os.environ, ACCIO_PRELOAD_PREFETCH="0"), None):  # off, and the default
        drop_pages(str(f))
        p, rep = accio_run(cmd, tmp_path, threshold=None, env=env)
        assert p.stdout == want and sum(pr["prefetch_windows"] for pr in rep["processes"]) == 0


def test_prefetch_reads_the_whole_window(tmp_path):
    """The window is really read: one WILLNEED reads at most max(the device's readahead, its largest
    request) (the kernel caps it: 8 MiB of a 32 MiB window on the 2-vCPU VM's disk, 128 KiB on a
    default device), so the shim asks for it in pieces of that size. A reader stops just past the
    first look (at 4 MiB); the 32 MiB after it must come into the page cache, far beyond what the
    kernel's own readahead of 4 MiB of reads would bring."""
    from accio._system import drop_pages, residency
    f = tmp_path / "window.bin"
    f.write_bytes(os.urandom(64 * 2**20))
    drop_pages(str(f))
    if residency(str(f)) > 0.05:
        pytest.skip("this filesystem keeps the file's pages (tmpfs?): nothing to prefetch")
    reader = ("import sys\nwith open(sys.argv[1], 'rb', buffering=0) as f:\n"
              "    for _ in range(4 * 16 + 1): f.read(65536)\n")
    p, rep = accio_run([sys.executable, "-c", reader, str(f)], tmp_path, threshold=None,
                       env=dict(os.environ, ACCIO_PRELOAD_PREFETCH="32m"))
    assert p.returncode == 0 and sum(pr["prefetch_windows"] for pr in rep["processes"]) == 1, (p, rep)
    got, deadline = 0.0, time.monotonic() + 10
    while got < 0.95 and time.monotonic() < deadline:  # WILLNEED returns before the reads complete
        time.sleep(0.05)
        got = residency(str(f), 4 * 2**20, 32 * 2**20)
    assert got >= 0.95, f"only {got:.0%} of the 32 MiB window came in"


def _profile_with_window(pdir: Path, of: Path, window) -> Path:
    """A profile for of's filesystem in pdir (posix at every size) whose prefetch window is
    `window` (None: a profile without the section)."""
    from accio import _ext
    pdir.mkdir(exist_ok=True)
    k = _ext.profile_key(str(of))
    posix = {"hot": [{"max_size": None, "plans": [0]}], "cold": [{"max_size": None, "plans": [0]}]}
    doc = {"schema": "accio.profile/1", "key": {"filesystem": k["filesystem"], "device": k["device"]},
           "plans": [{"mechanism": "posix"}], "decisions": {op: {"1": posix, "N": posix} for op in ("read", "write")}}
    if window is not None:
        doc["prefetch"] = {"qd1_mibps": [100.0] * 5, "qd16_mibps": [300.0] * 5, "gain": [3.0, 3.0, 3.0],
                           "window": window}
    path = pdir / os.path.basename(k["file"])
    path.write_text(json.dumps(doc, indent=1))
    return path


def test_the_launcher_turns_prefetch_on_only_where_a_profile_has_a_window(tmp_path):
    """ACCIO_PRELOAD_PREFETCH=profile reaches the program only when a profile it can use has a
    non-zero window; the user's own setting, ACCIO_PROFILE=off and a named profile are respected."""
    launcher = Path(sys.executable).with_name("accio-run")

    def seen(**env):
        e = {k: v for k, v in os.environ.items() if k not in ("ACCIO_PRELOAD_PREFETCH", "ACCIO_PROFILE")}
        p = subprocess.run([str(launcher), "--", "env"], env={**e, **env}, capture_output=True, text=True)
        assert p.returncode == 0 and not p.stderr, p.stderr
        got = [x.split("=", 1)[1] for x in p.stdout.splitlines() if x.startswith("ACCIO_PRELOAD_PREFETCH=")]
        return got[0] if got else None

    pdir = tmp_path / "profiles"
    assert seen(ACCIO_PROFILE_DIR=str(tmp_path / "none")) is None
    (pdir).mkdir()
    (pdir / "other.json").write_text('{"note": "a window of \\"window\\": 7 in a string is not a field"}')
    old = _profile_with_window(pdir, tmp_path, None)  # written before the tuner measured depth
    assert seen(ACCIO_PROFILE_DIR=str(pdir)) is None
    _profile_with_window(pdir, tmp_path, 0)
    assert seen(ACCIO_PROFILE_DIR=str(pdir)) is None
    _profile_with_window(pdir, tmp_path, 32 << 20)
    assert seen(ACCIO_PROFILE_DIR=str(pdir)) == "profile"
    assert seen(ACCIO_PROFILE_DIR=str(pdir), ACCIO_PRELOAD_PREFETCH="0") == "0"  # the user's setting wins
    assert seen(ACCIO_PROFILE_DIR=str(pdir), ACCIO_PROFILE="off") is None
    assert seen(ACCIO_PROFILE_DIR=str(tmp_path / "none"), ACCIO_PROFILE=str(old)) == "profile"  # a named profile
    _profile_with_window(pdir, tmp_path, 0)
    assert seen(ACCIO_PROFILE_DIR=str(tmp_path / "none"), ACCIO_PROFILE=str(old)) is None


@pytest.mark.parametrize("reader", ["cat", "sha256sum"])
def test_prefetch_follows_the_devices_profile(tmp_path, reader):
    """With a profile whose window is 32 MiB, a cold sequential reader under accio run (defaults:
    the launcher sees the window) gets windows asked for; with a window of 0, none; with
    ACCIO_PRELOAD_PREFETCH=profile but ACCIO_PROFILE=off, none. The output is the program's own."""
    from accio._system import drop_pages, residency
    f = tmp_path / "stream.bin"
    f.write_bytes(os.urandom(24 * 2**20))
    drop_pages(str(f))
    if residency(str(f)) > 0.1:
        pytest.skip("this filesystem keeps pages cached")
    cmd = {"cat": ["cat", str(f)], "sha256sum": ["sha256sum", str(f)]}[reader]
    want = plain(cmd).stdout
    pdir = tmp_path / "profiles"
    env = {k: v for k, v in os.environ.items() if k not in ("ACCIO_PRELOAD_PREFETCH", "ACCIO_PROFILE")}
    env["ACCIO_PROFILE_DIR"] = str(pdir)

    def windows(env):
        drop_pages(str(f))
        p, rep = accio_run(cmd, tmp_path, threshold=None, env=env)
        assert p.stdout == want
        return sum(pr["prefetch_windows"] for pr in rep["processes"])

    _profile_with_window(pdir, f, 32 << 20)
    assert windows(env) >= 1
    assert windows(dict(env, ACCIO_PRELOAD_PREFETCH="profile", ACCIO_PROFILE="off")) == 0
    _profile_with_window(pdir, f, 0)
    assert windows(dict(env, ACCIO_PRELOAD_PREFETCH="profile")) == 0  # asked the engine: 0, never again


@pytest.mark.skipif(shutil.which("script") is None, reason="needs script(1) for a terminal")
def test_the_one_note_comes_once_from_the_launcher(data, tmp_path):
    """At a terminal, with no tuning profile, the launcher says so once before the program starts;
    the program's processes (two dd here, each loading the engine) say nothing."""
    launcher = Path(sys.executable).with_name("accio-run")
    inner = (f"{launcher} -- sh -c 'dd if={data / 'big.bin'} of=/dev/null bs=4M status=none; "
             f"dd if={data / 'big.bin'} of=/dev/null bs=4M status=none'")
    env = dict(os.environ, ACCIO_PROFILE_DIR=str(tmp_path / "none"))
    env.pop("ACCIO_QUIET", None)
    out = subprocess.run(["script", "-qec", inner, "/dev/null"], env=env, capture_output=True, text=True).stdout
    assert out.count("no tuning profile") == 1 and out.startswith("accio run: note:"), out
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "some.json").write_text("{}")
    env["ACCIO_PROFILE_DIR"] = str(tmp_path / "profiles")
    out = subprocess.run(["script", "-qec", f"{launcher} -- true", "/dev/null"], env=env, capture_output=True,
                         text=True).stdout
    assert "no tuning profile" not in out, out
    # A profile measured on a machine with another number of CPUs (a profile directory in a home that
    # login and compute nodes share): said once, naming it; one of this machine's: nothing.
    (tmp_path / "profiles" / "some.json").write_text('{"cpus": %d}' % (os.cpu_count() + 5))
    out = subprocess.run(["script", "-qec", f"{launcher} -- true", "/dev/null"], env=env, capture_output=True,
                         text=True).stdout
    assert out.count("a tuning profile of another machine: some.json measured on "
                     f"{os.cpu_count() + 5} CPUs, this machine has {os.cpu_count()}") == 1, out
    (tmp_path / "profiles" / "some.json").write_text('{"cpus": %d}' % os.cpu_count())
    out = subprocess.run(["script", "-qec", f"{launcher} -- true", "/dev/null"], env=env, capture_output=True,
                         text=True).stdout
    assert "another machine" not in out, out
    # Only the top level's "cpus" counts: not one in a nested object, in an array or in a string
    # (the launcher read the first "cpus": anywhere, review N-4 of session 26).
    other = os.cpu_count() + 5
    for text in ('{"devices": [{"cpus": %d}], "x": {"cpus": %d}, "cpus": %d}' % (other, other, os.cpu_count()),
                 '{"note": "a \\"cpus\\": %d, {", "cpus": %d}' % (other, os.cpu_count())):
        assert json.loads(text)["cpus"] == os.cpu_count()
        (tmp_path / "profiles" / "some.json").write_text(text)
        out = subprocess.run(["script", "-qec", f"{launcher} -- true", "/dev/null"], env=env, capture_output=True,
                             text=True).stdout
        assert "another machine" not in out, (text, out)


def test_a_static_program_is_named_not_silently_left_alone(data, tmp_path):
    """LD_PRELOAD cannot enter a statically linked program (the GPU machine's carried fio was one:
    configure --build-static: under accio run it ran alone). The launcher says so before it starts, at a terminal or
    with --verbose or --stats, and says nothing of a dynamic program or in a pipe without them."""
    src = tmp_path / "reader.c"
    src.write_text("#include <stdio.h>\nint main(int c, char** v) { FILE* f = fopen(v[1], \"rb\"); char b[1 << 16];\n"
                   "  size_t n = 0, k; while ((k = fread(b, 1, sizeof b, f))) n += k; printf(\"%zu\\n\", n); return 0; }\n")
    exe = tmp_path / "reader-static"
    cc = subprocess.run(["cc", "-static", "-O1", "-o", str(exe), str(src)], capture_output=True, text=True)
    if cc.returncode:
        pytest.skip(f"no static C library to link a static program with: {cc.stderr.strip()[-200:]}")
    launcher = str(Path(sys.executable).with_name("accio-run"))
    size = str((data / "big.bin").stat().st_size)
    note = "is statically linked: the shim cannot be preloaded into it"
    for opts in (["--verbose"], ["--stats-json", str(tmp_path / "s.json")]):
        p = subprocess.run([launcher, *opts, "--", str(exe), str(data / "big.bin")], capture_output=True, text=True)
        assert p.returncode == 0 and p.stdout == size + "\n" and p.stderr.count(note) == 1, p.stderr
        assert p.stderr.startswith("accio run: note: " + str(exe))
    p = subprocess.run([launcher, "--", str(exe), str(data / "big.bin")], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout == size + "\n" and p.stderr == "", p.stderr  # not a terminal: silent
    loud = dict(os.environ)
    loud.pop("ACCIO_QUIET", None)  # the tests' environment sets it
    out = subprocess.run(["script", "-qec", f"{launcher} -- {exe} {data / 'big.bin'}", "/dev/null"],
                         capture_output=True, text=True, env=loud).stdout
    assert out.count(note) == 1, out
    out = subprocess.run(["script", "-qec", f"{launcher} -- {exe} {data / 'big.bin'}", "/dev/null"],
                         capture_output=True, text=True, env=dict(os.environ, ACCIO_QUIET="1")).stdout
    assert note not in out and size in out, out  # the user asked for quiet
    p = subprocess.run([launcher, "--verbose", "--", "true"], capture_output=True, text=True)
    assert note not in p.stderr  # dynamic: nothing said


def test_a_32_bit_program_runs_silently(data, tmp_path):
    """A 64-bit program under accio run may start a 32-bit one (a build script, an old tool); its loader
    printed ld.so's "wrong ELF class" for the 64-bit shim into that program's stderr. On a machine with
    a 32-bit loader the launcher names the shim through $PLATFORM (lib/accio-platform/), where the 32-bit
    names hold an empty 32-bit library: the program runs as without accio, in silence, and the 64-bit
    programs beside it are still served, by one shim even where the user preloaded it by hand too."""
    if not os.path.exists("/lib/ld-linux.so.2"):
        import platform
        if os.environ.get("CI", "") not in ("", "false") and platform.machine() == "x86_64":
            pytest.fail("no 32-bit loader: make deps installs libc6-i386 on x86-64 Debian")
        pytest.skip("no 32-bit loader (/lib/ld-linux.so.2) to run a 32-bit program with")
    exe = tmp_path / "word32"
    cc = subprocess.run(["cc", "-m32", "-nostdlib", "-fpie", "-pie", "-Wl,--dynamic-linker=/lib/ld-linux.so.2",
                         "-o", str(exe), str(Path(__file__).with_name("word32.c"))], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    ran = "32-bit program ran\n"
    from accio.run import shim_path
    by_hand = plain([str(exe)], env=dict(os.environ, LD_PRELOAD=shim_path()))
    assert b"wrong ELF class" in by_hand.stderr  # the premise: the 64-bit shim named directly
    size = (data / "big.bin").stat().st_size
    script = (f'{exe}; dd if={data / "big.bin"} of=/dev/null bs=1M status=none; echo "$LD_PRELOAD"')
    p, report = accio_run(["sh", "-c", script], tmp_path, env=dict(os.environ, LD_PRELOAD=shim_path()))
    out = p.stdout.decode()
    assert p.stderr == b"" and out.startswith(ran), p
    entry = out.splitlines()[1]
    assert entry == str(Path(shim_path()).parent / "accio-platform" / "$PLATFORM" / "libaccio_preload.so"), entry
    big = [f for f in report["files"] if f["path"].endswith("big.bin")]
    assert engine_calls(report, "read") >= 1 and big and big[0]["read"]["bytes"] == size, report
    launcher = str(Path(sys.executable).with_name("accio-run"))
    p = subprocess.run([launcher, "--", str(exe)], capture_output=True, text=True)
    assert (p.returncode, p.stdout, p.stderr) == (0, ran, ""), p  # not a terminal: no note either
    p = subprocess.run([launcher, "--", "sh", "-c", f"{launcher} -- {exe}"], capture_output=True, text=True)
    assert (p.returncode, p.stdout, p.stderr) == (0, ran, ""), p  # an accio run inside another (make's recipes)
    p = subprocess.run([launcher, "--verbose", "--", str(exe)], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout == ran, p
    assert p.stderr == f"accio run: note: {exe} is a 32-bit program: the shim serves 64-bit programs, so it runs " \
                       "as it would without accio (its own child processes that are 64-bit are served)\n", p.stderr


def test_the_shims_own_variables_are_checked_before_the_program_runs(tmp_path):
    """ACCIO_PRELOAD_* as the docs write them work under --stats (ACCIO_PRELOAD_THRESHOLD=64k made the
    report a traceback and the status 125 after the program had run); bad ones are refused with 125
    and one line before the program starts (the shim took them for its defaults in silence, and a
    bad ACCIO_PRELOAD_ENGINE passed every call to libc)."""
    ran = tmp_path / "ran"
    p = subprocess.run(ACCIO + ["run", "--stats", "--", "sh", "-c", "exit 3"], capture_output=True, text=True,
                       env=dict(os.environ, ACCIO_PRELOAD_THRESHOLD="64k"))
    assert p.returncode == 3 and "threshold 64 KiB" in p.stderr and "Traceback" not in p.stderr, p.stderr
    for name, value, words in (("ACCIO_PRELOAD_THRESHOLD", "abc", "is not a size"),
                               ("ACCIO_PRELOAD_PREFETCH", "lots", "nor 'profile'"),
                               ("ACCIO_PRELOAD_STATS_FILES", "0", "not a count from 1 to 65536"),
                               ("ACCIO_PRELOAD_ENGINE", str(tmp_path / "none.so"), "is not accio's engine")):
        for opts in ([], ["--stats"]):
            p = subprocess.run(ACCIO + ["run", *opts, "--", "touch", str(ran)], capture_output=True, text=True,
                               env=dict(os.environ, **{name: value}))
            assert p.returncode == 125 and p.stderr.startswith(f"accio run: {name}='{value}' ") and words in p.stderr
            assert "correct the variable or unset it" in p.stderr and not ran.exists(), p.stderr


def test_one_size_grammar_for_the_engine_and_the_launcher():
    """accio run's --threshold (the launcher's and the shim's parser) and the engine's sizes (bench -s,
    ACCIO_* settings, accio.parse_size) read the same texts the same way: they disagreed on 4096B, on
    leading blanks and on "1 0m" (10 MiB to the engine)."""
    from accio import _ext
    launcher = str(Path(sys.executable).with_name("accio-run"))
    for text in ("4096", "4096B", "64k", "64 KiB", " 1m", "1m ", "2GB", "1Ki", "0B", "1 0m", "1,5m", "1.5m", "-1",
                 "k", "", "12q", "1mb b", "99999999999999999999"):
        try:
            engine = _ext.parse_size(text)
        except OSError:
            engine = None
        p = subprocess.run([launcher, "--threshold", text, "--", "true"], capture_output=True, text=True)
        assert (p.returncode == 0) is (engine is not None), (text, engine, p.stderr)


def test_python_cli_without_its_launcher(tmp_path):
    """A package whose launcher is gone: accio run says so and exits 125 (accio's own error)."""
    code = ("import sys, accio.run as r\nr.launcher_path = lambda: sys.argv[1]\n"
            "sys.exit(r.launch(['--', 'true']))")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "gone")], capture_output=True, text=True)
    assert p.returncode == 125 and "cannot be run" in p.stderr and "reinstall accio" in p.stderr, p.stderr


def test_a_lower_crossing_point_is_not_shut_out_by_the_first_file(tmp_path, monkeypatch):
    """The gate is the lowest crossing point of the files seen, and a descriptor not seen yet reaches
    the slow path once: a first file whose profile never accelerates (posix at every size) must not
    keep a second file on another filesystem (no profile: the built-in model, 1 MiB) from the engine."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on another filesystem than the test directory")
    from accio import _ext
    pdir = tmp_path / "profiles"
    monkeypatch.setenv("ACCIO_PROFILE_DIR", str(pdir))
    a = tmp_path / "a.bin"
    a.write_bytes(os.urandom(4 << 20))
    b = shm / f"accio-gate-{os.getpid()}.bin"
    b.write_bytes(os.urandom(4 << 20))
    try:
        k = _ext.profile_key(str(a))
        posix = {"hot": [{"max_size": None, "plans": [0]}], "cold": [{"max_size": None, "plans": [0]}]}
        pdir.mkdir()
        Path(k["file"]).write_text(json.dumps({
            "schema": "accio.profile/1", "key": {"filesystem": k["filesystem"], "device": k["device"]},
            "plans": [{"mechanism": "posix"}],
            "decisions": {op: {"1": posix, "N": posix} for op in ("read", "write")}}))
        reader = ("import os, sys\nfor p in sys.argv[1:]:\n    fd = os.open(p, os.O_RDONLY)\n"
                  "    while os.read(fd, 2 << 20): pass\n    os.close(fd)\n")
        _, rep = accio_run([sys.executable, "-c", reader, str(a), str(b)], tmp_path, threshold=None,
                           env=dict(os.environ))
        got = {Path(f["path"]).name: f["read"] for f in rep["files"]}
        fa, fb = got["a.bin"], got[b.name]
        assert fa["accelerated_calls"] == 0, fa  # its profile says posix everywhere: libc
        assert fb["accelerated_calls"] + fb["declined_calls"] >= 2, fb  # asked of the planner, not shut out
    finally:
        b.unlink()


NONE = 2**64 - 1  # no request size: posix at every size


def _cpus(n: int) -> list[str]:
    """taskset's arguments for the first n CPUs this process may run on."""
    return ["taskset", "-c", ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:n])]


def _floor_seen(launcher: Path, cpus=None, **env) -> tuple[int, int]:
    """ACCIO_PRELOAD_FLOOR as the launcher gives it to the program (run on the first `cpus` CPUs)."""
    e = {k: v for k, v in os.environ.items() if k not in ("ACCIO_PRELOAD_FLOOR", "ACCIO_PROFILE")}
    pre = _cpus(cpus) if cpus else []
    p = subprocess.run(pre + [str(launcher), "--", "env"], env={**e, **env}, capture_output=True, text=True)
    assert p.returncode == 0 and not p.stderr, p.stderr
    got = [x.split("=", 1)[1] for x in p.stdout.splitlines() if x.startswith("ACCIO_PRELOAD_FLOOR=")]
    r, w = got[0].split(",")
    return int(r), int(w)


def _saved_profile(pdir: Path, of: Path, read_cells, path=None) -> Path:
    """A profile for of's filesystem saved as `accio tune` saves it (with "engine_from"), whose reads
    with one request in flight run read_cells ([(max_size, plan index)], 0 posix, 1 parallel)."""
    from accio import _ext
    from accio.tune import profile
    k = _ext.profile_key(str(of))
    posix = {"hot": [{"max_size": None, "plans": [0]}]}
    reads = {"hot": [{"max_size": m, "plans": [i]} for m, i in read_cells]}
    doc = {"schema": "accio.profile/1", "key": {"filesystem": k["filesystem"], "device": k["device"]},
           "plans": [{"mechanism": "posix"}, {"mechanism": "parallel"}],
           "decisions": {"read": {"1": reads, "N": posix}, "write": {"1": posix, "N": posix}}}
    path = path or pdir / os.path.basename(k["file"])
    profile.save(doc, str(path))
    return path


def test_the_launcher_gives_the_shim_the_floor_of_the_model_and_every_profile(tmp_path):
    """ACCIO_PRELOAD_FLOOR: the built-in model's read floor for the launcher's CPUs (model_floor.h),
    lowered by every profile's engine_from; a profile without the field (older accio) gives 0."""
    from accio import _ext
    launcher = Path(sys.executable).with_name("accio-run")
    model = json.loads(_ext.profile_describe(None))["engine_from"]
    none = str(tmp_path / "none")
    here = len(os.sched_getaffinity(0))
    assert _floor_seen(launcher, ACCIO_PROFILE_DIR=none) == (model["read"], NONE)  # this process's CPUs
    assert _floor_seen(launcher, cpus=1, ACCIO_PROFILE_DIR=none) == (8 << 20, NONE)  # one CPU: cold streams only
    if here >= 2:
        assert _floor_seen(launcher, cpus=2, ACCIO_PROFILE_DIR=none) == (3 << 19, NONE)  # 1.5 MiB
    pdir = tmp_path / "profiles"
    pdir.mkdir()
    p = _saved_profile(pdir, tmp_path, [(2**20 - 1, 0), (None, 1)])  # parallel from 1 MiB
    assert json.loads(p.read_text())["engine_from"] == {"read": 2**20, "write": None}
    assert _floor_seen(launcher, cpus=1, ACCIO_PROFILE_DIR=str(pdir)) == (2**20, NONE)
    assert _floor_seen(launcher, cpus=1, ACCIO_PROFILE_DIR=str(pdir), ACCIO_PROFILE="off") == (8 << 20, NONE)
    assert _floor_seen(launcher, cpus=1, ACCIO_PROFILE_DIR=none, ACCIO_PROFILE=str(p)) == (2**20, NONE)
    # Only the top level's "engine_from" counts, and only its own "read" and "write": not a nested or
    # quoted one ahead of it (the launcher took the first it found: review N-4 and N-6).
    doc = json.loads(p.read_text())
    decoy = {"note": '"engine_from": {"read": 4096, "write": 4096}',
             "x": {"engine_from": {"read": 8192, "write": 8192}, "read": 4096}}
    p.write_text(json.dumps({**decoy, **doc}))
    assert _floor_seen(launcher, cpus=1, ACCIO_PROFILE_DIR=str(pdir)) == (2**20, NONE)
    p.write_text(json.dumps(doc))
    _saved_profile(pdir, tmp_path, [(None, 0)], path=pdir / "posix-everywhere.json")
    assert _floor_seen(launcher, cpus=1, ACCIO_PROFILE_DIR=str(pdir)) == (2**20, NONE)  # the lowest of all
    doc = json.loads(p.read_text())
    del doc["engine_from"]
    p.write_text(json.dumps(doc))  # as an older accio wrote it: the floor is unknown
    assert _floor_seen(launcher, cpus=1, ACCIO_PROFILE_DIR=str(pdir)) == (0, 0)
    # A missing ACCIO_PROFILE is no longer run with a floor of 0: the launcher refuses it (the engine
    # would refuse every open), test_a_bad_setting_is_refused_before_the_program_runs.
    p = subprocess.run([str(launcher), "--", "env"], capture_output=True, text=True,
                       env={**os.environ, "ACCIO_PROFILE": str(tmp_path / "missing.json")})
    assert p.returncode == 125 and "ACCIO_PROFILE=" not in p.stdout, p.stderr


def test_below_the_floor_the_engine_is_never_loaded(tmp_path):
    """On one CPU the built-in model runs anything but posix only for cold reads of 8 MiB that start
    a stream: `dd bs=2M` passes every call to libc without loading the engine (which cost about
    2.5 ms per process, 3% of a hot 2 GiB `dd bs=1M` on 2 CPUs). A profile that accelerates from 1
    MiB lowers the floor, and its 2 MiB reads reach the planner again; a threshold given by the user
    rules over the floor."""
    f = tmp_path / "f.bin"
    f.write_bytes(os.urandom(6 << 20))
    taskset = _cpus(1)
    cmd = taskset + ["dd", f"if={f}", "of=/dev/null", "bs=2M", "status=none"]
    plain(cmd)  # hot
    env = dict(os.environ, ACCIO_PROFILE_DIR=str(tmp_path / "none"))
    for k in ("ACCIO_PROFILE", "ACCIO_MECHANISM"):
        env.pop(k, None)

    def run(env, threshold=None, prog=None, name="f.bin"):
        stats = tmp_path / f"stats-{os.urandom(4).hex()}.json"
        args = taskset + ACCIO + ["run", "--stats-json", str(stats)] + (["--threshold", threshold] if threshold else [])
        p = subprocess.run(args + ["--"] + (prog or cmd[len(taskset):]), env=env, capture_output=True)
        assert p.returncode == 0, p.stderr.decode()
        rep = json.loads(stats.read_text())
        fr = next(x for x in rep["files"] if x["path"].endswith(name))
        return rep, fr["read"] if fr["read"].get("calls") else fr["write"]

    rep, rd = run(env)
    assert not any(pr["engine_loaded"] for pr in rep["processes"]), rep["processes"]
    assert rd["calls"] >= 3 and rd["accelerated_calls"] == rd["declined_calls"] == 0, rd
    assert rep["floor"] == [8 << 20, None]  # as each process wrote it
    from accio import run as run_mod
    assert "reads below 8 MiB, writes at every size" in run_mod.render(rep)
    assert run(dict(env, ACCIO_MECHANISM="auto"))[0]["floor"] == [8 << 20, None]  # auto is the default
    # O_DIRECT descriptors are not held to the floor: the engine runs direct for them from the
    # threshold up, as before (reads and writes of 1 MiB, both under every floor here).
    for flag, name in (("iflag=direct", "f.bin"), ("oflag=direct", "out.bin")):
        prog = ["dd", f"if={f}", f"of={tmp_path / 'out.bin'}" if name == "out.bin" else "of=/dev/null", "bs=1M", flag,
                "status=none"]
        rep, side = run(env, prog=prog, name=name)
        assert side["accelerated_calls"] >= 6, (flag, side)
        assert any(pr["engine_loaded"] for pr in rep["processes"])
    pdir = tmp_path / "profiles"
    pdir.mkdir()
    _saved_profile(pdir, f, [(2**20 - 1, 0), (None, 1)])
    rep, rd = run(dict(env, ACCIO_PROFILE_DIR=str(pdir)))
    assert any(pr["engine_loaded"] for pr in rep["processes"])
    assert rd["accelerated_calls"] >= 3, rd  # hot 2 MiB reads: the profile's parallel
    rep, rd = run(env, threshold="1m")  # the user's threshold: every call from 1 MiB is the engine's
    assert rd["accelerated_calls"] >= 3, rd
    assert rep["floor"] == [2**20, 2**20]
    rep, rd = run(dict(env, ACCIO_MECHANISM="parallel"))  # so does a mechanism
    assert rd["accelerated_calls"] >= 3 and rep["floor"] == [2**20, 2**20], rd
    # Without the launcher (LD_PRELOAD by hand) nothing sets the floor, and a malformed one is ignored:
    # the first 2 MiB call loads the engine to learn that posix runs it.
    shim = next(Path(sys.modules["accio"].__file__).parent.glob("lib/libaccio_preload.so"))
    sd = tmp_path / "stats-by-hand"
    sd.mkdir()
    for floor in (None, "2m,x", "-1,-1", " 8388608,1", "8388608,99999999999999999999999"):
        e = dict(env, LD_PRELOAD=str(shim), ACCIO_PRELOAD_STATS_DIR=str(sd), ACCIO_QUIET="1")
        if floor:
            e["ACCIO_PRELOAD_FLOOR"] = floor
        for old in sd.iterdir():
            old.unlink()
        p = subprocess.run(cmd, env=e, capture_output=True)
        assert p.returncode == 0 and not p.stderr, p.stderr
        recs = [json.loads(x.read_text()) for x in sd.iterdir()]
        assert any(r["engine_loaded"] for r in recs), floor


def test_programs_get_default_sigpipe(tmp_path):
    """CPython ignores SIGPIPE and SIGXFSZ, and an ignored signal survives exec: `accio run` must hand
    the program the defaults, so `yes | head -1` ends quietly by SIGPIPE under it as it does plain."""
    cmd = " ".join(shlex.quote(a) for a in ACCIO) + " run -- yes | head -1; echo status=${PIPESTATUS[0]}"
    p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=60)
    assert p.stdout.splitlines() == ["y", "status=141"], p.stdout + p.stderr  # 128 + SIGPIPE
    assert "Broken pipe" not in p.stderr, p.stderr
    # cat's own ignored signals (Python would ignore both itself at start-up, so ask a C program)
    p = subprocess.run([*ACCIO, "run", "--", "cat", "/proc/self/status"], capture_output=True, text=True)
    ignored = int(next(x for x in p.stdout.splitlines() if x.startswith("SigIgn:")).split()[1], 16)
    assert not ignored & (1 << (signal.SIGPIPE - 1)) and not ignored & (1 << (signal.SIGXFSZ - 1)), hex(ignored)


def test_engine_load_cost_benchmark_runs(tmp_path):
    """benchmarks/engine_load_cost.py: the four contenders, their samples, and the floor `accio run`
    gives this machine (the figures in docs/preload.md come from it)."""
    out = tmp_path / "cost.json"
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "engine_load_cost.py"
    p = subprocess.run([sys.executable, str(script), "--dir", str(tmp_path), "--rounds", "7", "--json", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert set(doc["ms"]) == {"plain", "shim-128k", "no-floor", "floor"}
    assert all(len(v) >= 7 and min(v) > 0 for v in doc["ms"].values())
    r, w = doc["floor"].split(",")
    assert int(r) > 0 and int(w) > 0
    assert {"no-floor / shim-128k (time)", "floor / shim-128k (time)", "no-floor / floor (time)"} == set(doc["ratios"])
