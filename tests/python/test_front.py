"""The `accio` command on PATH is native (src/preload/front.c): `accio run` is the launcher in the same
process, no Python starts in front of the program; everything else is exec'd to accio-py, the Python
CLI beside it, with the same argv (bytes that are not UTF-8 and empty strings included), stdin,
stdout, stderr, pid, exit status and signals. Without accio-py it says so. The launcher finds the
shim in every layout pip makes (venv, --prefix, --user, --target, Debian's dist-packages; the slow
tests install a wheel built from this tree) and renders --stats with the installation's own Python,
never a python3 from PATH."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import accio
from accio.run import package_dir, shim_path

BIN = Path(sys.executable).parent
FRONT = BIN / "accio"
TOP = Path(__file__).resolve().parents[2]
PYLIB = f"python{sys.version_info[0]}.{sys.version_info[1]}"

# An accio-py stand-in: its pid, then its arguments, each ended by NUL, on stdout; its stdin on
# stderr; the exit status FAKE_RC, or death by SIGTERM when FAKE_RC is "term".
FAKE_PY = """#!/bin/sh
printf '%s\\0' "$$" "$@"
cat >&2
[ "$FAKE_RC" = term ] && kill -TERM $$
exit "${FAKE_RC:-0}"
"""


def python_trap(tmp_path: Path) -> tuple[dict, Path]:
    """An environment in which any Python that starts writes its argv to the returned file first
    (sitecustomize on PYTHONPATH): the evidence of whether a command started Python at all."""
    trap = tmp_path / "trap"
    trap.mkdir()
    mark = tmp_path / "python-started"
    (trap / "sitecustomize.py").write_text(
        f"import sys\nwith open({str(mark)!r}, 'a') as f:\n    f.write(repr(sys.argv) + '\\n')\n")
    return dict(os.environ, PYTHONPATH=str(trap)), mark


def front_in(where: Path, *, py: str | None = FAKE_PY, package: bool = True) -> Path:
    """A copy of the native accio in where/bin (a copy: /proc/self/exe of a link is the original),
    with accio-py beside it (py: its text, None for none) and, with package, the installed package's
    lib/ where a --target install puts it (where/accio/lib, a link to the real one)."""
    (where / "bin").mkdir(parents=True)
    exe = where / "bin" / "accio"
    shutil.copy2(FRONT, exe)
    if py is not None:
        (where / "bin" / "accio-py").write_text(py)
        (where / "bin" / "accio-py").chmod(0o755)
    if package:
        (where / "accio").mkdir()
        (where / "accio" / "lib").symlink_to(Path(shim_path()).parent)
    return exe


def entry_of(shim) -> str:
    """The LD_PRELOAD entry the launcher gives for this shim: its real path, or where the machine has a
    32-bit loader, the copy of it through lib/accio-platform/$PLATFORM (test_preload's 32-bit test says why)."""
    real = os.path.realpath(shim)
    tree = os.path.join(os.path.dirname(real), "accio-platform")
    return os.path.join(tree, "$PLATFORM", "libaccio_preload.so") \
        if os.path.exists("/lib/ld-linux.so.2") and os.path.isdir(tree) else real


def fields(out: bytes) -> list[bytes]:
    assert out.endswith(b"\0"), out
    return out[:-1].split(b"\0")


def test_accio_is_native_and_accio_py_is_this_python():
    assert FRONT.read_bytes()[:4] == b"\x7fELF"
    py = BIN / "accio-py"
    first = py.read_text().splitlines()[0]
    assert first == f"#!{sys.executable}" or sys.executable in py.read_text(), first


def test_accio_run_starts_no_python(tmp_path):
    """accio run -- PROGRAM: the program is this process's child (the front became it by exec) and
    no Python started on the way; the trap does fire for a command that goes to Python."""
    env, mark = python_trap(tmp_path)
    p = subprocess.run([str(FRONT), "run", "--", "sh", "-c", 'echo "$PPID $LD_PRELOAD"; exit 3'], env=env,
                       capture_output=True, text=True)
    ppid, preload = p.stdout.split()
    assert p.returncode == 3 and int(ppid) == os.getpid(), p
    assert preload.split(":")[0] == entry_of(shim_path())
    for argv, code in ((["run", "--help"], 0), (["run", "--bogus", "--", "true"], 125),
                       (["run", "-l", "64k", "--", "true"], 0), (["run", "--", "no-such-program-xyz"], 127)):
        assert subprocess.run([str(FRONT), *argv], env=env, capture_output=True).returncode == code, argv
    assert not mark.exists(), mark.read_text()
    assert subprocess.run([str(FRONT), "--version"], env=env, capture_output=True, text=True).stdout == \
        f"accio {accio.__version__}\n"
    assert "accio-py" in mark.read_text()


def test_run_help_is_the_launchers():
    native = subprocess.run([str(FRONT), "run", "--help"], capture_output=True, text=True, check=True).stdout
    assert native == subprocess.run([str(BIN / "accio-run"), "--help"], capture_output=True, text=True,
                                    check=True).stdout
    assert native.startswith("usage: accio run [options] -- program [args...]")


@pytest.mark.parametrize("argv", [[], ["--help"], ["--version"], ["info", "/nonexistent"], ["bogus-command"],
                                  ["config", "--prefix"], ["bench", "--bogus"]], ids=lambda a: " ".join(a) or "-")
def test_the_rest_is_the_python_cli(argv):
    """Everything but run: the same stdout, stderr and status as accio-py itself."""
    native = subprocess.run([str(FRONT), *argv], capture_output=True)
    py = subprocess.run([str(BIN / "accio-py"), *argv], capture_output=True)
    assert (native.returncode, native.stdout, native.stderr) == (py.returncode, py.stdout, py.stderr)
    if argv == ["config", "--prefix"]:
        assert native.stdout.decode().strip() == package_dir()


def test_python_m_accio_is_the_python_cli():
    out = subprocess.run([sys.executable, "-m", "accio", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout == f"accio {accio.__version__}\n"


def test_exec_keeps_argv_stdin_pid_status_and_signals(tmp_path):
    exe = front_in(tmp_path)
    argv = [b"info", b"\xff\xfe not utf-8", b"", b"two words", b"--", b"-x", "€".encode()]
    p = subprocess.Popen([bytes(exe), *argv], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=dict(os.environ, FAKE_RC="42"))
    out, err = p.communicate(b"stdin \x00\xff bytes")
    pid, *got = fields(out)
    assert got == argv and int(pid) == p.pid  # the same process: the front became accio-py
    assert err == b"stdin \x00\xff bytes" and p.returncode == 42
    p = subprocess.run([str(exe)], capture_output=True, env=dict(os.environ, FAKE_RC="0"))
    assert p.returncode == 0 and fields(p.stdout)[1:] == []
    p = subprocess.run([str(exe), "tune"], capture_output=True, env=dict(os.environ, FAKE_RC="term"))
    assert p.returncode == -signal.SIGTERM


def test_no_accio_py_beside_it(tmp_path):
    """Without accio-py: a clear error, 1 for the commands it would run; accio run still runs
    programs (the shim is found without Python) and refuses --stats (125) before the program runs."""
    exe = front_in(tmp_path, py=None)
    for argv in ([], ["--version"], ["info"]):
        p = subprocess.run([str(exe), *argv], capture_output=True, text=True)
        assert p.returncode == 1, p
        assert p.stderr == (f"accio: accio-py, the Python part of accio, is missing or not executable "
                            f"({exe.parent / 'accio-py'}); reinstall accio (pip install accio-io), or run "
                            "python -m accio\n")
    p = subprocess.run([str(exe), "run", "--", "sh", "-c", 'echo "$LD_PRELOAD"'], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.split(":")[0].strip() == entry_of(shim_path()), p
    ran = tmp_path / "ran"
    for opt in (["--stats"], ["--stats-json", str(tmp_path / "s.json")]):
        p = subprocess.run([str(exe), "run", *opt, "--", "touch", str(ran)], capture_output=True, text=True)
        assert p.returncode == 125 and "accio-py, the Python part of accio, which is missing" in p.stderr, p
        assert p.stderr.startswith(f"accio run: {opt[0]}: ") and not ran.exists()


def test_accio_py_that_cannot_run(tmp_path):
    """accio-py not executable, or naming a Python that is gone: a clear error, status 1."""
    exe = front_in(tmp_path / "a")
    (exe.parent / "accio-py").chmod(0o644)
    p = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
    assert p.returncode == 1 and "accio-py, the Python part of accio, is missing or not executable" in p.stderr
    exe = front_in(tmp_path / "b", py="#!/nonexistent/python3\n")
    p = subprocess.run([str(exe), "info"], capture_output=True, text=True)
    assert p.returncode == 1, p
    assert p.stderr == (f"accio: cannot run {exe.parent / 'accio-py'}: no such file or directory (errno 2): "
                        "the Python named in its first line is gone; reinstall accio\n")


def test_stats_are_rendered_by_accio_py_not_python3_on_path(tmp_path):
    """The report after a --stats run is accio-py's (the installation's Python), with the program's
    status; a python3 first on PATH is never asked."""
    exe = front_in(tmp_path)
    trap = tmp_path / "path"
    trap.mkdir()
    for name in ("python3", "python"):
        (trap / name).write_text(f"#!/bin/sh\ntouch {tmp_path / 'path-python-ran'}\nexit 99\n")
        (trap / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{trap}:{os.environ['PATH']}", FAKE_RC="0")
    env.pop("ACCIO_RUN_PYTHON", None)
    p = subprocess.run([str(exe), "run", "--stats", "-l", "64k", "--", "sh", "-c", "exit 5"], capture_output=True,
                       env=env, stdin=subprocess.DEVNULL)
    assert p.returncode == 5, p.stderr
    _, *argv = fields(p.stdout)
    assert argv[0] == b"--run-report" and argv[2:] == [b"--status", b"5", b"--stats", b"--threshold", b"65536",
                                                       b"--", b"sh", b"-c", b"exit 5"], argv
    assert not os.path.exists(argv[1]), "the statistics directory is left behind"
    assert not (tmp_path / "path-python-ran").exists()
    # a report that fails is accio's own error
    p = subprocess.run([str(exe), "run", "--stats", "--", "true"], capture_output=True,
                       env=dict(env, FAKE_RC="1"), stdin=subprocess.DEVNULL)
    assert p.returncode == 125


def test_accio_run_python_counts_only_as_an_absolute_path(tmp_path):
    """ACCIO_RUN_PYTHON=python3 (a name, to be looked up in PATH) is ignored with a warning and
    accio-py renders the report; an absolute ACCIO_RUN_PYTHON is run as `P -m accio.cli ...`."""
    exe = front_in(tmp_path)
    trap = tmp_path / "path"
    trap.mkdir()
    (trap / "python3").write_text(f"#!/bin/sh\ntouch {tmp_path / 'path-python-ran'}\nexit 99\n")
    (trap / "python3").chmod(0o755)
    env = dict(os.environ, PATH=f"{trap}:{os.environ['PATH']}", FAKE_RC="0", ACCIO_RUN_PYTHON="python3")
    p = subprocess.run([str(exe), "run", "--stats", "-l", "64k", "--", "sh", "-c", "exit 5"], capture_output=True,
                       env=env, stdin=subprocess.DEVNULL)
    assert p.returncode == 5, p.stderr
    assert b"ACCIO_RUN_PYTHON=python3 is not an absolute path: ignored" in p.stderr, p.stderr
    _, *argv = fields(p.stdout)
    assert argv[0] == b"--run-report", argv  # accio-py's words: no -m accio.cli
    assert not (tmp_path / "path-python-ran").exists()
    # an absolute one is the report's interpreter
    py = tmp_path / "py"
    py.write_text(FAKE_PY)
    py.chmod(0o755)
    p = subprocess.run([str(exe), "run", "--stats", "-l", "64k", "--", "true"], capture_output=True,
                       env=dict(env, ACCIO_RUN_PYTHON=str(py)), stdin=subprocess.DEVNULL)
    assert p.returncode == 0 and b"not an absolute path" not in p.stderr, p.stderr
    _, *argv = fields(p.stdout)
    assert argv[:3] == [b"-m", b"accio.cli", b"--run-report"], argv


def test_real_stats_with_no_python_on_path(tmp_path):
    """The installed accio renders --stats with PATH holding no Python with accio at all."""
    data = tmp_path / "d.bin"
    data.write_bytes(os.urandom(2 << 20))
    env = dict(os.environ, PATH="/usr/bin:/bin")
    env.pop("ACCIO_RUN_PYTHON", None)
    p = subprocess.run([str(FRONT), "run", "--stats", "--stats-json", str(tmp_path / "s.json"), "-l", "64k", "--",
                        "dd", f"if={data}", "of=/dev/null", "bs=1M", "status=none"], capture_output=True, text=True,
                       env=env)
    assert p.returncode == 0 and "accio run: 1 process, 1 file" in p.stderr, p.stderr
    assert '"schema": "accio.run-stats/1"' in (tmp_path / "s.json").read_text()


# ---- layouts: a wheel built from this tree, installed as pip installs it ----

@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """ACCIO_TEST_WHEEL (e.g. one `make wheel` built), else a wheel built from this tree in the build
    directory `make install` uses (incremental after it: about 20 s)."""
    given = os.environ.get("ACCIO_TEST_WHEEL")
    if given:
        return Path(given)
    if not (TOP / "pyproject.toml").is_file():
        pytest.skip("not in a source tree")
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "-w", str(out),
                    str(TOP)], check=True, cwd=TOP)
    (w,) = out.glob("accio_io-*.whl")
    names = zipfile.ZipFile(w).namelist()
    assert any(n.endswith(".data/scripts/accio") for n in names), names
    return w


def pip_install(python: str, wheel: Path, *options: str, env: dict | None = None, into: Path | None = None) -> None:
    """pip install of the wheel with options; into: the Python to install for (pip --python)."""
    subprocess.run([python, "-m", "pip", *(["--python", str(into)] if into else []), "install", "--ignore-installed", "-q", "--no-deps", "--no-index", "--no-warn-script-location",
                    *options, str(wheel)], check=True, env=env, capture_output=True)


def base_python() -> str:
    """This interpreter outside its virtual environment (pip refuses --user inside one)."""
    return getattr(sys, "_base_executable", None) or sys.executable


def layouts(root: Path, wheel: Path) -> dict[str, tuple[Path, Path]]:
    """Installs the wheel in each layout; returns name -> (scripts directory, package directory)."""
    out = {}
    sp = f"lib/{PYLIB}/site-packages"
    venv = root / "venv"
    subprocess.run([base_python(), "-m", "venv", "--without-pip", str(venv)], check=True)
    pip_install(sys.executable, wheel, into=venv / "bin" / "python")
    out["venv"] = (venv / "bin", venv / sp / "accio")
    pip_install(sys.executable, wheel, "--prefix", str(root / "prefix"))
    out["--prefix"] = (root / "prefix" / "bin", root / "prefix" / sp / "accio")
    pip_install(sys.executable, wheel, "--target", str(root / "target"))
    out["--target"] = (root / "target" / "bin", root / "target" / "accio")
    user = root / "user"
    # this environment's pip run for the base interpreter (--python): a fresh Debian has no pip of its own
    pip_install(sys.executable, wheel, "--user", "--break-system-packages",
                env=dict(os.environ, PYTHONUSERBASE=str(user)), into=Path(base_python()))
    out["--user"] = (user / "bin", user / sp / "accio")
    debian = Path(f"/usr/bin/{PYLIB}")
    if debian.is_file() and subprocess.run([str(debian), "-m", "pip", "--version"], capture_output=True).returncode == 0 \
            and "dist-packages" in subprocess.run([str(debian), "-c", "import sysconfig; print(sysconfig.get_path("
                                                   "'platlib'))"], capture_output=True, text=True).stdout:
        pip_install(str(debian), wheel, "--prefix", str(root / "debian"), "--break-system-packages")
        found = sorted((root / "debian").glob(f"**/{PYLIB}/dist-packages/accio"))
        assert len(found) == 1, found
        out["debian dist-packages"] = (found[0].parents[3] / "bin", found[0])
    return out


@pytest.mark.slow
def test_the_shim_is_found_in_every_layout(wheel, tmp_path):
    """accio run and accio-run, as pip installed them, put that installation's own shim in
    LD_PRELOAD, without starting Python; accio-py there works with the package on its path."""
    env, mark = python_trap(tmp_path)
    places = layouts(tmp_path / "l", wheel)
    if "debian dist-packages" not in places:
        print("no Debian python3 with pip here: the dist-packages layout is not tested")
    for name, (scripts, package) in places.items():
        shim = package / "lib" / "libaccio_preload.so"
        assert shim.is_file(), (name, shim)
        for cmd in ([str(scripts / "accio"), "run"], [str(scripts / "accio-run")]):
            p = subprocess.run([*cmd, "--", "sh", "-c", 'echo "$LD_PRELOAD"'], env=env, capture_output=True, text=True)
            assert p.returncode == 0 and p.stdout.strip() == entry_of(shim), (name, cmd, p)
        assert not mark.exists(), (name, mark.read_text())
    # accio-py of the --prefix and --target installs, with the package put on the path as their users do
    data = tmp_path / "d.bin"
    data.write_bytes(os.urandom(2 << 20))
    deps = sysconfig.get_path("purelib")  # numpy, for import accio
    for name, site in (("--prefix", places["--prefix"][1].parent), ("--target", places["--target"][1].parent)):
        scripts = places[name][0]
        penv = dict(os.environ, PYTHONPATH=f"{site}:{deps}", PATH="/usr/bin:/bin")
        p = subprocess.run([str(scripts / "accio"), "config", "--prefix"], env=penv, capture_output=True, text=True)
        assert p.returncode == 0 and p.stdout.strip() == str(places[name][1].resolve()), (name, p)
        p = subprocess.run([str(scripts / "accio"), "run", "--stats", "-l", "64k", "--", "dd", f"if={data}",
                            "of=/dev/null", "bs=1M", "status=none"], env=penv, capture_output=True, text=True)
        assert p.returncode == 0 and "accio run: 1 process, 1 file" in p.stderr, (name, p.stderr)


@pytest.mark.slow
def test_the_last_resort_asks_accio_py(wheel, tmp_path):
    """Scripts moved away from the package (no layout rule finds it): accio-py says where it is
    (config --prefix), a Python start-up; with no accio-py that knows, accio run fails with 125."""
    pip_install(sys.executable, wheel, "--target", str(tmp_path / "t"))
    moved = tmp_path / "elsewhere" / "bin"
    moved.parent.mkdir()
    shutil.move(str(tmp_path / "t" / "bin"), str(moved))
    env, mark = python_trap(tmp_path)
    env["PYTHONPATH"] += f":{tmp_path / 't'}:{sysconfig.get_path('purelib')}"
    p = subprocess.run([str(moved / "accio"), "run", "--", "sh", "-c", 'echo "$LD_PRELOAD"'], env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p
    assert p.stdout.strip() == entry_of(tmp_path / "t" / "accio" / "lib" / "libaccio_preload.so")
    assert "'config', '--prefix'" in mark.read_text()  # it was asked
    for broken in ("#!/bin/sh\necho nothing here; exit 1\n", "#!/bin/sh\necho /nonexistent\n", None):
        (moved / "accio-py").unlink(missing_ok=True)
        if broken:
            (moved / "accio-py").write_text(broken)
            (moved / "accio-py").chmod(0o755)
        p = subprocess.run([str(moved / "accio"), "run", "--", "touch", str(tmp_path / "ran")], capture_output=True,
                           text=True)
        assert p.returncode == 125 and not (tmp_path / "ran").exists(), p
        assert p.stderr == ("accio run: the preload library libaccio_preload.so is not in this installation of accio "
                            f"(looked beside {moved / 'accio'}, in the package beside it, and asked accio-py); "
                            "reinstall accio\n")
