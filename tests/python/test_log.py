"""The one message channel: the engine's messages reach Python as accio.AccioWarning (warnings) and
records of the `accio` logger, once per cause, from worker threads too; the CLI prints them as
`accio: warning: ...` lines. Driven by the fake CUDA driver's cuFile refusing every file (5027, as
real cuFile in compatibility mode did on the GPU machine), so that gds falls back to staged."""
import json
import os
from pathlib import Path
import subprocess
import sys
import textwrap

import pytest
from conftest import fake_cuda

CODE = """
    import json, logging, warnings, accio, numpy as np
    records = []
    class Keep(logging.Handler):
        def emit(self, r): records.append((r.levelname, getattr(r, "accio_key", None), r.getMessage()))
    logging.getLogger("accio").addHandler(Keep())
    data = np.random.default_rng(1).integers(0, 256, 3 << 20, dtype=np.uint8)
    data.tofile("in.bin")
    dev = accio.device_array(data.nbytes)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with accio.open("in.bin", mechanism="gds", threads=4, task_size="1m") as f:
            n = f.read_into(dev)
            n += f.read_into(dev)          # the same cause again: no second message
            ran = f.stats()["last_mechanism"]
    print(json.dumps({"n": n, "ran": ran, "same": dev.to_bytes() == data.tobytes(),
                      "warnings": [(w.category.__name__, str(w.message)) for w in caught],
                      "records": records}))
"""


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory):
    return fake_cuda(tmp_path_factory)


def run(code, fake_lib, tmp_path, quiet):
    env = dict(os.environ, ACCIO_LIBCUDA=fake_lib, ACCIO_LIBCUFILE=fake_lib, ACCIO_PROFILE="off",
               FAKE_CUFILE_REGISTER_ERR="5027", ACCIO_QUIET="1" if quiet else "0")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def test_fallback_message_reaches_warnings_and_logging_once(fake_lib, tmp_path):
    r = run(CODE, fake_lib, tmp_path, quiet=False)
    out = json.loads(r.stdout)
    assert out["n"] == 2 * (3 << 20) and out["same"]
    assert out["ran"] == "staged", "the statistics record the path that ran"
    assert len(out["warnings"]) == 1, out["warnings"]
    category, message = out["warnings"][0]
    assert category == "AccioWarning"
    assert "5027 (CU_FILE_HANDLE_NOT_REGISTERED)" in message and "run staged" in message, message
    [(level, key, logged)] = out["records"]
    assert (level, logged) == ("WARNING", message) and key.startswith("gds-register:"), out["records"]
    assert "accio: warning:" not in r.stderr, "through warnings, not the C library's stderr line"


def test_quiet_silences_warnings_but_not_logging(fake_lib, tmp_path):
    out = json.loads(run(CODE, fake_lib, tmp_path, quiet=True).stdout)
    assert out["warnings"] == [] and out["ran"] == "staged"
    assert [k.split(":")[0] for _, k, _ in out["records"]] == ["gds-register"]


def test_cli_prints_plain_warning_lines(fake_lib, tmp_path):
    code = """
        import sys, numpy as np, accio
        from accio.cli import main
        np.zeros(1 << 20, np.uint8).tofile("in.bin")
        sys.exit(main(["bench", "--target", "cuda:0", "-m", "gds", "-s", "1m", "-r", "1m", "-t", "1", "-i", "1",
                       "-T", "read", "--dir", "."]))
    """
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, ACCIO_LIBCUDA=fake_lib, ACCIO_LIBCUFILE=fake_lib,
                                             ACCIO_PROFILE="off", FAKE_CUFILE_REGISTER_ERR="5027", ACCIO_QUIET="0"))
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stderr.splitlines() if "gds cannot serve" in l]
    assert len(lines) == 1 and lines[0].startswith("accio: warning: mechanism gds cannot serve"), r.stderr


