"""safetensors checkpoints at storage speed, into host or GPU memory (docs/safetensors.md).

    from accio.safetensors.torch import load_file          # drop-in for safetensors.torch
    weights = load_file("model.safetensors", device="cuda:0")

    import accio.safetensors as st
    w = st.load_file("model.safetensors")                   # NumPy (BF16/F8 as ml_dtypes)
    w = st.load_file("model.safetensors.index.json", device="cuda", framework="torch")  # shards in parallel
    with st.safe_open("model.safetensors", framework="numpy") as f:   # reads only what is asked
        emb = f.get_tensor("embed.weight")
    st.save_file(weights, "copy.safetensors", metadata={"format": "pt"}, fsync=True)

load_file reads the whole file with one accio read straight into the target memory (GPU memory
through the staged pipeline: no host copy of the file), and returns the tensors as views of that one
allocation (copy=False, the default) or each in its own allocation (copy=True: one batch of reads,
one per tensor, still no second copy of the data). The header is untrusted: it is checked
completely, as safetensors checks it, before anything is allocated or read (HeaderError, a ValueError
naming the file and the tensor).
"""
from __future__ import annotations

import os
import sys

import accio

from .._errors import file_shrank
from ._format import (DTYPE_BITS, SUBBYTE, Header, HeaderError, SafetensorError, TensorInfo, TensorNotFoundError,
                      MAX_HEADER)
from . import _format

__all__ = ["load_file", "save_file", "load", "save", "safe_open", "read_header", "DeviceTensor", "HeaderError",
           "SafetensorError", "TensorNotFoundError", "SharedTensorsError", "TensorInfo", "Header", "DTYPES"]

DTYPES = tuple(DTYPE_BITS)

# safetensors dtype -> the NumPy (ml_dtypes for the ones NumPy lacks) and PyTorch type names
_NP = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16", "F16": "float16",
       "I32": "int32", "U32": "uint32", "F32": "float32", "C64": "complex64", "F64": "float64", "I64": "int64",
       "U64": "uint64"}
_ML = {"BF16": "bfloat16", "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu",
       "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz"}
_TORCH = {**_NP, **_ML, "F4": "float4_e2m1fn_x2"}
# and back, for save_file: a framework's dtype name -> safetensors'
_FROM_NAME = {v: k for k, v in _TORCH.items()}


def _ordinal(device) -> int | None:
    """None for the host ('cpu', None), else the GPU's ordinal ('cuda:N', N; 'cuda' and
    torch.device('cuda') are the calling thread's current GPU, as torch means them, where safetensors
    takes GPU 0)."""
    if device is None or device == "cpu":
        return None
    if type(device).__name__ == "device" and hasattr(device, "type"):  # a torch.device
        if device.type == "cpu":
            return None
        device = device.type if device.index is None else f"{device.type}:{device.index}"
    return accio._ordinal(device)


def _framework_name(framework, ordinal) -> str:
    aliases = {"pt": "torch", "pytorch": "torch", "np": "numpy", "numpy": "numpy", "torch": "torch", "cupy": "cupy",
               "accio": "accio"}
    if framework is None:
        if ordinal is None:
            return "numpy"
        import importlib.util
        return "cupy" if "cupy" in sys.modules or importlib.util.find_spec("cupy") is not None else "accio"
    if framework not in aliases:
        raise ValueError(f"framework {framework!r}: expected 'torch' ('pt'), 'numpy' ('np'), 'cupy' or 'accio'")
    name = aliases[framework]
    if name == "numpy" and ordinal is not None:
        raise ValueError("framework='numpy' holds host memory: use framework='torch', 'cupy' or 'accio' for a GPU, "
                         "or device='cpu'")
    if name == "accio" and ordinal is None:
        raise ValueError("framework='accio' (DeviceTensor) is GPU memory: give device='cuda:N', or use numpy")
    return name


# --- frameworks: a flat byte buffer of the target memory, and typed tensors on it -----------------

