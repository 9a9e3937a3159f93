"""accio.offload: run functions in a worker process through the VEO API (in the spirit of py-veo).

    from accio import offload
    import numpy as np
    with offload.Proc() as proc:
        lib = proc.load_library("./libkernels.so")
        f = lib.scale                       # or lib.find_function("scale")
        f.args_type("double *", "uint64_t", "double")
        f.ret_type("double")
        ctx = proc.open_context()
        x = np.arange(1000, dtype=np.float64)
        req = f(ctx, offload.OnStack(x, inout=offload.INTENT_INOUT), x.size, 2.0)
        print(req.wait_result(), x[:3])      # the kernel's result; x was copied back

        buf = proc.alloc_mem(x.nbytes)       # worker ("VE") memory
        proc.write_mem(buf, x)
        proc.read_mem(x, buf)

Buffers (OnStack, read_mem, write_mem and their async forms) are host memory (bytes-like objects,
NumPy, CPU DLPack) or GPU arrays (CuPy, PyTorch, Numba, JAX, accio.DeviceArray: anything accio's
read_into takes). The worker addresses host memory only, so GPU memory moves through a host copy:
device-to-host when the call is made (after the producer's stream, as read_into honours it), and
host-to-device when the request's result is picked up (wait_result, or the sync call's return).

Calls go through libaccio_offload's C API (include/accio/ve_offload.h) with ctypes; the timed paths
are in C, so Python adds its own call overhead (about a microsecond) on top of the runtime's. Loading libaccio_offload adds
its settings (offload_transport, offload_spin_us, ...; ACCIO_OFFLOAD_*) to libaccio's settings table,
which is how `accio info` lists them (load()). Errors raise OffloadError; they also reach the
``accio`` logger (level ERROR, key "offload") through libaccio's log channel.
"""
from __future__ import annotations

import ctypes
import errno
import os
import struct

from . import _ext

__all__ = ["Proc", "Library", "Function", "Context", "Request", "OnStack", "MemPtr", "OffloadError",
           "KernelException", "SymbolError", "UnfinishedError", "AllocationError", "INTENT_IN", "INTENT_INOUT", "INTENT_OUT", "COMMAND_OK",
           "COMMAND_EXCEPTION", "COMMAND_ERROR", "COMMAND_UNFINISHED"]

INTENT_IN, INTENT_INOUT, INTENT_OUT = 0, 1, 2
COMMAND_OK, COMMAND_EXCEPTION, COMMAND_ERROR, COMMAND_UNFINISHED = 0, 1, 2, 3
STATE_RUNNING, STATE_EXIT = 1, 4
_INVALID = (1 << 64) - 1


class OffloadError(RuntimeError):
    """A failed offload operation; `state` is the VEO_COMMAND_* state where one applies."""

    def __init__(self, message: str, state: int = COMMAND_ERROR):
        super().__init__(message)
        self.state = state


class SymbolError(OffloadError, AttributeError):
    """veo_get_sym found no such symbol (or the worker is gone)."""


class UnfinishedError(OffloadError, NameError):
    """peek_result of a request still running (state COMMAND_UNFINISHED). Also a NameError, which
    py-veo raises for it."""


class AllocationError(OffloadError, MemoryError):
    """veo_alloc_mem failed. Also a MemoryError, which py-veo raises for it."""


class KernelException(OffloadError, ArithmeticError):
    """A kernel died of a signal (VEO_COMMAND_EXCEPTION); `signal` is its number. Also an
    ArithmeticError, which py-veo raises for it."""

    def __init__(self, message: str, signal: int):
        super().__init__(message, COMMAND_EXCEPTION)
        self.signal = signal


class _Options(ctypes.Structure):
    _fields_ = [("venode", ctypes.c_int), ("worker", ctypes.c_char_p), ("transport", ctypes.c_int),
                ("spin_us", ctypes.c_int64), ("timeout_ms", ctypes.c_int64),
                ("arena_bytes", ctypes.c_size_t), ("slots", ctypes.c_uint32)]


_lib = None


def library_path() -> str:
    """The installed libaccio_offload.so (next to libaccio.so in the package's lib/)."""
    return os.path.join(os.path.dirname(os.path.realpath(__file__)), "lib", "libaccio_offload.so")


