"""The manylinux wheels `make wheel` leaves in build/wheelhouse pass .ci/wheel.py's check (tag is
manylinux, `auditwheel show` agrees, no library outside the policy), and the check refuses a wheel
auditwheel has not repaired. Skipped until `make wheel` has run (it needs auditwheel, which make
wheel installs in build/wheel/tools)."""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

TOP = Path(__file__).resolve().parents[2]
TOOLS = TOP / "build" / "wheel" / "tools" / "bin" / "auditwheel"
AUDITWHEEL = TOOLS if TOOLS.exists() else (shutil.which("auditwheel") and Path(shutil.which("auditwheel")))
REPAIRED = sorted((TOP / "build" / "wheelhouse").glob("accio_io-*.whl"))
RAW = sorted((TOP / "build" / "wheel").glob("raw-*/accio_io-*.whl"))

pytestmark = pytest.mark.skipif(not AUDITWHEEL or not REPAIRED, reason="no wheel built (make wheel) or no auditwheel")


def wheel_py():
    spec = importlib.util.spec_from_file_location("wheel_py", TOP / ".ci" / "wheel.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("wheel", REPAIRED, ids=lambda p: p.name)
def test_repaired_wheels_pass_the_check(wheel, monkeypatch):
    monkeypatch.setenv("PATH", f"{AUDITWHEEL.parent}:{__import__('os').environ['PATH']}")
    assert wheel_py().check(wheel, AUDITWHEEL) == []
    assert "manylinux" in wheel.name


@pytest.mark.skipif(not RAW, reason="no unrepaired wheel kept")
def test_the_check_refuses_an_unrepaired_wheel():
    problems = wheel_py().check(RAW[0], AUDITWHEEL)
    assert any("is not a manylinux tag" in p for p in problems), problems
