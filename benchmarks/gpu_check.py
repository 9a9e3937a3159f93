#!/usr/bin/env python3
"""`make gpu-check`: build accio on a GPU machine, check it there and measure it, in short resumable stages.

Made for a machine lent for a few minutes per command and no network (issue 17). Stages, in priority
order, each a subprocess with its own time limit (default 480 s), each writing its result as it ends:

  build              packages missing from the system come from .gpu-deps/ (Debian .debs unpacked into a
                     prefix, wheels installed with --no-index into a private directory); accio is built with
                     the machine's default compiler by `pip install --no-build-isolation` with the C++ tests
                     on; `accio info` and the machine's description are recorded
  correctness        ctest -L '^gpu$' (the real-GPU C++ tests), ctest -L exports, pytest -m gpu
  bench-hot          benchmarks/gpu_bench.py hot-read   (accio staged vs KvikIO, ceilings)
  bench-naive        benchmarks/gpu_bench.py naive      (accio naive vs the PyTorch user's read)
  bench-write        benchmarks/gpu_bench.py write      (GPU -> new file vs KvikIO and the host's own write)
  bench-safetensors  benchmarks/gpu_bench.py safetensors
  bench-cold         benchmarks/gpu_bench.py cold-read
  bench-zerocopy     benchmarks/gpu_bench.py zerocopy   (pagecache: first/repeated reads, CPU per GiB, mixed, small)
  bench-cli          `accio bench --target cuda:0 --preset quick`, timed (goal: under 2 minutes)
  tune-device        `accio tune --device 0` (host and GPU 0's device table, 90 s budget): the measured
                     device profile that `auto` uses for GPU buffers, kept in the report
  host-auto          the host side on the machine's CPUs, built-in model: `accio tune --evaluate --no-device`,
                     hot reads of a 2 GiB file in 64 MiB and 2 GiB requests (issue 19)
  host-programs      benchmarks/run_programs.py --size 1g --cache hot, then --size 2g for dd-64m and
                     readinto-64m (issue 20), then benchmarks/torch_load_reads.py (how torch.load reads)
  host-programs-cold benchmarks/run_programs.py --size 512m --cache cold (issue 20; fio from .gpu-deps)
  host-programs-large the large requests, fio's cases and torch.load on a hot 2 GiB file, then torch_load_reads.py
  host-realign       benchmarks/realign.py --size 1g: misaligned reads, realign auto vs off (posix, parallel, uring)
  host-auto-grid     `accio tune --evaluate --no-device` on the default grid, built-in model (issue 19)

Resuming: state lives in build/gpu-check/ (stages/<name>.json, logs/, bench/). A run skips the stages
that already finished for the same sources (a hash of src/, include/, python/, benchmarks/, tests/, CMake
files) and stops before a stage that would not fit in --deadline-s (default 540 s, under a 10-minute
command limit): run the same command again to continue. --stage NAME[,NAME] runs those stages (again).
After every stage the report is rewritten: results/gpu/<date>-<gpu>.json and .md; --copy-to DIR also
copies the report, the stage results and the logs there (give the device tool's $OUT).

    make gpu-check [STAGE=bench-hot] [COPY_TO=$OUT] [COMMIT=<sha>]      # here: python3 benchmarks/gpu_check.py
    make gpu-deps                                                          # on a machine with network

`prepare-deps` (make gpu-deps) downloads the packages into .gpu-deps/ for the GPU machine (Ubuntu 24.04,
Python 3.12, CUDA 13): see DEBS and WHEELS below; .gpu-deps/MANIFEST.json lists what is there.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = "accio.gpu-check/1"

# What the GPU machine lacks (gpu-machine.md), as files: Debian 12 .debs (unpacked into a prefix, not
# installed: their static libraries and headers are all the build uses) and wheels for CPython 3.12 on
# manylinux x86_64 (installed only where the system does not have the distribution already).
DEBS = ("liburing-dev", "liburing2", "libffi-dev", "libgtest-dev")
WHEELS = ("kvikio-cu13==26.10.0", "libkvikio-cu13==26.10.0", "rapids-logger==0.3.0", "cuda-pathfinder==1.9.0",
          "fastsafetensors==0.5.0", "safetensors==0.8.0",
          # accio's own needs, in case the machine's Python lacks them: build backend, tests, progress bars
          "scikit-build-core==1.1.2", "pathspec==1.1.1", "packaging==26.3", "nanobind==3.1.0",
          "pytest==9.2.0", "pluggy==1.7.0", "iniconfig==2.3.1", "pygments==2.21.0", "tqdm==4.70.1")
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
                   "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")
CARRY_LIMIT = 64 << 20  # what the device tool carries with a command
# fio (run_programs.py's fio cases and its cold queue-depth measurement; gpu-machine.md lists none): built
# here from Debian's source package with libaio linked in from libaio-dev's libaio.a (the engines that need
# other libraries left out), .gpu-deps/bin/fio, put on PATH there only where the system has none. It links
# the C library dynamically (Debian 12's glibc 2.36; the GPU machine has Ubuntu 24.04's 2.39): a fully
# static fio, as first built, is one LD_PRELOAD cannot enter, so run_programs' fio cases under `accio run`
# measured fio alone there (it was built with --build-static until 2026-11-27).
FIO_SOURCE = "fio"
FIO_LIBS = ("linux-vdso.so", "libc.so", "libm.so", "libmvec.so", "libpthread.so", "libdl.so", "librt.so", "libz.so",
            "ld-linux-x86-64.so")  # what the carried fio may need from the GPU machine
FIO_GLIBC_MAX = (2, 39)  # the GPU machine's C library (Ubuntu 24.04): the newest symbol version fio may need
FIO_CONFIGURE = ("--disable-native", "--disable-numa", "--disable-rdma", "--disable-rados",
                 "--disable-rbd", "--disable-http", "--disable-gfapi", "--disable-libnfs", "--disable-pmem",
                 "--disable-xnvme", "--disable-libzbc", "--disable-tcmalloc", "--disable-dfs")


@dataclass
class Stage:
    name: str
    estimate_s: int  # used until this machine has timed the stage once (H100 of 2026-11-27 where it ran)
    what: str


STAGES = (
    Stage("build", 45, "build accio and its C++ tests with the machine's compiler"),
    Stage("correctness", 200, "ctest -L '^gpu$', ctest -L exports, pytest -m gpu"),
    Stage("bench-hot", 150, "hot reads into GPU memory: accio staged vs KvikIO, host and pinned-copy ceilings"),
    Stage("bench-naive", 90, "accio naive vs torch.from_numpy(np.fromfile()).cuda()"),
    Stage("bench-write", 240, "GPU -> new file: accio staged vs KvikIO vs the host's own write, then with fsync"),
    Stage("bench-safetensors", 420, "accio.safetensors load (4 GiB file; 4 x 2 GiB shards) vs safetensors.torch "
          "and fastsafetensors (defaults and the best of a settings sweep); save vs safetensors; host memory vs "
          "safetensors.numpy; VmHWM rise"),
    Stage("bench-cold", 150, "cold reads: staged, staged+direct, KvikIO"),
    Stage("bench-zerocopy", 300, "pagecache (DMA from registered page-cache pages): first and repeated reads vs "
          "staged, KvikIO compat and pinned H2D with CPU time per GiB; half-cached file; 4 KiB-1 MiB requests"),
    Stage("bench-cli", 150, "accio bench --target cuda:0 --preset quick, timed"),
    Stage("tune-device", 120, "accio tune --device 0: the host profile and GPU 0's measured device table"),
    # The host side on this machine's CPUs (a GPU machine is the only many-CPU machine a session gets):
    Stage("host-auto", 160, "issue 19, no profile (ACCIO_PROFILE=off): accio tune --evaluate, hot reads of a 2 GiB "
          "file in 64 MiB and 2 GiB requests at 1 and N threads (auto vs the best fixed plan)"),
    Stage("host-programs", 330, "issue 20: benchmarks/run_programs.py, every program on a hot 1 GiB file and the "
          "large requests on a hot 2 GiB one, plain vs accio run with default settings"),
    Stage("host-programs-cold", 220, "issue 20: benchmarks/run_programs.py, every program on a cold 512 MiB file, "
          "with fio's queue-depth 16 vs 1 (the prefetch goal) and the small readers with the prefetch forced on"),
    Stage("host-programs-large", 240, "issue 20: benchmarks/run_programs.py, the large requests (dd bs=64M, readinto "
          "of 64 MiB with its own loop timed), fio's psync cases and torch.load on a hot 2 GiB file, then "
          "torch_load_reads.py"),
    Stage("host-realign", 30, "benchmarks/realign.py: hot reads into a bytearray and a buffer 8 bytes off, "
          "realign auto vs off vs a page-aligned buffer (whether this CPU's kernel copy is slow for them)"),
    Stage("host-auto-grid", 330, "issue 19, no profile: accio tune --evaluate on the default grid (8 and 128 MiB "
          "files, 4 KiB-8 MiB requests, hot and cold, reads and writes)"),
)
# tune-device: --budget (the total) and the GPU's share of it: the stage stays under 2 minutes.
TUNE_ARGS = ("--budget", "90", "--device-budget", "60")
BENCH_SECTION = {"bench-hot": "hot-read", "bench-naive": "naive", "bench-write": "write",
                 "bench-safetensors": "safetensors", "bench-cold": "cold-read", "bench-zerocopy": "zerocopy"}
NAMES = [s.name for s in STAGES]


def now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def say(msg: str) -> None:
    print(f"gpu-check: {msg}", flush=True)


def read_json(path: Path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_json(path: Path, doc) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, default=str)
        f.write("\n")
    os.replace(tmp, path)


def source_id(root: Path = ROOT) -> str:
    """A hash of everything that goes into the build and the checks: results of one build are reused
    only with the same sources."""
    h = hashlib.sha256()
    parts = ["CMakeLists.txt", "pyproject.toml", "Makefile", "cmake", "src", "include", "python", "benchmarks", "tests"]
    for part in parts:
        p = root / part
        files = [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else []
        for f in files:
            if "__pycache__" in f.parts or f.suffix == ".pyc":
                continue
            h.update(str(f.relative_to(root)).encode() + b"\0")
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


class Run:
    """One invocation: options, paths, and the environment the stages run in."""

    def __init__(self, a):
        self.a = a
        self.state = Path(a.state).resolve()
        self.results = Path(a.results).resolve()
        self.deps = Path(a.deps).resolve()
        self.site_accio = self.state / "site-accio"
        self.site_deps = self.state / "site-deps"
        self.prefix = self.state / "prefix"
        self.build_dir = self.state / "build"
        self.data = Path(a.data).resolve() if a.data else self.state / "data"
        self.t0 = time.monotonic()
        self.sid = a.source_id or source_id()
        self.python = a.python or sys.executable

    # -- environment --
    def env(self) -> dict:
        e = dict(os.environ)
        e.setdefault("ACCIO_QUIET", "1")
        e["ACCIO_PROFILE"] = "off"  # measurements of fixed mechanisms and defaults, not of a tuned profile
        if not self.a.installed:
            paths = [str(self.site_accio), str(self.site_deps)]
            e["PYTHONPATH"] = os.pathsep.join(paths + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
        if shutil.which("fio", path=e.get("PATH")) is None and (self.deps / "bin" / "fio").is_file():
            e["PATH"] = os.pathsep.join([str(self.deps / "bin"), e.get("PATH", os.defpath)])
        if (self.prefix / "usr").is_dir():
            pre = str(self.prefix / "usr")
            e["CMAKE_PREFIX_PATH"] = os.pathsep.join([pre] + ([e["CMAKE_PREFIX_PATH"]] if e.get("CMAKE_PREFIX_PATH") else []))
        return e

    def stage_file(self, name: str) -> Path:
        return self.state / "stages" / f"{name}.json"

    def log_file(self, name: str) -> Path:
        return self.state / "logs" / f"{name}.log"

    def elapsed(self) -> float:
        return time.monotonic() - self.t0


# ---------------------------------------------------------------------------------------------
# Running a command: output to the stage's log and to stdout; a time limit that ends the command's own
# process group (and nothing else).

class StageTimeout(Exception):
    pass


def run_cmd(cmd: list[str], log, env: dict, deadline: float, cwd: Path = ROOT) -> int:
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True, text=True, errors="replace")
    import threading

    def pump():
        for line in p.stdout:
            log.write(line)
            log.flush()
            sys.stdout.write(line)
            sys.stdout.flush()

    th = threading.Thread(target=pump, daemon=True)
    th.start()
    try:
        p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                break
            try:
                p.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        th.join(5)
        log.write(f"\n[gpu-check] stopped: past the stage's time limit\n")
        raise StageTimeout(" ".join(cmd[:4]))
    th.join(5)
    log.write(f"[exit {p.returncode}]\n")
    return p.returncode


# ---------------------------------------------------------------------------------------------
# Dependencies: what the system lacks comes from .gpu-deps/.

def system_has(dep: str) -> bool:
    inc = [Path("/usr/include"), Path("/usr/local/include")]
    arch = [Path("/usr/include/x86_64-linux-gnu"), Path("/usr/include/aarch64-linux-gnu")]
    if dep == "liburing":
        return any((d / "liburing.h").is_file() for d in inc)
    if dep == "libffi":
        return any((d / "ffi.h").is_file() for d in inc + arch)
    if dep == "gtest":
        has_h = any((d / "gtest" / "gtest.h").is_file() for d in inc)
        cfg = [Path(p) for p in ("/usr/lib/x86_64-linux-gnu/cmake/GTest", "/usr/lib/cmake/GTest",
                                 "/usr/local/lib/cmake/GTest", "/usr/lib64/cmake/GTest", "/usr/share/cmake/GTest")]
        return has_h and any(c.is_dir() for c in cfg)
    raise ValueError(dep)


def unpack_deb(deb: Path, dest: Path, dpkg: bool | None = None) -> None:
    """dpkg -x, or (where there is no dpkg) the ar archive's data.tar.* through tarfile."""
    if dpkg is None:
        dpkg = shutil.which("dpkg") is not None
    if dpkg:
        subprocess.run(["dpkg", "-x", str(deb), str(dest)], check=True)
        return
    import io
    import tarfile
    blob = deb.read_bytes()
    if not blob.startswith(b"!<arch>\n"):
        raise ValueError(f"{deb}: not a .deb (ar) archive")
    pos = 8
    while pos + 60 <= len(blob):
        name = blob[pos:pos + 16].decode().strip().rstrip("/")
        size = int(blob[pos + 48:pos + 58].decode().strip())
        body = blob[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body)) as t:
                if hasattr(tarfile, "data_filter"):
                    t.extractall(dest, filter="data")
                else:
                    t.extractall(dest)
            return
    raise ValueError(f"{deb}: no data.tar member")


