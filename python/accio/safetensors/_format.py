"""The safetensors format: parsing an untrusted header, and writing one byte for byte as safetensors does.

A file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON, then the data section.
The JSON maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative
to the data section) plus an optional "__metadata__" map of strings to strings.

parse() accepts exactly what safetensors 0.8.0 (its Rust core, serde_json) accepts, checked by
tests/python/test_safetensors_fuzz.py against the installed package, with one deliberate exception:
a tensor name given twice is rejected (safetensors keeps one of them silently). Every length, offset
and shape is checked, with 64-bit overflow as safetensors computes it, before anything is allocated
or read; the caller has read at most min(N, 100 MB, file size) bytes for the header.
"""
from __future__ import annotations

import json
import math
import re

MAX_HEADER = 100_000_000          # safetensors' bound on N
U64_MAX = (1 << 64) - 1
MAX_DEPTH = 127                   # serde_json's recursion limit, counted as safetensors hits it

# Every safetensors dtype, in the order of its Rust enum (save_file sorts by it): name -> bits.
DTYPE_BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8,
    "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}
DTYPE_RANK = {name: i for i, name in enumerate(DTYPE_BITS)}
SUBBYTE = ("F4", "F6_E2M3", "F6_E3M2")


class SafetensorError(Exception):
    """accio's counterpart of safetensors.SafetensorError, the base of its safetensors errors
    (HeaderError, TensorNotFoundError): code that catches safetensors' one class, spelled with
    accio's, catches these. path and tensor name the file and, where one is to blame, the tensor."""


class HeaderError(SafetensorError, ValueError):
    """A safetensors file (or index) that is malformed or hostile: names the file and, where one
    is to blame, the tensor. A ValueError, as it was before SafetensorError, and a SafetensorError."""

    def __init__(self, path: str, what: str, tensor: str | None = None):
        self.path, self.tensor, self.what = path, tensor, what
        where = f"safetensors file '{path}'" + (f", tensor {tensor!r}" if tensor is not None else "")
        super().__init__(f"{where}: {what}")

    def __reduce__(self):  # a worker process's error reaches its parent whole (multiprocessing pickles it)
        return type(self), (self.path, self.what, self.tensor)


class TensorNotFoundError(SafetensorError, KeyError):
    """safe_open's get_tensor or get_slice of a name the file does not hold. safetensors raises its
    SafetensorError("File does not contain tensor NAME"); this message begins the same and names the
    file. A KeyError as well, as accio raised before, so that `except KeyError` keeps working."""

    def __init__(self, path: str, tensor: str):
        self.path, self.tensor = path, tensor
        super().__init__(f"File does not contain tensor {tensor} (safetensors file '{path}')")

    def __str__(self) -> str:  # KeyError's would quote the message as a repr
        return str(self.args[0])

    def __reduce__(self):
        return type(self), (self.path, self.tensor)


class TensorInfo:
    """One tensor of a parsed header: dtype (safetensors' name), shape, and its byte range
    [begin, end) relative to the data section."""
    __slots__ = ("name", "dtype", "shape", "begin", "end")

    def __init__(self, name: str, dtype: str, shape: tuple, begin: int, end: int):
        self.name, self.dtype, self.shape, self.begin, self.end = name, dtype, shape, begin, end

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    def __repr__(self) -> str:
        return f"TensorInfo({self.name!r}, {self.dtype}, {list(self.shape)}, [{self.begin}, {self.end}))"


class Header:
    """A validated header: tensors in file order (by offset, then name), metadata (None or a dict
    of str), where the data section starts and how long it is."""

    def __init__(self, path: str, tensors: list[TensorInfo], metadata, data_start: int, data_len: int):
        self.path, self.metadata, self.data_start, self.data_len = path, metadata, data_start, data_len
        self.tensors = {t.name: t for t in tensors}


# --- JSON as serde_json reads it -----------------------------------------------------------------

class _Obj(dict):
    """A JSON object; dups lists the keys that appeared more than once (the last value is kept) and
    dup_values every value given to them, the shadowed ones too (serde types each as it reads it)."""
    __slots__ = ("dups", "dup_values")


def _pairs(pairs):
    o = _Obj(pairs)
    if len(o) == len(pairs):
        o.dups = o.dup_values = ()
    else:
        seen: set = set()
        o.dups = tuple({k for k, _ in pairs if k in seen or seen.add(k)})
        o.dup_values = tuple(v for k, v in pairs if k in o.dups)
    return o


def _int(text: str):
    # serde_json reads a non-negative integer up to 2^64-1 as an integer, anything else as a float
    # (so "-0", "-3" and 2^64 are not a usize); a float too large for f64 is an error.
    if len(text) <= 20:
        v = int(text)
        if text[0] != "-" and v <= U64_MAX:
            return v
    return _float(text)


