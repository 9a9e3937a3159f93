"""Whether the device gains from depth: the measurement behind the preload shim's prefetch.

A sequential reader of small requests (cat, sha256sum, numpy.fromfile) keeps the device at a queue
depth of about one; the shim's prefetch (posix_fadvise(WILLNEED) of a window ahead of it) queues
the window at once. That pays only where the device delivers more at depth: the tuner measures cold
reads of PIECE-sized pieces straight from the device (uring with O_DIRECT) at queue depth 1 (one
piece per request) and at DEPTH (REQUEST-sized requests split into pieces), interleaved, and writes
a window only where the ratio's 95% interval lies at or above GAIN. Depth 1 is measured with one
piece per request because a large request split at queue depth 1 adds the engine's per-task hand-off
to every piece (a fifth of the bandwidth on the 2-vCPU VM's disk while this was written, under load),
which would inflate the gain; fio's iodepth=1 has no such cost (benchmarks/prefetch_gain.py runs both).
Section format: docs/tuning.md ("prefetch").
"""
from __future__ import annotations

import time

from .. import stats
from .measure import MiB, Bench

KiB = 1 << 10
PIECE = 128 * KiB      # what the kernel's readahead and WILLNEED issue at a time, about
DEPTH = 16
REQUEST = 16 * MiB     # one request: 128 pieces, so that DEPTH stay in flight for most of it
WINDOW = 32 * MiB      # the window where depth pays (the shim's reach ahead of the reader)
GAIN = 1.5             # the bar: QD16 >= 1.5x QD1
MIN_ROUNDS = 5         # rounds (one sample of each depth) that make a decision
SHARE = 0.10           # of the calibration budget
MIN_SECONDS = 2.0      # below this share the measurement is skipped


def plan(depth: int) -> tuple[dict, int]:
    """One contender: its settings (PIECE-sized tasks, `depth` in flight, O_DIRECT) and request size."""
    return {"mechanism": "uring", "task_size": PIECE, "queue_depth": depth, "direct": True}, \
        PIECE if depth == 1 else REQUEST


def measure(bench: Bench, seconds: float, takes_direct: bool) -> dict:
    """The prefetch section: QD1 and QD16 MiB/s of cold reads, interleaved (stats.interleave), in
    about `seconds`; skipped (window 0, a note why) where that is too little time, reads cannot be
    made cold, or the filesystem refuses O_DIRECT."""
    why = None
    if not bench.cold_reads:
        why = "cold reads cannot be made here"
    elif not takes_direct:
        why = "the filesystem refuses O_DIRECT, so reads at a fixed queue depth cannot be measured"
    elif seconds < MIN_SECONDS:
        why = f"the budget's share for it ({seconds:.1f} s) is under {MIN_SECONDS:g} s"
    elif bench.file_size < REQUEST:
        why = f"the scratch file is smaller than {REQUEST // MiB} MiB"
    if why:
        return decide([], [], f"depth gain not measured: {why}")
    deadline = time.monotonic() + seconds
    per = seconds / (2 * stats.MIN_SAMPLES)  # aim of one sample
    est = {1: 100.0, DEPTH: 100.0}           # MiB/s, sizes the next sample

    def sample(depth: int):
        settings, size = plan(depth)

        def run() -> float:
            nbytes = min(bench.file_size, max(REQUEST, int(est[depth] * MiB * per) // REQUEST * REQUEST))
            est[depth] = bench.sample(settings, "read", True, 1, size, nbytes, min_seconds=per / 2)
            return est[depth]
        return run

    got = stats.interleave({"qd1": sample(1), "qd16": sample(DEPTH)}, stats.MIN_SAMPLES,
                           on_round=lambda r, s: time.monotonic() >= deadline)
    return decide(got["qd1"], got["qd16"])


def decide(qd1: list[float], qd16: list[float], note: str | None = None) -> dict:
    """The section for these samples: window WINDOW where the 95% interval of qd16/qd1 (paired:
    rounds) lies at or above GAIN, else 0 with a note saying why."""
    out = {"qd1_mibps": [round(x, 1) for x in qd1], "qd16_mibps": [round(x, 1) for x in qd16],
           "gain": None, "window": 0}
    n = min(len(qd1), len(qd16))
    if note is None and n < MIN_ROUNDS:
        note = f"depth gain not decided: {n} of the {MIN_ROUNDS} rounds it needs fitted in the budget"
    if note is None:
        r = stats.ratio(qd16[:n], qd1[:n], paired=True)
        out["gain"] = [round(r.estimate, 3), round(r.low, 3), round(r.high, 3)]
        if r.low >= GAIN:
            out["window"] = WINDOW
        else:
            note = (f"no prefetch: the gain is {'under' if r.high < GAIN else 'not surely at or above'} "
                    f"the {GAIN:g}x that prefetch needs")
    if note:
        out["note"] = note
    return out


def render(section: dict | None) -> str:
    """One line for `accio tune --show`."""
    if not section:
        return "prefetch: off (a profile written before `accio tune` measured the depth gain)"
    g, w, note = section.get("gain"), section.get("window", 0), section.get("note")
    text = "prefetch: " + (f"{w // MiB} MiB window ahead of sequential readers of cold files under `accio run`"
                           if w else "off")
    if g:
        text += f"; cold {PIECE // KiB} KiB reads at queue depth {DEPTH}: {g[0]:.2f}x depth 1 [{g[1]:.2f}-{g[2]:.2f}]"
    return text + (f" ({note})" if note else "")