def test_quiet_takes_the_settings_off_words():
    """ACCIO_QUIET=false (off, no, 0) is not quiet, for the Python side and the native launcher alike
    (the engine's and the shim's stderr share the launcher's rule, src/base/quiet.h): every other
    value silences. Until the nineteenth session any value but 0 did."""
    import shutil
    static_program = os.path.exists("/sbin/ldconfig") and shutil.which("readelf") and "INTERP" not in \
        subprocess.run(["readelf", "-l", "/sbin/ldconfig"], capture_output=True, text=True).stdout  # Debian's is
    for value, quiet in (("false", False), ("OFF", False), ("no", False), ("0", False), ("", False),
                         ("1", True), ("true", True), ("yes", True)):
        env = dict(os.environ, ACCIO_QUIET=value)
        r = subprocess.run([sys.executable, "-c", "import accio._log as l; print(l._quiet())"], env=env,
                           capture_output=True, text=True)
        assert r.stdout.strip() == str(quiet), (value, r.stdout, r.stderr)
        if static_program and shutil.which("script"):  # at a terminal the launcher notes a static program
            launcher = Path(sys.executable).with_name("accio-run")
            out = subprocess.run(["script", "-qec", f"{launcher} -- /sbin/ldconfig -p", "/dev/null"], env=env,
                                 capture_output=True, text=True).stdout
            assert ("is statically linked" in out) is (not quiet), (value, out[:300])


def test_a_worker_thread_message_never_waits_for_the_gil(fake_lib, tmp_path):
    """The engine warns from a pool worker while the main thread holds the GIL and waits for that
    worker (the temporary File is closed by its destructor with the request in flight): the message
    is queued, not delivered by blocking on the GIL, and arrives once the main thread runs Python."""
    code = """
        import json, warnings, accio, numpy as np
        data = np.arange(4 << 20, dtype=np.uint8)
        data.tofile("in.bin")
        dev = accio.device_array(data.nbytes)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fut = accio.open("in.bin", mechanism="gds", threads=2, task_size="1m").read_into_async(dev)
            n = fut.result()
            accio._ext.drain_log()
        print(json.dumps({"n": n, "same": dev.to_bytes() == data.tobytes(),
                          "warnings": [str(w.message) for w in caught]}))
    """
    out = json.loads(run(code, fake_lib, tmp_path, quiet=False).stdout)  # run() times out at 300 s
    assert out["n"] == 4 << 20 and out["same"]
    assert len(out["warnings"]) == 1 and "gds cannot serve" in out["warnings"][0], out["warnings"]


def test_engine_warnings_point_at_the_programs_line(tmp_path):
    """An AccioWarning names the line of the program that made the call, not accio's wrapper
    (accio/__init__.py), so `python -W error` and the warning's location lead to the user's code."""
    import subprocess
    import sys
    prog = tmp_path / "user.py"
    (tmp_path / "f").write_bytes(b"x" * 10)
    prog.write_text("import accio\n\nf = accio.open(%r)\n" % str(tmp_path / "f"))
    env = {k: v for k, v in os.environ.items() if k != "ACCIO_QUIET"}
    env["ACCIO_PROFILE_DIR"] = str(tmp_path / "none")  # no profile: the engine warns at open
    r = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, env=env)
    assert "AccioWarning" in r.stderr, r.stderr
    assert f"{prog}:3: AccioWarning" in r.stderr and "__init__.py" not in r.stderr, r.stderr


RANK_ENV = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "PALS_RANKID", "SLURM_PROCID",
            "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")