def dist_name(wheel: Path) -> tuple[str, str]:
    """(normalized distribution name, version) from a wheel's file name."""
    name, version = wheel.name.split("-")[:2]
    return re.sub(r"[-_.]+", "-", name).lower(), version


def _build_minimums() -> dict:
    """The build requirements' lower bounds, from pyproject.toml (their one owner): {dist: version}."""
    import re
    text = (ROOT / "pyproject.toml").read_text()
    reqs = re.search(r"^requires\s*=\s*\[(.*?)\]", text, re.M | re.S).group(1)
    return {re.sub(r"[-_.]+", "-", m.group(1)).lower(): m.group(2) for m in re.finditer(r'"([A-Za-z0-9_.-]+)\s*>=\s*([0-9.]+)"', reqs)}


def _older(have: str, want: str | None) -> bool:
    """Whether version `have` is below `want` (numeric parts; None: no bound)."""
    def parts(v):
        out = []
        for p in v.split("."):
            digits = "".join(c for c in p if c.isdigit()) if p[:1].isdigit() else ""
            if not digits:
                break
            out.append(int(digits))
        return tuple(out)
    return want is not None and parts(have) < parts(want)


BUILD_MINIMUMS = _build_minimums()  # a system nanobind older than accio builds with is replaced


def installed_version(python: str, dist: str, env: dict) -> str | None:
    code = ("import importlib.metadata as m, sys\n"
            "try: print(m.version(sys.argv[1]))\n"
            "except m.PackageNotFoundError: pass\n")
    r = subprocess.run([python, "-c", code, dist], env=env, capture_output=True, text=True)
    return r.stdout.strip() or None


