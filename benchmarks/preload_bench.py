#!/usr/bin/env python3
"""accio run against the same unmodified programs run plainly, side by side in one run (issue 5).

Cases, each run with and without the shim in rounds (the order by accio.stats.rotation), `--repeat`
times (at least 7), medians and spreads, and the speedup plain/shim as the median of the
per-round ratios with its 95% interval and verdict (accio.stats; until the twenty-fourth session a
ratio of medians in a fixed rotation from 5 rounds, statistics audit):
  hot-dd         dd if=F of=/dev/null bs=64M of a cached file             (accio run -- dd ...)
  hot-readinto   Python readinto() of 64 MiB chunks of a cached file
  cold-dd        the same dd with the file's pages dropped first (posix_fadvise, residency checked)
  cold-readinto  the same readinto, cold
  write-dd       dd if=/dev/zero of=NEW bs=64M (page cache), and write-sync-dd with conv=fsync
  git-status     `git status` in a repository of --small-files files          (small I/O overhead)
  tar-small      `tar cf OUT.tar dir` of --small-files files                  (small I/O overhead)
For the small-I/O cases the shim is set with LD_PRELOAD directly (what a program pays), and the
`accio run` launcher (native: benchmarks/run_programs.py --launch-only measures it closely) is
reported on its own line.

    python benchmarks/preload_bench.py [--dir /tmp] [--size 2g] [--repeat 7] [--json results/preload.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import accio
from accio import _ext, stats
from accio._system import drop_pages, residency
from accio.run import shim_path

MiB = 1 << 20
READER = ("import sys\nbuf = bytearray(64 << 20)\nwith open(sys.argv[1], 'rb', buffering=0) as f:\n"
          "    while f.readinto(buf):\n        pass\n")


def accio_cmd(threshold=None) -> list[str]:
    exe = shutil.which("accio") or str(Path(sys.executable).with_name("accio"))
    return [exe, "run"] + (["--threshold", str(threshold)] if threshold else []) + ["--"]


def timed(cmd, env=None, cwd=None) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed: {p.stderr.decode().strip()}")
    return dt




def make_file(path: Path, size: int) -> None:
    if path.exists() and path.stat().st_size == size:
        return
    block = os.urandom(64 * MiB)
    with open(path, "wb") as f:
        left = size
        while left:
            left -= f.write(block[:min(left, len(block))])


def summarize(samples: list[float]) -> dict:
    return {"median_s": statistics.median(samples), "min_s": min(samples), "max_s": max(samples),
            "samples_s": samples}


def run_pair(name, plain_cmd, shim_cmd, repeat, before=None, env_plain=None, env_shim=None, cwd=None,
             nbytes=None, note="", preload_too=False):
    """Plain and shim runs in rounds (the order by stats.rotation); returns the case's record.
    preload_too adds a third side: the plain command with LD_PRELOAD set directly (the program's
    own time under the shim, without the `accio run` launcher)."""
    sides = [("plain", plain_cmd, env_plain), ("shim", shim_cmd, env_shim)]
    if preload_too:
        sides.append(("preload", plain_cmd, dict(os.environ, LD_PRELOAD=shim_path())))
    samples = {s[0]: [] for s in sides}
    by_label = {side[0]: side for side in sides}
    for i in range(repeat):
        for label, cmd, env in (by_label[x] for x in stats.rotation(list(by_label), i)):
            ctx = before() if before else None
            samples[label].append(timed(cmd, env=env, cwd=cwd))
            if ctx is not None and ctx > 0.05:
                raise SystemExit(f"{name}: the file was {ctx:.0%} cached before a cold run")
    rec = {"case": name, "command_plain": " ".join(map(str, plain_cmd)),
           "command_shim": " ".join(map(str, shim_cmd)), "note": note}
    line = f"{name:15s}"
    for label, xs in samples.items():
        rec[label] = summarize(xs)
        if nbytes:
            rec[label]["MiBps"] = nbytes / MiB / rec[label]["median_s"]
        if label != "plain":  # plain time / this side's time, round by round: above 1 is faster
            r = stats.ratio(samples["plain"], xs, paired=True)
            rec[label].update(speedup=r.estimate, ratio=r.as_dict(), verdict=stats.verdict(r))
        line += f" {label} {rec[label]['median_s']:8.4f}s [{min(xs):.4f}..{max(xs):.4f}]"
        line += f" {stats.describe(r)} {rec[label]['verdict']}" if label != "plain" else ""
    rec["speedup"] = rec["shim"]["speedup"]
    print(line, flush=True)
    return rec


def small_tree(root: Path, n: int) -> None:
    if (root / ".git").is_dir():
        return
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        d = root / f"d{i % 50}"
        d.mkdir(exist_ok=True)
        (d / f"f{i}.txt").write_text(f"file {i}\n" * (1 + i % 200))
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@x", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@x")
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-q", "-m", "tree"]):
        subprocess.run(cmd, cwd=root, env=env, check=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default="/tmp", help="directory for the test files (default /tmp)")
    ap.add_argument("--size", default="2g", help="file size for the large cases (default 2g)")
    ap.add_argument("--repeat", type=int, default=stats.MIN_SAMPLES, help="runs of each side per large case (default 7)")
    ap.add_argument("--small-repeat", type=int, default=30, help="runs per side for small-I/O cases (default 30)")
    ap.add_argument("--small-files", type=int, default=3000, help="files in the small-I/O tree (default 3000)")
    ap.add_argument("--cases", default="all", help="comma-separated subset of the cases")
    ap.add_argument("--json", help="write every sample and the summary here")
    a = ap.parse_args()
    if min(a.repeat, a.small_repeat) < stats.MIN_SAMPLES:
        ap.error(f"--repeat and --small-repeat must be at least {stats.MIN_SAMPLES} (the project's statistics rule)")
    size = _ext.parse_size(a.size)
    work = Path(a.dir) / f"accio-preload-bench.{os.getpid()}"
    work.mkdir(parents=True)
    want = set(a.cases.split(",")) if a.cases != "all" else None
    use = lambda c: want is None or c in want
    big, out = work / "big.bin", work / "out.bin"
    results = []
    try:
        make_file(big, size)
        env_shim = dict(os.environ, LD_PRELOAD=shim_path())
        dd = ["dd", f"if={big}", "of=/dev/null", "bs=64M"]
        rd = [sys.executable, "-c", READER, str(big)]
        warm = lambda: (timed(["cat", str(big)]), None)[1]
        cold = lambda: (drop_pages(str(big), 0, size), residency(str(big)))[1]
        if use("hot-dd"):
            warm()
            results.append(run_pair("hot-dd", dd, accio_cmd() + dd, a.repeat, before=warm, nbytes=size,
                                    preload_too=True))
        if use("hot-readinto"):
            results.append(run_pair("hot-readinto", rd, accio_cmd() + rd, a.repeat, before=warm, nbytes=size,
                                    preload_too=True))
        if use("cold-dd"):
            results.append(run_pair("cold-dd", dd, accio_cmd() + dd, a.repeat, before=cold, nbytes=size))
        if use("cold-readinto"):
            results.append(run_pair("cold-readinto", rd, accio_cmd() + rd, a.repeat, before=cold, nbytes=size))
        count = str(size // (64 * MiB))
        wr = ["dd", "if=/dev/zero", f"of={out}", "bs=64M", f"count={count}"]
        fresh = lambda: (out.unlink(missing_ok=True), os.sync(), None)[2]
        if use("write-dd"):
            results.append(run_pair("write-dd", wr, accio_cmd() + wr, a.repeat, before=fresh, nbytes=size))
        if use("write-sync-dd"):
            results.append(run_pair("write-sync-dd", wr + ["conv=fsync"], accio_cmd() + wr + ["conv=fsync"],
                                    a.repeat, before=fresh, nbytes=size))
        out.unlink(missing_ok=True)
        tree = work / "tree"
        if use("git-status") or use("tar-small"):
            small_tree(tree, a.small_files)
        if use("git-status"):
            gs = ["git", "status", "--porcelain"]
            results.append(run_pair("git-status", gs, gs, a.small_repeat, env_shim=env_shim, cwd=tree,
                                    note="shim set with LD_PRELOAD; the launcher is measured separately"))
        if use("tar-small"):
            tar = ["tar", "cf", str(work / "small.tar"), "tree"]
            results.append(run_pair("tar-small", tar, tar, a.small_repeat, env_shim=env_shim, cwd=work,
                                    note="shim set with LD_PRELOAD; the launcher is measured separately"))
        if use("launcher"):
            results.append(run_pair("launcher", ["true"], accio_cmd() + ["true"], a.small_repeat,
                                    note="`accio run -- true` against `true`: the launcher's start-up, paid "
                                    "once per run"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc = {
        "schema": "accio.preload-bench/1",
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
        "machine": {"kernel": platform.release(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "dir": a.dir, "filesystem": _ext.profile_key(a.dir)["filesystem"],
                    "device": _ext.profile_key(a.dir)["device"]},
        "accio": {"version": accio.__version__, "commit": _ext.git_commit()},
        "size": size, "repeat": a.repeat, "small_repeat": a.small_repeat, "small_files": a.small_files,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "results": results,
    }
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