def _storage(info: TensorInfo) -> tuple[str, tuple]:
    """(safetensors dtype to give the framework, shape) for a tensor: sub-byte types travel as their
    packed bytes, the last dimension packed (F4: float4_e2m1fn_x2 for torch, uint8 elsewhere; F6:
    uint8), or as a flat byte vector when the last dimension does not pack into whole bytes."""
    if info.dtype not in SUBBYTE:
        return info.dtype, info.shape
    bits = DTYPE_BITS[info.dtype]
    last = info.shape[-1] if info.shape else 1
    if info.shape and (last * bits) % 8 == 0:
        return ("F4" if info.dtype == "F4" else "U8"), info.shape[:-1] + (last * bits // 8,)
    return "U8", (info.nbytes,)


class _Numpy:
    name = "numpy"

    def __init__(self, ordinal):
        import numpy
        self.np = numpy

    def dtype(self, st: str):
        if st in _NP:
            return self.np.dtype(_NP[st])
        if st == "F4":
            return self.np.dtype("uint8")
        try:
            import ml_dtypes
        except ImportError as e:
            raise ImportError(f"{st} tensors as NumPy arrays need ml_dtypes (pip install ml_dtypes): {e}",
                              name="ml_dtypes") from e
        return self.np.dtype(getattr(ml_dtypes, _ML[st]))

    def alloc(self, n: int):
        return self.np.empty(n, self.np.uint8)

    def part(self, buf, begin: int, end: int):
        return buf[begin:end]

    def from_bytes(self, data):
        return self.np.frombuffer(bytearray(data), self.np.uint8)

    def typed(self, flat, st: str, shape):
        return flat.view(self.dtype(st)).reshape(shape)

    def empty(self, st: str, shape):
        return self.np.empty(shape, self.dtype(st))


class _Cupy(_Numpy):
    name = "cupy"

    def __init__(self, ordinal):
        super().__init__(ordinal)
        self.cp = accio._framework("cupy", "accio.safetensors")
        self.device = self.cp.cuda.Device(self.cp.cuda.runtime.getDevice() if ordinal is None else ordinal)

    def alloc(self, n: int):
        with self.device:
            return self.cp.empty(n, self.cp.uint8)

    def typed(self, flat, st: str, shape):
        return flat.view(self.dtype(st)).reshape(shape)

    def empty(self, st: str, shape):
        with self.device:
            return self.cp.empty(shape, self.dtype(st))

    def from_bytes(self, data):
        with self.device:
            return self.cp.asarray(super().from_bytes(data))


class _Torch:
    name = "torch"

    def __init__(self, ordinal):
        self.torch = accio._framework("torch", "accio.safetensors")
        self.where = "cpu" if ordinal is None else f"cuda:{ordinal}"

    def dtype(self, st: str):
        t = getattr(self.torch, _TORCH.get(st, ""), None)
        if not isinstance(t, self.torch.dtype):
            raise ValueError(f"PyTorch {self.torch.__version__} has no type for {st} "
                             f"(torch.{_TORCH.get(st, '?')})")
        return t

    def alloc(self, n: int):
        return self.torch.empty(n, dtype=self.torch.uint8, device=self.where)

    def part(self, buf, begin: int, end: int):
        """A host tensor's view gets a storage of its own, the slice of the buffer's (no copy; it
        keeps the buffer alive), as safetensors.torch gives: untyped_storage() is the tensor's bytes,
        so torch.save of one tensor writes that tensor, not the whole file, and code that finds shared
        tensors by storage finds none. GPU tensors stay views of the one allocation: slicing a CUDA
        storage is not yet checked on hardware (docs/gpu.md)."""
        if buf.device.type != "cpu":
            return buf[begin:end]
        return self.torch.empty(0, dtype=self.torch.uint8).set_(buf.untyped_storage()[begin:end])

    def from_bytes(self, data):
        t = self.torch.frombuffer(bytearray(data), dtype=self.torch.uint8) if data else self.alloc(0)
        return t if self.where == "cpu" else t.to(self.where)

    def typed(self, flat, st: str, shape):
        return flat.view(self.dtype(st)).reshape(shape)

    def empty(self, st: str, shape):
        return self.torch.empty(shape, dtype=self.dtype(st), device=self.where)


class DeviceTensor:
    """One tensor's bytes in GPU memory, for framework='accio' (no CuPy or PyTorch needed).
    dtype (safetensors' name) and shape describe the tensor; __cuda_array_interface__ exposes its
    bytes as a flat uint8 vector (cupy.asarray(t).view(...) types it); to_bytes() copies them to the
    host. Views of one load share, and keep alive, one accio.DeviceArray (`base`)."""

    def __init__(self, base, offset: int, nbytes: int, dtype: str, shape: tuple, device: int):
        self.base, self.offset, self.nbytes, self.dtype, self.shape, self.device = base, offset, nbytes, dtype, shape, device

    @property
    def ptr(self) -> int:
        return self.base.ptr + self.offset if self.base is not None else 0

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.ptr, False), "strides": None, "version": 3}

    def to_bytes(self) -> bytes:
        out = bytearray(self.nbytes)
        if self.nbytes:
            accio._ext.copy(out, self)
        return bytes(out)

    def __repr__(self) -> str:
        return f"<accio.safetensors.DeviceTensor {self.dtype} {list(self.shape)} cuda:{self.device} {self.nbytes} bytes>"