def prepare_build_env(run: Run, log) -> dict:
    """Unpacks the .debs when the system lacks a library, installs the wheels the system lacks;
    returns what was used."""
    used = {"system": [], "prefix": [], "wheels_installed": [], "wheels_from_system": {}}
    missing = [d for d in ("liburing", "libffi", "gtest") if not system_has(d)]
    if run.a.force_prefix:
        missing = missing or ["(forced)"]
    used["system"] = [d for d in ("liburing", "libffi", "gtest") if d not in missing]
    debs = sorted((run.deps / "deb").glob("*.deb"))
    if missing:
        if not debs:
            raise RuntimeError(f"the system lacks {', '.join(missing)} and {run.deps / 'deb'} has no .debs: "
                               f"run `make gpu-deps` on a machine with network and carry .gpu-deps/ here")
        shutil.rmtree(run.prefix, ignore_errors=True)
        run.prefix.mkdir(parents=True)
        for deb in debs:
            unpack_deb(deb, run.prefix)
        used["prefix"] = [d.name for d in debs]
        log.write(f"system lacks {', '.join(missing)}: unpacked {', '.join(d.name for d in debs)} into {run.prefix}\n")
    else:
        shutil.rmtree(run.prefix, ignore_errors=True)
    wheels = sorted((run.deps / "whl").glob("*.whl"))
    base_env = dict(os.environ)
    base_env.pop("PYTHONPATH", None)
    todo = []
    for w in wheels:
        dist, ver = dist_name(w)
        have = installed_version(run.python, dist, base_env)
        if have and not _older(have, BUILD_MINIMUMS.get(dist)):
            used["wheels_from_system"][dist] = have
        else:
            todo.append(w)
    shutil.rmtree(run.site_deps, ignore_errors=True)
    run.site_deps.mkdir(parents=True)
    pip = [run.python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(run.site_deps)]
    if todo and run_cmd(pip + [str(w) for w in todo], log, base_env, time.monotonic() + 300):
        # One at a time, so that one wheel this Python cannot take (another CPython's) costs only itself:
        # its peer is then reported as skipped by the benchmark, and a missing build need fails the build.
        used["wheels_failed"] = [w.name for w in todo
                                 if run_cmd(pip + ["--upgrade", str(w)], log, base_env, time.monotonic() + 120)]
    used["wheels_installed"] = [w.name for w in todo if w.name not in used.get("wheels_failed", [])]
    return used


def cmake_cache(build: Path) -> dict:
    out = {}
    try:
        for line in (build / "CMakeCache.txt").read_text().splitlines():
            m = re.match(r"^(URING_LIBRARY|FFI_LIBRARY|GTest_DIR|CMAKE_CXX_COMPILER|CMAKE_CXX_COMPILER_VERSION)"
                         r"(:[A-Z]+)?=(.*)$", line)
            if m:
                out[m.group(1)] = m.group(3)
    except OSError:
        pass
    return out


# ---------------------------------------------------------------------------------------------
# The stages. Each returns (status, summary); status ok, failed, or skipped.

def stage_build(run: Run, log, deadline: float):
    if run.a.installed:
        return "skipped", {"reason": "--installed: the accio importable by this Python is used"}
    used = prepare_build_env(run, log)
    env = run.env()
    shutil.rmtree(run.site_accio, ignore_errors=True)
    cmd = [run.python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-build-isolation", "--target",
           str(run.site_accio), ".", f"--config-settings=build-dir={run.build_dir}",
           "--config-settings=cmake.define.ACCIO_BUILD_TESTS=ON"]
    if run_cmd(cmd, log, env, deadline):
        return "failed", {"deps": used, "error": "pip install (build) failed: see the log"}
    summary = {"deps": used, "cmake": cmake_cache(run.build_dir)}
    fio = shutil.which("fio", path=env.get("PATH"))
    summary["fio"] = (fio if fio and not fio.startswith(str(run.deps)) else
                      f"{fio} (carried)" if fio else "none: run_programs' fio cases and its queue-depth measurement skip")
    info = subprocess.run([run.python, "-m", "accio.cli", "info", str(run.data.parent)], env=env, capture_output=True,
                          text=True, cwd="/")
    (run.state / "accio-info.txt").write_text(info.stdout + info.stderr)
    summary["accio_info_exit"] = info.returncode
    log.write(info.stdout + info.stderr)
    run.data.mkdir(parents=True, exist_ok=True)
    rc = run_cmd([run.python, str(ROOT / "benchmarks" / "gpu_bench.py"), "--dir", str(run.data), "--machine-json",
                  str(run.state / "machine.json")], log, env, deadline)
    summary["machine"] = "machine.json" if rc == 0 else f"gpu_bench --machine-json exited {rc}"
    return ("ok" if info.returncode == 0 else "failed"), summary


def ctest_summary(text: str) -> dict:
    # "100% tests passed, 0 tests failed out of 7" (CMake 3.25 here); "100% tests passed out of 1" (the
    # GPU machine's CMake: a passing test_gpu once read as "none run")
    m = re.search(r"(\d+)% tests passed(?:, (\d+) tests? failed)? out of (\d+)", text)
    if not m:
        return {"ran": 0 if "No tests were found" in text else None}
    failed = re.findall(r"^\s*\d+ - (\S+) \(", text.split("The following tests FAILED:")[-1], re.M) if m.group(2) and int(m.group(2)) else []
    return {"ran": int(m.group(3)), "failed": int(m.group(2) or 0), "failed_names": failed}


def ctest_probes(text: str) -> dict:
    """The "probe NAME: VALUE" lines a test printed (ctest -V prefixes them "N: "): what a test
    records of the real hardware without asserting it."""
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^(?:\d+: )?probe (\w+): (.*)$", text, re.M)}


def junit_summary(path: Path) -> dict:
    import xml.etree.ElementTree as ET
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    suites = [root] if root.tag == "testsuite" else list(root)
    out = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    out["failed_names"] = [f"{c.get('classname')}::{c.get('name')}" for s in suites for c in s.iter("testcase")
                           if c.find("failure") is not None or c.find("error") is not None]
    # what tests recorded of the hardware (pytest's record_property)
    probes = {p.get("name"): p.get("value") for s in suites for c in s.iter("testcase") for p in c.iter("property")}
    if probes:
        out["probes"] = probes
    return out