def load() -> ctypes.CDLL:
    """Loads libaccio_offload (once): its VEO API, and its rows in libaccio's settings table (the
    library registers them when it is loaded). Raises OSError when the library is missing."""
    return _c()


def _c():
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(library_path(), use_errno=True)  # errno ETIMEDOUT: a wait that ran out (Request)
    P, U64, I, S = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int, ctypes.c_size_t
    sig = {
        "accio_offload_options_init": (I, [ctypes.POINTER(_Options)]),
        "accio_offload_proc_create": (P, [ctypes.POINTER(_Options)]),
        "accio_offload_worker_pid": (I, [P]),
        "accio_offload_last_error": (ctypes.c_char_p, []),
        "accio_offload_args_set_ret": (I, [P, I]),
        "veo_proc_destroy": (I, [P]),
        "veo_load_library": (U64, [P, ctypes.c_char_p]),
        "veo_unload_library": (I, [P, U64]),
        "veo_get_sym": (U64, [P, U64, ctypes.c_char_p]),
        "veo_alloc_mem": (I, [P, ctypes.POINTER(U64), S]),
        "veo_free_mem": (I, [P, U64]),
        "veo_read_mem": (I, [P, P, U64, S]),
        "veo_write_mem": (I, [P, U64, P, S]),
        "veo_num_contexts": (I, [P]),
        "veo_context_open": (P, [P]),
        "veo_context_close": (I, [P]),
        "veo_context_sync": (None, [P]),
        "veo_get_context_state": (I, [P]),
        "veo_args_alloc": (P, []),
        "veo_args_free": (None, [P]),
        "veo_args_set_stack": (I, [P, I, I, P, S]),
        "veo_call_sync": (I, [P, U64, P, ctypes.POINTER(U64)]),
        "veo_call_async": (U64, [P, U64, P]),
        "veo_call_peek_result": (I, [P, U64, ctypes.POINTER(U64)]),
        "veo_call_wait_result": (I, [P, U64, ctypes.POINTER(U64)]),
        "veo_async_read_mem": (U64, [P, P, U64, S]),
        "veo_async_write_mem": (U64, [P, U64, P, S]),
        "veo_version_string": (ctypes.c_char_p, []),
    }
    for t, ct in (("i64", ctypes.c_int64), ("u64", ctypes.c_uint64), ("i32", ctypes.c_int32),
                  ("u32", ctypes.c_uint32), ("i16", ctypes.c_int16), ("u16", ctypes.c_uint16),
                  ("i8", ctypes.c_int8), ("u8", ctypes.c_uint8), ("double", ctypes.c_double),
                  ("float", ctypes.c_float)):
        sig["veo_args_set_" + t] = (I, [P, I, ct])
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    _lib = lib
    return lib


def _error() -> str:
    return (_c().accio_offload_last_error() or b"").decode(errors="replace")


def version() -> str:
    return _c().veo_version_string().decode()


# ---- types: C spelling -> (setter suffix, struct code for results) ----
_INT_TYPES = {
    "int64_t": "i64", "long": "i64", "long long": "i64", "ssize_t": "i64",
    "uint64_t": "u64", "unsigned long": "u64", "unsigned long long": "u64", "size_t": "u64",
    "int32_t": "i32", "int": "i32", "uint32_t": "u32", "unsigned int": "u32", "unsigned": "u32",
    "int16_t": "i16", "short": "i16", "uint16_t": "u16", "unsigned short": "u16",
    "int8_t": "i8", "char": "i8", "signed char": "i8", "uint8_t": "u8", "unsigned char": "u8", "bool": "u8",
}
_RESULT_CODES = {"i64": "q", "u64": "Q", "i32": "i", "u32": "I", "i16": "h", "u16": "H", "i8": "b", "u8": "B"}


def _norm(t: str) -> str:
    t = " ".join(t.replace("*", " * ").split())
    return t.replace("const ", "").replace(" *", "*")


def _kind(t: str) -> str:
    t = _norm(t)
    if t.endswith("*"):
        return "u64"  # a worker address (MemPtr or int) or an OnStack buffer
    if t in ("double", "float"):
        return t
    if t in _INT_TYPES:
        return _INT_TYPES[t]
    raise ValueError(f"unsupported argument type {t!r} (integers, float, double, pointers)")


