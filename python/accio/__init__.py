"""accio: move file data between storage and memory as fast as the machine allows.

    import accio, numpy as np
    with accio.open("data.bin", "r", mechanism="parallel", threads=4) as f:
        buf = np.empty(f.size, dtype=np.uint8)
        f.read_into(buf)
    arr = accio.read("data.bin")            # numpy.ndarray of uint8
    accio.write("copy.bin", arr)

Any host buffer works: bytes-like objects (bytearray, memoryview, mmap), NumPy arrays, and
DLPack arrays (e.g. PyTorch CPU tensors). Settings are the ACCIO_* knobs by lower-case name.
"""
from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs ~10 ms of start-up, which `accio run` pays per launch
if TYPE_CHECKING:
    from typing import Any, Iterable

from . import _ext
from ._errors import Error

__all__ = ["open", "read", "write", "File", "Future", "Error", "settings", "mechanisms",
           "global_stats", "reset_global_stats", "__version__"]
__version__: str = _ext.version()
Future = _ext.Future


def _kv(settings: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for k, v in settings.items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = "on" if v else "off"
        out.append((k, str(v)))
    return out


def settings(**overrides: Any) -> dict[str, str]:
    """Effective settings (defaults, then ACCIO_* environment, then overrides) by name."""
    return {name: value for name, _env, _doc, value in _ext.settings(_kv(overrides))}


def mechanisms() -> list[tuple[str, bool, str]]:
    """(name, available, why not) for every mechanism, in display order."""
    return _ext.mechanisms()


def global_stats() -> dict:
    """Process-wide statistics: bytes, calls, time, and per-mechanism calls and bytes."""
    return _ext.global_stats()


def reset_global_stats() -> None:
    _ext.reset_global_stats()


class File:
    """An open file. Use as a context manager; see accio.open()."""

    def __init__(self, path: str | os.PathLike, mode: str = "r", mechanism: str | None = None,
                 **settings: Any):
        self.path = os.fspath(path)
        self.mode = mode
        self._f = _ext.File(self.path, mode, _kv({"mechanism": mechanism, **settings}))
        self._append = mode.startswith("a")

    # -- context manager --
    def __enter__(self) -> "File":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<accio.File {self.path!r} mode={self.mode!r} mechanism={self.setting('mechanism')!r}>"

    # -- transfers --
    def read_into(self, buf, offset: int = 0) -> int:
        """Fill buf from the file at offset; returns bytes read (short only at end of file)."""
        return self._f.read_into(buf, offset)

    def write_from(self, buf, offset: int | None = None) -> int:
        """Write all of buf at offset (in append modes, offset None appends); returns bytes written."""
        if offset is None:
            if self._append:
                return self._f.append(buf)[1]
            offset = 0
        return self._f.write_from(buf, offset)

    def append(self, buf) -> int:
        """Write buf at the end of the file; returns the offset it was written at."""
        return self._f.append(buf)[0]

    def read_into_async(self, buf, offset: int = 0) -> Future:
        """Start a read; the Future's result() is the byte count. Keep buf alive until then."""
        return self._f.async_(buf, offset, False)

    def write_from_async(self, buf, offset: int = 0) -> Future:
        return self._f.async_(buf, offset, True)

    def submit(self, requests: Iterable[tuple[Any, int]], write: bool = False) -> list[Future]:
        """Submit many (buffer, offset) requests at once; one Future per request."""
        return self._f.submit(list(requests), write)

    def fsync(self) -> None:
        self._f.fsync()

    @property
    def size(self) -> int:
        return self._f.size()

    def close(self) -> None:
        self._f.close()

    # -- introspection --
    def plan(self, nbytes: int, write: bool = False) -> str:
        """The mechanism a request of nbytes at offset 0 would run (after auto and fallbacks)."""
        return self._f.plan(nbytes, write)

    def stats(self) -> dict:
        """Calls, bytes and time; per-mechanism calls and bytes; 'plans': which plan served how many
        requests and why (for auto: the profile cell, concurrency and cache state)."""
        return self._f.stats()

    def explain(self, nbytes: int, offset: int = 0, write: bool = False, aligned: bool = True) -> dict:
        """The plan a request of nbytes at offset would run now, and why: {'plan', 'mechanism', 'why'}.
        aligned=False asks about a buffer that is not aligned for O_DIRECT."""
        mechanism, plan, why = self._f.explain(nbytes, offset, write, aligned)
        return {"plan": plan, "mechanism": mechanism, "why": why}

    def setting(self, name: str) -> str:
        return self._f.setting(name)

    def residency(self, offset: int = 0, length: int | None = None) -> dict:
        """Page-cache residency of a range: {'cached', 'dirty', 'total'} in bytes."""
        return self._f.residency(offset, self.size if length is None else length)


def open(path: str | os.PathLike, mode: str = "r", mechanism: str | None = None,
         **settings: Any) -> File:
    """Open path. mode: r, r+ (rw), w, w+, a, a+. mechanism: auto (default), posix, parallel,
    direct or uring. Other keyword arguments are settings (threads=4, task_size="8M", ...)."""
    return File(path, mode, mechanism, **settings)


def read(path: str | os.PathLike, mechanism: str | None = None, **settings: Any):
    """Read a whole file into a new numpy.ndarray of uint8."""
    import numpy as np
    with File(path, "r", mechanism, **settings) as f:
        n = f.size
        arr = np.empty(n, dtype=np.uint8)
        got = f.read_into(arr, 0)
    return arr[:got]


def write(path: str | os.PathLike, data, mechanism: str | None = None, fsync: bool = False,
          **settings: Any) -> int:
    """Write data (any buffer or array) as the whole content of path; returns bytes written."""
    with File(path, "w", mechanism, **settings) as f:
        n = f.write_from(data, 0)
        if fsync:
            f.fsync()
    return n