def stage_correctness(run: Run, log, deadline: float):
    env = run.env()
    summary, ok = {}, True
    if not run.a.installed:
        for label in ("^gpu$", "exports"):
            start = log.tell()
            # the GPU tests verbose: their "probe NAME: VALUE" lines record what the real driver answered
            verbose = ["-V"] if label == "^gpu$" else ["--output-on-failure"]
            rc = run_cmd(["ctest", "--test-dir", str(run.build_dir), "-L", label, *verbose], log, env, deadline)
            log.flush()
            with open(log.name) as f:
                f.seek(start)
                text = f.read()
            s = ctest_summary(text)
            if probes := ctest_probes(text):
                s["probes"] = probes
            s["exit"] = rc
            summary[f"ctest -L {label}"] = s
            ok &= rc == 0 and bool(s.get("ran"))
    xml = run.state / "pytest-gpu.xml"
    rc = run_cmd([run.python, "-m", "pytest", "-m", "gpu", "tests/python", "-q", "-p", "no:cacheprovider",
                  f"--junitxml={xml}"], log, env, deadline)
    s = junit_summary(xml)
    s["exit"] = rc
    summary["pytest -m gpu"] = s
    ok &= rc == 0
    return ("ok" if ok else "failed"), summary


def stage_bench(run: Run, log, deadline: float, section: str):
    out = run.state / "bench" / f"{section}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    budget = max(60, int(deadline - time.monotonic()) - 45)
    cmd = [run.python, "benchmarks/gpu_bench.py", section, "--dir", str(run.data), "--json", str(out),
           "--budget-s", str(budget), *run.a.bench_args.split()]
    rc = run_cmd(cmd, log, run.env(), deadline)
    doc = read_json(out) or {}
    sec = doc.get("sections", {}).get(section, {})
    summary = {"json": str(out.relative_to(run.state)), "exit": rc, "section_status": sec.get("status"),
               "checks_ok": sec.get("checks_ok"), "contenders_failed": sec.get("contenders_failed"),
               "reason": sec.get("reason") or sec.get("error")}
    if rc == 3 or sec.get("status") == "skipped":
        return "skipped", summary
    return ("ok" if rc == 0 and sec.get("status") == "done" else "failed"), summary


def stage_cli(run: Run, log, deadline: float):
    out = run.state / "bench" / "cli-quick.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [run.python, "-m", "accio.cli", "bench", "--target", "cuda:0", "--preset", "quick", "-d", str(run.data),
           "--json", str(out)]
    start = log.tell()
    t0 = time.monotonic()
    rc = run_cmd(cmd, log, run.env(), deadline)
    took = time.monotonic() - t0
    log.flush()
    with open(log.name) as f:
        f.seek(start)
        text = f.read()
    progress = [ln for ln in text.splitlines() if ln.startswith("accio bench: ") and "/" in ln]
    summary = {"command": " ".join(["accio", *cmd[3:]]), "exit": rc, "wall_s": round(took, 1),
               "goal_s": 120, "within_goal": rc == 0 and took < 120, "progress_lines": len(progress),
               "first_progress": progress[:2], "json": str(out.relative_to(run.state))}
    return ("ok" if rc == 0 else "failed"), summary


def stage_tune(run: Run, log, deadline: float):
    """accio tune on the data directory's filesystem with GPU 0's device table, into a profile file of
    the run (not the user's cache): what auto chooses for GPU buffers on this machine, measured."""
    out = run.state / "bench" / "tune-profile.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    run.data.mkdir(parents=True, exist_ok=True)
    cmd = [run.python, "-m", "accio.cli", "tune", str(run.data), "--device", "0", *TUNE_ARGS, "--profile", str(out), "-q"]
    t0 = time.monotonic()
    rc = run_cmd(cmd, log, run.env(), deadline)
    summary = {"command": " ".join(["accio", *cmd[3:]]), "exit": rc, "wall_s": round(time.monotonic() - t0, 1),
               "profile": str(out.relative_to(run.state))}
    doc = read_json(out) if rc == 0 else None
    if doc:
        summary["devices"] = doc.get("devices") or []
    return ("ok" if rc == 0 and summary.get("devices") else "failed"), summary


# host-auto: issue 19's 16-CPU goal, hot large reads (a 2 GiB file in 64 MiB and 2 GiB requests, 1 and N
# threads; about 100 s); host-auto-grid: the default grid (about 5 minutes: a call of its own).
HOST_EVALUATIONS = {"host-auto": (("2g", ["--file-sizes", "2g", "--transfers", "64m,2g", "--ops", "read",
                                          "--caches", "hot"]),),
                    "host-auto-grid": (("grid", []),)}


def stage_host_auto(run: Run, log, deadline: float, name: str = "host-auto"):
    """accio tune --evaluate with the built-in model (run.env() sets ACCIO_PROFILE=off) on this
    machine's CPUs (host memory only)."""
    env = run.env()
    run.data.mkdir(parents=True, exist_ok=True)
    summary, ok = {}, True
    for label, extra in HOST_EVALUATIONS[name]:
        out = run.state / "bench" / f"host-evaluate-{label}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [run.python, "-m", "accio.cli", "tune", str(run.data), "--evaluate", "--no-device", "-q", *extra,
               "--json", str(out)]
        rc = run_cmd(cmd, log, env, deadline)
        doc = read_json(out) if rc == 0 else None
        s = {"command": "ACCIO_PROFILE=off " + " ".join(["accio", *cmd[3:]]), "exit": rc,
             "json": str(out.relative_to(run.state))}
        if doc:
            v = doc.get("verdict") or {}
            s.update(cells=len(doc.get("cells", [])), cells_fine=v.get("cells_fine"), best_fixed=v.get("best_fixed"),
                     auto_geomean=doc["summary"]["auto"]["geomean"],
                     best_fixed_geomean=doc["summary"].get(v.get("best_fixed"), {}).get("geomean"),
                     hot_reads=[{"threads": c["threads"], "file_size": c["file_size"], "transfer": c["transfer"],
                                 "oracle": c["oracle"], "auto_ratio": c.get("auto_ratio"), "verdict": c.get("verdict"),
                                 "auto_plans": c.get("auto_plans")}
                                for c in doc["cells"] if c["op"] == "read" and c["cache"] == "hot"])
        summary[label] = s
        ok &= doc is not None
    return ("ok" if ok else "failed"), summary


def stage_host_auto_grid(run: Run, log, deadline: float):
    return stage_host_auto(run, log, deadline, "host-auto-grid")


# host-programs: issue 20 on this machine's CPUs, hot: every program on a 1 GiB file, then the two
# large-request cases on the 2 GiB file (with the engine's own ratio they are held to);
# host-programs-cold: every program on a cold 512 MiB file, with fio's queue-depth measurement (the
# virtio disk there reads about 1.5 GB/s cold; a smaller file keeps the stage within its call), and
# the small-request readers once more with the prefetch forced on (no profile is tuned there, so
# the default settings do not prefetch: this says what a profile's window would give).
HOST_PROGRAMS = {"host-programs": (("hot", ("--size", "1g", "--cache", "hot")),
                                   ("hot-large", ("--size", "2g", "--cache", "hot", "--cases", "dd-64m,readinto-64m"))),
                 "host-programs-cold": (("cold", ("--size", "512m", "--cache", "cold", "--prefetch", "32m")),),
                 # the large requests, the fio cases and torch.load alone (a third of host-programs' time)
                 "host-programs-large": (("large", ("--size", "2g", "--cache", "hot", "--cases",
                                                    "dd-64m,readinto-64m,fio-psync-128k,fio-psync-4m,torch.load")),)}
HOST_REALIGN_ARGS = ("--size", "1g", "--mechanisms", "posix,parallel,uring")


def host_benchmark(run: Run, log, deadline: float, script: str, args, name: str):
    """One of benchmarks/ on this machine's CPUs, its JSON under bench/NAME.json."""
    out = run.state / "bench" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    run.data.mkdir(parents=True, exist_ok=True)
    cmd = [run.python, str(ROOT / "benchmarks" / script), "--dir", str(run.data), *args, "--json", str(out)]
    rc = run_cmd(cmd, log, run.env(), deadline)
    summary = {"command": " ".join(["python", *cmd[1:]]), "exit": rc, "json": str(out.relative_to(run.state))}
    return ("ok" if rc == 0 and read_json(out) else "failed"), summary