class OnStack:
    """A buffer passed by pointer to a copy in the worker (veo_args_set_stack). IN copies it in;
    OUT and INOUT copy the worker's copy back into it when the result is picked up. A GPU array
    goes through a host copy (see the module's docstring)."""

    def __init__(self, buff, size: int | None = None, inout: int = INTENT_IN):
        # Held until this OnStack goes: the address stays valid (no resize, no close). OUT and INOUT
        # need a writable buffer: TypeError naming the read-only one, as every read target.
        self._view = _ext.HeldView(buff, inout != INTENT_IN)
        n = self._view.nbytes
        self.size = n if size is None else int(size)
        if not 0 <= self.size <= n:
            raise ValueError(f"size {self.size} exceeds the buffer ({n} bytes)")
        self.inout = inout
        self.buff = buff

    def _bind(self) -> tuple[int, object, object]:
        """(address for veo_args_set_stack, what to keep alive, what to run once the call is done).
        GPU memory goes through a host copy: made now for IN and INOUT, copied back after OUT and INOUT."""
        if self.size == 0:
            return 0, self, None
        if self._view.where != "device":
            return self._view.address, self, None
        stage = _Staged(self.size)
        if self.inout != INTENT_OUT:
            _ext.copy(stage.buf, self.buff, self.size)
        back = None if self.inout == INTENT_IN else (lambda: _ext.copy(self.buff, stage.buf, self.size))
        return stage.view.address, (self, stage), back


class _Staged:
    """A host bytearray held while the offload runtime uses its address (GPU memory's host copy)."""

    def __init__(self, n: int):
        self.buf = bytearray(n)
        self.view = _ext.HeldView(self.buf, True)


def _held(buf, writable: bool, nbytes: int | None) -> tuple[object, int]:
    """(held view, bytes to move) of a contiguous buffer, host or GPU (see the module's docstring);
    nbytes (default: all of it) must fit."""
    view = _ext.HeldView(buf, writable)  # a read-only buffer to read into: TypeError naming it
    n = view.nbytes
    if nbytes is not None:
        if not 0 <= int(nbytes) <= n:
            raise ValueError(f"nbytes {nbytes} does not fit the buffer ({n} bytes)")
        n = int(nbytes)
    return view, n


def _source(buf, nbytes: int | None) -> tuple[int, int, object]:
    """What write_mem sends: (address, bytes, keep-alive): the buffer itself, or a host copy of a GPU
    buffer made now."""
    view, n = _held(buf, False, nbytes)
    if view.where != "device" or n == 0:
        return view.address, n, view
    stage = _Staged(n)
    _ext.copy(stage.buf, buf, n)
    return stage.view.address, n, (stage, view)


def _destination(buf, nbytes: int | None) -> tuple[int, int, object, object]:
    """Where read_mem lands: (address, bytes, keep-alive, then): the buffer itself, or a host buffer
    that the returned callable copies into the GPU buffer once the bytes are there (None for host)."""
    view, n = _held(buf, True, nbytes)
    if view.where != "device" or n == 0:
        return view.address, n, view, None
    stage = _Staged(n)
    return stage.view.address, n, (stage, view), lambda: _ext.copy(buf, stage.buf, n)


class MemPtr(int):
    """An address in the worker's memory (veo_alloc_mem); an int, so it passes as a pointer."""

    def __new__(cls, addr: int, size: int, proc: "Proc"):
        p = super().__new__(cls, addr)
        p.size, p.proc = size, proc
        return p

    def __add__(self, off):
        return MemPtr(int(self) + off, self.size - off, self.proc)


