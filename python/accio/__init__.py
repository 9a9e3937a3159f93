"""accio: move file data between storage and memory as fast as the machine allows.

    import accio, numpy as np
    with accio.open("data.bin", "r", mechanism="parallel", threads=4) as f:
        buf = np.empty(f.size, dtype=np.uint8)
        f.read_into(buf)
    arr = accio.read("data.bin")            # numpy.ndarray of uint8
    accio.write("copy.bin", arr)

Any host buffer works: bytes-like objects (bytearray, memoryview, mmap), NumPy arrays, and
DLPack arrays (e.g. PyTorch CPU tensors). So does GPU memory: CuPy arrays, PyTorch CUDA tensors,
Numba and JAX arrays (DLPack or ``__cuda_array_interface__``, recognised before the buffer
protocol, with the producer's stream waited for) go through the device mechanisms (naive, staged,
gds, pagecache; auto runs staged unless `accio tune` measured this GPU model):

    t = torch.empty(n, dtype=torch.uint8, device="cuda")
    with accio.open("weights.bin") as f:
        f.read_into(t)
    g = accio.read("weights.bin", device="cuda:0")   # a CuPy array, or an accio.DeviceArray
    w = accio.read("w.bin", device=0, framework="torch", dtype="bfloat16", shape=(4096, -1))
    accio.read("weights.bin", out=t)                  # fill an existing array (host or GPU)

Settings are the ACCIO_* knobs by lower-case name, as keywords (mechanism="staged", threads=8), or
process-wide defaults (accio.defaults.set(threads=8), also as `with accio.defaults.set(...):`).

Also: accio.Future (a concurrent.futures.Future, awaitable), accio.RawFile (an io.RawIOBase, for
io.BufferedReader and open()-style code), accio.pinned_empty(n) (pinned host memory for your own staging).
"""
from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing costs ~10 ms of start-up, which `accio run` pays per launch
if TYPE_CHECKING:  # type checkers see these imports; at run time Future and RawFile load on first use
    from typing import Any, Iterable

    from ._futures import Future
    from ._rawio import RawFile

from . import _ext
from . import _defaults as defaults
from ._errors import Error, file_shrank as _shrank
from ._log import AccioWarning, install as _install_log

_install_log(_ext)


def _finish_imports_before_fork() -> None:
    """Before a fork: an import of accio's lazily loaded modules that another thread has begun is
    waited for. Forked in its middle, the child inherited the import's module lock, held by a thread
    that does not exist there, and its first async call (or accio.Future) hung (ML audit, session 27).
    A module not being imported costs a dictionary lookup."""
    for name in ("accio._futures", "accio._rawio"):
        module = sys.modules.get(name)
        if module is not None and getattr(getattr(module, "__spec__", None), "_initializing", False):
            __import__(name)  # takes the module's lock: returns once the other thread's import is done


os.register_at_fork(before=_finish_imports_before_fork)

__all__ = ["open", "read", "write", "File", "Future", "RawFile", "Error", "AccioWarning", "defaults", "settings",
           "mechanisms", "global_stats", "reset_global_stats", "DeviceArray", "device_array", "PinnedBuffer",
           "pinned_empty", "gpus", "cuda_available", "__version__"]
__version__: str = _ext.version()
DeviceArray = _ext.DeviceArray
PinnedBuffer = _ext.PinnedBuffer


if not TYPE_CHECKING:  # hidden from type checkers, which then take a typo (accio.opne) for an error, not Any
    def __getattr__(name: str) -> type:
        """Future and RawFile load on first use: concurrent.futures costs ~10 ms of start-up, which
        `accio run` would pay per launch."""
        if name == "Future":
            from ._futures import Future
            return Future
        if name == "RawFile":
            from ._rawio import RawFile
            return RawFile
        raise AttributeError(f"module 'accio' has no attribute {name!r}")
