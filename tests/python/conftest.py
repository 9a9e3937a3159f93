import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("ACCIO_QUIET", "1")
# Profiles the tests write (accio tune) or rely on never come from or go to the user's cache.
os.environ["ACCIO_PROFILE_DIR"] = tempfile.mkdtemp(prefix="accio-test-profiles-")

MECHANISMS = ["posix", "parallel", "direct", "uring", "auto"]


@pytest.fixture(params=MECHANISMS)
def mechanism(request):
    return request.param


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

