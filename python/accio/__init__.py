"""accio: move file data between storage and memory as fast as the machine allows.

    import accio, numpy as np
    with accio.open("data.bin", "r", mechanism="parallel", threads=4) as f:
        buf = np.empty(f.size, dtype=np.uint8)
        f.read_into(buf)
    arr = accio.read("data.bin")            # numpy.ndarray of uint8
    accio.write("copy.bin", arr)

Any host buffer works: bytes-like objects (bytearray, memoryview, mmap), NumPy arrays, and
DLPack arrays (e.g. PyTorch CPU tensors). So does GPU memory: CuPy arrays, PyTorch CUDA tensors,
Numba and JAX arrays (``__cuda_array_interface__`` or DLPack) go through the device mechanisms
(naive, staged, gds; auto picks staged):

    t = torch.empty(n, dtype=torch.uint8, device="cuda")
    with accio.open("weights.bin") as f:
        f.read_into(t)
    g = accio.read("weights.bin", device="cuda:0")   # a CuPy array, or an accio.DeviceArray

Settings are the ACCIO_* knobs by lower-case name.
"""
from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs ~10 ms of start-up, which `accio run` pays per launch
if TYPE_CHECKING:
    from typing import Any, Iterable

from . import _ext
from ._errors import Error
from ._log import AccioWarning, install as _install_log

_install_log(_ext)

__all__ = ["open", "read", "write", "File", "Future", "Error", "AccioWarning", "settings", "mechanisms",
           "global_stats", "reset_global_stats", "DeviceArray", "device_array", "gpus", "cuda_available",
           "__version__"]
__version__: str = _ext.version()
Future = _ext.Future
DeviceArray = _ext.DeviceArray


def _ordinal(device: str | int) -> int:
    """'cuda:1', 'cuda', 1 -> 1, 0, 1."""
    if isinstance(device, int):
        return device
    name, _, num = str(device).partition(":")
    if name != "cuda" or (num and not num.isdigit()):
        raise ValueError(f"device {device!r}: expected 'cuda' or 'cuda:N'")
    return int(num or 0)


def cuda_available() -> tuple[bool, str]:
    """(True, '') when the CUDA driver loads and reports a GPU, else (False, why)."""
    return _ext.cuda_available()


def gpus() -> list[dict]:
    """The GPUs the driver reports: name, PCI bus id, memory, NUMA node, link, local CPUs."""
    return _ext.gpus()


def device_array(nbytes: int, device: str | int = "cuda:0", managed: bool = False) -> DeviceArray:
    """nbytes of GPU memory owned by the returned DeviceArray (freed with it). It exposes
    __cuda_array_interface__ and DLPack: cupy.asarray(a), torch.from_dlpack(a) take it without a copy."""
    return _ext.DeviceArray(nbytes, _ordinal(device), managed)


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


def read(path: str | os.PathLike, mechanism: str | None = None, device: str | int | None = None,
         **settings: Any):
    """Read a whole file into a new numpy.ndarray of uint8, or with device="cuda:N" into GPU memory:
    a cupy.ndarray of uint8 when CuPy is installed, else an accio.DeviceArray (DLPack and
    __cuda_array_interface__, so torch.from_dlpack() takes it)."""
    with File(path, "r", mechanism, **settings) as f:
        n = f.size
        if device is None:
            import numpy as np
            arr = np.empty(n, dtype=np.uint8)
            return arr[:f.read_into(arr, 0)]
        ordinal = _ordinal(device)
        try:
            import cupy
        except ImportError:
            cupy = None
        if cupy is not None:
            with cupy.cuda.Device(ordinal):
                arr = cupy.empty(n, dtype=cupy.uint8)
            got = f.read_into(arr, 0)
            return arr if got == n else arr[:got]
        arr = device_array(n, ordinal)
        got = f.read_into(arr, 0)
        if got != n:  # the file shrank while being read
            raise Error(5, f"read '{path}': {got} of {n} bytes (file shrank while being read)")
        return arr


def write(path: str | os.PathLike, data, mechanism: str | None = None, fsync: bool = False,
          **settings: Any) -> int:
    """Write data (any buffer or array) as the whole content of path; returns bytes written."""
    with File(path, "w", mechanism, **settings) as f:
        n = f.write_from(data, 0)
        if fsync:
            f.fsync()
    return n