del TYPE_CHECKING, annotations  # compile-time only: not names of the module's (dir(accio), help())


def __dir__() -> list[str]:
    """The module's names and the two that load on first use, so that completion offers them."""
    return sorted({*globals(), "Future", "RawFile"})


def _ordinal(device: str | int) -> int:
    """'cuda:1', 1 -> 1; 'cuda' -> the calling thread's current GPU (_current_gpu), as torch means it."""
    if isinstance(device, int):
        return device
    name, _, num = str(device).partition(":")
    if name != "cuda" or (num and not num.isdigit()):
        raise ValueError(f"device {device!r}: expected 'cuda', 'cuda:N' or a GPU number for GPU memory "
                         "(None or 'cpu' for host memory, where a call takes it)")
    return int(num) if num else _current_gpu()


def _where(device) -> int | None:
    """None for host memory (None, 'cpu', torch.device('cpu')), else the GPU's ordinal ('cuda:N', N,
    torch.device('cuda:N'); 'cuda' is the calling thread's current GPU, as torch means it)."""
    if device is None or device == "cpu":
        return None
    if type(device).__name__ == "device" and hasattr(device, "type"):  # a torch.device
        if device.type == "cpu":
            return None
        device = device.type if device.index is None else f"{device.type}:{device.index}"
    return _ordinal(device)


def _current_gpu() -> int:
    """The GPU that "cuda" without an index means, as PyTorch and the CUDA runtime mean it: the calling
    thread's current device. torch.cuda.current_device() where torch is imported and has set up CUDA
    (torch.cuda.set_device, a tensor made on a GPU); else the GPU of the thread's current CUDA context
    (cudaSetDevice, CuPy's Device, a framework made it current); else 0, what cudaGetDevice says when
    nothing chose one. Makes no CUDA context (a context on GPU 0 made by every rank is the waste
    torch.cuda warns of)."""
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    if callable(getattr(cuda, "is_initialized", None)) and cuda.is_initialized():
        return int(cuda.current_device())
    current = _ext.cuda_current_device()
    return current if current >= 0 else 0


def cuda_available() -> tuple[bool, str]:
    """(True, '') when the CUDA driver loads and reports a GPU, else (False, why)."""
    return _ext.cuda_available()


def gpus() -> list[dict]:
    """The GPUs the driver reports: name, PCI bus id, memory, NUMA node, link, local CPUs."""
    return _ext.gpus()


def device_array(nbytes: int, device: str | int = "cuda:0", managed: bool = False) -> DeviceArray:
    """nbytes of GPU memory owned by the returned DeviceArray (freed with it). It exposes
    __cuda_array_interface__ and DLPack: cupy.asarray(a), torch.from_dlpack(a) take it without a copy.
    managed=True gives CUDA managed memory (DLPack device type 13, CUDA managed): CuPy takes it;
    PyTorch's DLPack import has no case for that type and refuses it."""
    return _ext.DeviceArray(nbytes, _ordinal(device), managed)


def pinned_empty(nbytes: int) -> PinnedBuffer:
    """nbytes of page-locked host memory (zeroed, page-aligned, huge pages where possible) for code
    that stages itself: memoryview(b) and numpy.frombuffer(b, dtype) use it in place, and accio and
    the CUDA driver copy to and from it at DMA speed. b.pinned says how it is held: 'cuda' (registered
    with the CUDA driver, when it loads), 'mlock' (no driver), or 'pageable' (neither was allowed: one
    AccioWarning says which limit to raise). Freed when b and every view of it are gone. nbytes 0
    gives an empty buffer, as numpy.empty(0) does."""
    try:
        return _ext.PinnedBuffer(nbytes)
    except TypeError:
        _int_args(nbytes=nbytes, nbytes_min=0)
        raise


def settings(**overrides: Any) -> dict[str, str]:
    """Effective settings by name: the table's defaults, then the ACCIO_* environment, then
    accio.defaults, then overrides."""
    return {name: value for name, _env, _doc, value in _ext.settings(defaults._resolve(overrides))}