def stage_host_programs(run: Run, log, deadline: float, name: str = "host-programs"):
    """Unmodified programs plain and under accio run (default settings) on this machine's CPUs; the
    summary has each case's ratio and its goal's verdict."""
    summary, ok = {}, True
    for label, args in HOST_PROGRAMS[name]:
        status, s = host_benchmark(run, log, deadline, "run_programs.py", args, f"run-programs-{label}")
        doc = read_json(run.state / s["json"])
        if doc:
            s["cases"] = [program_line(c, r["cache"]) for r in doc["runs"] for c in r["cases"] if c.get("ratio")]
        summary[label] = s
        ok &= status == "ok"
    if name in ("host-programs", "host-programs-large"):  # how torch.load reads (the H100's shim saw none of it)
        status, s = host_benchmark(run, log, deadline, "torch_load_reads.py", ("--size", "1g"), "torch-load-reads")
        doc = read_json(run.state / s["json"]) or {}
        if seen := doc.get("through_a_file_object"):
            s["seen"] = (f"torch {doc['torch']}: readinto {seen['calls']['readinto']} calls {seen['bytes']['readinto']} B, "
                         f"read {seen['calls']['read']} calls {seen['bytes']['read']} B, largest {seen['largest']} B, "
                         f"mapped after: {seen['mapped_after']} (by path: {doc['by_path']['mapped_after']})")
        summary["torch-load-reads"] = s
        ok &= status == "ok"
    return ("ok" if ok else "failed"), summary


def program_line(c: dict, cache: str) -> str:
    """A case of run_programs.py in one line: ratio, verdict and each goal's result."""
    parts = [f"{c['verdict']}", f"goal {c.get('goal_result')}"]
    parts += [f"{g} {c[k]['result']}" for g, k in (("large", "large_goal"), ("prefetch", "prefetch_goal")) if k in c]
    if "loop" in c:
        loop_goal = c.get("large_goal", {}).get("loop_result")
        parts.append(f"its own loop {c['loop']['ratio']['estimate']:.2f}" + (f" large {loop_goal}" if loop_goal else ""))
    if "prefetch_forced" in c:
        f = c["prefetch_forced"]
        parts.append(f"forced prefetch {f['ratio']['estimate']:.2f} {f['goal_result']}")
    if srv := c.get("served"):  # what the shim did with the program's bytes (its statistics)
        dropped = (srv.get("dropped") or {}).get("calls", 0)
        parts.append(f"engine {srv.get('accelerated_bytes', 0)} of {srv.get('bytes', 0)} B"
                     + (f", {dropped} calls past the rows kept" if dropped else ""))
    return f"{c['name']} {cache} {c['ratio']['estimate']:.2f} ({'; '.join(parts)})"


def stage_host_programs_cold(run: Run, log, deadline: float):
    return stage_host_programs(run, log, deadline, "host-programs-cold")


def stage_host_programs_large(run: Run, log, deadline: float):
    return stage_host_programs(run, log, deadline, "host-programs-large")


def stage_host_realign(run: Run, log, deadline: float):
    """Reads into misaligned buffers with and without realign, and whether this CPU needs it."""
    status, summary = host_benchmark(run, log, deadline, "realign.py", HOST_REALIGN_ARGS, "realign")
    doc = read_json(run.state / summary["json"])
    if doc:
        summary["ratios"] = [f"{r['mechanism']} {r['buffer']} {r['what']} {r['ratio']['estimate']:.2f}"
                             for r in doc["ratios"] if r["what"] == "realign auto / off"]
    return status, summary


def run_stage(run: Run, st: Stage, deadline: float) -> dict:
    log_path = run.log_file(st.name)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    rec = {"stage": st.name, "what": st.what, "source_id": run.sid, "started": now(), "status": "running",
           "log": str(log_path.relative_to(run.state))}
    write_json(run.stage_file(st.name), rec)
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        # looked up here, at run time (the tests stand in for the stage functions)
        own = {"build": stage_build, "correctness": stage_correctness, "bench-cli": stage_cli,
               "tune-device": stage_tune, "host-auto": stage_host_auto, "host-programs": stage_host_programs,
               "host-programs-cold": stage_host_programs_cold, "host-programs-large": stage_host_programs_large,
               "host-realign": stage_host_realign,
               "host-auto-grid": stage_host_auto_grid}.get(st.name)
        try:
            if own:
                status, summary = own(run, log, deadline)
            else:
                status, summary = stage_bench(run, log, deadline, BENCH_SECTION[st.name])
        except StageTimeout as e:
            status, summary = "timeout", {"error": f"past the time limit in: {e}"}
        except Exception as e:  # noqa: BLE001 - recorded; the next stage runs
            import traceback
            log.write(traceback.format_exc())
            status, summary = "failed", {"error": f"{type(e).__name__}: {e}"}
    rec.update(status=status, summary=summary, duration_s=round(time.monotonic() - t0, 1), finished=now())
    write_json(run.stage_file(st.name), rec)
    return rec


# ---------------------------------------------------------------------------------------------
# Choosing stages.

def finished(rec: dict | None, sid: str) -> bool:
    """A stage is done for these sources when it ran to its end (ok, failed or skipped), not when it
    was cut off (timeout, running)."""
    return bool(rec) and rec.get("source_id") == sid and rec.get("status") in ("ok", "failed", "skipped")


def stage_done(run: Run, name: str) -> bool:
    """Finished for these sources; for the build, its outputs must be here too (a state directory
    brought back from a machine that was given back has the stage files but no build)."""
    if not finished(read_json(run.stage_file(name)), run.sid):
        return False
    return name != "build" or run.a.installed or (run.site_accio / "accio" / "__init__.py").is_file()


def plan(run: Run, asked: list[str] | None) -> list[Stage]:
    if asked:
        return [s for s in STAGES if s.name in asked]
    return [s for s in STAGES if not stage_done(run, s.name)]


def estimate(run: Run, st: Stage) -> float:
    rec = read_json(run.stage_file(st.name))
    if rec and rec.get("status") == "ok" and rec.get("duration_s"):
        return float(rec["duration_s"])
    return float(st.estimate_s)


def needs_build(run: Run, st: Stage) -> str | None:
    """Why st cannot run now (the build it needs has not succeeded for these sources), or None."""
    if st.name == "build" or run.a.installed:
        return None
    b = read_json(run.stage_file("build"))
    if not (b and b.get("status") == "ok" and b.get("source_id") == run.sid and stage_done(run, "build")):
        return "no successful build of these sources yet"
    return None


def execute(run: Run, asked: list[str] | None) -> int:
    todo = plan(run, asked)
    if not todo:
        say(f"every stage has finished for sources {run.sid}; `--stage NAME` (make gpu-check STAGE=NAME) "
            "runs one again, --force all")
    ran, blocked = [], []
    for st in todo:
        why = needs_build(run, st)
        if why:
            say(f"skipping {st.name}: {why}")
            blocked.append(st.name)
            continue
        left = run.a.deadline_s - run.elapsed()
        est = estimate(run, st)
        if ran and est > left:
            say(f"stopping before {st.name} (about {est:.0f} s; {left:.0f} s left of the {run.a.deadline_s:.0f} s "
                "deadline): run the same command again to continue")
            break
        limit = min(run.a.stage_timeout_s, max(30.0, left))
        say(f"stage {st.name}: {st.what} (limit {limit:.0f} s)")
        rec = run_stage(run, st, time.monotonic() + limit)
        ran.append(rec)
        say(f"stage {st.name}: {rec['status']} in {rec['duration_s']} s")
        report(run)
    report(run)
    rest = [s.name for s in STAGES if not stage_done(run, s.name)]
    say("not finished yet: " + (", ".join(rest) if rest else "nothing: all stages done"))
    bad = [r["stage"] for r in ran if r["status"] in ("failed", "timeout")]
    return 1 if bad or blocked else 0


