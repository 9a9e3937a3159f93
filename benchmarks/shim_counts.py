#!/usr/bin/env python3
"""What the preload shim does to a program, counted rather than timed (issue 20): timings on a shared
2-core machine are noisy, counts are not. For each tuning profile (--profile, as in run_programs.py:
`off` is the built-in model) and each dd block size, `dd` reads a hot file to /dev/null under
`accio-run`, and this reports

  syscalls    strace -f: calls by name (fstat/fcntl/lseek per call would show the shim's slow path,
              cachestat a residency probe, io_uring_setup the uring probe, openat errors a library search);
  callgrind   valgrind --tool=callgrind: user-space instructions of the whole run, and of the engine's
              loading (dlopen), opening the file (accio_open_fd: the profile's parse) and the shim's read();
  faults      minor page faults of a plain run (getrusage).

    python benchmarks/shim_counts.py --size 512m --bs 1M,128k --profile off \\
        --profile results/tune/profile_ext4_vda.json --json results/preload/shim_counts.json

Needs strace and valgrind. Counts depend on the build and the machine's libraries, not on load.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from accio._system import parse_size
from accio._usage import write_json

sys.path.insert(0, str(Path(__file__).resolve().parent))
from preload_bench import make_file  # noqa: E402
from run_programs import launcher, shim_contenders  # noqa: E402

FUNCTIONS = {"dlopen": re.compile(r":dlopen@@"), "accio_open_fd": re.compile(r":accio_open_fd \["),
             "read (shim)": re.compile(r":read \[.*libaccio_preload")}


# System calls an older strace has no name for, by number (strace -c leaves them out of its table).
UNNAMED = {"syscall_0x1c3": "cachestat"}


def syscalls(cmd: list[str], env: dict, tmp: Path) -> dict[str, list[int]]:
    """{syscall: [calls, errors]}, counted from strace -f's full trace (its -c summary drops the
    calls it has no name for, such as cachestat on strace 6.1)."""
    out = tmp / "strace.txt"
    subprocess.run(["strace", "-f", "-o", str(out), *cmd], env=env, check=True, stdout=subprocess.DEVNULL)
    got: dict[str, list[int]] = {}
    for line in out.read_text(errors="replace").splitlines():
        m = re.match(r"\d+\s+(?:<\.\.\. )?(\w+)(?:\(| resumed>)", line)
        if not m or "resumed>" in line[:m.end()]:
            continue  # an unfinished call is counted where it started
        name = UNNAMED.get(m.group(1), m.group(1))
        c = got.setdefault(name, [0, 0])
        c[0] += 1
        c[1] += " = -1 " in line
    return got


def callgrind(cmd: list[str], env: dict, tmp: Path) -> dict[str, int]:
    """Instructions of the run (the program's process, exec'd by the launcher) and, inclusive, of the
    functions in FUNCTIONS."""
    for old in tmp.glob("cg.*"):
        old.unlink()
    subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=yes", f"--callgrind-out-file={tmp}/cg.%p", *cmd],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    files = sorted(tmp.glob("cg.*"), key=lambda p: p.stat().st_size)
    if not files:
        raise SystemExit("callgrind wrote no output")
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(files[-1])], capture_output=True, text=True,
                         check=True).stdout
    got = {"total": 0, **{k: 0 for k in FUNCTIONS}}
    for line in ann.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(.*)", line)
        if not m:
            continue
        n = int(m.group(1).replace(",", ""))
        if m.group(2).startswith("PROGRAM TOTALS"):
            got["total"] = n
        for k, rx in FUNCTIONS.items():
            if rx.search(m.group(2)):
                got[k] = max(got[k], n)
    return got


def faults(cmd: list[str], env: dict) -> int:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - before


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp", help="directory for the test file (default /tmp)")
    ap.add_argument("--size", default="512m", help="file size (default 512m)")
    ap.add_argument("--bs", default="1M,128k", help="dd block sizes, comma-separated (default 1M,128k)")
    ap.add_argument("--profile", action="append", metavar="off|PATH",
                    help="ACCIO_PROFILE for the shim (repeat it; default: off and results/tune/profile_ext4_vda.json)")
    ap.add_argument("--json", help="write the counts here")
    a = ap.parse_args()
    for tool in ("strace", "valgrind", "callgrind_annotate"):
        if not shutil.which(tool):
            ap.error(f"{tool} is not installed")
    profiles = a.profile or ["off", str(Path(__file__).resolve().parent.parent / "results/tune/profile_ext4_vda.json")]
    for p in profiles:
        if p != "off" and not Path(p).is_file():
            ap.error(f"--profile {p}: no such file (give `off` or a profile's path)")
    size = parse_size(a.size)
    work = Path(tempfile.mkdtemp(prefix="accio-shim-counts.", dir=a.dir))
    big = work / "big.bin"
    rows = []
    try:
        make_file(big, size)
        subprocess.run(["cat", str(big)], stdout=subprocess.DEVNULL, check=True)  # hot
        for bs in a.bs.split(","):
            dd = ["dd", f"if={big}", "of=/dev/null", f"bs={bs}", "status=none"]
            for name, env in [("plain", dict(os.environ)), *shim_contenders(profiles).items()]:
                cmd = dd if name == "plain" else [launcher(), "--", *dd]
                row = {"bs": bs, "run": name, "profile": env.get("ACCIO_PROFILE") if name != "plain" else None,
                       "syscalls": syscalls(cmd, env, work), "instructions": callgrind(cmd, env, work),
                       "minor_faults": faults(cmd, env)}
                rows.append(row)
                sc, ins = row["syscalls"], row["instructions"]
                shown = " ".join(f"{k}={sc[k][0]}" for k in ("read", "newfstatat", "fcntl", "lseek", "openat", "mmap",
                                                             "io_uring_setup", "cachestat") if k in sc)
                other = sum(v[0] for k, v in sc.items() if k not in ("read", "write"))
                print(f"bs={bs:5s} {name:34s} instr {ins['total'] / 1e6:6.2f} M (dlopen {ins['dlopen'] / 1e6:.2f}, "
                      f"open {ins['accio_open_fd'] / 1e6:.2f})  faults {row['minor_faults']:4d}  syscalls but "
                      f"read/write {other:4d}: {shown}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        write_json(a.json, {"schema": "accio.shim-counts/1", "command": " ".join([sys.executable, *sys.argv]),
                            "machine": {"cpus": os.cpu_count(), "kernel": platform.release()}, "size": size,
                            "launcher": launcher(), "runs": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