def test_no_profile_is_said_once_per_mpi_job(tmp_path):
    """Every rank of an MPI job opens files on a filesystem with no tuning profile: rank 0 says so,
    the other ranks record it without a word (1000 ranks, one line), on the C library's stderr and
    as an AccioWarning alike."""
    (tmp_path / "f").write_bytes(b"x" * 10)
    code = textwrap.dedent(f"""
        import ctypes, json, sys
        if sys.argv[1] == "c":  # the C library alone, its default channel (stderr)
            import importlib.util, os
            pkg = importlib.util.find_spec("accio").submodule_search_locations[0]  # not imported: no callback
            lib = ctypes.CDLL(os.path.join(pkg, "lib", "libaccio.so"))
            f = ctypes.c_void_p()
            assert lib.accio_open(ctypes.byref(f), {str(tmp_path / "f")!r}.encode(), b"r", None) == 0
            buf = ctypes.create_string_buffer(1 << 16)
            lib.accio_warnings(buf, len(buf))
            print(json.dumps("no tuning profile" in buf.value.decode()))
        else:
            import accio
            accio.read({str(tmp_path / "f")!r})
            print(json.dumps("no tuning profile" in accio._ext.warnings()))
    """)
    base = {k: v for k, v in os.environ.items() if k not in ("ACCIO_QUIET", *RANK_ENV)}
    base["ACCIO_PROFILE_DIR"] = str(tmp_path / "none")
    for how in ("c", "python"):
        for rank_env, says in (({}, True), ({"PMI_RANK": "0"}, True), ({"PMI_RANK": "5"}, False),
                               ({"OMPI_COMM_WORLD_RANK": "1"}, False), ({"PMIX_RANK": "2"}, False),
                               ({"OMPI_COMM_WORLD_RANK": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "0"}, False),
                               ({"PMIX_RANK": "3", "SLURM_PROCID": "0"}, False), ({"SLURM_PROCID": "9"}, False)):
            r = subprocess.run([sys.executable, "-c", code, how], capture_output=True, text=True,
                               env=dict(base, **rank_env))
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout) is True, (how, rank_env, r.stdout)  # recorded on every rank
            assert ("no tuning profile" in r.stderr) == says, (how, rank_env, r.stderr)


def test_forked_workers_do_not_repeat_what_the_parent_said(tmp_path):
    """A multiprocessing pool's workers (fork) open files where the parent found no tuning profile:
    the parent's warning is the only one, and each worker still has it on record."""
    for name in "abcd":
        (tmp_path / name).write_bytes(b"x" * 10)
    prog = tmp_path / "pool.py"
    prog.write_text(textwrap.dedent(f"""
        import multiprocessing as mp, accio
        def work(name):
            accio.read({str(tmp_path)!r} + "/" + name)
            return "no tuning profile" in accio._ext.warnings()
        if __name__ == "__main__":
            accio.read({str(tmp_path / "a")!r})
            with mp.get_context("fork").Pool(3) as pool:
                print(pool.map(work, "bcd"))
    """))
    env = {k: v for k, v in os.environ.items() if k not in ("ACCIO_QUIET", *RANK_ENV)}
    env["ACCIO_PROFILE_DIR"] = str(tmp_path / "none")
    r = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[True, True, True]", r.stderr
    assert r.stderr.count("no tuning profile") == 1, r.stderr


def test_accio_errors_survive_pickling():
    """A worker process's accio error reaches its parent (multiprocessing pickles it): the errno
    subclasses are made at run time and pickle could not find them by name."""
    import pickle
    import accio
    from accio._errors import file_shrank
    with pytest.raises(accio.Error) as info:
        accio.open("/nonexistent/accio-pickle")
    back = pickle.loads(pickle.dumps(info.value))
    assert type(back) is type(info.value) and isinstance(back, FileNotFoundError) and isinstance(back, accio.Error)
    assert (back.errno, str(back), back.filename, back.operation) == (
        info.value.errno, str(info.value), info.value.filename, info.value.operation)
    shrank = pickle.loads(pickle.dumps(file_shrank("p", 1, 2)))
    assert type(shrank) is accio.Error and "file shrank" in str(shrank) and shrank.errno == 5
    assert repr(type(back)) == "<class 'accio.FileNotFoundError'>" and accio.Error.__module__ == "accio"