class Request:
    """A submitted call or transfer; wait_result() blocks, peek_result() does not. Its buffers are
    kept until it is waited for, or until the context's next sync() or close(): requests never
    waited for keep theirs that long."""

    def __init__(self, ctx: "Context", reqid: int, ret: str, keep=(), after=()):
        self.ctx, self.id, self._ret, self._keep = ctx, reqid, ret, keep
        # The buffers stay alive until the request is done even when this object goes first: a
        # request that waits on the host for room reads its source (or fills its destination) later.
        if ctx is not None and keep:
            ctx._inflight[reqid] = keep
        self._after = after  # callables run once it succeeded (GPU buffers' host-to-device copies)
        self._done, self._value = False, None

    def _convert(self, raw: int):
        if self._ret == "void":
            return None
        if self._ret == "double":
            return struct.unpack("<d", struct.pack("<Q", raw))[0]
        if self._ret == "float":
            return struct.unpack("<f", struct.pack("<Q", raw)[:4])[0]
        code = _RESULT_CODES[self._ret]
        size = struct.calcsize(code)
        return struct.unpack("<" + code, struct.pack("<Q", raw)[:size])[0]

    def _finish(self, state: int, raw: int):
        if state == COMMAND_OK:
            after, self._after = self._after, ()
            try:
                for fn in after:
                    fn()
            finally:
                self._done, self._value, self._keep = True, self._convert(raw), ()
                if self.ctx is not None:
                    self.ctx._inflight.pop(self.id, None)
            return self._value
        msg = _error() or f"request {self.id} failed"
        self._done, self._keep = True, ()
        if self.ctx is not None:
            self.ctx._inflight.pop(self.id, None)
        if state == COMMAND_EXCEPTION:
            raise KernelException(msg, raw)
        raise OffloadError(msg, state)

    def wait_result(self):
        """The result; raises OffloadError if the request failed, KernelException if the kernel died
        of a signal. A wait that ran out (timeout_ms) raises OffloadError too, but the request is
        still running: its buffers stay held, and wait_result() may be called again."""
        if self._done:
            return self._value
        raw = ctypes.c_uint64()
        ctypes.set_errno(0)
        state = _c().veo_call_wait_result(self.ctx._h, self.id, ctypes.byref(raw))
        if state == COMMAND_ERROR and ctypes.get_errno() == errno.ETIMEDOUT:
            # Not done: a later wait picks it up, and what it reads or writes stays alive until then.
            raise OffloadError(_error() or f"request {self.id} did not finish in time", COMMAND_ERROR)
        return self._finish(state, raw.value)

    def peek_result(self):
        """The result if finished; raises OffloadError with state COMMAND_UNFINISHED if not."""
        if self._done:
            return self._value
        raw = ctypes.c_uint64()
        state = _c().veo_call_peek_result(self.ctx._h, self.id, ctypes.byref(raw))
        if state == COMMAND_UNFINISHED:
            raise UnfinishedError(f"request {self.id} is not finished", COMMAND_UNFINISHED)
        return self._finish(state, raw.value)


class _Args:
    """veo_args built from Python values and declared types."""

    def __init__(self, types, values, ret: str):
        c = _c()
        self.h = c.veo_args_alloc()
        self.keep = []
        self.after = []  # OnStack GPU buffers' copies back, once the call is done
        if types is not None and len(types) != len(values):
            raise TypeError(f"the function takes {len(types)} arguments, {len(values)} given")
        try:
            for i, v in enumerate(values):
                if isinstance(v, OnStack):
                    addr, keep, back = v._bind()
                    rc = c.veo_args_set_stack(self.h, v.inout, i, addr, v.size)
                    self.keep.append(keep)
                    if back:
                        self.after.append(back)
                else:
                    kind = _kind(types[i]) if types is not None else (
                        "double" if isinstance(v, float) else "i64" if int(v) < 0 else "u64")
                    rc = getattr(c, "veo_args_set_" + kind)(self.h, i, float(v) if kind in ("double", "float") else int(v))
                if rc != 0:
                    raise OffloadError(_error())
            if ret in ("double", "float"):
                c.accio_offload_args_set_ret(self.h, 1 if ret == "double" else 2)
        except Exception:
            c.veo_args_free(self.h)
            raise

    def __del__(self):
        if getattr(self, "h", None):
            _c().veo_args_free(self.h)


class Function:
    """A kernel: declare its types (py-veo style), then call it on a context."""

    def __init__(self, lib: "Library", name: str, addr: int):
        self.lib, self.name, self.addr = lib, name, addr
        self._args = None
        self._ret = "u64"

    def args_type(self, *types: str) -> "Function":
        for t in types:
            _kind(t)
        self._args = list(types)
        return self

    def ret_type(self, t: str) -> "Function":
        t = _norm(t)
        self._ret = "void" if t == "void" else _kind(t)
        return self

    def __call__(self, ctx: "Context", *args) -> Request:
        return ctx.call_async(self, *args)

    def __repr__(self):
        return f"<accio.offload.Function {self.name} at {self.addr:#x}>"


