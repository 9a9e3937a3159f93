"""accio bench end to end at tiny sizes: JSON against its schema, cold reads verified cold, the fpp
and shared layouts' files, mpirun -np 2, --vs-fio, compare, outputs, and the error paths."""
import json
import os
import re
import statistics
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

import accio
from accio import _ext
from accio._system import parse_sizes
from accio.bench.spec import Spec, apply_preset, default_tmpfs, parse_counts, parse_mechanisms, parse_tests
from accio.info import filesystem

ACCIO = [sys.executable, "-m", "accio.cli"]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def bench(*args, check=True, cwd=None, env=None):
    r = subprocess.run([*ACCIO, "bench", *args], capture_output=True, text=True, cwd=cwd,
                       env={**os.environ, **(env or {})})
    if check and r.returncode != 0:
        raise AssertionError(f"accio bench {' '.join(args)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def validate(doc):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(resources.files("accio.bench").joinpath("schema.json").read_text())
    jsonschema.validate(doc, schema)


def on_tmpfs(path) -> bool:
    return filesystem(str(path))["fstype"] in ("tmpfs", "ramfs")


# ---- parameters ----

def test_sizes_lists_and_doubling_ranges():
    assert parse_sizes("1m,16m") == [1 << 20, 16 << 20]
    assert parse_sizes("4k:64k") == [4096 << i for i in range(5)]
    assert parse_sizes("1g") == [1 << 30]
    assert parse_sizes("16MiB,1m:2m") == [1 << 20, 2 << 20, 16 << 20]
    for bad in ("", "0", "1x", "64k:4k", "-1"):
        with pytest.raises(ValueError):
            parse_sizes(bad)


def test_counts_tests_mechanisms():
    assert parse_counts("1,2,4", 8) == [1, 2, 4]
    assert parse_counts("1:8", 8) == [1, 2, 4, 8]
    assert parse_counts("1..N", 3) == [1, 2, 3]
    assert parse_counts("max", 6) == [6]
    with pytest.raises(ValueError):
        parse_counts("0", 4)
    assert parse_tests("all")[0] == "write" and len(parse_tests("all")) == 8
    assert parse_tests("reread,write") == ["write", "reread"]  # always IOzone's order
    with pytest.raises(ValueError, match="unknown test"):
        parse_tests("write,bogus")
    ms = parse_mechanisms("posix,uring+direct")
    assert [m.label for m in ms] == ["posix", "uring+direct"] and ms[1].o_direct() and not ms[0].o_direct()
    # --set direct=on reaches a mechanism that reads it (the fio job and the cache method follow it)
    assert ms[1].o_direct({"direct": "off"}) and not ms[0].o_direct({"direct": "on"})
    assert parse_mechanisms("uring")[0].o_direct({"direct": "on"}) and parse_mechanisms("direct")[0].o_direct()
    # Bench audit, session 25: posix+direct and parallel+direct measured buffered I/O labelled O_DIRECT
    # (posix and parallel have no direct setting); refused, naming what does O_DIRECT.
    for item in ("posix+direct", "parallel+direct"):
        with pytest.raises(ValueError, match=f"'{re.escape(item)}': .* does no O_DIRECT I/O.*use direct or uring\\+direct"):
            parse_mechanisms(item)
    with pytest.raises(ValueError, match="'direct\\+direct': direct is always O_DIRECT"):
        parse_mechanisms("direct+direct")
    # every mechanism, and auto beside them (the planner's choice belongs in every table)
    assert [m.name for m in parse_mechanisms("all")] == ["posix", "parallel", "direct", "uring", "auto"]
    for bad in ("bogus", "posix+fast", ""):
        with pytest.raises(ValueError):
            parse_mechanisms(bad)


def test_presets_fill_what_was_not_given():
    base = Spec(tests=["read"], mechanisms=parse_mechanisms("posix"), file_sizes=[1 << 20], records=[1 << 20],
                threads=[1], processes=[1], layouts=["fpp"], dirs=["/tmp"])
    q = apply_preset(base, "quick", 1, explicit=set())
    assert q.tests == ["write", "write+sync", "cold-read", "reread"] and len(q.mechanisms) == 5
    assert apply_preset(base, "quick", 1, explicit={"tests"}).tests == ["read"]
    v = apply_preset(base, "veaccio", 1, explicit=set())
    assert v.file_sizes == [1 << 30] and v.records == [1 << 20, 16 << 20] and v.threads[0] == 1
    x = apply_preset(base, "xeonphi", 1, explicit=set())
    assert x.file_sizes == [32 << 20] and x.records == [4 << 20] and "cold-read" in x.tests
    assert x.dirs == list(dict.fromkeys([default_tmpfs(), tempfile.gettempdir()]))  # a tmpfs and a disk
    i = apply_preset(base, "ior", 4, explicit=set())
    assert i.processes == [1, 4] and i.layouts == ["fpp", "shared"] and len(i.file_sizes) > 1
    with pytest.raises(ValueError):
        apply_preset(base, "nope", 1, explicit=set())


# ---- end to end ----

def test_small_bench_all_tests_all_outputs(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    js, csv, html, plots = out / "r.json", out / "r.csv", out / "r.html", out / "plots"
    r = bench("-T", "all", "-m", "all,uring+direct", "-s", "2m", "-r", "256k,1m", "-t", "1,2", "-i", "2",
              "-d", str(tmp_path), "--json", str(js), "--csv", str(csv), "--plot", str(plots),
              "--report", str(html))
    doc = json.loads(js.read_text())
    validate(doc)
    assert doc["environment"]["paths"][str(tmp_path)]["fstype"]
    res = doc["results"]
    # 8 tests x 6 mechanisms (with auto) x 2 records x 2 thread counts
    assert len(res) == 8 * 6 * 2 * 2
    for x in res:
        assert len(x["samples"]) == 2 and x["min"] <= x["mib_s"] <= x["max"]
        assert all(s["bytes"] == x["file_size"] * x["threads"] for s in x["samples"])
    cold = [x for x in res if x["test"] == "cold-read"]
    if on_tmpfs(tmp_path):  # tmpfs cannot drop its pages: the run must say the read was not cold
        assert all(not x["cache"]["cold"] for x in cold) and "not cold" in r.stdout
    else:
        assert all(x["cache"]["cold"] and x["cache"]["residency"] <= 0.01 for x in cold), cold
        assert all(x["cache"]["method"] == ("fadvise+o_direct" if x["mechanism"] in ("direct", "uring+direct")
                                            else "fadvise") for x in cold)
    assert {x["cache"]["method"] for x in res if x["test"] in ("read", "reread")} == {"none"}
    assert all(x["cache"] is None for x in res if x["test"] in ("write", "rewrite", "write+sync", "random-write"))
    # table: mechanisms as columns, rows by threads, record and test
    head = r.stdout.splitlines()[0].split()
    assert head[:3] == ["threads", "record", "test"] and head[3:] == ["posix", "parallel", "direct", "uring",
                                                                      "auto", "uring+direct"]
    assert len(csv.read_text().splitlines()) == len(res) + 1
    import csv as csv_mod
    rows = list(csv_mod.DictReader(csv.open()))
    assert {x["cold"] for x in rows if x["test"] == "cold-read"} <= {"true", "false"}  # as JSON, not Python's True
    assert {x["cold"] for x in rows if x["test"] != "cold-read" and x["cache_method"] == ""} <= {""}
    page = html.read_text()
    assert page.startswith("<!doctype html>") and "<svg" in page and "Environment" in page
    names = sorted(p.name for p in plots.iterdir())
    assert "bw-vs-record-cold-read.png" in names and "speedup-write.png" in names
    assert not list(tmp_path.glob("accio-bench.*"))  # files under test removed


def test_layouts_create_the_expected_files(tmp_path):
    js = tmp_path / "r.json"
    d = tmp_path / "d"
    d.mkdir()
    r = bench("-T", "write,read", "-m", "posix", "-s", "1m", "-r", "256k", "-t", "2", "-i", "1", "--layout",
              "fpp,shared", "-d", str(d), "--keep", "--json", str(js))
    files = {p.name: p.stat().st_size for p in d.iterdir()}
    assert f"kept 3 file(s): {', '.join(sorted(str(p) for p in d.iterdir()))}\n" in r.stderr, r.stderr  # said where
    fpp = sorted(n for n in files if ".fpp." in n)
    shared = [n for n in files if n.endswith(".shared")]
    assert len(fpp) == 2 and fpp[0].endswith(".fpp.r0.t0") and fpp[1].endswith(".fpp.r0.t1")
    assert all(files[n] == 1 << 20 for n in fpp)
    assert len(shared) == 1 and files[shared[0]] == 2 << 20  # two threads, one block each
    layouts = {x["layout"] for x in json.loads(js.read_text())["results"]}
    assert layouts == {"fpp", "shared"}


def test_explicit_files_are_used_and_kept(tmp_path):
    a, b = tmp_path / "a.dat", tmp_path / "b.dat"
    a.write_bytes(b"u" * (3 << 20))  # a write test overwrites a user's file (IOzone -F; documented)
    bench("-T", "write,reread", "-m", "posix", "-s", "1m", "-r", "1m", "-t", "2", "-i", "1",
          "--files", f"{a},{b}")
    assert a.stat().st_size == b.stat().st_size == 1 << 20
    r = bench("-T", "read", "-m", "posix", "-s", "1m", "-r", "1m", "-t", "3", "-i", "1", "--files", f"{a},{b}",
              check=False)
    assert r.returncode == 2 and "3 files needed (one per thread and process), 2 given" in r.stderr


def test_a_read_only_run_reads_the_users_files_as_they_are(tmp_path):
    # `--files data.bin -T read -s 8m` rewrote a 100 MiB file with 8 MiB of bench data (the untimed
    # write before a read): a run that only reads now reads the files as they are, as fio does.
    a, b = tmp_path / "a.dat", tmp_path / "b.dat"
    content = {f: os.urandom((3 << 20) + 5) for f in (a, b)}
    for f, c in content.items():
        f.write_bytes(c)
    js = tmp_path / "r.json"
    r = bench("-T", "read,cold-read", "-m", "posix,parallel", "-s", "1m", "-r", "256k", "-t", "2", "-i", "1",
              "--files", f"{a},{b}", "--json", str(js))
    assert all(f.read_bytes() == c for f, c in content.items())  # not a byte written, nor truncated
    assert "note: reads of the --files as they are" in r.stdout and "not verified" in r.stdout
    doc = json.loads(js.read_text())
    validate(doc)
    assert doc["parameters"]["files_read_as_found"] is True
    assert len(doc["results"]) == 4
    for x in doc["results"]:
        assert x["as_found"] is True and x["verified"] is False
        assert all(s["bytes"] == 2 << 20 and s["as_found"] and not s["verified"] for s in x["samples"])
    # a write test first: the files are this run's again, written and verified (and overwritten)
    doc = json.loads(bench("-T", "write,read", "-m", "posix", "-s", "1m", "-r", "256k", "-i", "1",
                           "--files", str(a), "--json", "-").stdout)
    assert doc["parameters"]["files_read_as_found"] is False and a.stat().st_size == 1 << 20
    read = next(x for x in doc["results"] if x["test"] == "read")
    assert read["verified"] is True and read["as_found"] is False
    # a read first and a write test after it: the run writes the files, and says so (it said "read as
    # they are: not written" and then random-write overwrote the file)
    b.write_bytes(content[b])
    r = bench("-T", "read,random-write", "-m", "posix", "-s", "1m", "-r", "256k", "-i", "1", "--files", str(b),
              "--json", str(js))
    doc = json.loads(js.read_text())
    assert "not written" not in r.stderr and doc["parameters"]["files_read_as_found"] is False
    read = next(x for x in doc["results"] if x["test"] == "read")
    assert read["verified"] is True and read["as_found"] is False  # it wrote them first, then read what it wrote


def test_one_file_is_never_two_outputs_nor_an_output_and_the_input(tmp_path):
    """`bench report r.json -o r.json` replaced the run's only copy with HTML; `--json X --csv X` kept
    only the CSV. Both are refused before anything is written or run (exit 2)."""
    js = tmp_path / "r.json"
    bench("-T", "write", "-m", "posix", "-s", "1m", "-r", "1m", "-i", "1", "-d", str(tmp_path), "--json", str(js))
    before = js.read_bytes()
    for out in (str(js), f"{tmp_path}/./r.json"):
        r = subprocess.run([*ACCIO, "bench", "report", str(js), "-o", out], capture_output=True, text=True)
        assert r.returncode == 2 and "name the same file" in r.stderr and js.read_bytes() == before, r.stderr
    x = tmp_path / "x.out"
    for a, b in (("--json", "--csv"), ("--json", "--report")):
        r = bench("-T", "write", "-m", "posix", "-s", "1m", "-r", "1m", "-i", "1", "-d", str(tmp_path), a, str(x),
                  b, str(x), check=False)
        assert r.returncode == 2 and f"{a} and {b} name the same file" in r.stderr and not x.exists(), r.stderr
    r = bench("-T", "write", "-m", "posix", "-s", "1m", "-r", "1m", "-i", "1", "-d", str(tmp_path), "--plot",
              str(js), check=False)  # a file where --plot wants a directory: refused before the run
    assert r.returncode == 1 and "--plot" in r.stderr and "timed phases" not in r.stderr, r.stderr
    pytest.importorskip("matplotlib")
    deep = tmp_path / "new" / "plots"  # made at the end with its parents, as it always was
    r = bench("-T", "write", "-m", "posix", "-s", "1m", "-r", "1m", "-i", "1", "-d", str(tmp_path), "--plot", str(deep))
    assert deep.is_dir()
    # one record size, one thread count, one file size: nothing to draw, and it says so
    assert f"--plot {deep}: no plot to draw; a plot needs two record sizes" in r.stderr, r.stderr


@pytest.mark.parametrize("size, extra, message", [
    (512 << 10, [], "{f}: 512 KiB, but -T read,reread reads 1 MiB of it; a read-only run reads the files as "
                    "they are and never writes them: give -s 512k or less, or put a write test first "
                    "(-T write,read,reread)"),
    ((3 << 20) // 2, ["--shared", "-t", "2"], "{f}: 1536 KiB, but -T read,reread reads 2 MiB of it (2 writers x "
                                              "-s); a read-only run reads the files as they are and never writes "
                                              "them: give -s 768k"),
    (None, [], "{f}: no such file; -T read,reread reads the files as they are and does not create them: name an "
               "existing file, or put a write test first (-T write,read,reread), which writes it"),
])
def test_a_read_only_run_refuses_files_it_cannot_read_before_it_starts(tmp_path, size, extra, message):
    f = tmp_path / "short.dat"
    content = os.urandom(size) if size is not None else None
    if content is not None:
        f.write_bytes(content)
    r = bench("-T", "read,reread", "-m", "posix", "-s", "1m", "-r", "256k", "-i", "1", "--files", str(f), *extra,
              check=False)
    status = 1 if size is None else 2  # a missing path is 1, as for -d; a file too short for the run, usage
    assert r.returncode == status and f"accio bench: --files {message.format(f=f)}" in r.stderr, r.stderr
    assert "timed phases" not in r.stderr and "Traceback" not in r.stderr  # refused before the run
    assert (f.read_bytes() if f.exists() else None) == content  # untouched, and never created


def _mpirun():
    """mpirun and the environment it needs here, or the test is skipped (failed in CI)."""
    mpirun = shutil.which("mpirun")
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        mpirun = None
    if not mpirun:
        if IN_CI:
            pytest.fail("CI must install OpenMPI and mpi4py (make test does)")
        pytest.skip("mpirun or mpi4py missing")
    return mpirun, {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                    "OMPI_MCA_rmaps_base_oversubscribe": "1", "OMPI_MCA_btl": "self,vader,tcp"}


def test_mpirun_read_only_run_of_a_shared_file_as_it_is(tmp_path):
    mpirun, env = _mpirun()
    f = tmp_path / "shared.dat"
    content = os.urandom(3 << 20)
    f.write_bytes(content)
    argv = [mpirun, "-np", "2", *ACCIO, "bench", "-T", "read", "-m", "posix", "-r", "256k", "-i", "1", "--shared",
            "--files", str(f), "-q"]
    r = subprocess.run([*argv, "-s", "2m"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode != 0 and r.stderr.count("3 MiB, but -T read reads 4 MiB of it (2 writers x -s)") == 1
    assert f.read_bytes() == content  # refused on every rank, before any of them touched the file
    r = subprocess.run([*argv, "-s", "1m", "-p", "1,2"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f.read_bytes() == content and r.stdout.count("note: reads of the --files as they are") == 1


# A wrapper around the CLI that makes one thing fail: the --json file (every write of it), or, on
# rank 1 only, the configuration's jobs (an error no other rank sees).
FAILING = """
import sys
from accio.bench import output, runner
what, target = sys.argv[1], sys.argv[2]
if what == "json":
    real = output.write_json
    def write_json(path, doc):
        if path == target:
            raise FileNotFoundError(2, "No such file or directory", path + ".partial")
        return real(path, doc)
    output.write_json = write_json
elif what == "check":  # rank 1 alone refuses the run before it starts (its own host's memory, say)
    import accio.bench as bench
    check = bench._check_resources
    def refusing(spec, ranks_here):
        from mpi4py import MPI
        if MPI.COMM_WORLD.Get_rank() == 1:
            raise ValueError("injected refusal on rank 1")
        return check(spec, ranks_here)
    bench._check_resources = refusing
else:
    jobs = runner.Runner.jobs
    def failing_jobs(self, c):
        if self.comm.rank == 1:
            raise RuntimeError("injected on rank 1")
        return jobs(self, c)
    runner.Runner.jobs = failing_jobs
from accio.cli import main
sys.exit(main(["bench", *sys.argv[3:]]))
"""


def test_a_json_file_that_cannot_be_written_loses_no_result(tmp_path):
    """Bench audit, session 25: a --json file that could not be written after a cell (its folder
    removed, a full filesystem) ended the run with exit 1, no table, every cell lost. The run goes
    on, warns once, prints its table, keeps the JSON in a file it can write, and exits 1."""
    target = tmp_path / "out.json"
    r = subprocess.run([sys.executable, "-c", FAILING, "json", str(target), "-T", "write,reread", "-m", "posix,parallel",
                        "-s", "1m", "-r", "256k", "-i", "1", "-d", str(tmp_path), "--json", str(target)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.count(f"warning: cannot write --json {target}: {target}.partial: no such file or directory") == 1
    assert f"wrote {target}" not in r.stderr, r.stderr
    assert "reread" in r.stdout and "parallel" in r.stdout  # the table
    saved = r.stderr.split("the run's JSON is in ")[1].split()[0]
    try:
        doc = json.loads(open(saved).read())
        validate(doc)
        assert doc["complete"] and len(doc["results"]) == 4
    finally:
        os.unlink(saved)
    assert not target.exists() and not [p for p in os.listdir(tmp_path) if p.startswith("accio-bench.")]


def test_mpirun_an_error_on_one_rank_ends_every_rank(tmp_path):
    """An error on one rank outside the collective checks left the others waiting at their next barrier
    (and rank 0 in MPI_Finalize) until killed; a --json write failure did the same. Now the rank says
    why and MPI_Abort ends them all; the JSON failure no longer stops the run."""
    mpirun, env = _mpirun()
    args = ["-T", "write,reread", "-m", "posix", "-s", "1m", "-r", "256k", "-p", "2", "-i", "1", "-d", str(tmp_path), "-q"]
    r = subprocess.run([mpirun, "-np", "2", sys.executable, "-c", FAILING, "jobs", "-", *args],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0 and "accio bench: rank 1: injected on rank 1; ending every rank" in r.stderr, r.stderr
    # a refusal before the run that one rank alone makes (review, session 25: the others started and
    # waited at their first barrier): every rank ends, rank 0 says which rank refused and why
    r = subprocess.run([mpirun, "-np", "2", sys.executable, "-c", FAILING, "check", "-", *args],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and r.stderr.count("accio bench: rank 1: injected refusal on rank 1") == 1, r.stderr
    target = tmp_path / "m.json"
    r = subprocess.run([mpirun, "-np", "2", sys.executable, "-c", FAILING, "json", str(target), *args, "--json", str(target)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 1 and "the run's JSON is in " in r.stderr, r.stdout + r.stderr
    os.unlink(r.stderr.split("the run's JSON is in ")[1].split()[0])


def test_mpirun_interrupted_removes_every_ranks_files(tmp_path):
    """Bench audit, session 25: Ctrl-C to mpirun (which passes SIGTERM to the ranks) killed them without
    their cleanup: each rank's 128 MiB file stayed, and nothing was said. Each rank now takes SIGTERM
    as Ctrl-C: it removes its files, and rank 0 keeps what was measured and says so."""
    import signal
    mpirun, env = _mpirun()
    d = tmp_path / "d"
    d.mkdir()
    js = tmp_path / "x.json"
    p = subprocess.Popen([mpirun, "-np", "2", *ACCIO, "bench", "-d", str(d), "-i", "7", "-T", "write,read", "-m", "posix",
                          "-s", "16m", "-r", "1m", "-p", "2", "--runtime", "2s", "--json", str(js)], env=env,
                         stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(n.startswith("accio-bench.") for n in os.listdir(d)):
        time.sleep(0.05)  # the ranks have started writing
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    _out, err = p.communicate(timeout=120)
    # (rank 0's closing line may not get through: mpirun ends the job, and its relay of the ranks'
    # output, when the first rank exits with a status that is not 0)
    assert p.returncode != 0 and "Traceback" not in err, err
    assert not os.listdir(d), (os.listdir(d), err)
    assert json.loads(js.read_text())["complete"] is False


def _rank_pid(marker: str, rank: int) -> int | None:
    """The pid of the MPI rank whose command line holds marker (a path of the test's own)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if marker.encode() in cmd and b"mpirun" not in cmd.split(b"\0")[0] and f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(pid)
    return None


def test_mpirun_one_rank_signalled_alone_ends_the_job(tmp_path):
    """Review, session 25: once every rank took SIGTERM as Ctrl-C, a rank signalled alone cleaned up
    and waited in MPI_Finalize while the other waited for it at its next barrier, for ever. The
    rank waits a while for the others to leave, then ends the job (MPI_Abort), and no file stays.
    OpenMPI sends the others SIGTERM and, a second later, SIGKILL: in a fresh Debian check a loaded
    rank 0 was killed before it removed its file. Here the SIGKILL comes at once (sigkill_timeout 0),
    and the rank that ends the job removes every file of the run it sees."""
    import signal
    mpirun, env = _mpirun()
    env = {**env, "OMPI_MCA_odls_base_sigkill_timeout": "0"}
    d = tmp_path / "d"
    d.mkdir()
    p = subprocess.Popen([mpirun, "-np", "2", *ACCIO, "bench", "-d", str(d), "-i", "7", "-T", "write,read", "-m", "posix",
                          "-s", "16m", "-r", "1m", "-p", "2", "--runtime", "2s", "-q"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len([n for n in os.listdir(d) if n.startswith("accio-bench.")]) < 2:
        time.sleep(0.05)
    pid = _rank_pid(str(d), 1)
    assert pid, "rank 1 not found"
    os.kill(pid, signal.SIGTERM)
    _out, err = p.communicate(timeout=120)  # it hung here
    assert p.returncode != 0 and "rank 1: interrupted alone; ending every rank" in err, err
    deadline = time.monotonic() + 10
    while os.listdir(d) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.listdir(d), os.listdir(d)


def test_mpirun_two_ranks(tmp_path):
    mpirun, env = _mpirun()
    js = tmp_path / "m.json"
    d = tmp_path / "d"
    d.mkdir()
    r = subprocess.run([mpirun, "-np", "2", *ACCIO, "bench", "-T", "write,cold-read", "-m", "posix,uring",
                        "-s", "1m", "-r", "256k", "-p", "1,2", "--layout", "fpp,shared", "-i", "2", "-d", str(d),
                        "--keep", "--json", str(js)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(js.read_text())
    validate(doc)
    assert doc["environment"]["processes"] == 2
    procs = {(x["processes"], x["layout"]) for x in doc["results"]}
    assert procs == {(1, "fpp"), (2, "fpp"), (2, "shared")}  # one writer: shared == fpp, skipped
    for x in doc["results"]:
        assert all(s["bytes"] == x["processes"] * x["file_size"] for s in x["samples"])
    names = sorted(p.name for p in d.iterdir())
    assert any(n.endswith(".fpp.r0.t0") for n in names) and any(n.endswith(".fpp.r1.t0") for n in names)
    assert sum(n.endswith(".shared") for n in names) == 1
    assert r.stdout.count("MiB/s, median") == 1  # only rank 0 prints


@pytest.mark.skipif(not shutil.which("fio"), reason="fio not installed")
def test_vs_fio(tmp_path):
    js = tmp_path / "f.json"
    r = bench("-T", "write,reread", "-m", "posix,parallel,uring", "-s", "4m", "-r", "1m", "-i", "2", "--vs-fio",
              "--set", "task_size=256k", "-d", str(tmp_path), "--json", str(js))
    assert "accio vs fio" in r.stdout and "95% interval" in r.stdout and "too few samples (2 < 7)" in r.stdout
    assert not any(v in r.stdout for v in ("faster", "slower", "within noise"))
    doc = json.loads(js.read_text())
    validate(doc)
    for x in doc["results"]:
        f = x["fio"]
        assert f["mib_s"] > 0 and f["ratio"] > 0 and f["samples"][0]["bytes"] == 4 << 20
        # the paired ratio: the median of the per-iteration accio/fio ratios, inside its interval
        per_round = [a["mib_s"] / b["mib_s"] for a, b in zip(x["samples"], f["samples"])]
        assert len(per_round) == 2 and f["ratio"] == pytest.approx(statistics.median(per_round))
        assert f["interval"][0] <= f["ratio"] <= f["interval"][1]
        assert f["verdict"] == "too few samples (2 < 7)"  # -i 2: the ratio, but no verdict (accio.stats)
    jobs = {x["mechanism"]: x["fio"]["job"] for x in doc["results"]}
    assert jobs["posix"].startswith("psync bs=1048576") and jobs["uring"].startswith("io_uring bs=262144 iodepth=4")
    assert "x2 (2 per thread" in jobs["parallel"] or "x1" in jobs["parallel"]


def test_fio_jobs_follow_the_runs_direct_setting():
    """Bench audit, session 25: --set direct=on made accio's uring O_DIRECT while its fio job stayed
    direct=0 (ratio 0.41), and the cold read's cache method left out +o_direct."""
    from types import SimpleNamespace

    from accio.bench import fio, runner
    jobs = [SimpleNamespace(path="/x", offset=0, length=8 << 20)]
    uring = parse_mechanisms("uring")[0]
    for run, want in (({}, "direct=0"), ({"direct": "on"}, "direct=1")):
        secs, desc = fio.sections(jobs, "write", uring, 1 << 20, run)
        assert want in desc and all(s["direct"] == int(want[-1]) for s in secs), (run, desc)
    _, desc = fio.sections(jobs, "write", parse_mechanisms("uring+direct")[0], 1 << 20, {"direct": "off"})
    assert "direct=1" in desc
    _, desc = fio.sections(jobs, "read", parse_mechanisms("posix")[0], 1 << 20, {"direct": "on"})
    assert "direct=0" in desc  # posix reads no direct setting: buffered, as accio's posix
    sample = [{"residency": 0.0}]
    assert runner.cache_summary("cold-read", uring, sample, False, {"direct": "on"})["method"] == "fadvise+o_direct"
    assert runner.cache_summary("cold-read", uring, sample, False, {})["method"] == "fadvise"


@pytest.mark.skipif(not shutil.which("fio"), reason="fio not installed")
def test_vs_fio_writes_a_files_target_in_place(tmp_path):
    """Bench audit, session 25: fio unlinks and re-creates a write job's file shorter than the job,
    so --vs-fio --files turned a symlink into a regular file (and left its target empty)."""
    (tmp_path / "tgt").mkdir()
    target = tmp_path / "tgt" / "data"
    target.write_bytes(b"")
    link = tmp_path / "lnk"
    link.symlink_to(target)
    bench("--files", str(link), "-T", "write", "-m", "posix", "-s", "2m", "-r", "1m", "-i", "1", "--vs-fio")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.stat().st_size == 2 << 20


@pytest.mark.skipif(not shutil.which("fio"), reason="fio not installed")
def test_vs_fio_says_which_columns_it_cannot_compare(tmp_path):
    """Bench audit, session 25: -m auto --vs-fio printed no fio table and no word."""
    r = bench("-T", "write", "-m", "auto,posix", "-s", "1m", "-r", "1m", "-i", "1", "--vs-fio", "-d", str(tmp_path))
    assert "warning: --vs-fio: auto has no fio equivalent (fio runs one fixed way); compared with fio: posix" in r.stderr
    r = bench("-m", "bogus", check=False)
    assert r.returncode == 2 and "unknown mechanism 'bogus'; choose from posix, parallel, direct, uring, auto, all " \
        "(GPU memory, --target cuda:N: naive, staged, gds, pagecache)" in r.stderr, r.stderr


def test_compare(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for f in (a, b):
        bench("-T", "write,reread", "-m", "posix", "-s", "1m", "-r", "1m", "-i", "1", "-d", str(tmp_path),
              "--json", str(f))
    r = subprocess.run([*ACCIO, "bench", "compare", str(a), str(b)], capture_output=True, text=True)
    assert r.returncode == 0 and "B/A" in r.stdout and "2 results in both; geometric mean" in r.stdout
    assert "Descriptive" in r.stdout and "faster" not in r.stdout and "slower" not in r.stdout
    (tmp_path / "bad.json").write_text('{"schema": "other"}')
    r = subprocess.run([*ACCIO, "bench", "compare", str(a), str(tmp_path / "bad.json")], capture_output=True,
                       text=True)
    assert r.returncode == 1 and "not an accio bench JSON" in r.stderr  # it ran and the file was wrong
    # a result without its fields names both files and what is missing (was just "'results'")
    doc = json.loads(a.read_text())
    del doc["results"][0]["mib_s"]
    (tmp_path / "cut.json").write_text(json.dumps(doc))
    r = subprocess.run([*ACCIO, "bench", "compare", str(a), str(tmp_path / "cut.json")], capture_output=True,
                       text=True)
    assert r.returncode == 1 and "cut.json" in r.stderr and "a result lacks 'mib_s'" in r.stderr, r.stderr
    # nothing in both: a failure on stderr (exit 1), not a table's line on stdout with exit 0
    c = tmp_path / "c.json"
    bench("-T", "write", "-m", "parallel", "-s", "1m", "-r", "1m", "-i", "1", "-d", str(tmp_path), "--json", str(c))
    r = subprocess.run([*ACCIO, "bench", "compare", str(a), str(c)], capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout == "" and "no result appears in both" in r.stderr, r
    # the file that is wrong is named (was "B is not JSON"), with what to give instead
    small = tmp_path / "small.txt"
    small.write_text("hi\n")
    r = subprocess.run([*ACCIO, "bench", "compare", str(a), str(small)], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.startswith(f"accio bench compare: {small} is not JSON (") \
        and "give the --json file of an accio bench run" in r.stderr, r.stderr
    # '-' is stdin for one input, as it is stdout for the outputs
    r = subprocess.run([*ACCIO, "bench", "compare", "-", str(b)], input=a.read_text(), capture_output=True,
                       text=True)
    assert r.returncode == 0 and "2 results in both" in r.stdout, r.stderr
    r = subprocess.run([*ACCIO, "bench", "compare", "-", str(b)], input="hi\n", capture_output=True, text=True)
    assert r.returncode == 1 and "accio bench compare: stdin is not JSON (" in r.stderr
    r = subprocess.run([*ACCIO, "bench", "compare", "-", "-"], input=a.read_text(), capture_output=True, text=True)
    assert r.returncode == 2 and "A and B both ask for stdin ('-'); give one of them a file name" in r.stderr
    html = tmp_path / "from-stdin.html"
    r = subprocess.run([*ACCIO, "bench", "report", "-", "-o", str(html)], input=a.read_text(), capture_output=True,
                       text=True)
    assert r.returncode == 0 and "posix" in r.stdout and html.read_text().lower().startswith("<!doctype html")
    r = subprocess.run([*ACCIO, "bench", "report", "-"], input=a.read_text(), capture_output=True, text=True)
    assert r.returncode == 2 and "give -o FILE.html (or -o - for stdout)" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["-s", "12q"], "not a size"),
    (["-T", "write,nope"], "unknown test"),
    (["-m", "warp"], "unknown mechanism"),
    (["--target", "cuda:9"], "target cuda:9: "),  # no driver, or fewer GPUs (fake-driver runs: test_gpu.py)
    (["--target", "gpu0"], "unknown target"),
    (["--target", "tpu"], "unknown target"),
    (["-p", "2"], "mpirun -np 2"),
    (["-d", "/nonexistent/dir"], "-d /nonexistent/dir: no such file or directory (errno 2)"),
    (["--set", "threads=lots"], "threads"),
    (["--layout", "striped"], "unknown layout"),
    (["-i", "0"], "at least 1"),
])
def test_bad_arguments_fail_clearly(args, message):
    r = bench(*args, check=False)
    assert r.returncode in (1, 2) and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_phase_has_no_floor_from_the_interrupt_poll(tmp_path):
    """Review, session 25: the poll that lets Ctrl-C end a phase slept 20 ms before looking whether
    the jobs were done, so every phase lasted at least 20 ms (tune's budget bought half its samples).
    50 phases of one 4 KiB read take far less than the 1 s such a floor would make them."""
    p = tmp_path / "f"
    p.write_bytes(os.urandom(1 << 16))
    with accio.open(p, "r", mechanism="posix") as f:
        t0 = time.monotonic()
        for _ in range(50):
            accio._ext.bench_phase([f._f], [0], [4096], 4096, False)
        assert time.monotonic() - t0 < 0.9


def test_a_run_the_machine_cannot_hold_is_refused_before_it_starts(tmp_path):
    """Bench audit, session 25: -r 64g ended in a MemoryError traceback, -s 1000000t too (the offsets),
    and nothing compared -s with the free space of -d (a typo filled the disk before ENOSPC)."""
    from accio._system import meminfo
    twice = 2 * (meminfo()["MemAvailable"] >> 20) + 1  # GiB: twice what this machine has free
    for args in (["-s", f"{twice}g", "-r", f"{twice}g"], ["-s", "1000000t", "-r", "1m"]):
        r = bench("-T", "write", "-m", "posix", "-i", "1", "-d", str(tmp_path), *args, check=False)
        assert r.returncode == 2 and "of memory per process" in r.stderr and "is available: give a smaller" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and not os.listdir(tmp_path)
    st = os.statvfs(tmp_path)
    too_big = (st.f_bavail * st.f_frsize >> 30) + 2
    r = bench("-T", "write", "-m", "posix", "-i", "1", "-d", str(tmp_path), "-s", f"{too_big}g", "-r", "64m", check=False)
    assert r.returncode == 2 and f"-d {tmp_path}: the run writes up to {too_big} GiB there" in r.stderr, r.stderr
    assert not os.listdir(tmp_path)


def test_o_direct_columns_with_unaligned_records_are_said(tmp_path):
    """Bench audit, session 25: -r 3000 made `direct` write through the page cache (each record is all
    unaligned head and tail) without a word; the run says so before it starts."""
    from accio.bench import unaligned_direct
    spec = Spec(tests=["write"], mechanisms=parse_mechanisms("posix,direct,uring+direct"), file_sizes=[1 << 20],
                records=[3000, 1 << 20], threads=[1], processes=[1], layouts=["fpp"], dirs=[str(tmp_path)])
    notes = unaligned_direct(spec)
    assert len(notes) == 1 and notes[0].startswith(f"direct, uring+direct in {tmp_path}: 3000 B is not a multiple"), notes
    assert unaligned_direct(Spec(**{**spec.__dict__, "records": [1 << 20]})) == []
    assert unaligned_direct(Spec(**{**spec.__dict__, "mechanisms": parse_mechanisms("posix,uring")})) == []


@pytest.mark.parametrize("args, message", [
    (["-s", "abc"], "-s: 'abc' is not a size (e.g. 64m, 1g)"),  # was "parse size: ... (errno 22)"
    (["-s", "0"], "-s: '0' is not a positive size (e.g. 64m, 1g)"),  # was "'0': sizes must be positive"
    (["-s", "1m,0"], "-s: '0' is not a positive size"),
    (["-r", "16m:1m"], "-r: '16m:1m' is not a range of sizes: need 0 < low <= high"),
    (["-t", "abc"], "-t: 'abc' is not a count (e.g. 1,2,4 or 1:8 or 1..N)"),  # was "invalid literal for int()"
    (["-t", "3:1"], "-t: '3:1' is not a range of counts: need low <= high (e.g. 1:3 doubling, or 1..3 every count)"),
    (["-t", ","], "-t: ',' names no count (e.g. 1,2,4 or 1:8 or 1..N)"),  # was "',': no counts"
    (["-Q", "x"], "-Q: 'x' is not a count"),
])
def test_a_bad_size_or_count_names_its_option(args, message):
    r = bench(*args, check=False)
    assert r.returncode == 2 and r.stderr.startswith(f"accio bench: {message}"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "errno" not in r.stderr, r.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root may drop caches")
def test_drop_caches_needs_root():
    r = bench("--drop-caches", check=False)
    assert r.returncode == 2 and "needs root" in r.stderr


# ---- the native timed loop ----

def test_phase_verifies_stamps_and_reports_short_files(tmp_path):
    p = tmp_path / "v.dat"
    with accio.open(p, "w+", "posix") as f:
        out = _ext.bench_phase([f._f], [0], [1 << 20], 65536, True, False, True, False, 3)
        assert out[0][2] == 1 << 20 and out[0][1] >= out[0][0]
        ok = _ext.bench_phase([f._f], [0], [1 << 20], 65536, False, True, False, True, 4)  # random order
        assert ok[0][2] == 1 << 20
        f.write_from(np.zeros(8, dtype=np.uint8), 5 * 65536)  # clobber one stamp
        with pytest.raises(RuntimeError, match="verification failed: the record at offset 327680"):
            _ext.bench_phase([f._f], [0], [1 << 20], 65536, False, False, False, True, 5)
        with pytest.raises(RuntimeError, match="short read"):
            _ext.bench_phase([f._f], [0], [2 << 20], 65536, False, False, False, False, 5)
        with pytest.raises(ValueError):
            _ext.bench_phase([f._f], [0, 1], [1], 4096, False)


def test_phase_error_carries_errno(tmp_path):
    p = tmp_path / "ro.dat"
    p.write_bytes(b"x" * 8192)
    with accio.open(p, "r", "posix") as f:
        with pytest.raises(OSError) as e:
            _ext.bench_phase([f._f, f._f], [0, 4096], [4096, 4096], 4096, True)
        assert e.value.errno == 9  # EBADF: writing a read-only handle, from either thread
    assert Path(p).read_bytes() == b"x" * 8192


def test_heat_map_when_file_and_transfer_sizes_both_vary(tmp_path):
    plots = tmp_path / "plots"
    r = bench("-T", "write", "-m", "posix,uring", "-s", "512k,1m", "-r", "128k:512k", "-i", "1", "-d", str(tmp_path),
              "--plot", str(plots))
    assert "file" in r.stdout.splitlines()[0] and "record" in r.stdout.splitlines()[0]
    names = sorted(p.name for p in plots.iterdir())
    assert any(n.startswith("heatmap-write-fpp-p1-t1-") for n in names), names
    assert "bw-vs-record-write.png" in names


def test_progress_prints_lines_when_stderr_is_not_a_terminal(capsys):
    # A run on a GPU machine printed nothing for 110 s (issue 17): without a terminal, a line every
    # `every` seconds with the phases done, the time so far and an estimate of the rest.
    from accio._progress import Progress
    now = [0.0]
    p = Progress("accio bench", True, total=10, tty=False, every=10, clock=lambda: now[0])
    for i in range(10):
        now[0] = i * 4.0  # each phase takes 4 s
        p.step(f"staged write it{i + 1}")
    p.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["accio bench: 3/10 phases done, 12 s, about 28 s left; now staged write it4",
                     "accio bench: 6/10 phases done, 24 s, about 16 s left; now staged write it7",
                     "accio bench: 9/10 phases done, 36 s, about 4 s left; now staged write it10"]
    quiet = Progress("accio bench", False, total=10, tty=False, every=0, clock=lambda: now[0])
    quiet.step("x")
    assert capsys.readouterr().err == ""
    bar = Progress("accio bench", True, total=10, tty=True, every=0)  # a terminal gets the tqdm bar instead of lines
    assert bar.bar is not None and not bar.lines
    bar.close()


def test_tune_progress_without_a_terminal_prints_the_fraction_done(capsys):
    # `accio tune` knows its progress as a fraction of its time budget. It printed nothing at all
    # without a terminal (a 6-minute evaluation under nohup was silent); now it prints as bench does.
    from accio._progress import Progress
    now = [0.0]
    p = Progress("accio tune", True, tty=False, every=10, clock=lambda: now[0])
    for i in range(1, 9):
        now[0] = i * 6.0
        p(f"read hot 2t 1m/4k cell{i}", i / 8)
    p("past the end", 1.5)  # clamped
    p.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["accio tune: 25% done, 12 s, about 36 s left; now read hot 2t 1m/4k cell2",
                     "accio tune: 50% done, 24 s, about 24 s left; now read hot 2t 1m/4k cell4",
                     "accio tune: 75% done, 36 s, about 12 s left; now read hot 2t 1m/4k cell6",
                     "accio tune: 100% done, 48 s, about 0 s left; now read hot 2t 1m/4k cell8"]
    Progress("accio tune", False, tty=False, every=0)("x", 0.5)  # -q
    assert capsys.readouterr().err == ""
    bar = Progress("accio tune", True, tty=True, every=0)
    assert bar.bar is not None and not bar.lines
    bar("x", 0.5)
    assert bar.bar.n == 500
    bar.close()
    with pytest.raises(ValueError, match="total"):
        Progress("accio tune", True, tty=False).step("x")  # counted steps need a total


def test_tune_progress_of_a_time_budget_estimates_the_budget_left(capsys):
    # The calibration's fraction is the search's share of its own budget, while its time counts from
    # before the scratch files and the prefetch measurement: "10% done, 10 s, about 94 s left" with
    # --budget 60 (audit s26 #17). A budgeted run now estimates the budget left.
    from accio._progress import Progress
    now = [5.0]
    p = Progress("accio tune", True, tty=False, every=10, clock=lambda: now[0], budget=60, t0=0.0)
    for t, f in ((10, 0.1), (20, 0.28), (70, 1.0)):
        now[0] = t
        p("x", f)
    assert capsys.readouterr().err.splitlines() == ["accio tune: 10% done, 10 s, about 50 s left; now x",
                                                    "accio tune: 28% done, 20 s, about 40 s left; now x",
                                                    "accio tune: 100% done, 70 s, about 0 s left; now x"]


def test_tune_progress_stages_share_the_whole(capsys):
    # With a GPU, accio tune runs the host search and then the GPU's, each reporting its own
    # fraction; the lines said "100% done" after the first and then "50% ... about 250 s left"
    # when 50 s were left (review s22). Each stage now maps onto its share of the whole.
    from accio._progress import Progress
    now = [0.0]
    p = Progress("accio tune", True, tty=False, every=50, clock=lambda: now[0])
    host, gpu = p.stage(0.0, 2 / 3), p.stage(2 / 3, 1.0)
    for t in range(0, 201, 10):
        now[0] = t
        host("host", t / 200)
    for t in range(210, 301, 10):
        now[0] = t
        gpu("gpu", (t - 200) / 100)
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["accio tune: 17% done, 50 s, about 250 s left; now host",
                     "accio tune: 33% done, 100 s, about 200 s left; now host",
                     "accio tune: 50% done, 150 s, about 150 s left; now host",
                     "accio tune: 67% done, 200 s, about 100 s left; now host",
                     "accio tune: 83% done, 250 s, about 50 s left; now gpu",
                     "accio tune: 100% done, 300 s, about 0 s left; now gpu"]


def test_tune_without_a_terminal_prints_progress_lines(tmp_path, monkeypatch, capsys):
    # End to end: accio tune --evaluate, not -q, stderr not a terminal (captured), a line at every
    # report (every=0): the tune side must not gate its progress on a terminal again.
    import functools
    import accio.tune
    from accio import cli
    from accio._progress import Progress
    monkeypatch.setattr(accio.tune, "Progress", functools.partial(Progress, every=0))
    assert cli.main(["tune", str(tmp_path), "--evaluate", "--file-sizes", "1m", "--transfers", "512k", "--ops",
                     "read", "--caches", "hot", "-i", "1", "--max-reps", "1", "--threads", "1"]) == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("accio tune: ") and "% done" in ln]
    assert lines and lines[-1].startswith("accio tune: 100% done"), lines


def test_bench_without_a_terminal_says_what_it_runs(tmp_path):
    r = bench("-T", "write", "-m", "posix", "-s", "1m", "-i", "1", "-d", str(tmp_path))
    assert r.stderr.startswith("accio bench: 1 timed phase, 1 mechanism(s)"), r.stderr


def test_sizes_and_records_that_cannot_pair_are_said_before_the_run(tmp_path):
    """`-s 1m,4m -r 2m` dropped the 1 MiB file size without a word (only "nothing would run" was
    said); a record larger than every file likewise. A warning on stderr (under -q too) and in the
    JSON."""
    out = tmp_path / "r.json"
    r = bench("-T", "write", "-m", "posix", "-s", "1m,4m", "-r", "2m,8m", "-i", "1", "-q", "-d", str(tmp_path),
              "--json", str(out))
    assert r.stderr.splitlines()[:2] == [
        "accio bench: warning: file size 1 MiB skipped: no record (2 MiB, 8 MiB) fits in it",
        "accio bench: warning: record 8 MiB skipped: larger than every file size (at most 4 MiB)"], r.stderr
    doc = json.loads(out.read_text())
    assert "file size 1 MiB skipped: no record (2 MiB, 8 MiB) fits in it" in doc["warnings"]
    assert {(x["file_size"], x["record_size"]) for x in doc["results"]} == {(4 << 20, 2 << 20)}
    r = bench("-T", "write", "-m", "posix", "-s", "1m", "-r", "1m", "-i", "1", "-q", "-d", str(tmp_path))
    assert "warning" not in r.stderr, r.stderr


def test_one_directory_named_twice_is_refused(tmp_path):
    """`-d sig -d ./sig` measured one directory twice, as two row groups."""
    r = bench("-T", "write", "-m", "posix", "-s", "1m", "-i", "1", "-d", str(tmp_path), "-d", f"{tmp_path}/.",
              check=False)
    assert r.returncode == 2 and f"-d {tmp_path} and -d {tmp_path}/. name the same directory" in r.stderr, r.stderr


def test_a_files_file_that_cannot_be_opened_is_named_before_the_run(tmp_path, monkeypatch):
    """An unreadable --files file was found by the first phase (`open 'secret': Permission denied`,
    no option named). Checked before the run, as the run opens it (root reads a mode-000 file, so the
    refusal is made by a stand-in os.open)."""
    from accio.bench import _check_files_open
    f = tmp_path / "secret"
    f.write_bytes(b"x")
    real = os.open

    def refuse(path, flags, *a):
        if str(path) == str(f):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, flags, *a)
    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(PermissionError, match=f"--files {f}"):
        _check_files_open([str(f)], write=False)
    monkeypatch.undo()
    _check_files_open([str(f)], write=True)  # readable and writable: nothing to say
    with pytest.raises(IsADirectoryError, match=f"--files {tmp_path}"):
        _check_files_open([str(tmp_path)], write=True)
    with pytest.raises(FileNotFoundError, match="--files /nonexistent-dir/new"):
        _check_files_open(["/nonexistent-dir/new"], write=True)  # a file the run would make, where it cannot


def test_a_rank_that_ends_the_job_removes_every_file_of_the_run_it_sees(tmp_path):
    """Before MPI_Abort the interrupted rank removes the run's files of every rank in the directory:
    mpirun's SIGKILL follows its SIGTERM a second later (OpenMPI), and a rank 0 that had not removed
    its own by then left it (a fresh Debian check). Another run's files and the user's stay."""
    from accio.bench import _leave
    from accio.bench.comm import Solo
    from accio.bench.runner import Runner
    spec = Spec(tests=["write"], mechanisms=parse_mechanisms("posix"), file_sizes=[1 << 20], records=[1 << 20],
                threads=[1], processes=[2], layouts=["fpp"], dirs=[str(tmp_path)])
    runner = Runner(spec, Solo())
    ours = [f"accio-bench.{runner.tag}.fpp.r{r}.t0" for r in range(3)] + [f"accio-bench.{runner.tag}.shared"]
    pid = runner.tag.split("-")[0]  # another job whose rank 0 had the same pid (on another node)
    others = [f"accio-bench.{runner.tag}1.fpp.r0.t0", f"accio-bench.{pid}-zzzzzz.fpp.r0.t0", f"accio-bench.{pid}.shared",
              "data.bin"]
    for n in ours + others:
        (tmp_path / n).write_bytes(b"x")
    seen = []

    class Alone(Solo):
        size = 2

        def leave(self, deadline_s):
            return False  # the other rank does not leave

        def abort(self, code):
            seen.append((code, sorted(os.listdir(tmp_path))))
    assert _leave(Alone(), 143, runner) == 143
    assert seen == [(143, sorted(others))]
    # --keep keeps them, as it keeps this rank's own
    for n in ours:
        (tmp_path / n).write_bytes(b"x")
    seen.clear()
    _leave(Alone(), 130, Runner(Spec(**{**spec.__dict__, "keep": True}), Solo()))
    assert seen == [(130, sorted(ours + others))]
