"""The accio command: --version, --help everywhere, info (text and JSON), config. (bench: test_bench.py)"""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ACCIO = [sys.executable, "-m", "accio.cli"]


def run(*args, check=True):
    return subprocess.run([*ACCIO, *args], capture_output=True, text=True, check=check)


def test_version():
    assert run("--version").stdout.strip() == "accio 0.1.0"


@pytest.mark.parametrize("sub", [[], ["info"], ["config"], ["bench"], ["bench", "run"], ["bench", "compare"],
                                 ["bench", "report"]])
def test_help(sub):
    out = run(*sub, "--help").stdout
    assert "usage: accio" in out


def test_no_command_prints_help_and_fails():
    """A usage error, so its help goes to stderr (it went to stdout, with exit 2)."""
    r = run(check=False)
    assert r.returncode == 2 and "COMMAND" in r.stderr and r.stdout == "", r


def test_a_bench_sub_command_given_alone_is_pointed_at_bench():
    r = run("compare", "a.json", "b.json", check=False)
    assert r.returncode == 2 and "accio: error: 'compare' is a sub-command of bench: accio bench compare a.json " \
        "b.json" in r.stderr, r.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("argv", [["--help"], ["bench", "--help"], ["bench", "compare", "--help"], ["info"],
                                  ["run", "--help"]])