class Library:
    """A shared library loaded in the worker (handle 0: the worker program and all it loaded)."""

    def __init__(self, proc: "Proc", handle: int, path: str):
        self.proc, self.handle, self.path = proc, handle, path
        self._funcs: dict[str, Function] = {}

    def find_function(self, name: str) -> Function:
        f = self._funcs.get(name)
        if f is None:
            addr = _c().veo_get_sym(self.proc._handle(), self.handle, name.encode())
            if not addr:
                raise SymbolError(_error() or f"no symbol {name} in {self.path}")
            f = self._funcs[name] = Function(self, name, addr)
        return f

    def get_symbol(self, name: str) -> int:
        return self.find_function(name).addr

    def __getattr__(self, name: str) -> Function:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.find_function(name)

    def unload(self) -> None:
        if self.handle and _c().veo_unload_library(self.proc._handle(), self.handle) != 0:
            raise OffloadError(_error())
        self._funcs.clear()
        self.handle = 0


class Context:
    """An in-order queue served by its own worker thread."""

    def __init__(self, proc: "Proc", h: int):
        self.proc, self._h = proc, h
        self._inflight: dict[int, object] = {}  # request id -> its buffers, until it is done (or a sync)

    def call_async(self, func, *args, ret: str | None = None) -> Request:
        if isinstance(func, Function):
            addr, types, r = func.addr, func._args, func._ret
        else:
            addr, types, r = int(func), None, "u64"
        a = _Args(types, args, ret or r)
        reqid = _c().veo_call_async(self._h, addr, a.h)
        if reqid == _INVALID:
            raise OffloadError(_error())
        return Request(self, reqid, ret or r, (a, args), a.after)

    def async_read_mem(self, dst, src: int, nbytes: int | None = None) -> Request:
        addr, n, keep, after = _destination(dst, nbytes)
        reqid = _c().veo_async_read_mem(self._h, addr, int(src), n)
        if reqid == _INVALID:
            raise OffloadError(_error())
        return Request(self, reqid, "void", (keep, dst), (after,) if after else ())

    def async_write_mem(self, dst: int, src, nbytes: int | None = None) -> Request:
        addr, n, keep = _source(src, nbytes)
        reqid = _c().veo_async_write_mem(self._h, int(dst), addr, n)
        if reqid == _INVALID:
            raise OffloadError(_error())
        return Request(self, reqid, "void", (keep, src))

    def sync(self) -> None:
        before = list(self._inflight)  # requests of other threads submitted during the sync may still run
        ctypes.set_errno(0)
        _c().veo_context_sync(self._h)
        if ctypes.get_errno() == errno.ETIMEDOUT:  # timeout_ms ran out: they run on, with their buffers
            raise OffloadError(_error() or "veo_context_sync did not finish in time", COMMAND_ERROR)
        for reqid in before:  # everything submitted before the sync has completed
            self._inflight.pop(reqid, None)

    @property
    def state(self) -> str:
        return "running" if _c().veo_get_context_state(self._h) == STATE_RUNNING else "exit"

    def close(self) -> None:
        if self._h:
            _c().veo_context_close(self._h)
            self.proc._contexts.remove(self)
            self._h = None
            self._inflight.clear()