def mechanisms() -> list[tuple[str, bool, str]]:
    """(name, available, why not) for every mechanism, in display order."""
    return [(m["name"], m["available"], m["detail"]) for m in _ext.mechanisms()]


def global_stats() -> dict:
    """Process-wide statistics: bytes, calls, time, and per-mechanism calls and bytes."""
    return _ext.global_stats()


def reset_global_stats() -> None:
    """Sets the process-wide counters that global_stats() returns back to zero."""
    _ext.reset_global_stats()


class File:
    """An open file. Use as a context manager; see accio.open()."""

    def __init__(self, path: str | bytes | os.PathLike[str] | os.PathLike[bytes], mode: str = "r",
                 mechanism: str | None = None, **settings: Any):
        self.path = os.fsdecode(path)  # bytes too, as os.open takes them
        self.mode = mode
        self._f = _ext.File(path, mode, defaults._resolve({"mechanism": mechanism, **settings}))
        self._append = mode.startswith("a")
        self._closed = False

    def __reduce_ex__(self, protocol):
        """copy.copy, copy.deepcopy and pickle refuse a File: a copy shared the descriptor (closing
        one closed the other's), and one in another process would hold a descriptor number that is
        not its own. Open the path again instead (accio.open(f.path, ...))."""
        raise TypeError(f"cannot copy or pickle accio.File {self.path!r}: it owns an open descriptor and its "
                        "requests in flight; open the path again (accio.open(f.path, ...)) for another handle")

    # -- context manager --
    def __enter__(self) -> "File":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self._closed else f" mechanism={self.setting('mechanism')!r}"
        return f"<accio.File {self.path!r} mode={self.mode!r}{state}>"

    # -- transfers --
    def read_into(self, buf, offset: int = 0) -> int:
        """Fill buf from the file at offset; returns bytes read (short only at end of file)."""
        try:
            return self._f.read_into(buf, offset)
        except TypeError:
            _int_args(offset=offset)
            raise

    def write_from(self, buf, offset: int | None = None) -> int:
        """Write all of buf at offset (in append modes, offset None appends); returns bytes written."""
        if offset is None:
            if self._append:
                return self._f.append(buf)[1]
            offset = 0
        try:
            return self._f.write_from(buf, offset)
        except TypeError:
            _int_args(offset=offset)
            raise

    def append(self, buf) -> int:
        """Write buf at the end of the file; returns the offset it was written at."""
        return self._f.append(buf)[0]

    def read_into_async(self, buf, offset: int = 0) -> Future:
        """Start a read; the Future's result() is the byte count. The request holds buf until it is done."""
        from ._futures import Future
        try:
            return Future(self._f.start(buf, offset, False))
        except TypeError:
            _int_args(offset=offset)
            raise

    def write_from_async(self, buf, offset: int | None = None) -> Future:
        """Start a write of all of buf at offset; the Future's result() is the byte count. In append
        modes an offset must be given: write_from(buf) and append(buf) append, and an asynchronous
        write at 0 in their place would overwrite the file's head."""
        from ._futures import Future
        if offset is None:
            if self._append:
                raise ValueError(f"write_from_async on a file opened in '{self.mode}' mode needs an offset: it writes "
                                 "where it is told, and an append cannot run asynchronously; use write_from(buf) or "
                                 "append(buf) to append, or give the offset (f.size for the current end)")
            offset = 0
        try:
            return Future(self._f.start(buf, offset, True))
        except TypeError:
            _int_args(offset=offset)
            raise

    def submit(self, requests: Iterable[tuple[Any, int]], write: bool = False) -> list[Future]:
        """Submit many (buffer, offset) requests at once; one Future per request."""
        from ._futures import Future
        requests = list(requests)
        try:
            futures = self._f.submit(requests, write)
        except TypeError:
            _submit_args(requests, write)
            raise
        return [Future(f) for f in futures]

    def fsync(self) -> None:
        """Waits for the requests in flight, then fsync(2) of the file (data and metadata)."""
        self._f.fsync()

    @property
    def size(self) -> int:
        return self._f.size()

    def close(self) -> None:
        """Waits for the requests in flight and closes; again is a no-op. RuntimeError, the file left
        open, from Python code that runs inside a call on this file (a buffer's property, the log
        sink): that call would wait for itself."""
        try:
            self._f.close()
        finally:
            self._closed = self._f.closed()

    @property
    def closed(self) -> bool:
        return self._closed

    def fileno(self) -> int:
        """The descriptor accio reads and writes through (the File owns it: do not close it). ValueError
        once closed, as io.FileIO."""
        if self._closed:
            raise ValueError(f"fileno of closed accio.File {self.path!r}")
        return self._f.fileno()

    # -- introspection --
    def plan(self, nbytes: int, write: bool = False) -> str:
        """The mechanism a request of nbytes at offset 0 would run (after auto and fallbacks)."""
        try:
            return self._f.plan(nbytes, write)
        except TypeError:
            _int_args(nbytes=nbytes, nbytes_min=0)
            raise

    def stats(self) -> dict:
        """Calls, bytes and time; per-mechanism calls and bytes; 'plans': which plan served how many
        requests and why (for auto: the profile cell, concurrency and cache state)."""
        return self._f.stats()

    def explain(self, nbytes: int, offset: int = 0, write: bool = False, aligned: bool = True) -> dict:
        """The plan a request of nbytes at offset would run now, and why: {'plan', 'mechanism', 'why'}.
        aligned=False asks about a buffer that is not aligned for O_DIRECT."""
        try:
            mechanism, plan, why = self._f.explain(nbytes, offset, write, aligned)
        except TypeError:
            _int_args(nbytes=nbytes, nbytes_min=0, offset=offset)
            raise
        return {"plan": plan, "mechanism": mechanism, "why": why}

    def setting(self, name: str) -> str:
        """The value this handle has for a setting, as text ('3' for threads=3): what it got from the
        defaults, ACCIO_* and its own keywords. accio.Error (EINVAL) for a name that is not a setting."""
        return self._f.setting(name)

    def residency(self, offset: int = 0, length: int | None = None) -> dict:
        """Page-cache residency of a range: {'cached', 'dirty', 'total'} in bytes."""
        length = self.size if length is None else length
        try:
            return self._f.residency(offset, length)
        except TypeError:
            _int_args(offset=offset, length=length)
            raise


