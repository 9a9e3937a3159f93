"""Whether the device gains from depth: the measurement behind the preload shim's prefetch.

A sequential reader of small requests (cat, sha256sum, numpy.fromfile) gets what the kernel's
readahead gives it: with a small readahead (128 KiB, the kernel's default) about one request in
flight; the shim's prefetch (posix_fadvise(WILLNEED) of a window ahead of it) queues the window at
once. That pays only where the device delivers more at depth than the reader already gets: the
tuner measures cold reads of PIECE-sized pieces straight from the device (uring with O_DIRECT) at
queue depth 1 (one piece per request) and at DEPTH (REQUEST-sized requests split into pieces), and
the reader's own rate (posix, PIECE-sized buffered requests in order, the kernel's readahead at
work), interleaved, and writes a window only where the 95% intervals of QD16/QD1 (the gain, the
issue's measure of the device) and of QD16 over the reader's own rate (the headroom) both lie at
or above GAIN. The gain alone is not enough: on the 2-vCPU VM's disk (read_ahead_kb 8192) the gain was
1.4-1.8x while a cold `cat` already read at the QD16 rate, so prefetch had nothing to add.
Depth 1 is measured with one piece per request because a large request split at queue depth 1 adds
the engine's per-task hand-off to every piece, which would inflate the gain; fio's iodepth=1 has no
such cost (benchmarks/prefetch_gain.py runs both).
Section format: docs/tuning.md ("prefetch").
"""
from __future__ import annotations

import time

from .. import stats
from .._system import fmt_size
from .measure import MiB, Bench

KiB = 1 << 10
PIECE = 128 * KiB      # what the kernel's readahead and WILLNEED issue at a time, about
DEPTH = 16
REQUEST = 16 * MiB     # one request: 128 pieces, so that DEPTH stay in flight for most of it
WINDOW = 32 * MiB      # the window where depth pays (the shim's reach ahead of the reader)
GAIN = 1.5             # the bar: QD16 >= 1.5x QD1; the window also needs QD16 >= 1.5x the reader
MIN_ROUNDS = stats.MIN_SAMPLES  # rounds (one sample of each depth) that make a decision (5 until session 24)
SHARE = 0.10           # of the calibration budget
MIN_SECONDS = 2.0      # below this share the measurement is skipped


def plan(depth: int) -> tuple[dict, int]:
    """One contender: its settings (PIECE-sized tasks, `depth` in flight, O_DIRECT) and request size;
    depth 0 is the reader's own: buffered PIECE-sized requests in order (posix)."""
    if depth == 0:
        return {"mechanism": "posix"}, PIECE
    return {"mechanism": "uring", "task_size": PIECE, "queue_depth": depth, "direct": True}, \
        PIECE if depth == 1 else REQUEST


def measure(bench: Bench, seconds: float, takes_direct: bool) -> dict:
    """The prefetch section: QD1, QD16 and the reader's own MiB/s of cold reads, interleaved, in
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
        return decide([], [], [], f"depth gain not measured: {why}")
    deadline = time.monotonic() + seconds
    per = seconds / (3 * stats.MIN_SAMPLES)  # aim of one sample
    est = {0: 100.0, 1: 100.0, DEPTH: 100.0}  # MiB/s, sizes the next sample

    def sample(depth: int):
        settings, size = plan(depth)

        def run() -> float:
            nbytes = min(bench.file_size, max(REQUEST, int(est[depth] * MiB * per) // REQUEST * REQUEST))
            est[depth] = bench.sample(settings, "read", True, 1, size, nbytes, min_seconds=per / 2)
            return est[depth]
        return run

    got = stats.interleave({"qd1": sample(1), "qd16": sample(DEPTH), "reader": sample(0)}, stats.MIN_SAMPLES,
                           on_round=lambda r, s: time.monotonic() >= deadline)
    return decide(got["qd1"], got["qd16"], got["reader"])


def decide(qd1: list[float], qd16: list[float], reader: list[float], note: str | None = None) -> dict:
    """The section for these samples: window WINDOW where the 95% intervals (paired: rounds) of
    qd16/qd1 (the gain) and of qd16/reader (the headroom) both lie at or above GAIN, else 0 with
    a note saying why."""
    out = {"qd1_mibps": [round(x, 1) for x in qd1], "qd16_mibps": [round(x, 1) for x in qd16],
           "reader_mibps": [round(x, 1) for x in reader], "gain": None, "headroom": None, "window": 0}
    n = min(len(qd1), len(qd16), len(reader))
    if note is None and n < MIN_ROUNDS:
        note = f"depth gain not decided: {n} of the {MIN_ROUNDS} rounds it needs fitted in the budget"
    if note is None:
        g = stats.ratio(qd16[:n], qd1[:n], paired=True)
        h = stats.ratio(qd16[:n], reader[:n], paired=True)
        out["gain"] = [round(g.estimate, 3), round(g.low, 3), round(g.high, 3)]
        out["headroom"] = [round(h.estimate, 3), round(h.low, 3), round(h.high, 3)]
        if g.low >= GAIN and h.low >= GAIN:
            out["window"] = WINDOW
        elif h.low >= GAIN:
            note = (f"no prefetch: depth gives {'under' if g.high < GAIN else 'not surely'} {GAIN:g}x of depth 1 "
                    f"(a reader is held back by something else: a window of WILLNEED would not lift it)")
        else:
            note = (f"no prefetch: depth gives {'under' if h.high < GAIN else 'not surely'} {GAIN:g}x of what a "
                    f"reader already gets with the kernel's readahead")
    if note:
        out["note"] = note
    return out


def _interval(x) -> list | None:
    """[estimate, low, high] as numbers, else None (a field the engine does not read: --show shows it
    only where it has that shape)."""
    ok = isinstance(x, list) and len(x) == 3 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in x)
    return x if ok else None


def render(section: dict | None) -> str:
    """One line for `accio tune --show`."""
    if not section:
        return "prefetch: off (a profile written before `accio tune` measured the depth gain)"
    if not isinstance(section, dict):
        return "prefetch: off"
    g, h = _interval(section.get("gain")), _interval(section.get("headroom"))
    w, note = section.get("window", 0), section.get("note")
    w = w if isinstance(w, int) and not isinstance(w, bool) else 0  # the engine checked the window
    text = "prefetch: " + (f"{fmt_size(w)} window ahead of sequential readers of cold files under `accio run`"
                           if w else "off")
    if g:
        text += f"; cold {PIECE // KiB} KiB reads at queue depth {DEPTH}: {g[0]:.2f}x depth 1 [{g[1]:.2f}-{g[2]:.2f}]"
    if h:
        text += f", {h[0]:.2f}x a reader's own [{h[1]:.2f}-{h[2]:.2f}]"
    return text + (f" ({note})" if note else "")
