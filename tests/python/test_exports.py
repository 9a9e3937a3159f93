"""The installed package's libraries export their API and nothing else (DESIGN.md; issue 17).

The same check as ctest -L exports (tests/check_exports.py), on what pip installed: the extension
module (PyInit__ext only), lib/libaccio.so (what include/accio/accio.h declares, and nothing of the
offload runtime or libffi), lib/libaccio_offload.so (what include/accio/ve_offload.h declares), the
preload shim (the libc names it interposes) and the worker programs (nothing of their own). A wheel built by a
compiler that links libstdc++ statically exported the C++ runtime from both libraries and crashed.
"""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

import accio

ROOT = Path(__file__).resolve().parents[2]
PKG = Path(accio.__file__).resolve().parent

spec = importlib.util.spec_from_file_location("check_exports", ROOT / "tests" / "check_exports.py")
check_exports = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_exports)

pytestmark = pytest.mark.skipif(not shutil.which("nm") or not shutil.which("ldd"), reason="needs nm and ldd")


def header(name: str) -> str:
    """A public header: installed with the package, else the checkout's."""
    inc = PKG / "include" / "accio"
    if not (inc / "accio.h").exists():
        inc = ROOT / "include" / "accio"
    return str(inc / name)


def assert_exports(obj: Path, *args, **kwargs):
    found, names = check_exports.problems(str(obj), *args, **kwargs)
    assert not found, f"{obj}:\n" + "\n".join(found)
    return names


def test_extension_exports_only_its_init():
    ext = sorted(PKG.glob("_ext*.so"))
    assert ext, f"no _ext*.so in {PKG}"
    assert assert_exports(ext[0], str(ROOT / "cmake" / "accio_ext.map")) == ["PyInit__ext"]


def test_libaccio_exports_its_header():
    lib = PKG / "lib" / "libaccio.so"
    names = assert_exports(lib, str(ROOT / "cmake" / "libaccio.map"), [header("accio.h")])
    assert "accio_open" in names and "accio_log" in names
    assert not [n for n in names if n.startswith(("io_uring", "ffi_", "_Z", "veo_", "accio_offload_"))]
    # the offload runtime and libffi are libaccio_offload's alone (issue 18; stripped here: the
    # exports and DT_NEEDED are what this sees)
    assert check_exports.forbidden(str(lib), ["veo_*", "accio_offload_*", "ffi_*"], ["libffi*"]) == []


def test_libaccio_offload_exports_its_header():
    lib = PKG / "lib" / "libaccio_offload.so"
    names = assert_exports(lib, str(ROOT / "cmake" / "libaccio_offload.map"), [header("ve_offload.h")])
    assert "veo_proc_create" in names and "accio_offload_worker_main" in names
    assert all(n.startswith(("veo_", "accio_offload_")) for n in names)
    # it uses libaccio (settings, log) as a dependency, not a copy of it
    assert [n for n in check_exports.needed(str(lib)) if n.startswith("libaccio")] == ["libaccio.so"]


def test_wheel_sonames_are_the_file_names():
    """The wheel holds no symlinks (docs/abi.md): each library's soname is its file name, so that
    what links it (the extension, libaccio_offload, the programs) finds it in lib/."""
    for name in ("libaccio.so", "libaccio_offload.so"):
        assert check_exports.soname(str(PKG / "lib" / name)) == name
    for obj in [*PKG.glob("_ext*.so"), PKG / "lib" / "libaccio_offload.so", PKG / "lib" / "accio-offload-worker"]:
        libs = [n for n in check_exports.needed(str(obj)) if n.startswith("libaccio")]
        assert libs and all((PKG / "lib" / n).exists() for n in libs), (obj, libs)


def test_preload_shim_exports_what_it_interposes():
    assert_exports(PKG / "lib" / "libaccio_preload.so", str(ROOT / "cmake" / "accio_preload.map"),
                   sources=[str(ROOT / "src" / "preload" / "preload.c")])


@pytest.mark.parametrize("program", ["accio-offload-worker", "accio-offload-bench"])
def test_programs_export_nothing_of_their_own(program):
    assert_exports(PKG / "lib" / program, None, program=True)


def test_check_fails_on_extra_symbols(tmp_path):
    """The check is not vacuous: libaccio against the shim's list fails and names what it exports."""
    found, _ = check_exports.problems(str(PKG / "lib" / "libaccio.so"), str(ROOT / "cmake" / "accio_preload.map"))
    assert found and "accio_open" in found[0]
    empty = tmp_path / "empty.map"
    empty.write_text("{ local: *; };\n")
    found, _ = check_exports.problems(str(PKG / "lib" / "libaccio.so"), str(empty))
    assert found == [f"{empty} declares no symbol"]
    # and --forbid sees a symbol that is there (the installed libraries are stripped, so only what
    # they export: ctest -L exports checks the build's full symbol tables for libffi as well)
    found = check_exports.forbidden(str(PKG / "lib" / "libaccio_offload.so"), ["veo_proc_*"], ["libaccio*"])
    assert len(found) == 2 and "veo_proc_create" in found[0] and "libaccio.so" in found[1]