def _int_args(nbytes_min: int = -2**63, **values) -> None:
    """After the extension refused its arguments (nanobind's TypeError lists the overloads): the one
    at fault, in a sentence (an offset of 2**63 read "incompatible function arguments")."""
    import operator
    for name, v in values.items():
        try:
            i = operator.index(v)
        except TypeError:
            raise TypeError(f"{name} must be an int, not {type(v).__name__}") from None
        low = nbytes_min if name == "nbytes" else -2**63
        if not low <= i < 2**63:
            raise OverflowError(f"{name} {i}: outside what accio takes ({low} to 2**63 - 1)") from None


def _submit_args(requests: list, write) -> None:
    """submit's arguments after the extension refused them: which request, and why, in a sentence."""
    if not isinstance(write, bool):
        raise TypeError(f"write must be a bool, not {type(write).__name__}")
    for i, r in enumerate(requests):
        if not isinstance(r, tuple) or len(r) != 2:
            raise TypeError(f"requests[{i}] must be a (buffer, offset) tuple, not "
                            + (f"a tuple of {len(r)}" if isinstance(r, tuple) else type(r).__name__))
        _int_args(**{f"requests[{i}]'s offset": r[1]})


def open(path: str | bytes | os.PathLike[str] | os.PathLike[bytes], mode: str = "r",
         mechanism: str | None = None, **settings: Any) -> File:
    """Open path. mode: r, r+ (rw), w, w+, a, a+, x, x+ (a new file: FileExistsError where path
    exists), each also with b (rb, r+b, wb: always binary).
    For an io.RawIOBase (io.BufferedReader(...), open()-style code) use accio.RawFile. mechanism: "auto" (the default: a plan per
    request) or a name from mechanisms(): posix, parallel, direct, uring for host memory, naive,
    staged, gds, pagecache for GPU memory. Other keyword arguments are settings (threads=4, task_size="8M", ...)."""
    return File(path, mode, mechanism, **settings)