# ---------------------------------------------------------------------------------------------
# The report: results/gpu/<date>-<gpu>.json and .md, from the state directory.

def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def cell(text) -> str:
    """Text for a markdown table cell: one line, no column separators."""
    return " ".join(str(text).split()).replace("|", "/")


def param(key: str, v) -> str:
    """A group parameter for people: sizes in binary units, shares in %."""
    if isinstance(v, int) and (key.endswith("size") or key == "size"):
        for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
            if v >= 1 << shift and v % (1 << shift) == 0:
                return f"{v >> shift} {unit}"
        return f"{v} B"
    if isinstance(v, float) and (key.startswith("cached") or key.startswith("residency")):
        return f"{v:.1%}"
    return str(v)


def fmt_mib(v) -> str:
    return "-" if v is None else f"{v:,.0f}"


def gather_report(run: Run) -> dict:
    stages = {s.name: read_json(run.stage_file(s.name)) for s in STAGES}
    machine = read_json(run.state / "machine.json") or {}
    sections = {}
    bench_started = None
    for st_name, section in BENCH_SECTION.items():
        d = read_json(run.state / "bench" / f"{section}.json")
        if not d:
            continue
        machine = d.get("machine") or machine
        bench_started = min(filter(None, [bench_started, d.get("started")]), default=None)
        sec = d.get("sections", {}).get(section)
        if sec is not None:
            sections[section] = {**sec, "command": d.get("command"), "accio": d.get("accio")}
    cli = read_json(run.state / "bench" / "cli-quick.json")
    commit = run.a.commit or git_commit()
    return {"schema": SCHEMA, "generated": now(), "accio_commit": commit, "source_id": run.sid,
            "command": run.a.command or "make gpu-check", "machine": machine,
            "stages": {k: ({kk: v[kk] for kk in ("status", "duration_s", "started", "summary", "source_id") if kk in v}
                           if v else {"status": "not run"}) for k, v in stages.items()},
            "sections": sections, "cli_quick": (stages.get("bench-cli") or {}).get("summary"),
            "cli_quick_results": cli.get("results") if cli else None, "bench_started": bench_started}


def git_commit() -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=12"],
                           capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _disk_text(bd: dict | None) -> str:
    """The block device's facts the planner reads: rotational (the built-in model's cold plans) and
    its read-ahead."""
    if not bd:
        return ""
    kind = "rotational" if bd.get("rotational") else "not rotational" if bd.get("rotational") is False else "?"
    return f", {bd.get('disk') or bd.get('name')}: {kind}, read-ahead {bd.get('read_ahead_kb', '?')} KiB"


def _stats():
    """accio.stats from this source tree, without importing accio (this script runs before accio is
    built, and with any Python)."""
    import importlib.util
    name = "_accio_stats_for_gpu_check"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent.parent / "python/accio/stats.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def render_md(doc: dict) -> str:
    m = doc.get("machine") or {}
    gpus = m.get("gpus") or []
    gpu = gpus[0]["name"] if gpus else "unknown GPU"
    fs = m.get("filesystem") or {}
    cpu = m.get("cpu") or {}
    cf = m.get("cufile") or {}
    lines = [f"# accio GPU check: {gpu}", "",
             f"Commit `{doc.get('accio_commit') or 'unknown'}` (sources {doc['source_id']}), generated {doc['generated']}.",
             f"Command: `{doc['command']}` (stages: `python3 benchmarks/gpu_check.py`; each section's own command below).", "",
             "| machine | |", "|---|---|",
             f"| GPU | {gpu}" + (f", {gpus[0]['memory'] / 2**30:.0f} GiB, {gpus[0].get('link') or 'link unknown'}" if gpus else "") + " |",
             f"| driver / CUDA | {m.get('nvidia_driver') or 'unknown'} / CUDA {m.get('cuda_driver_api') or 'unknown'} (driver API) |",
             f"| CPU | {cpu.get('model', 'unknown')}, {cpu.get('usable', '?')} of {cpu.get('count', '?')} usable |",
             f"| memory | {m.get('memory_kib', 0) / 2**20:.0f} GiB |",
             f"| kernel | {m.get('kernel', 'unknown')} |",
             f"| filesystem | {fs.get('fstype', '?')} on {fs.get('device', '?')} ({fs.get('path', '?')})"
             + _disk_text(m.get("block_device")) + " |",
             f"| cuFile | {cf.get('mode') or cf.get('detail') or 'unknown'}; nvidia-fs {'loaded' if m.get('nvidia_fs_loaded') else 'not loaded'} |",
             f"| GPU arrays | {m.get('gpu_arrays') or '?'}; Python {m.get('python', '?')} |"]
    peers = m.get("peers") or {}
    if peers:
        lines.append("| peers | " + "; ".join(
            f"{n} {p.get('version', '')}".strip() if p.get("available") else f"{n}: skipped ({cell(p.get('reason'))})"
            for n, p in peers.items()) + " |")
    lines += ["", "| stage | status | seconds | |", "|---|---|---|---|"]
    for name, st in doc["stages"].items():
        s = st.get("summary") or {}
        note = s.get("reason") or s.get("error") or ""
        if s.get("checks_ok") is False:
            note = "bytes differ: see the section below"
        if s.get("contenders_failed"):
            note = (note + "; " if note else "") + "failed: " + "; ".join(s["contenders_failed"])
        if name == "correctness" and s:
            note = "; ".join(f"{k}: " + (f"{v.get('ran', v.get('tests', '?'))} run, "
                                         f"{v.get('failed', v.get('failures', 0)) + v.get('errors', 0)} failed"
                                         + (f" ({', '.join(v.get('failed_names', [])[:5])})" if v.get('failed_names') else ""))
                             for k, v in s.items() if isinstance(v, dict))
        if name == "bench-cli" and s.get("wall_s") is not None:
            note = f"{s['wall_s']} s (goal < {s['goal_s']} s), {s['progress_lines']} progress lines"
        if name == "tune-device" and s.get("devices"):
            note = f"{s['wall_s']} s; device table of " + ", ".join(d.get("model", "?") for d in s["devices"])
        if name.startswith("host-programs") and s:
            note = "; ".join(c for v in s.values() if isinstance(v, dict) for c in v.get("cases", []))
        if name.startswith("host-auto") and s:
            note = "; ".join(f"{k}: auto {v['auto_geomean']} vs {v['best_fixed']} {v['best_fixed_geomean']}, "
                             f"{v['cells_fine']}/{v['cells']} cells fine" + "".join(
                                 f", hot {h['threads']}t {h['transfer'] >> 20} MiB read auto/oracle {h['auto_ratio']}"
                                 for h in v.get("hot_reads", []) if h["transfer"] >= 64 << 20)
                             for k, v in s.items() if isinstance(v, dict) and "auto_geomean" in v)
        lines.append(f"| {name} | {st.get('status')} | {st.get('duration_s', '')} | {cell(note)} |")
    for name, sec in doc["sections"].items():
        lines += ["", f"## {name}", ""]
        if sec.get("command"):
            lines.append(f"`{sec['command']}`")
            lines.append("")
        if sec.get("status") != "done":
            lines.append(f"Status: **{sec.get('status')}**" + (f": {sec.get('reason') or sec.get('error')}"
                                                               if sec.get("reason") or sec.get("error") else "") +
                         (" (partial: the rounds measured before it stopped)" if sec.get("status") == "running" else ""))
            lines.append("")
        for g in sec.get("groups", []):
            lines.append(f"**{g['label']}** ({', '.join(f'{k} {param(k, v)}' for k, v in g['params'].items())}; "
                         f"{g.get('rounds', 0)} rounds)")
            lines.append("")
            lines += ["| contender | median MiB/s | min-max | spread | ran | bytes |", "|---|---|---|---|---|---|"]
            for n, c in g["contenders"].items():
                if "skipped" in c:
                    lines.append(f"| {n} | skipped | | | | {cell(c['skipped'])} |")
                elif "failed" in c:
                    lines.append(f"| {n} | failed | | | | {cell(c['failed'])} |")
                else:
                    lines.append(f"| {n} | {fmt_mib(c.get('median'))} | {fmt_mib(c.get('min'))}-{fmt_mib(c.get('max'))} "
                                 f"| ±{c.get('spread_pct', float('nan')):.0f}% | {c.get('ran', '')} | {cell(c.get('check', '?'))} |")
            lines.append("")
            for cmp in g.get("comparisons", []):
                head = f"- {cmp['a']} / {cmp['b']}: "
                if "withheld" in cmp:
                    if cmp.get("withheld_because") != "skipped":  # a skipped peer is said in its row
                        lines.append(head + f"withheld ({cell(cmp['withheld'])})")
                    continue
                goal = f"; goal {cmp['goal']:.2f}: {cmp['goal_verdict']}" if cmp.get("goal") is not None else ""
                lines.append(head + f"{cmp['estimate']:.2f}x [{_stats().bounds(cmp['low'], cmp['high'])}] {cmp['verdict']}{goal}"
                             + (f" ({cmp['note']})" if cmp.get("note") else ""))
            lines.append("")
        for note in sec.get("notes", []):
            lines.append(f"Note: {note}")
    lines += ["", "Ratios: median of the per-round ratios with a 95% bootstrap interval (accio.stats); "
              "'within noise' only when the interval contains 1.0 and lies inside ±5%. Every contender's bytes are "
              "checked (column bytes); a contender whose bytes differ gets no ratio.", ""]
    return "\n".join(lines)