class _Accio:
    name = "accio"

    def __init__(self, ordinal):
        self.ordinal = ordinal

    def alloc(self, n: int):
        return _Flat(accio.device_array(n, self.ordinal) if n else None, 0, n)

    def typed(self, flat, st: str, shape):
        return DeviceTensor(flat.base, flat.offset, flat.n, st, shape, self.ordinal)

    def empty(self, st: str, shape):
        return DeviceTensor(None, 0, 0, st, shape, self.ordinal)

    def part(self, buf, begin: int, end: int):
        return buf[begin:end]

    def from_bytes(self, data):
        out = self.alloc(len(data))
        if data:
            accio._ext.copy(out, data)
        return out


class _Flat:
    """A byte range of a DeviceArray that slices and reads like the frameworks' flat buffers."""

    def __init__(self, base, offset: int, n: int):
        self.base, self.offset, self.n = base, offset, n

    def __getitem__(self, s: slice):
        return _Flat(self.base, self.offset + s.start, s.stop - s.start)

    @property
    def __cuda_array_interface__(self) -> dict:
        ptr = self.base.ptr + self.offset if self.base is not None else 0
        return {"shape": (self.n,), "typestr": "|u1", "data": (ptr, False), "strides": None, "version": 3}


_FRAMEWORKS = {"numpy": _Numpy, "cupy": _Cupy, "torch": _Torch, "accio": _Accio}


