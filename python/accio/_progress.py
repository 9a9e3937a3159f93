"""Progress on stderr for the long commands (`accio bench`, `accio tune`): one definition, so that
both behave alike on a terminal and off one."""

from __future__ import annotations

import sys
import time


class Progress:
    """A tqdm bar on a terminal (after 2 s); otherwise (a pipe, a log file, a batch job) a line at
    most every `every` seconds, as the work reports its progress, with how much is done, the time
    so far and an estimate of the rest, so that a long run is never silent. `name` starts each line
    (`accio bench`).

    Counted work (`total` units of `unit`, one `step` per unit as it starts) prints
    "3/10 phases done"; work known by its fraction of the whole (`progress(desc, fraction)`, a
    budget in time) prints "42% done"; a stage of it reports its own fraction through
    `stage(lo, hi)`. Work limited by a time budget (`budget` seconds from `t0`, a clock reading
    taken before this object: the calibration's setup counts) estimates the rest as the budget
    left, not from the fraction: the fraction is the search's share of its own budget, so
    spent / fraction ran past the budget ("10% done, 10 s, about 94 s left" with --budget 60)."""

    def __init__(self, name: str, enabled: bool, total: int | None = None, unit: str = "phases",
                 tty: bool | None = None, every: float = 10.0, clock=time.monotonic,
                 budget: float | None = None, t0: float | None = None):
        self.name, self.total, self.unit, self.every, self.clock = name, total, unit, every, clock
        self.bar = None
        self.done = 0
        self.lines = enabled and not (sys.stderr.isatty() if tty is None else tty)
        self.t0 = self.last = clock() if t0 is None else t0
        self.budget = budget
        if enabled and not self.lines:
            try:
                from tqdm import tqdm
                if total is None:
                    self.bar = tqdm(total=1000, file=sys.stderr, delay=2, leave=False,
                                    bar_format="{desc} {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]")
                else:
                    self.bar = tqdm(total=total, file=sys.stderr, delay=2, unit=unit.rstrip("s"), leave=False,
                                    bar_format="{l_bar}{bar}| {n}/{total} [{elapsed}<{remaining}]")
            except ImportError:
                self.lines = True

    def step(self, desc: str) -> None:
        """One unit of `total` starts; desc names it."""
        if self.total is None:
            raise ValueError("Progress.step counts units of a total: give total=, or report fractions")
        if self.bar:
            self.bar.set_description_str(desc, refresh=False)
            self.bar.update(1)
            return
        if self.lines:
            fraction = self.done / self.total if self.total else 0.0
            self._line(desc, f"{self.done}/{self.total} {self.unit} done", fraction)
        self.done += 1

    def __call__(self, desc: str, fraction: float) -> None:
        """`fraction` (0 to 1) of the whole is done; desc names what runs now."""
        fraction = min(1.0, max(0.0, fraction))
        if self.bar:
            self.bar.set_description_str(desc[:48].ljust(48), refresh=False)
            self.bar.update(max(0, int(fraction * 1000) - self.bar.n))
        elif self.lines:
            self._line(desc, f"{fraction:.0%} done", fraction)

    def stage(self, lo: float, hi: float):
        """A callable for a stage that spans [lo, hi] of the whole (the host search, then the GPU's):
        its own fraction done, 0 to 1, becomes the whole's."""
        return lambda desc, fraction: self(desc, lo + min(1.0, max(0.0, fraction)) * (hi - lo))

    def _line(self, desc: str, done: str, fraction: float) -> None:
        t = self.clock()
        if t - self.last < self.every:
            return
        self.last = t
        spent = t - self.t0
        if self.budget is not None:
            left = f", about {max(0.0, self.budget - spent):.0f} s left"
        else:
            left = f", about {spent / fraction * (1 - fraction):.0f} s left" if fraction > 0 else ""
        print(f"{self.name}: {done}, {spent:.0f} s{left}; now {desc}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar:
            self.bar.close()