def report(run: Run) -> Path | None:
    doc = gather_report(run)
    gpus = (doc.get("machine") or {}).get("gpus") or []
    date = (doc.get("bench_started") or doc["generated"])[:10]
    base = f"{date}-{slug(gpus[0]['name']) if gpus else 'no-gpu'}"
    run.results.mkdir(parents=True, exist_ok=True)
    jpath = run.results / f"{base}.json"
    write_json(jpath, doc)
    (run.results / f"{base}.md").write_text(render_md(doc))
    if run.a.copy_to:
        # The device tool brings back at most 8 files, 2 folders down: the report as it is, and the
        # state (every stage's JSON and log, the benchmarks' JSON) as one archive that unpacks into
        # build/gpu-check/ here to resume on a new machine.
        import tarfile
        dest = Path(run.a.copy_to)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(jpath, dest / jpath.name)
        shutil.copy2(jpath.with_suffix(".md"), dest / f"{base}.md")
        run.state.mkdir(parents=True, exist_ok=True)  # no stage ran yet: the archive is still made
        tmp = run.state / "gpu-check.tar.gz"  # made beside the state: nothing half-written in dest
        with tarfile.open(tmp, "w:gz") as t:
            for name in ("stages", "logs", "bench", "machine.json", "accio-info.txt", "pytest-gpu.xml"):
                if (run.state / name).exists():
                    t.add(run.state / name, arcname=name)
        shutil.copy2(tmp, dest / "gpu-check.tar.gz")
    return jpath


# ---------------------------------------------------------------------------------------------
# make gpu-deps: the files for a machine without network.

def prepare_deps(a) -> int:
    deps = Path(a.deps).resolve()
    (deps / "deb").mkdir(parents=True, exist_ok=True)
    (deps / "whl").mkdir(parents=True, exist_ok=True)
    if not shutil.which("apt-get"):
        print("gpu-deps: apt-get not found: fetch " + ", ".join(DEBS) + " (Debian 12 or Ubuntu 24.04 .debs) into "
              f"{deps / 'deb'} by hand", file=sys.stderr)
        return 2
    r = subprocess.run(["apt-get", "download", *DEBS], cwd=deps / "deb")
    if r.returncode and os.geteuid() == 0:
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        r = subprocess.run(["apt-get", "download", *DEBS], cwd=deps / "deb")
    if r.returncode:
        print("gpu-deps: apt-get download failed", file=sys.stderr)
        return 1
    plat = [x for p in WHEEL_PLATFORMS for x in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           a.python_version, "--implementation", "cp", *plat, "-d", str(deps / "whl"), *WHEELS]
    r = subprocess.run(cmd)
    if r.returncode:
        print("gpu-deps: pip download failed (a pinned version may be gone: see WHEELS in benchmarks/gpu_check.py)",
              file=sys.stderr)
        return 1
    fio = build_fio(deps / "bin")
    files = sorted(p for p in deps.rglob("*") if p.is_file() and p.name != "MANIFEST.json")
    total = sum(p.stat().st_size for p in files)
    manifest = {"prepared": now(), "for": f"CPython {a.python_version}, manylinux x86_64; Debian .debs",
                "debs": list(DEBS), "wheels": list(WHEELS), "fio": fio, "total_bytes": total,
                "files": [{"path": str(p.relative_to(deps)), "bytes": p.stat().st_size,
                           "sha256": hashlib.sha256(p.read_bytes()).hexdigest()} for p in files]}
    write_json(deps / "MANIFEST.json", manifest)
    print(f"gpu-deps: {len(files)} files, {total / 2**20:.1f} MiB in {deps} (the device tool carries up to "
          f"{CARRY_LIMIT >> 20} MiB: carry=['{deps.relative_to(ROOT) if deps.is_relative_to(ROOT) else deps}'])")
    if total > CARRY_LIMIT:
        print("gpu-deps: too large to carry with a command", file=sys.stderr)
        return 1
    return 0


def deb_src_sources(text: str, deb822: bool) -> str:
    """An APT sources file with source packages too: `Types: deb` (deb822) becomes `Types: deb
    deb-src`, a `deb ...` line gets its `deb-src ...` twin; everything else is dropped."""
    if deb822:
        return "\n".join("Types: deb deb-src" if ln.strip().startswith("Types:") and "deb" in ln.split() else ln
                         for ln in text.splitlines()) + "\n"
    return "".join(ln.strip() + "\ndeb-src" + ln.strip()[3:] + "\n" for ln in text.splitlines()
                   if ln.strip().startswith("deb "))


def build_fio(dest: Path) -> str:
    """A static fio for the GPU machine: the upstream source from Debian's fio source package (its
    orig tarball; Debian's patches are not applied) and libaio-dev's libaio.a, fetched by APT with
    its own source list (the system's entries and their deb-src twins) in a scratch directory, built
    with the engines that need no other library. Returns what was done, for the manifest; a failure
    is reported and costs only the fio cases there, never the rest of `make gpu-deps`."""
    try:
        return _build_fio(dest)
    except Exception as e:  # noqa: BLE001 - reported; the other packages are still prepared
        why = str(e) if isinstance(e, FioStepFailed) else f"{type(e).__name__}: {e}"
        print(f"gpu-deps: no fio ({why}); run_programs.py on the GPU machine goes without its fio cases",
              file=sys.stderr)
        return f"none: {why}"


class FioStepFailed(RuntimeError):
    """A command of the fio build that exited non-zero (its message: the command and its output's end)."""


def _fio_step(cmd: list[str], cwd: Path, env: dict | None = None) -> None:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if r.returncode:
        raise FioStepFailed(f"{' '.join(cmd[:2] + cmd[-2:])} failed: {(r.stderr or r.stdout).strip()[-300:]}")


