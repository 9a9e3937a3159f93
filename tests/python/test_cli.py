"""The accio command: --version, --help everywhere, info (text and JSON), config. (bench: test_bench.py)"""
import json
import os
import shutil
import subprocess
import sys

import pytest

ACCIO = [sys.executable, "-m", "accio.cli"]


def run(*args, check=True):
    return subprocess.run([*ACCIO, *args], capture_output=True, text=True, check=check)


def test_version():
    assert run("--version").stdout.strip() == "accio 0.1.0"


@pytest.mark.parametrize("sub", [[], ["info"], ["config"], ["bench"], ["bench", "compare"]])
def test_help(sub):
    out = run(*sub, "--help").stdout
    assert "usage: accio" in out


def test_no_command_prints_help_and_fails():
    r = run(check=False)
    assert r.returncode == 2 and "COMMAND" in r.stdout


def test_info_text_and_json(tmp_path):
    text = run("info", str(tmp_path)).stdout
    for word in ("kernel", "io_uring", "huge pages", "memlock", "O_DIRECT", "residency", "gpus", "mechanisms"):
        assert word in text
    data = json.loads(run("info", "--json", str(tmp_path)).stdout)
    assert data["path"]["fstype"] != "unknown"
    assert {m["name"] for m in data["mechanisms"]} == {"posix", "parallel", "direct", "uring", "naive", "staged", "gds"}
    assert data["residency_query"]["method"] in ("cachestat", "mincore")
    assert any(s["name"] == "threads" and s["env"] == "ACCIO_THREADS" for s in data["settings"])


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