def _itemsize(st: str) -> int:
    return max(1, DTYPE_BITS[st] // 8)


def _tensor(fw, path: str, flat, info: TensorInfo):
    """The typed tensor for info on flat (exactly its bytes); ValueError naming the tensor when the
    framework cannot hold it (a dtype it lacks, more dimensions than it allows)."""
    st, shape = _storage(info)
    try:
        if info.nbytes == 0:
            return fw.empty(st, shape)
        return fw.typed(flat, st, shape)
    except (ValueError, TypeError, RuntimeError, OverflowError) as e:
        raise ValueError(f"safetensors file '{path}', tensor {info.name!r}: {fw.name} cannot hold "
                         f"{info.dtype} {list(info.shape)}: {e}") from None


# --- reading -----------------------------------------------------------------------------------

def read_header(f: "accio.File", path: str | None = None) -> Header:
    """The validated header of an open accio.File (HeaderError when the file is malformed)."""
    path = path or f.path
    size = f.size
    first = bytearray(8)
    got = f.read_into(first, 0) if size >= 8 else 0
    n = _format.header_length(path, bytes(first[:got]), size)
    raw = bytearray(n)
    if n and f.read_into(raw, 8) != n:
        raise file_shrank(path, 8, 8 + n)
    return _format.interpret(path, _format.loads(path, bytes(raw)), n, size)


def _misaligned(h: Header) -> bool:
    """Whether a tensor's bytes would start off its type's alignment in a buffer holding the file from
    offset 0: only in files whose header is not padded to 8 bytes (safetensors before 0.3.1)."""
    return any(i.nbytes and (h.data_start + i.begin) % _itemsize(_storage(i)[0]) for i in h.tensors.values())


def _views(fw, path: str, buf, h: Header) -> dict:
    """The tensors of h as views of buf, which holds the file from offset 0 (aligned: not _misaligned)."""
    return {i.name: _tensor(fw, path, fw.part(buf, h.data_start + i.begin, h.data_start + i.end), i)
            for i in h.tensors.values()}


def _load_one(path: str, fw, copy: bool, settings: dict) -> tuple[dict, Header]:
    with accio.File(path, "r", **settings) as f:
        h = read_header(f, path)
        infos = list(h.tensors.values())
        if copy or (_misaligned(h) and fw.name != "accio"):  # DeviceTensors are bytes: no alignment to keep
            # Each tensor in its own allocation, one batch of reads; also for an old file whose views
            # would be misaligned, where cloning them beside the whole-file buffer needed twice the
            # checkpoint's memory (on a GPU too) until the buffer was dropped.
            flats = [fw.alloc(i.nbytes) for i in infos]
            _read_ranges(f, path, [(b, h.data_start + i.begin, i.nbytes) for b, i in zip(flats, infos)])
            return {i.name: _tensor(fw, path, b, i) for b, i in zip(flats, infos)}, h
        # The whole file, header included, in one read from offset 0: file offsets and buffer offsets
        # then agree, so the engine's tasks fill whole (huge) pages of the new buffer each, as for
        # accio.read; reading the data section alone into a fresh buffer ran up to 2x slower (pages
        # shared by two tasks at every task boundary). The header's bytes are the whole cost.
        size = h.data_start + h.data_len
        buf = fw.alloc(size)
        got = f.read_into(buf, 0)
        if got != size:
            raise file_shrank(path, got, size)
        return _views(fw, path, buf, h), h


def _read_ranges(f, path: str, reqs: list) -> None:
    """Reads (buffer, file offset, bytes) requests as one batch; short reads raise."""
    reqs = [r for r in reqs if r[2]]
    futs = f.submit([(b, off) for b, off, _ in reqs])
    for fut, (_, off, n) in zip(futs, reqs):
        got = fut.result()
        if got != n:
            raise file_shrank(path, off + got, off + n)


def _index_files(index_path: str) -> tuple[list[str], dict[str, str]]:
    """The shard files of a model.safetensors.index.json (in the order first named; one file named two
    ways, "./a" and "a", is one shard) and its weight_map (tensor name -> shard path). The index is
    untrusted: its size is bounded, and a shard must be a plain relative path inside the index's
    directory."""
    import json
    try:
        size = os.path.getsize(index_path)
        if size > MAX_HEADER:
            raise HeaderError(index_path, f"the index has {size} bytes, beyond the {MAX_HEADER}-byte bound")
        with open(index_path, "rb") as fh:
            doc = json.loads(fh.read().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        if isinstance(e, HeaderError):
            raise
        raise HeaderError(index_path, f"the index is not valid JSON: {e}") from None
    wm = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
        raise HeaderError(index_path, "the index has no weight_map object of tensor name -> file name")
    base = os.path.dirname(os.path.abspath(index_path))
    files, seen = [], {}
    for name, shard in wm.items():
        if shard not in seen:
            parts = shard.replace("\\", "/").split("/")
            if not shard or os.path.isabs(shard) or ".." in parts or "\0" in shard:
                raise HeaderError(index_path, f"shard file {shard!r} is not a relative path inside the index's "
                                  "directory", name)
            full = os.path.normpath(os.path.join(base, shard))
            if full not in files:
                files.append(full)
            seen[shard] = full
    return files, {name: seen[shard] for name, shard in wm.items()}


def load_file(filename, device="cpu", framework: str | None = None, *, copy: bool = False,
              max_workers: int | None = None, **settings):
    """Load every tensor of a safetensors file, or of a sharded checkpoint, into a dict.

    filename: a .safetensors file; a model.safetensors.index.json (its weight_map's shards, checked
      against what the shards hold); or a list of shard files. Shards are read in parallel
      (max_workers threads, default one per shard up to 8).
    device: "cpu" (default) or a GPU: "cuda:N", N, "cuda" (the calling thread's current GPU, as torch
      means it; safetensors takes GPU 0) or a torch.device.
    framework: "torch" ("pt"), "numpy" ("np"), "cupy" or "accio" (DeviceTensor, GPU only). Default:
      numpy on the host; on a GPU CuPy when it is installed, else accio.
    copy: False (default): one allocation holds the whole file and every tensor is a view of it, so
      memory is freed when the last of them is dropped. True: every tensor owns its
      own allocation. Either way the data is read once, straight into the target memory.
    Other keyword arguments are accio settings (mechanism="staged", threads=16, ...).

    The result equals safetensors.torch.load_file / safetensors.numpy.load_file: same names (in the
    file's order), dtypes, shapes and bytes. Sub-byte types come as packed bytes (see the guide).
    Raises HeaderError (a ValueError) for a malformed file, accio.Error (an OSError) for I/O errors."""
    ordinal = _ordinal(device)
    fw = _FRAMEWORKS[_framework_name(framework, ordinal)](ordinal)
    wanted = None
    if isinstance(filename, (list, tuple)):
        files = [os.fspath(p) for p in filename]
    else:
        path = os.fspath(filename)
        if not path.endswith(".json"):
            return _load_one(path, fw, copy, settings)[0]
        files, wanted = _index_files(path)
    if len(files) == 1:
        results = [_load_one(files[0], fw, copy, settings)]
    else:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=max_workers or min(8, len(files))) as pool:
            results = list(pool.map(lambda p: _load_one(p, fw, copy, settings), files))
    out, where = {}, {}
    for path, (tensors, _h) in zip(files, results):
        for name, t in tensors.items():
            if name in out:
                raise HeaderError(path, f"the tensor is also in '{where[name]}'", name)
            out[name], where[name] = t, path
    if wanted is not None:
        # As transformers reads an index: every tensor of every shard it lists is loaded, named in
        # weight_map or not, wherever weight_map places it. A tensor it names that no shard holds is
        # refused: transformers takes weight_map's names for the checkpoint's keys, so it would not
        # report the tensor missing and the model's weight would keep its initial values.
        for name, path in wanted.items():
            if name not in where:
                raise HeaderError(os.fspath(filename), f"the index places the tensor in '{path}', but no shard "
                                  "holds it", name)
    return out


class _Slice:
    """get_slice's result: get_shape(), get_dtype(), and indexing that reads only the rows asked for
    (the first index; the rest is applied to those rows)."""

    def __init__(self, owner: "safe_open", info: TensorInfo):
        self.owner, self.info = owner, info

    def get_shape(self) -> list:
        return list(self.info.shape)

    def get_dtype(self) -> str:
        return self.info.dtype

    def __getitem__(self, idx):
        info = self.info
        first, rest = (idx[0], idx[1:]) if isinstance(idx, tuple) and idx else (idx, ())
        rows = info.shape[0] if info.shape else 0
        if info.dtype in SUBBYTE or not info.shape or rows == 0 or isinstance(idx, tuple) and not idx:
            return self.owner.get_tensor(info.name)[idx]
        row = info.nbytes // rows
        if isinstance(first, int) and not isinstance(first, bool):
            i = first + rows if first < 0 else first
            if not 0 <= i < rows:
                raise IndexError(f"index {first} is out of bounds for dimension 0 of {info.name!r} ({rows} rows)")
            part = self.owner._read(info, i * row, row, (1,) + info.shape[1:])
            return part[(0,) + rest]
        if isinstance(first, slice):
            start, stop, step = first.indices(rows)
            if step > 0:
                stop = max(stop, start)
                part = self.owner._read(info, start * row, (stop - start) * row, (stop - start,) + info.shape[1:])
                return part[(slice(None, None, step),) + rest]
        return self.owner.get_tensor(info.name)[idx]


class safe_open:
    """Lazy access to one safetensors file: the header is read and checked at open; get_tensor reads
    only that tensor's byte range into a new tensor of its own (framework and device as load_file).

        with accio.safetensors.safe_open("model.safetensors", framework="pt", device="cuda:0") as f:
            w = {k: f.get_tensor(k) for k in f.keys() if k.startswith("layers.0.")}
    """

    def __init__(self, filename, framework: str | None = None, device="cpu", **settings):
        self.path = os.fspath(filename)
        ordinal = _ordinal(device)
        self._fw = _FRAMEWORKS[_framework_name(framework, ordinal)](ordinal)
        self._f = accio.File(self.path, "r", **settings)
        try:
            self.header = read_header(self._f, self.path)
        except BaseException:
            self._f.close()
            raise

    def __enter__(self) -> "safe_open":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._f.close()

    def keys(self) -> list[str]:
        """Tensor names, sorted (as safetensors' safe_open.keys())."""
        return sorted(self.header.tensors)

    def offset_keys(self) -> list[str]:
        """Tensor names in the order of their data in the file."""
        return list(self.header.tensors)

    def metadata(self) -> dict | None:
        return None if self.header.metadata is None else dict(self.header.metadata)

    def _info(self, name: str) -> TensorInfo:
        try:
            return self.header.tensors[name]
        except KeyError:
            raise TensorNotFoundError(self.path, name) from None

    def _read(self, info: TensorInfo, offset: int, n: int, shape: tuple):
        flat = self._fw.alloc(n)
        if n:
            _read_ranges(self._f, self.path, [(flat, self.header.data_start + info.begin + offset, n)])
        part = TensorInfo(info.name, info.dtype, shape, 0, n)
        return _tensor(self._fw, self.path, flat, part)

    def get_tensor(self, name: str):
        info = self._info(name)
        return self._read(info, 0, info.nbytes, info.shape)

    def get_tensors(self, names=None) -> dict:
        """Several tensors (default: all) read as one batch of requests, each into its own memory."""
        infos = [self._info(n) for n in (self.offset_keys() if names is None else names)]
        flats = [self._fw.alloc(i.nbytes) for i in infos]
        _read_ranges(self._f, self.path, [(b, self.header.data_start + i.begin, i.nbytes) for b, i in zip(flats, infos)])
        return {i.name: _tensor(self._fw, self.path, b, i) for b, i in zip(flats, infos)}

    def get_slice(self, name: str) -> _Slice:
        if self._fw.name == "accio":
            raise TypeError("get_slice indexes tensors: open with framework 'torch', 'numpy' or 'cupy'")
        return _Slice(self, self._info(name))


# --- writing -----------------------------------------------------------------------------------

def _describe(name: str, t):
    """(safetensors dtype, header shape, flat byte buffer accio can write from, or None when empty)."""
    mod = type(t).__module__.split(".")[0]
    if isinstance(t, DeviceTensor):
        return t.dtype, tuple(t.shape), (t if t.nbytes else None)
    if mod == "torch":
        torch = sys.modules["torch"]
        if t.layout != torch.strided:
            raise ValueError(f"tensor {name!r} is sparse ({t.layout}): save t.to_dense()")
        if t.device.type == "meta":
            raise ValueError(f"tensor {name!r} is on the meta device: it has no data to save")
        if t.is_conj() or t.is_neg():
            raise ValueError(f"tensor {name!r} is a lazily conjugated or negated view, whose memory holds the "
                             "other values: save t.resolve_conj().resolve_neg()")
        if not t.is_contiguous():
            raise ValueError(f"tensor {name!r} is not contiguous: save t.contiguous()")
        dname = str(t.dtype).split(".")[-1]
        shape = tuple(t.shape)
        if dname == "float4_e2m1fn_x2" and shape:
            shape = shape[:-1] + (shape[-1] * 2,)  # safetensors records F4 elements, two per byte
        flat = t.detach().reshape(-1).view(torch.uint8) if t.numel() else None
        return _st_dtype(name, dname), shape, flat
    import numpy as np
    if mod == "cupy" or isinstance(t, np.ndarray):
        if not t.flags.c_contiguous:
            raise ValueError(f"tensor {name!r} is not C-contiguous: save an ascontiguousarray() copy")
        dtype = _st_dtype(name, t.dtype.name)
        if t.dtype.byteorder == ">":
            t = t.byteswap().view(t.dtype.newbyteorder("<"))  # safetensors stores little-endian
        flat = t.reshape(-1).view(np.uint8) if t.size else None
        return dtype, tuple(t.shape), flat
    raise TypeError(f"tensor {name!r} is a {type(t).__module__}.{type(t).__name__}: expected a torch.Tensor, "
                    "numpy.ndarray, cupy.ndarray or accio.safetensors.DeviceTensor")


def _st_dtype(name: str, dname: str) -> str:
    if dname not in _FROM_NAME:
        raise ValueError(f"tensor {name!r}: safetensors has no type for {dname} "
                         f"(it stores {', '.join(sorted(_FROM_NAME))})")
    return _FROM_NAME[dname]


def _serialize(tensors: dict, metadata: dict | None) -> tuple[bytes, list, int]:
    """The header's bytes, the (flat buffer, offset in the data section, bytes) writes of a save and
    the data section's length, every tensor checked first: what safetensors refuses to save is
    refused here, before any file is touched."""
    if not isinstance(tensors, dict):
        raise ValueError(f"expected a dict of name -> tensor, got {type(tensors).__name__}")
    if metadata is not None and (not isinstance(metadata, dict) or
                                 not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
        raise ValueError("metadata must be a dict of str -> str")
    items = []
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise ValueError(f"tensor name {name!r} is not a str")
        if name == "__metadata__":
            raise ValueError("a tensor may not be named '__metadata__': the header keeps that name for the metadata "
                             "(the file would be unreadable)")
        dtype, shape, flat = _describe(name, t)
        items.append((name, dtype, shape, flat))
    _shared_check(items)
    items.sort(key=lambda x: (-_format.DTYPE_RANK[x[1]], x[0]))
    entries, reqs, pos = [], [], 0
    for name, dtype, shape, flat in items:
        n = 0 if flat is None else flat.numel() if hasattr(flat, "element_size") else flat.nbytes  # torch: numel
        try:
            size = _format._byte_size(TensorInfo(name, dtype, shape, pos, pos + n))
        except ValueError as e:
            raise ValueError(f"tensor {name!r}: {e}; safetensors cannot store it") from None
        if size != n:
            raise ValueError(f"tensor {name!r}: {dtype} {list(shape)} is {size} bytes, but its memory holds {n}")
        entries.append((name, dtype, shape, pos, pos + n))
        if n:
            reqs.append((flat, pos, n))
        pos += n
    head = _format.serialize_header(entries, metadata)
    if len(head) - 8 > MAX_HEADER:
        raise ValueError(f"the header would be {len(head) - 8} bytes, beyond safetensors' bound of {MAX_HEADER} "
                         "(no reader would open the file): fewer tensors or less metadata per file")
    return head, reqs, pos


def save_file(tensors: dict, filename, metadata: dict | None = None, *, fsync: bool = False, **settings) -> None:
    """Write tensors (torch, NumPy, CuPy arrays or DeviceTensors, host or GPU, mixed) to a
    safetensors file: the same bytes as safetensors.torch/numpy.save_file for the same input
    (metadata with several keys is written sorted: safetensors' own order varies between runs).
    GPU tensors are written straight from GPU memory through the staged pipeline, all tensors as
    one batch of requests. As safetensors does, the file is written under a temporary name beside
    filename and renamed over it at the end, so an existing file is never truncated: not under
    tensors mapped from it (safetensors.torch.load_file's), not by a save that fails. fsync=True
    makes the file and its name durable before returning. Other keyword arguments are accio settings."""
    head, reqs, _ = _serialize(tensors, metadata)
    path = os.fspath(filename)
    tmp, mode = _temporary_beside(path)
    try:
        with accio.File(tmp, "w", **settings) as f:
            todo = [(head, 0)] + [(b, len(head) + off) for b, off, _ in reqs]
            for fut in f.submit(todo, write=True):
                fut.result()
            if fsync:
                f.fsync()
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if fsync:
        d = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(d)
        finally:
            os.close(d)


def save(tensors: dict, metadata: dict | None = None) -> bytes:
    """The bytes save_file would write, in host memory (safetensors.torch.save, safetensors.numpy.save).
    Built in a bytearray and returned as bytes: twice the checkpoint's size at the peak."""
    head, reqs, data_len = _serialize(tensors, metadata)
    out = bytearray(len(head) + data_len)
    out[:len(head)] = head
    view = memoryview(out)
    for flat, off, n in reqs:
        accio._ext.copy(view[len(head) + off:len(head) + off + n], flat)
    return bytes(out)


def load(data, device="cpu", framework: str | None = None) -> dict:
    """The tensors of a safetensors file's bytes (safetensors.torch.load, safetensors.numpy.load),
    checked as load_file checks a file; each tensor in its own memory on device (framework as for
    load_file)."""
    path = "<bytes>"
    mv = memoryview(data).cast("B")
    n = _format.header_length(path, bytes(mv[:8]), len(mv))
    h = _format.interpret(path, _format.loads(path, bytes(mv[8:8 + n])), n, len(mv))
    ordinal = _ordinal(device)
    fw = _FRAMEWORKS[_framework_name(framework, ordinal)](ordinal)
    return {i.name: _tensor(fw, path, fw.from_bytes(mv[h.data_start + i.begin:h.data_start + i.end]), i)
            for i in h.tensors.values()}


def _temporary_beside(path: str) -> tuple[str, int | None]:
    """A new empty file in path's directory (created exclusively, with the mode a new file gets) and
    the permission bits to give it: an existing regular file's, else None."""
    import stat
    try:
        st = os.stat(path)
        mode = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else None
    except FileNotFoundError:
        mode = None
    head, tail = os.path.split(path)
    for _ in range(100):
        tmp = os.path.join(head, f".{tail}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))
            return tmp, mode
        except FileExistsError:
            continue
        except OSError as e:
            raise type(e)(e.errno, f"cannot create a temporary file beside '{path}' ({e.strerror}): save_file writes "
                          "the checkpoint there and renames it over the target, so that an existing file is never "
                          "truncated", tmp) from None
    raise FileExistsError(f"cannot find a free temporary name beside '{path}'")


def _shared_check(items) -> None:
    """torch tensors whose bytes overlap are refused, as safetensors.torch refuses tensors that share
    storage and overlap (their bytes would be saved twice and loaded as separate tensors). Disjoint
    views of one storage (what load_file returns by default) are written, as safetensors.torch writes
    them."""
    spans = []
    for name, _dtype, _shape, flat in items:
        if flat is not None and type(flat).__module__.split(".")[0] == "torch":
            p = flat.data_ptr()
            spans.append((str(flat.device), p, p + flat.numel(), name))
    spans.sort()
    for (d0, _b0, e0, n0), (d1, b1, _e1, n1) in zip(spans, spans[1:]):
        if d0 == d1 and b1 < e0:
            raise SharedTensorsError(f"tensors {n0!r} and {n1!r} share memory (their bytes overlap); safetensors "
                                     "refuses them too: save clones, or see safetensors.torch.save_model")


class SharedTensorsError(ValueError, RuntimeError):
    """save_file's refusal of tensors whose bytes overlap: a ValueError, and a RuntimeError as
    safetensors.torch raises it (code that catches it to fall back to save_model keeps working)."""