# framework -> (module, what to pip install)
_FRAMEWORKS = {
    "numpy": ("numpy", "numpy"),
    "cupy": ("cupy", "cupy-cuda12x (or cupy-cuda13x, cupy-cuda11x: the one matching your CUDA driver)"),
    "torch": ("torch", "torch (a CUDA build for device=)"),
}


def _framework(name: str, caller: str = "accio.read"):
    """The module of a framework accio.read can return, or an ImportError naming the caller's call
    and the pip package."""
    if name not in _FRAMEWORKS:
        raise ValueError(f"framework {name!r}: expected 'numpy', 'cupy' or 'torch'")
    module, package = _FRAMEWORKS[name]
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{caller}(framework={name!r}) needs {module}, which does not import here ({e}): "
                          f"pip install {package}", name=module) from e


def _torch_dtype(torch, dtype):
    """torch.float32, 'bfloat16', numpy.float32 or 'f4' -> a torch.dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    import numpy as np
    name = dtype if isinstance(dtype, str) and isinstance(getattr(torch, dtype, None), torch.dtype) \
        else np.dtype(dtype).name
    t = getattr(torch, name, None)
    if not isinstance(t, torch.dtype):
        raise TypeError(f"dtype {dtype!r}: PyTorch has no {name} type")
    return t


def _layout(path: str, nbytes: int, dtype, itemsize: int, shape) -> tuple[int, ...]:
    """The shape an nbytes file has as elements of itemsize bytes; ValueError when it does not fit."""
    if shape is None:
        if nbytes % itemsize:
            raise ValueError(f"read '{path}': the file's {nbytes} bytes are not a whole number of {dtype} "
                             f"elements ({itemsize} bytes each); pass a dtype that divides the size")
        return (nbytes // itemsize,)
    import operator
    try:  # whole numbers only: "4096" was iterated (shape (4, 0, 9, 6)), 4096.7 truncated
        shape = (operator.index(shape),) if not hasattr(shape, "__iter__") else tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"shape {shape!r}: expected an int or a tuple of ints") from None
    known = 1
    for d in shape:
        known *= d if d != -1 else 1
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise ValueError(f"shape {shape}: extents must be >= 0, with at most one -1")
    if -1 in shape:
        if known == 0 or nbytes % (known * itemsize):
            raise ValueError(f"read '{path}': the file's {nbytes} bytes do not fill shape {shape} of {dtype} "
                             f"({itemsize} bytes each)")
        shape = tuple(nbytes // (known * itemsize) if d == -1 else d for d in shape)
    elif known * itemsize != nbytes:
        raise ValueError(f"read '{path}': the file has {nbytes} bytes; shape {shape} of {dtype} needs "
                         f"{known * itemsize}")
    return shape


def _whole_file(path: str) -> None:
    """ValueError unless path is a regular file whose size is what it holds, checked before it is
    opened, so that a FIFO's bytes are not consumed (accio.read returned an empty array for /dev/zero,
    a FIFO, /proc/cpuinfo)."""
    import stat
    try:
        st = os.stat(path)
    except OSError as e:  # as the engine's open says it: an accio.Error (FileNotFoundError...)
        from ._errors import make_error
        raise make_error(e.errno, "open", path, None, f"open '{path}': {e.strerror} (errno {e.errno})") from None
    mode = st.st_mode
    if not stat.S_ISREG(mode):
        kind = ("a directory" if stat.S_ISDIR(mode) else "a pipe (FIFO)" if stat.S_ISFIFO(mode) else
                "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode) else
                "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise ValueError(f"accio.read('{path}'): {kind}, not a regular file: accio.read sizes its array by the "
                         f"file's size; read a stream with open(path, 'rb') and numpy.frombuffer"
                         + (", or a block device with accio.open(path).read_into(buffer)" if stat.S_ISBLK(mode) else ""))
    if st.st_size == 0:
        fd = os.open(path, os.O_RDONLY)  # (open is accio's here)
        try:
            holds = os.read(fd, 1)
        finally:
            os.close(fd)
        if holds:
            raise ValueError(f"accio.read('{path}'): the file reports size 0 but holds bytes (a /proc or /sys "
                                 f"file): accio.read sizes its array by the file's size; read it with "
                                 f"open(path, 'rb').read()")


def read(path: str | bytes | os.PathLike[str] | os.PathLike[bytes], *, device: str | int | None = None,
         framework: str | None = None, dtype=None, shape=None, out=None, **settings: Any):
    """Read a whole file into a new array, or into `out`.

    device: None (host memory) or a GPU ("cuda:N", N, or "cuda": the calling thread's current GPU).
    framework: "numpy", "cupy" or "torch": what the array is. Default: numpy on the host; on a device
      CuPy, or an accio.DeviceArray (DLPack and __cuda_array_interface__, so torch.from_dlpack() and
      cupy.asarray() take it) when CuPy is not installed. "cupy" without device uses CuPy's current
      device; "torch" without device makes a CPU tensor. A framework that is not installed raises
      ImportError naming its pip package.
    dtype, shape: read the bytes as this element type (numpy's names, or torch dtypes for "torch";
      default uint8) and shape (default 1-D; one extent may be -1). ValueError if the file's size
      does not fit.
    out: an existing array or buffer to fill instead (host or GPU, any type read_into takes); it must
      hold exactly the file's size, and is returned. device, framework, dtype and shape stay unset.
    Other keyword arguments are settings: mechanism="staged", threads=8, ...

    Without dtype and shape, a file that shrinks while being read gives a shorter array; otherwise
    (and for a DeviceArray) that raises accio.Error (EIO). The file's size sets the array's, so only
    a regular file is read: a pipe, a device or a /proc file (size 0, yet bytes) raise ValueError
    before anything of them is read."""
    path = os.fspath(path)
    _whole_file(path)
    if out is not None:
        if device is not None or framework is not None or dtype is not None or shape is not None:
            raise TypeError("accio.read(out=...) fills out as it is: leave device, framework, dtype and shape "
                            "unset (out's own type, place and size decide them)")
        with File(path, "r", **settings) as f:
            n = f.size
            try:
                got = f._f.read_into(out, 0, n)  # the size is checked on the view read into
            except ValueError as e:
                raise ValueError(f"read '{path}': {e}") from None
        if got != n:
            raise _shrank(path, got, n)
        return out

    ordinal = _where(device)
    default = framework is None
    if default:
        framework = "numpy" if ordinal is None else "cupy"
    elif framework == "numpy" and ordinal is not None:
        raise ValueError(f"framework='numpy' holds host memory, not device={device!r}: use framework='cupy' "
                         "or 'torch' for GPU memory, or leave device unset")
    with File(path, "r", **settings) as f:
        n = f.size
        import importlib.util
        if framework == "cupy" and default and "cupy" not in sys.modules and importlib.util.find_spec("cupy") is None:
            # No CuPy (a broken one raises from _framework instead): accio's own device bytes.
            if dtype is not None or shape is not None:
                raise ImportError("accio.read(device=..., dtype/shape) returns a typed GPU array, which needs CuPy "
                                  "(pip install cupy-cuda12x) or framework='torch'; without them accio.read "
                                  "returns an accio.DeviceArray of bytes", name="cupy")
            arr = device_array(n, ordinal)
            got = f.read_into(arr, 0)
            if got != n:  # the file shrank while being read
                raise _shrank(path, got, n)
            return arr
        mod = _framework(framework)
        if framework == "torch":
            dt = mod.uint8 if dtype is None else _torch_dtype(mod, dtype)
            itemsize = getattr(dt, "itemsize", None) or mod.empty((), dtype=dt).element_size()  # torch < 2.1
            where = "cpu" if ordinal is None else f"cuda:{ordinal}"
            arr = mod.empty(_layout(path, n, dt, itemsize, shape), dtype=dt, device=where)
        else:
            import numpy as np
            dt = np.dtype(np.uint8 if dtype is None else dtype)
            if dt.itemsize == 0 or dt.hasobject:
                raise TypeError(f"dtype {dt}: accio reads fixed-size plain elements")
            layout = _layout(path, n, dt, dt.itemsize, shape)
            if framework == "cupy":
                with mod.cuda.Device(mod.cuda.runtime.getDevice() if ordinal is None else ordinal):
                    arr = mod.empty(layout, dtype=dt)
            else:
                arr = mod.empty(layout, dtype=dt)
        # NumPy exports no buffer (and DLPack refuses) for datetime64/timedelta64: their bytes, as bytes
        target = arr.reshape(-1).view("u1") if getattr(getattr(arr, "dtype", None), "kind", "") in ("m", "M") else arr
        got = f.read_into(target, 0)
    if got == n:
        return arr
    if dtype is None and shape is None:
        return arr[:got]
    raise _shrank(path, got, n)


def write(path: str | bytes | os.PathLike[str] | os.PathLike[bytes], data, *, fsync: bool = False,
          atomic: bool = False, **settings: Any) -> int:
    """Write data as the whole content of path; returns bytes written. data: any buffer or array
    read_into takes, host or GPU (bytes, NumPy, CuPy, PyTorch, Numba, JAX, accio.DeviceArray, ...).
    fsync=True flushes it to storage before returning. Other keyword arguments are settings
    (mechanism="staged", threads=8, ...). data that is refused (not a buffer, not contiguous, ...)
    leaves the file as it was: it is checked before the file is truncated.

    Otherwise the file is truncated first, as open(path, "wb") and numpy.tofile do: a write that
    fails part way (ENOSPC, RLIMIT_FSIZE's EFBIG, EFAULT from a buffer mapped from the file itself)
    leaves it truncated or partial, the old content gone. atomic=True writes under a temporary
    name beside path and renames it over path at the end (keeping path's permission bits), so a
    failed write leaves the old file and readers never see a partial one (with fsync=True the new
    name is durable too); it needs room for both files until the rename, and replaces a symbolic
    link rather than writing its target. A path that is a device or a FIFO is written through either
    way. accio.safetensors.save_file writes checkpoints that way."""
    view = _ext.HeldView(data, False)  # TypeError/ValueError now, not after "w" emptied the file
    from . import _replace
    target = os.fsdecode(path)
    node = _replace.special(target)
    if node is not None:  # a device or FIFO: written through (a FIFO has no offset 0 to pwrite at)
        return _replace.write_in_place(target, node, [(view, 0)], fsync, settings)
    if atomic:
        with _replace.replacing(target, fsync, "accio.write(atomic=True)") as tmp:
            with File(tmp, "w", **settings) as f:
                n = f.write_from(view, 0)
                if fsync:
                    f.fsync()
        return n
    with File(path, "w", **settings) as f:
        n = f.write_from(view, 0)
        if fsync:
            f.fsync()
    return n