def _whole(name: str, value, low: int, high: int) -> int:
    """A keyword option as an int in [low, high], else ValueError/TypeError naming it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}={value!r}: an integer")
    if not low <= value <= high:
        raise ValueError(f"{name}={value}: from {low} to {high}")
    return value


class Proc:
    """A worker process. Keyword options override the ACCIO_OFFLOAD_* environment: transport ('shm' or
    'socket'), spin_us (microseconds, or 'forever'), timeout_ms (0: no limit), arena (bytes, or a size
    such as '16m'), slots (requests in flight per queue), worker (the worker program)."""

    def __init__(self, venode: int = -1, *, worker: str | None = None, transport: str | None = None,
                 spin_us: int | str | None = None, timeout_ms: int | None = None, arena: int | str | None = None,
                 slots: int | None = None):
        c = _c()
        o = _Options()
        if c.accio_offload_options_init(ctypes.byref(o)) != 0:
            raise OffloadError(_error())
        o.venode = venode
        if worker is not None:
            self._worker = os.fsencode(worker)
            o.worker = self._worker
        if transport is not None:
            if transport not in ("shm", "socket"):
                raise ValueError(f"transport={transport!r}: 'shm' or 'socket'")
            o.transport = 0 if transport == "shm" else 1
        if spin_us is not None:  # as ACCIO_OFFLOAD_SPIN_US takes it; -1 is the C API's SPIN_FOREVER
            o.spin_us = -1 if spin_us == "forever" else _whole("spin_us", spin_us, -1, 2 ** 62)
        if timeout_ms is not None:
            o.timeout_ms = _whole("timeout_ms", timeout_ms, 0, 2 ** 40)
        if arena is not None:
            from ._system import parse_size
            o.arena_bytes = _whole("arena", parse_size(arena) if isinstance(arena, str) else arena, 64 << 10, 2 ** 40)
        if slots is not None:
            o.slots = _whole("slots", slots, 2, 2 ** 20)
        self._h = c.accio_offload_proc_create(ctypes.byref(o))
        if not self._h:
            raise OffloadError(_error())
        self._contexts: list[Context] = []
        self.static = Library(self, 0, "<worker program>")

    def _handle(self) -> int:
        if not self._h:
            raise OffloadError("the proc was destroyed")
        return self._h

    @property
    def pid(self) -> int:
        return _c().accio_offload_worker_pid(self._handle())

    def load_library(self, path: str | os.PathLike) -> Library:
        path = os.fspath(path)
        h = _c().veo_load_library(self._handle(), path.encode())
        if not h:
            raise OffloadError(_error())
        return Library(self, h, path)

    def get_function(self, name: str) -> Function:
        return self.static.find_function(name)

    def open_context(self) -> Context:
        h = _c().veo_context_open(self._handle())
        if not h:
            raise OffloadError(_error())
        for ctx in self._contexts:  # the main context comes back as itself
            if ctx._h == h:
                return ctx
        ctx = Context(self, h)
        self._contexts.append(ctx)
        return ctx

    @property
    def num_contexts(self) -> int:
        return _c().veo_num_contexts(self._handle())

    def call_sync(self, func, *args, ret: str | None = None):
        if isinstance(func, Function):
            addr, types, r = func.addr, func._args, func._ret
        else:
            addr, types, r = int(func), None, "u64"
        r = ret or r
        a = _Args(types, args, r)
        raw = ctypes.c_uint64()
        if _c().veo_call_sync(self._handle(), addr, a.h, ctypes.byref(raw)) != 0:
            raise OffloadError(_error())
        for fn in a.after:
            fn()
        return Request(None, 0, r)._convert(raw.value)

    def alloc_mem(self, nbytes: int) -> MemPtr:
        addr = ctypes.c_uint64()
        if _c().veo_alloc_mem(self._handle(), ctypes.byref(addr), nbytes) != 0:
            raise AllocationError(_error())
        return MemPtr(addr.value, nbytes, self)

    def free_mem(self, ptr: int) -> None:
        if _c().veo_free_mem(self._handle(), int(ptr)) != 0:
            raise OffloadError(_error())

    def write_mem(self, dst: int, src, nbytes: int | None = None) -> None:
        addr, n, _keep = _source(src, nbytes)
        if _c().veo_write_mem(self._handle(), int(dst), addr, n) != 0:
            raise OffloadError(_error() or f"veo_write_mem of {n} bytes to {int(dst):#x} failed")

    def read_mem(self, dst, src: int, nbytes: int | None = None) -> None:
        addr, n, _keep, after = _destination(dst, nbytes)
        if _c().veo_read_mem(self._handle(), addr, int(src), n) != 0:
            raise OffloadError(_error() or f"veo_read_mem of {n} bytes from {int(src):#x} failed")
        if after:
            after()

    def destroy(self) -> None:
        if self._h:
            _c().veo_proc_destroy(self._h)
            self._h = None
            self._contexts.clear()

    def __enter__(self) -> "Proc":
        return self

    def __exit__(self, *exc) -> None:
        self.destroy()

    def __del__(self):
        try:
            self.destroy()
        except Exception:
            pass
