import atexit
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("ACCIO_QUIET", "1")
# Profiles the tests write (accio tune) or rely on never come from or go to the user's cache.
os.environ["ACCIO_PROFILE_DIR"] = tempfile.mkdtemp(prefix="accio-test-profiles-")
atexit.register(shutil.rmtree, os.environ["ACCIO_PROFILE_DIR"], ignore_errors=True)

MECHANISMS = ["posix", "parallel", "direct", "uring", "auto"]
# The smallest profile document the planner takes: posix for every request.
POSIX_PROFILE = json.dumps({"schema": "accio.profile/1", "plans": [{"mechanism": "posix"}], "decisions": {
    op: {n: {"hot": [{"max_size": None, "plans": [0]}]} for n in ("1", "N")} for op in ("read", "write")}})


@pytest.fixture(params=MECHANISMS)
def mechanism(request):
    return request.param


@pytest.fixture
def data(tmp_path):
    """A 4 MiB + 123 B file of random bytes: (path, content). Some test files have their own `data`."""
    p = tmp_path / "data.bin"
    content = os.urandom((4 << 20) + 123)
    p.write_bytes(content)
    return p, content


def compile_shared(tmp_path_factory, source: str, name: str, *flags: str) -> str:
    """Builds tests/<source> into a shared library `name` in a fresh temporary directory (skips the
    test when there is no C compiler); returns its path."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    out = tmp_path_factory.mktemp(Path(name).stem) / name
    subprocess.run([cc, "-shared", "-fPIC", "-O2", *flags, "-o", str(out),
                    str(Path(__file__).resolve().parents[1] / source)], check=True)
    return str(out)



def fake_cuda(tmp_path_factory) -> str:
    """Builds the fake CUDA driver and cuFile (tests/fake_cuda: its C, and the C++ that makes its
    cuFile a C++ library on the shared libstdc++ like the real one) into a fresh temporary
    directory; returns the library's path for ACCIO_LIBCUDA / ACCIO_LIBCUFILE."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if not cxx:
        pytest.skip("no C++ compiler")
    src = Path(__file__).resolve().parents[1] / "fake_cuda"
    out = tmp_path_factory.mktemp("fakecuda") / "libfakecuda.so"
    objs = []
    for s in sorted(src.glob("*.c")) + sorted(src.glob("*.cpp")):
        obj = out.parent / (s.name + ".o")
        lang = ["-x", "c", "-std=gnu11"] if s.suffix == ".c" else ["-x", "c++", "-std=c++17"]
        subprocess.run([cxx, *lang, "-c", "-fPIC", "-O2", "-fvisibility=hidden", "-o", str(obj), str(s)], check=True)
        objs.append(str(obj))
    subprocess.run([cxx, "-shared", "-o", str(out), *objs, "-pthread"], check=True)
    return str(out)
