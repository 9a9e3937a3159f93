"""Checks `accio tune`'s depth measurement (the prefetch window) against fio in the same run.

The tuner's measurement (accio.tune.prefetch: uring O_DIRECT, 128 KiB pieces, queue depth 16 vs 1
and vs a buffered reader's own rate, interleaved) and fio's (libaio O_DIRECT sequential 128 KiB
reads at iodepth 16 vs 1, the issue's reference, and psync buffered: benchmarks/run_programs.py's
fio_qd) run one after the other on the same scratch file. Prints the ratios with their 95%
intervals and the window the tuner would write; --json keeps them (results/run/prefetch_gain.json). About seconds + 14 fio runs of the file (~1-2 min at 256 MiB on a
disk of ~150-250 MiB/s).

  .venv/bin/python benchmarks/prefetch_gain.py --dir . --json results/run/prefetch_gain.json
"""
from __future__ import annotations

import argparse
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path

from accio import __version__, _ext, stats
from accio._system import parse_size
from accio._usage import write_json
from accio.tune import prefetch
from accio.tune.measure import Bench

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_programs import fio_qd  # noqa: E402  (the issue's fio reference)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=".", help="a directory on the device to measure (default .)")
    ap.add_argument("--file-size", default="256m", help="scratch file size (default 256m, as accio tune)")
    ap.add_argument("--seconds", type=float, default=12.0,
                    help="the tuner's time for it (default 12: its tenth of the default 120 s budget)")
    ap.add_argument("--rounds", type=int, default=stats.MIN_SAMPLES, help="fio rounds (default 7)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    size = parse_size(a.file_size)
    with Bench(a.dir, size) as bench:
        takes_direct = _ext.probe("o_direct", a.dir)[0]
        tuner = prefetch.measure(bench, a.seconds, takes_direct)
        fio = fio_qd(Path(bench.read_path), size, a.rounds) if shutil.which("fio") and takes_direct else None
    g = tuner["gain"]
    print(prefetch.render(tuner))
    if fio:
        r = fio["ratio"]
        print(f"fio libaio O_DIRECT 128 KiB, iodepth 16 / 1: {r['estimate']:.2f}x [{stats.bounds(r['low'], r['high'])}]"
              f" (the issue's measure of the device)")
        r = fio["headroom"]["ratio"]
        print(f"fio iodepth 16 / psync buffered (a reader's own): {r['estimate']:.2f}x [{stats.bounds(r['low'], r['high'])}]"
              f" (the prefetch applies at >= {prefetch.GAIN:g}x)")
    if g and fio:
        print(f"tuner / fio: gain {g[0] / fio['ratio']['estimate']:.2f}, "
              f"headroom {tuner['headroom'][0] / fio['headroom']['ratio']['estimate']:.2f}")
    if a.json:
        write_json(a.json, {"schema": "accio.prefetch-gain/1", "command": "python " + " ".join(sys.argv),
                            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                            "accio": __version__, "git_commit": _ext.git_commit(), "dir": str(Path(a.dir).resolve()),
                            "file_size": size, "tuner": tuner, "fio_qd": fio})
    return 0


if __name__ == "__main__":
    sys.exit(main())