def _build_fio(dest: Path) -> str:
    import tarfile
    import tempfile
    if (dest / "fio").is_file():
        try:
            check_fio(dest / "fio")
            return "kept: " + subprocess.run([str(dest / "fio"), "--version"], capture_output=True,
                                             text=True).stdout.strip()
        except FioStepFailed as e:  # a static one (the first builds), or one that would not run there
            print(f"gpu-deps: building fio again: the one in {dest} {e}")
    with tempfile.TemporaryDirectory(prefix="accio-fio-") as tmp:
        t = Path(tmp)
        etc = Path("/etc/apt")
        (t / "parts").mkdir()
        (t / "parts" / "src.sources").write_text(  # deb822 stanzas, a blank line between files
            "\n".join(deb_src_sources(p.read_text(), True) for p in sorted(etc.glob("sources.list.d/*.sources"))))
        (t / "parts" / "src.list").write_text("".join(
            deb_src_sources(p.read_text(), False) for p in [etc / "sources.list", *sorted(etc.glob("sources.list.d/*.list"))]
            if p.is_file()))
        (t / "lists" / "partial").mkdir(parents=True)
        (t / "src").mkdir()
        opts = ["-o", "Dir::Etc::SourceList=/dev/null", "-o", f"Dir::Etc::SourceParts={t / 'parts'}",
                "-o", f"Dir::State::Lists={t / 'lists'}"]
        _fio_step(["apt-get", "-qq", *opts, "update"], t)
        _fio_step(["apt-get", "-qq", *opts, "source", "--download-only", FIO_SOURCE], t / "src")
        _fio_step(["apt-get", "-qq", *opts, "download", "libaio-dev"], t)
        unpack_deb(next(t.glob("libaio-dev_*.deb")), t / "pfx")
        for so in (t / "pfx").rglob("libaio.so*"):  # libaio.a alone: linked in, not needed there
            so.unlink()
        with tarfile.open(next((t / "src").glob("fio_*.orig.tar.*"))) as tar:
            tar.extractall(t / "src", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        tree = next(p for p in (t / "src").iterdir() if p.is_dir())
        lib = next((t / "pfx").rglob("libaio.a")).parent
        env = dict(os.environ, LIBRARY_PATH=str(lib))
        for cmd in (["./configure", *FIO_CONFIGURE, f"--extra-cflags=-I{t / 'pfx' / 'usr' / 'include'}"],
                    ["make", f"-j{os.cpu_count() or 1}"], ["strip", "fio"]):
            _fio_step(cmd, tree, env)
        needs = check_fio(tree / "fio")
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(tree / "fio", dest / "fio")
    version = subprocess.run([str(dest / "fio"), "--version"], capture_output=True, text=True).stdout.strip()
    print(f"gpu-deps: built {version} into {dest / 'fio'} (needs {', '.join(needs)})")
    return (f"built: {version}, the C library dynamic, libaio linked in (the orig tarball of Debian's source "
            f"package, libaio.a); needs {', '.join(needs)}")


def check_fio(exe: Path) -> list[str]:
    """The libraries a fio for the GPU machine needs, or FioStepFailed saying why it would not do
    there: static (LD_PRELOAD cannot enter it), a library outside FIO_LIBS, or a C library symbol
    newer than FIO_GLIBC_MAX."""
    needs = fio_needs(exe)
    if not needs:
        raise FioStepFailed("is static: LD_PRELOAD cannot enter it, so `accio run` would measure fio alone")
    if other := [n for n in needs if not n.startswith(FIO_LIBS)]:
        raise FioStepFailed(f"needs {', '.join(other)}, which the GPU machine may lack (it has {', '.join(FIO_LIBS)})")
    if (v := glibc_needed(exe)) > FIO_GLIBC_MAX:
        raise FioStepFailed(f"needs GLIBC_{v[0]}.{v[1]}, newer than the GPU machine's "
                            f"{FIO_GLIBC_MAX[0]}.{FIO_GLIBC_MAX[1]}: run make gpu-deps on an older system")
    return needs


def glibc_needed(exe: Path) -> tuple[int, int]:
    """The newest GLIBC_x.y symbol version a program needs (objdump -T), (0, 0) for none."""
    out = subprocess.run(["objdump", "-T", str(exe)], capture_output=True, text=True).stdout
    return max(((int(a), int(b)) for a, b in re.findall(r"GLIBC_(\d+)\.(\d+)", out)), default=(0, 0))


def fio_needs(exe: Path) -> list[str]:
    """The shared libraries a program loads (ldd's names); none for a static program."""
    r = subprocess.run(["ldd", str(exe)], capture_output=True, text=True)
    if "statically linked" in r.stdout or "not a dynamic executable" in r.stdout + r.stderr:
        return []
    return [Path(line.split()[0]).name for line in r.stdout.splitlines() if line.strip()]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", nargs="?", default="run", choices=("run", "prepare-deps", "report", "status"))
    ap.add_argument("--stage", help=f"comma-separated stages to run (again): {', '.join(NAMES)}")
    ap.add_argument("--force", action="store_true", help="run every stage again")
    ap.add_argument("--state", default=str(ROOT / "build" / "gpu-check"))
    ap.add_argument("--results", default=str(ROOT / "results" / "gpu"))
    ap.add_argument("--deps", default=str(ROOT / ".gpu-deps"))
    ap.add_argument("--data", help="directory for the benchmark files (default STATE/data)")
    ap.add_argument("--copy-to", help="also copy the report, stage results and logs here (the device tool's $OUT)")
    ap.add_argument("--deadline-s", type=float, default=540, help="start no stage that would end after this (540)")
    ap.add_argument("--stage-timeout-s", type=float, default=480, help="a stage's time limit (480)")
    ap.add_argument("--commit", help="the commit being checked (when the tree has no .git)")
    ap.add_argument("--command", help="the command to record in the report")
    ap.add_argument("--bench-args", default="", help="extra arguments for benchmarks/gpu_bench.py (e.g. '--size 1g')")
    ap.add_argument("--installed", action="store_true", help="use the accio this Python imports; no build stage")
    ap.add_argument("--force-prefix", action="store_true", help="use .gpu-deps/deb even where the system has the "
                    "libraries (to check the prefix build)")
    ap.add_argument("--python", help="the Python to build for and run with (default: this one)")
    ap.add_argument("--python-version", default="3.12", help="prepare-deps: the GPU machine's Python (3.12)")
    ap.add_argument("--source-id", help=argparse.SUPPRESS)
    return ap


def main(argv=None) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    if a.action == "prepare-deps":
        return prepare_deps(a)
    run = Run(a)
    if a.action == "report":
        say(f"wrote {report(run)}")
        return 0
    if a.action == "status":
        for s in STAGES:
            rec = read_json(run.stage_file(s.name)) or {}
            mark = "" if rec.get("source_id") in (None, run.sid) else " (other sources)"
            print(f"{s.name:<18} {rec.get('status', 'not run'):<8} {rec.get('duration_s', ''):>7} {mark}")
        return 0
    asked = None
    if a.stage:
        asked = [x.strip() for x in a.stage.split(",") if x.strip()]
        bad = [x for x in asked if x not in NAMES]
        if bad:
            ap.error(f"unknown stage(s) {', '.join(bad)}; choose from {', '.join(NAMES)}")
    elif a.force:
        asked = list(NAMES)
    if a.installed:
        asked = [x for x in (asked or [s.name for s in plan(run, None)]) if x != "build"] or None
        if asked is None:
            say("nothing to run")
            return 0
    say(f"sources {run.sid}; state {run.state}; deadline {a.deadline_s:.0f} s")
    return execute(run, asked)


if __name__ == "__main__":
    sys.exit(main())