def _float(text: str) -> float:
    f = float(text)
    if math.isinf(f):
        raise ValueError(f"number out of range: {text[:40]}")
    return f


def _constant(text: str):
    raise ValueError(f"{text} is not JSON")


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _walk(value, check_surrogates: bool) -> None:
    """serde_json's limits that Python's json lacks: nesting depth and lone surrogate escapes."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (dict, list)):
            if depth > MAX_DEPTH:
                raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
            items = v.items() if isinstance(v, dict) else enumerate(v)
            for k, x in items:
                if check_surrogates and isinstance(k, str):
                    _no_surrogate(k)
                if isinstance(x, (dict, list)):
                    stack.append((x, depth + 1))
                elif check_surrogates and isinstance(x, str):
                    _no_surrogate(x)
        elif check_surrogates and isinstance(v, str):
            _no_surrogate(v)


# _within_depth's tables: the bytes that are neither a quote nor a bracket (deleted), an escape (a
# backslash and the byte after it: \" does not end a string), and both bracket kinds as one.
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}')
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_ONE_KIND = bytes.maketrans(b"{}", b"[]")


def _within_depth(raw: bytes, limit: int) -> bool:
    """Whether the JSON text raw, which json.loads took, nests its arrays and objects at most limit
    deep (the outermost is depth 1), found with C-speed bytes operations only, so that _walk's
    Python loop over every value runs only for a header that may be too deep (it took 4.7 s of a
    48 MB header's 7.8 s; audit s26 #9). The brackets outside strings are kept (escapes dropped
    first; a string then runs from a quote to the next; the brackets and quotes are ASCII, which no
    byte of a multi-byte UTF-8 character is), and each pass removes every innermost pair: a depth of
    d empties in exactly d passes (str.replace does not rescan what it has replaced)."""
    if b"\\" in raw:
        raw = _ESCAPE.sub(b"", raw)
    s = raw.translate(None, _NOT_STRUCTURE).replace(b'""', b"")  # removing two adjacent quotes keeps
    if b'"' in s:                                                # every other byte in or out of its string
        s = b"".join(s.split(b'"')[::2])
    s = s.translate(_ONE_KIND)
    for _ in range(limit):
        if not s:
            return True
        s = s.replace(b"[]", b"")
    return not s


def _no_surrogate(s: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a string holds a lone UTF-16 surrogate escape") from None


def loads(path: str, raw: bytes):
    """The header's JSON value, read as serde_json reads it (HeaderError otherwise)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise HeaderError(path, f"the header is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_int=_int, parse_float=_float,
                           parse_constant=_constant)
        surrogates = bool(_SURROGATE_ESCAPE.search(text))
        if surrogates or not _within_depth(raw, MAX_DEPTH):
            _walk(value, surrogates)
    except RecursionError:
        raise HeaderError(path, f"the header's JSON is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:  # json.JSONDecodeError is one
        raise HeaderError(path, f"the header is not valid JSON: {e}") from None
    return value


# --- the header's content -------------------------------------------------------------------------

def _usize(v) -> bool:
    return type(v) is int and 0 <= v <= U64_MAX  # bool is an int subclass: excluded by type()


def _dtype(v):
    if isinstance(v, str):
        return v if v in DTYPE_BITS else None
    if isinstance(v, dict) and len(v) == 1:  # serde's map form of an enum: {"F32": null}
        (k, x), = v.items()
        return k if x is None and k in DTYPE_BITS and not v.dups else None
    return None


def _byte_size(info: TensorInfo) -> int | None:
    """The tensor's bytes as safetensors computes them (checked 64-bit products, shape left to
    right), or None on overflow; ValueError when the bits do not end on a byte."""
    n = 1
    for d in info.shape:
        n *= d
        if n > U64_MAX:
            return None
    bits = n * DTYPE_BITS[info.dtype]
    if bits > U64_MAX:
        return None
    if bits % 8:
        raise ValueError(f"{len(info.shape)}-d {info.dtype} shape {list(info.shape)} is {bits} bits, "
                         "not a whole number of bytes")
    return bits // 8


def interpret(path: str, value, header_len: int, file_size: int) -> Header:
    """Checks the JSON value of a header whose length is header_len in a file of file_size bytes."""
    if not isinstance(value, dict):
        raise HeaderError(path, f"the header is a JSON {type(value).__name__}, not an object")
    if value.dups:
        name = sorted(value.dups)[0]
        if name == "__metadata__":
            raise HeaderError(path, "__metadata__ appears twice in the header")
        raise HeaderError(path, "the tensor name appears more than once in the header (safetensors would keep "
                          "one of them silently; accio refuses the file)", name)
    metadata = value.get("__metadata__")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise HeaderError(path, f"__metadata__ is a JSON {type(metadata).__name__}, not an object of strings")
        for k, v in metadata.items():
            if not isinstance(v, str):
                raise HeaderError(path, f"__metadata__[{k!r}] is not a string")
        if not all(isinstance(v, str) for v in metadata.dup_values):  # {"k": 1, "k": "v"}: serde refuses the 1
            raise HeaderError(path, f"__metadata__[{sorted(metadata.dups)[0]!r}] is given twice, once not as a string")
        metadata = dict(metadata)
    infos = []
    for name, t in value.items():
        if name == "__metadata__":
            continue
        if not isinstance(t, dict):
            raise HeaderError(path, "the entry is not a JSON object with dtype, shape and data_offsets", name)
        for field in ("dtype", "shape", "data_offsets"):
            if field not in t:
                raise HeaderError(path, f"no {field}", name)
            if field in t.dups:
                raise HeaderError(path, f"{field} appears twice", name)
        dtype = _dtype(t["dtype"])
        if dtype is None:
            raise HeaderError(path, f"unknown dtype {t['dtype']!r} (known: {', '.join(DTYPE_BITS)})", name)
        shape, offs = t["shape"], t["data_offsets"]
        if not isinstance(shape, list) or not all(_usize(d) for d in shape):
            raise HeaderError(path, f"shape {shape!r} is not a list of integers in [0, 2^64)", name)
        if not isinstance(offs, list) or len(offs) != 2 or not all(_usize(o) for o in offs):
            raise HeaderError(path, f"data_offsets {offs!r} is not two integers in [0, 2^64)", name)
        infos.append(TensorInfo(name, dtype, tuple(shape), offs[0], offs[1]))
    # safetensors' order: by (begin, end); names only break ties between empty tensors.
    infos.sort(key=lambda i: (i.begin, i.end, i.name))
    pos = 0
    for info in infos:
        if info.begin != pos or info.end < info.begin:
            what = ("ends before it begins" if info.end < info.begin else
                    "overlaps the tensor before it" if info.begin < pos else "leaves a gap after the tensor before it")
            raise HeaderError(path, f"data_offsets [{info.begin}, {info.end}) {what} (the tensors must tile the "
                              f"data section from 0 in order; the one before ends at {pos})", info.name)
        pos = info.end
        try:
            size = _byte_size(info)
        except ValueError as e:
            raise HeaderError(path, str(e), info.name) from None
        if size is None:
            raise HeaderError(path, f"shape {list(info.shape)} of {info.dtype} overflows 64 bits", info.name)
        if info.end - info.begin != size:
            raise HeaderError(path, f"shape {list(info.shape)} of {info.dtype} is {size} bytes, but data_offsets "
                              f"[{info.begin}, {info.end}) hold {info.end - info.begin}", info.name)
    data_start = 8 + header_len
    if data_start + pos != file_size:
        raise HeaderError(path, f"the tensors cover {pos} bytes of data, but the file has {file_size - data_start} "
                          f"after its {header_len}-byte header")
    return Header(path, infos, metadata, data_start, pos)


def header_length(path: str, first8: bytes, file_size: int) -> int:
    """N from the first 8 bytes, checked against the file's size and safetensors' 100 MB bound."""
    if file_size < 8 or len(first8) < 8:
        raise HeaderError(path, f"the file has {file_size} bytes, fewer than the 8 of a header length")
    n = int.from_bytes(first8[:8], "little")
    if n > MAX_HEADER:
        raise HeaderError(path, f"header length {n} is beyond safetensors' bound of {MAX_HEADER} bytes")
    if 8 + n > file_size:
        raise HeaderError(path, f"header length {n} is beyond the end of the {file_size}-byte file")
    return n


# --- writing ------------------------------------------------------------------------------------

def _json_str(s: str, what: str) -> str:
    out = json.dumps(s, ensure_ascii=False)  # escapes as serde_json does: " \ and U+0000-U+001F
    try:
        out.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} {s!r} is not valid Unicode (a lone surrogate)") from None
    return out


def serialize_header(entries: list[tuple[str, str, tuple, int, int]], metadata) -> bytes:
    """The header bytes (length prefix, JSON, space padding to a multiple of 8) that safetensors
    writes for entries (name, dtype, shape, begin, end) already in its order."""
    parts = []
    if metadata is not None:
        # safetensors writes the metadata in its hash map's order, which differs from run to run
        # when there are several keys; sorted here (one key or none: identical bytes).
        parts.append('"__metadata__":{' + ",".join(
            f"{_json_str(k, 'metadata key')}:{_json_str(v, 'metadata value')}" for k, v in sorted(metadata.items())) + "}")
    for name, dtype, shape, begin, end in entries:
        parts.append(f'{_json_str(name, "tensor name")}:{{"dtype":"{dtype}","shape":[{",".join(map(str, shape))}],'
                     f'"data_offsets":[{begin},{end}]}}')
    text = ("{" + ",".join(parts) + "}").encode("utf-8")
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text