def test_a_failed_write_to_stdout_is_one_line_and_exit_1(argv, buffered):
    """`accio --help >/dev/full` lost the help and exited 0 (argparse drops the OSError) or, with
    Python's usual buffering, ended in a traceback; `accio info >/dev/full` said `no space left on
    device` as if of the path it describes. Now one line naming stdout, exit 1 (125 for run, as env)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED" or not buffered}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    for front in FRONTS.values():
        with open("/dev/full", "w") as full:
            r = subprocess.run([*front, *argv], stdout=full, stderr=subprocess.PIPE, text=True, env=env)
        assert r.returncode == (125 if argv[0] == "run" else 1), r.stderr
        assert r.stderr.endswith("write error on stdout: no space left on device (errno 28)\n"), r.stderr
        assert r.stderr.count("\n") == 1, r.stderr


def test_info_text_and_json(tmp_path):
    text = run("info", str(tmp_path)).stdout
    for word in ("kernel", "io_uring", "huge pages", "memlock", "O_DIRECT", "residency", "gpus", "mechanisms", "realign"):
        assert word in text
    data = json.loads(run("info", "--json", str(tmp_path)).stdout)
    # whether realign=auto takes misaligned reads here (this CPU's kernel copy measured once)
    assert isinstance(data["cpu"]["slow_misaligned_copy"], bool) and "realign=auto" in data["cpu"]["realign_detail"]
    assert data["path"]["fstype"] != "unknown"
    assert {m["name"] for m in data["mechanisms"]} == {"posix", "parallel", "direct", "uring", "naive", "staged", "gds", "pagecache"}
    assert data["residency_query"]["method"] in ("cachestat", "mincore")
    assert any(s["name"] == "threads" and s["env"] == "ACCIO_THREADS" for s in data["settings"])


def test_info_shows_a_bad_setting_in_its_row_and_fails(tmp_path):
    """A bad ACCIO_* value is shown where it is, in its row (the engine's error under it) and as the
    profile accio would use, and said again on stderr, exit 1: `accio info` listed ACCIO_MECHANISM=bogus
    as the current value, and a missing ACCIO_PROFILE's file as if the profile directory's were used."""
    missing = tmp_path / "nonexistent.json"
    env = {**os.environ, "ACCIO_MECHANISM": "bogus", "ACCIO_PROFILE": str(missing)}
    r = subprocess.run([*ACCIO, "info", str(tmp_path)], capture_output=True, text=True, env=env)
    assert r.returncode == 1, r.stderr
    mech = "read environment: ACCIO_MECHANISM='bogus' is not valid: unknown mechanism (one of auto, posix"
    prof = f"read environment: ACCIO_PROFILE='{missing}' is not valid: no such file"
    lines = r.stdout.splitlines()
    assert any(x.startswith(f"tune profile  invalid: {prof}") for x in lines), r.stdout
    row = next(i for i, x in enumerate(lines) if x.split()[:3] == ["mechanism", "invalid", "ACCIO_MECHANISM"])
    assert lines[row + 1].strip().startswith(mech), lines[row:row + 2]
    assert [x.split(": ", 1)[0] for x in r.stderr.splitlines()] == ["accio info", "accio info"], r.stderr
    assert mech in r.stderr and prof in r.stderr and r.stderr.count("; correct the variable or unset it") == 2
    data = json.loads(subprocess.run([*ACCIO, "info", "--json", str(tmp_path)], capture_output=True, text=True,
                                     env=env).stdout)
    rows = {s["name"]: s for s in data["settings"]}
    assert rows["mechanism"]["value"] is None and rows["mechanism"]["error"].startswith(mech)
    assert rows["threads"]["error"] is None and int(rows["threads"]["value"]) > 0
    assert data["tuning_profile"]["source"] == "ACCIO_PROFILE" and data["tuning_profile"]["error"].startswith(prof)


def test_info_says_which_profile_accio_profile_chooses(tmp_path):
    from conftest import POSIX_PROFILE
    good = tmp_path / "p.json"
    good.write_text(POSIX_PROFILE)
    for value, shown in [(str(good), f"tune profile  {good} (ACCIO_PROFILE)"),
                         ("off", "tune profile  off (ACCIO_PROFILE): auto uses the built-in model")]:
        r = subprocess.run([*ACCIO, "info", str(tmp_path)], capture_output=True, text=True,
                           env={**os.environ, "ACCIO_PROFILE": value})
        assert r.returncode == 0 and shown in r.stdout.splitlines(), r.stdout + r.stderr


def test_config_builds_a_c_program(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    flags = run("config", "--cflags", "--libs").stdout.split()
    src = tmp_path / "prog.c"
    src.write_text('#include <accio/accio.h>\n#include <stdio.h>\n'
                   'int main(void){accio_file*f; int rc=accio_open(&f,"/etc/hostname","r",NULL);'
                   'if(rc){puts(accio_last_error());return 1;} char b[4]; long n=(long)accio_pread(f,b,4,0);'
                   'accio_close(f); printf("%s %ld\\n", accio_version(), n); return 0;}\n')
    subprocess.run([cc, str(src), "-o", str(tmp_path / "prog"), *flags], check=True)
    out = subprocess.run([str(tmp_path / "prog")], capture_output=True, text=True, check=True).stdout
    assert out.startswith("0.1.0 ")


FORTRAN_TEST = Path(__file__).resolve().parents[1] / "cpp" / "fortran_api.f90"


def _gfortran():
    fc = shutil.which("gfortran")
    if not fc and os.environ.get("CI", "") not in ("", "false"):
        pytest.fail("CI must test the Fortran module: make installs gfortran")
    if not fc:
        pytest.skip("no gfortran")
    return fc


def test_config_builds_a_fortran_program(tmp_path):
    """The installed Fortran module (accio config --fortran) compiled with tests/cpp/fortran_api.f90,
    strict Fortran 2018, linked with accio config --libs: the whole Fortran API test passes against
    the installed package."""
    fc = _gfortran()
    module = run("config", "--fortran").stdout.strip()
    assert module.endswith("accio.f90") and os.path.isfile(module), module
    subprocess.run([fc, "-std=f2018", "-Wall", "-Werror", module, str(FORTRAN_TEST), "-o", str(tmp_path / "prog"),
                    *run("config", "--libs").stdout.split()], check=True, cwd=tmp_path)
    r = subprocess.run([str(tmp_path / "prog"), str(tmp_path)], capture_output=True, text=True,
                       env=dict(os.environ, ACCIO_QUIET="1"))
    assert r.returncode == 0 and "fortran_api: ok" in r.stdout, r.stdout + r.stderr


def test_pkgconfig_and_cmake_package(tmp_path):
    pc = run("config", "--pkgconfig").stdout.strip()
    if shutil.which("pkg-config"):
        out = subprocess.run(["pkg-config", "--cflags", "--libs", "accio"], capture_output=True, text=True,
                             env={**os.environ, "PKG_CONFIG_PATH": pc}, check=True).stdout
        assert "-laccio" in out and "include" in out
    if not shutil.which("cmake"):
        return
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(user CXX)\nset(CMAKE_CXX_STANDARD 17)\n"
        "find_package(accio REQUIRED)\nadd_executable(user main.cpp)\ntarget_link_libraries(user accio::accio)\n")
    (tmp_path / "main.cpp").write_text(
        '#include <accio/accio.hpp>\n#include <iostream>\nint main(){ try { accio::File f("/nonexistent"); }'
        ' catch (const accio::Error& e) { std::cout << e.op() << " " << e.errnum() << "\\n"; } }\n')
    cmake_dir = run("config", "--cmake").stdout.strip()
    subprocess.run(["cmake", "-S", str(tmp_path), "-B", str(tmp_path / "b"), f"-Daccio_DIR={cmake_dir}"],
                   check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(tmp_path / "b")], check=True, capture_output=True)
    out = subprocess.run([str(tmp_path / "b" / "user")], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "open 2"
    # Fortran through the same package: the module's source named by accio_FORTRAN_MODULE_SOURCE
    fc = _gfortran()
    f = tmp_path / "f"
    f.mkdir()
    # two programs in one project, as the module is built once for both (the module source in each
    # target would make two rules write accio.mod)
    (f / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(user Fortran)\nfind_package(accio REQUIRED)\n"
        "add_executable(user main.f90)\ntarget_link_libraries(user accio::fortran)\n"
        "add_executable(user2 main.f90)\ntarget_link_libraries(user2 accio::fortran)\n")
    (f / "main.f90").write_text(
        "program main\n  use accio\n  implicit none\n  type(c_ptr) :: h\n"
        "  print '(i0)', accio_open(h, '/nonexistent', 'r')\nend program main\n")
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(["cmake", "-S", str(f), "-B", str(f / "b"), *gen, f"-Daccio_DIR={cmake_dir}",
                    f"-DCMAKE_Fortran_COMPILER={fc}"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(f / "b")], check=True, capture_output=True)
    for exe in ("user", "user2"):
        out = subprocess.run([str(f / "b" / exe)], capture_output=True, text=True, check=True).stdout
        assert out.strip() == "-2"


# ---- exit statuses and error lines (issue 21): 2 called wrongly, 1 ran and failed; accio run: the
# program's status, 127 not found, 126 cannot be run, 125 accio's own errors (as env) ----

@pytest.fixture
def places(tmp_path):
    noexec = tmp_path / "noexec"
    noexec.write_text("#!/bin/sh\n")
    badformat = tmp_path / "badformat"
    badformat.write_bytes(b"\x00\x01 not a program\n")
    badformat.chmod(0o755)
    script = tmp_path / "noshebang"  # a shell script without #!: runs under /bin/sh, as env(1) runs it
    script.write_text('echo "$1 ran"; exit 7\n')
    script.chmod(0o755)
    return {"tmp": str(tmp_path), "noexec": str(noexec), "badformat": str(badformat), "noshebang": str(script)}


EXIT_TABLE = [
    # (command line, exit status, a fragment of stderr)
    (["nosuchcommand"], 2, "invalid choice"),
    (["info", "/nonexistent"], 1, "accio info: stat /nonexistent: no such file or directory (errno 2)"),
    (["info", "--bogus"], 2, "usage: accio info [-h]"),  # the sub-command's usage, not the top level's
    (["tune", ".", "--bogus"], 2, "accio tune: error: unrecognized arguments: --bogus"),
    (["--bogus", "info"], 2, "usage: accio [-h]"),  # given to the top level, said with its usage
    (["bench", "-s", "1m", "extra"], 2, "accio bench: error: unrecognized arguments: extra"),
    (["bench", "--json", "{tmp}/x", "--csv", "{tmp}/x"], 2, "--json and --csv name the same file"),
    (["bench", "--files", ","], 2, "--files ',' names no file"),
    (["bench", "--files", "{tmp}/a", "-d", "{tmp}"], 2, "--files and -d do not go together"),
    (["bench", "--files", "{tmp}/a,{tmp}/./a", "-t", "2", "-T", "write"], 2, "a file is named twice"),
    (["config"], 2, "accio config: give at least one of"),
    (["config", "--prefix", "--offload"], 2, "accio config: --offload goes with --cflags or --libs"),
    (["bench", "-r", "2m", "-s", "1m"], 2, "accio bench: no record size (2 MiB) fits in a file size (1 MiB)"),
    (["bench", "-r", "4m,8m", "-s", "1m:2m"], 2, "nothing would run"),
    (["bench", "-s", "12q"], 2, "accio bench: "),
    (["bench", "-t", "0"], 2, "at least 1"),
    (["bench", "-i", "x"], 2, "invalid int value"),
    (["bench", "-i", "0"], 2, "--iterations must be at least 1"),
    (["bench", "-m", "warp"], 2, "unknown mechanism"),
    (["bench", "--set", "threads=lots"], 2, "threads='lots' is not valid"),
    (["bench", "--set", "nonsense"], 2, "expected NAME=VALUE"),
    (["bench", "-d", "/nonexistent"], 1, "accio bench: -d /nonexistent: no such file or directory (errno 2)"),
    (["bench", "-d", "{noexec}"], 1, "not a directory"),
    (["bench", "--json", "-", "--csv", "-"], 2, "--json and --csv both ask for stdout"),
    (["bench", "--plot", "-"], 2, "--plot takes a directory"),
    (["bench", "--json", "/nonexistent/out.json"], 1, "--json /nonexistent/out.json"),
    (["bench", "--report", "{tmp}"], 1, "is a directory"),
    (["bench", "compare", "/nonexistent/a.json", "/nonexistent/b.json"], 1,
     "accio bench compare: /nonexistent/a.json: no such file or directory (errno 2)"),
    (["bench", "compare", "{noexec}"], 2, "the following arguments are required"),
    (["bench", "run", "-i", "0"], 2, "accio bench: --iterations must be at least 1"),
    (["bench", "-Q", "0"], 2, "accio bench: -Q: '0': counts must be at least 1"),
    (["bench", "--runtime", "-5"], 2, "the time must be above 0"),
    (["bench", "--runtime", "soon"], 2, "is not a time"),
    (["bench", "--vs-fio", "-Q", "1,4"], 2, "--iodepth"),
    (["bench", "report", "/nonexistent/run.json"], 1,
     "accio bench report: /nonexistent/run.json: no such file or directory (errno 2)"),
    (["tune", "/nonexistent"], 1, "accio tune: /nonexistent: no such file or directory (errno 2)"),
    (["tune", "{tmp}", "--file-size", "lots"], 2, "accio tune: --file-size 'lots' is not a size"),
    (["tune", "{tmp}", "--budget", "1"], 2, "--budget 1: must be a number of seconds, at least 5"),
    (["tune", "{tmp}", "--budget", "soon"], 2, "'soon' is not a time: give seconds, e.g. 30, 30s, 2m"),
    (["tune", "{tmp}", "--threads", "-1"], 2, "--threads -1"),
    (["tune", "{tmp}", "--json", "x.json"], 2, "--json goes with --evaluate"),
    (["tune", "{tmp}", "--profile", "-"], 2, "--profile takes a file name"),
    (["tune", "{tmp}", "--show", "--evaluate"], 2, "do not go together"),
    (["tune", "{tmp}", "--show", "--budget", "30"], 2,  # was ignored without a word
     "accio tune: --budget: not read with --show, which prints the profile; leave it out"),
    (["tune", "{tmp}", "--evaluate", "--budget", "30", "--file-size", "8m"], 2,
     "accio tune: --budget, --file-size: a calibration's options, not read with --evaluate; leave them out"),
    (["tune", "{tmp}", "--reps", "9"], 2, "accio tune: --reps: --evaluate's option, not read by a calibration; leave"),
    (["tune", "{tmp}", "--show", "--threads", "2"], 2, "--threads: not read with --show"),
    (["tune", "{tmp}", "--evaluate", "--transfers", "4q"], 2, "accio tune: --transfers: '4q' is not a size (e.g. 64m"),
    (["tune", "{tmp}", "--evaluate", "--reps", "0"], 2, "--reps must be at least 1"),
    (["tune", "{tmp}", "--target", "cuda:0"], 2, "measured with --device cuda:N"),
    (["tune", "{tmp}", "--device", "gpu0"], 2, "--device 'gpu0': expected cuda:N or N"),
    (["tune", "{tmp}", "--device", "0", "--no-device"], 2, "--device and --no-device do not go together"),
    (["offload-bench", "--transports", "pigeon"], 2, "unknown configuration(s) pigeon"),
    (["offload-bench", "--max-bytes", "lots"], 2, "accio offload-bench: --max-bytes: 'lots' is not a size"),
    (["offload-bench", "--reps", "0"], 2, "--reps 0: must be at least 1"),
    (["offload-bench", "--json", "/nonexistent/o.json"], 1, "--json /nonexistent/o.json"),
    (["run", "--", "sh", "-c", "exit 3"], 3, ""),
    (["run", "--stats", "--", "sh", "-c", "exit 4"], 4, "accio run: "),
    (["run", "-l", "64k", "--", "true"], 0, ""),
    (["run", "--", "no-such-program-xyz"], 127, "accio run: no-such-program-xyz: command not found"),
    (["run", "--stats", "--", "no-such-program-xyz"], 127, "command not found"),
    (["run", "--", "{noexec}"], 126, "permission denied"),
    (["run", "--", "{tmp}"], 126, "is a directory"),
    (["run", "--", "{badformat}"], 126, "accio run: exec {badformat}: exec format error (errno 8)"),
    (["run", "--", "{noshebang}", "it"], 7, ""),  # run by /bin/sh, its own status
    (["run", "--stats-json", "{tmp}/s.json", "--", "{noshebang}", "it"], 7, ""),
    (["run", "--stats", "--", "{badformat}"], 126, "exec format error"),
    (["run", "--"], 125, "accio run: no program given"),
    (["run"], 125, "no program given"),
    (["run", "--threshold", "lots", "--", "true"], 125, "accio run: --threshold 'lots'"),
    (["run", "-l", "-5", "--", "true"], 125, "--threshold"),
    (["run", "-t", "64k", "--", "true"], 125, "the threshold is --threshold or -l"),
    (["run", "--mechanism", "warp", "--", "true"], 125, "warp"),
    (["run", "--bogus", "--", "true"], 125, "--bogus"),
    (["run", "--mech", "posix", "--", "true"], 0, ""),  # a unique prefix, as getopt_long and argparse
    (["run", "--thr=64k", "--", "true"], 0, ""),
    (["run", "--stat", "--", "true"], 125, "accio run: ambiguous option '--stat' (could be --stats, --stats-json)"),
    (["run", "--stats", "--", "true"], 0, "accio run: "),  # exact beats the longer --stats-json
    (["run", "--stats=yes", "--", "true"], 125, "option '--stats' takes no value"),
    (["run", "--mech", "warp", "--", "true"], 125, "--mechanism 'warp'"),
    (["run", "--stats-json", "/nonexistent/s.json", "--", "true"], 125,
     "accio run: --stats-json /nonexistent/s.json: /nonexistent: no such file or directory (errno 2)"),
]


# Through the Python CLI, and through the native `accio` users type (src/preload/front.c: run is its
# own, the rest is exec'd to accio-py): the same table holds for both.
FRONTS = {"python": ACCIO, "native": [str(Path(sys.executable).with_name("accio"))]}


def test_stdout_closed_is_one_line_not_a_traceback(tmp_path):
    """A closed stdout: a command does its work, then says in one line that its output was lost and
    exits 1 (a traceback before); accio run and its --stats-json report, which write nothing there,
    run as with it open."""
    r = subprocess.run(f"{sys.executable} -m accio.cli info >&-", shell=True, capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.startswith("accio: stdout is closed: ") and "were lost" in r.stderr, r.stderr
    js = tmp_path / "s.json"
    r = subprocess.run(f"{sys.executable} -m accio.cli run --stats-json {js} -- true >&-", shell=True,
                       capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(js.read_text())["exit_status"] == 0, r.stderr
    r = subprocess.run(f"{sys.executable} -m accio.cli bench -T write -m posix -s 1m -r 1m -i 1 -q -d {tmp_path} "
                       f"--json {tmp_path / 'b.json'} >&-", shell=True, capture_output=True, text=True)
    assert (tmp_path / "b.json").exists() and "Traceback" not in r.stderr, r.stderr  # the work done, then said
    assert r.returncode == 1 and "stdout is closed" in r.stderr, r.stderr  # (its table went nowhere)


def test_info_names_accio_variables_it_does_not_read(tmp_path):
    """A typo (ACCIO_THREAD=4) was ignored without a word: accio info warns, with the nearest name, and
    still exits 0 (a newer accio may read it)."""
    env = dict(os.environ, ACCIO_THREAD="4", ACCIO_NOTHING_LIKE_IT="1")
    r = subprocess.run([sys.executable, "-m", "accio.cli", "info", str(tmp_path)], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert "accio info: warning: ACCIO_THREAD is not a variable accio reads (did you mean ACCIO_THREADS?)" in r.stderr
    assert "ACCIO_NOTHING_LIKE_IT is not a variable accio reads\n" in r.stderr
    r = subprocess.run([sys.executable, "-m", "accio.cli", "info", str(tmp_path)], capture_output=True, text=True)
    assert "is not a variable accio reads" not in r.stderr, r.stderr  # every one the tests set is known


def test_a_bad_accio_variable_is_exit_1_for_every_command(tmp_path):
    """The table's rule for a bad ACCIO_* value (1: it ran and failed), the same in bench as in info and
    tune (bench said 2, a usage error), each naming the variable and what to do."""
    env = dict(os.environ, ACCIO_THREADS="abc")
    (tmp_path / "x.safetensors").write_bytes(b"\x02\0\0\0\0\0\0\0{}")
    for argv in (["info", str(tmp_path)], ["tune", str(tmp_path), "--budget", "5", "--file-size", "8m",
                                           "--profile", str(tmp_path / "p.json")],
                 ["bench", "safetensors", str(tmp_path / "x.safetensors"), "--rounds", "1"],
                 ["bench", "-s", "1m", "-r", "1m", "-T", "write", "-i", "1", "-d", str(tmp_path)]):
        r = subprocess.run([sys.executable, "-m", "accio.cli", *argv], capture_output=True, text=True, env=env)
        assert r.returncode == 1, (argv, r.stderr)
        assert "ACCIO_THREADS='abc'" in r.stderr and "correct the variable or unset it" in r.stderr, (argv, r.stderr)


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("argv, status, fragment", EXIT_TABLE, ids=[" ".join(a) for a, _, _ in EXIT_TABLE])
def test_exit_status_and_message(places, argv, status, fragment, front):
    argv = [a.format(**places) for a in argv]
    r = subprocess.run([*FRONTS[front], *argv], capture_output=True, text=True, cwd=places["tmp"], timeout=120)
    assert r.returncode == status, r.stderr
    assert fragment.format(**places) in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not os.path.exists(os.path.join(places["tmp"], "-")), "a file named '-' was created"
    if status in (1, 2, 125) and argv[0] != "nosuchcommand":
        # the error is the last line and starts with `accio` (argparse's: usage, then `accio: error: ...`)
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("accio"), r.stderr


@pytest.mark.parametrize("package, argv, env, fragment", [
    ("matplotlib", ["bench", "--plot", "plots"], {}, "accio bench: --plot needs matplotlib: pip install 'accio-io[plot]'"),
    ("mpi4py", ["bench"], {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"},
     "accio bench: running under an MPI launcher but mpi4py is not installed: pip install 'accio-io[mpi]'"),
])
def test_a_missing_optional_package_is_a_usage_error_before_the_run(tmp_path, package, argv, env, fragment):
    """A missing optional package is exit 2 before anything is measured, as a missing fio (--vs-fio),
    torch (bench safetensors) or GPU (--target cuda:0, tune --device 0) are: asked for what this
    machine lacks. --plot used to find matplotlib missing after the whole run."""
    trap = tmp_path / "trap"
    trap.mkdir()
    (trap / "sitecustomize.py").write_text(f"import sys\nsys.modules[{package!r}] = None  # not installed\n")
    e = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(trap), os.environ.get("PYTHONPATH")])), **env)
    r = subprocess.run([*ACCIO, *argv, "-d", str(tmp_path), "-s", "1m", "-r", "1m", "-i", "1"],
                       capture_output=True, text=True, cwd=tmp_path, env=e, timeout=120)
    assert r.returncode == 2 and fragment in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "plots").exists()
    assert r.stdout == "", "nothing was measured (a run prints its table)"


def _small_bench(*extra):
    return ["bench", "-T", "write,read", "-m", "posix", "-s", "1m", "-r", "1m", "-i", "1", "-q", *extra]


@pytest.mark.parametrize("option", ["--json", "--csv", "--report"])
def test_dash_is_stdout_and_the_table_goes_to_stderr(tmp_path, option):
    """The table goes to stderr when stdout holds the output asked for, and nowhere under -q (it did
    go to stderr then too: -q left a table there)."""
    r = subprocess.run([*ACCIO, *[a for a in _small_bench("-d", str(tmp_path), option, "-") if a != "-q"]],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert r.returncode == 0 and "posix" in r.stderr, r.stderr  # the table
    r = subprocess.run([*ACCIO, *_small_bench("-d", str(tmp_path), option, "-")], capture_output=True, text=True,
                       cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "-").exists()
    assert r.stderr == "", r.stderr  # -q: nothing but errors and warnings
    if option == "--json":
        assert json.loads(r.stdout)["schema"] == "accio.bench/1"
    elif option == "--csv":
        assert r.stdout.splitlines()[0].startswith("test,mechanism,")
    else:
        assert r.stdout.lstrip().lower().startswith("<!doctype html")
    assert "wrote" not in r.stderr


def test_run_letters_do_not_clash_with_bench():
    """-t is threads in bench (as in IOzone); run's threshold is --threshold / -l."""
    run_help = run("run", "--help").stdout
    assert "--threshold BYTES, -l BYTES" in run_help or "-l BYTES, --threshold BYTES" in run_help
    assert "-t," not in run_help and "-t " not in run_help
    assert "-t THREADS, --threads THREADS" in run("bench", "--help").stdout


@pytest.mark.parametrize("argv, schema", [
    (["offload-bench", "--quick", "--transports", "socket", "--reps", "1", "--max-bytes", "1m"],
     "accio.offload-bench/1"),
    (["tune", ".", "--evaluate", "--file-sizes", "1m", "--transfers", "64k", "--reps", "1", "-q"],
     "accio.tune-evaluate/1"),
])
def test_json_dash_elsewhere(tmp_path, argv, schema):
    r = subprocess.run([*ACCIO, *argv, "--json", "-"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    if argv[0] == "offload-bench" and r.returncode == 1 and "is missing" in r.stderr:
        pytest.skip("this package has no offload runtime")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["schema"] == schema  # stdout is the JSON alone; the tables went to stderr
    assert not (tmp_path / "-").exists() and "wrote" not in r.stderr


def _into_a_closed_pipe(argv, cwd):
    """Runs argv with stdout a pipe whose reader has already gone (as `| head` leaves it), with
    Python's stdout buffered as users have it (a PYTHONUNBUFFERED in the test's environment hid
    that the broken pipe then comes at the interpreter's last flush: exit 120)."""
    r, w = os.pipe()
    os.close(r)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    try:
        return subprocess.run(argv, stdout=w, stderr=subprocess.PIPE, text=True, cwd=cwd, timeout=120, env=env)
    finally:
        os.close(w)


@pytest.mark.parametrize("front", FRONTS)
def test_a_reader_that_went_away_is_not_an_error(places, front, tmp_path):
    # `accio tune DIR --show | head -5` printed "accio tune: broken pipe (errno 32)" and exited 1;
    # `accio run --stats-json - -- true | head`, the same and 125. Coreutils exit quietly (141).
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for f in (a, b):
        subprocess.run([*ACCIO, *_small_bench("-d", str(tmp_path), "--json", str(f))], check=True, timeout=300,
                       capture_output=True)
    for argv in (["info"], ["bench", "compare", str(a), str(b)]):
        r = _into_a_closed_pipe([*FRONTS[front], *argv], places["tmp"])
        assert (r.returncode, r.stderr) == (141, ""), (argv, r.returncode, r.stderr)
    for argv in (["--help"], ["bench", "--help"]):  # argparse's exit 0, its text unflushed: quiet too
        r = _into_a_closed_pipe([*FRONTS[front], *argv], places["tmp"])
        assert r.returncode in (0, 141) and r.stderr == "", (argv, r.returncode, r.stderr)
    # accio run: the program's own status stands, and nothing is said about the report's pipe
    for code in (0, 3):
        r = _into_a_closed_pipe([*FRONTS[front], "run", "--stats-json", "-", "--", "sh", "-c", f"exit {code}"],
                                places["tmp"])
        assert (r.returncode, r.stderr) == (code, ""), (code, r.returncode, r.stderr)


def test_a_broken_pipe_that_is_not_stdout_stays_an_error(tmp_path):
    """Only stdout's reader going away is quiet: a BrokenPipeError from another pipe (a worker's
    socket) is reported, exit 1, while stdout is a live pipe (in a child process, so that stdout is a
    real descriptor and the poll runs)."""
    code = textwrap.dedent("""
        import sys
        from accio import cli
        def fails(_args):
            raise BrokenPipeError(32, "Broken pipe", "the offload worker's socket")
        sys.exit(cli._guarded("offload-bench", fails, None))
    """)
    r = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert "accio offload-bench: the offload worker's socket: broken pipe (errno 32)" in r.stderr
