"""accio.RawFile: an io.RawIOBase over an accio file, so accio sits under open()-style code.

    with io.BufferedReader(accio.RawFile("data.bin", "rb", mechanism="parallel")) as f:
        header = f.read(16); f.seek(4096); rest = f.read()

It behaves as io.FileIO does (tests/python/test_rawio.py runs both side by side): readinto, read,
readall, write, seek (SEEK_SET, SEEK_CUR, SEEK_END), tell, truncate, fileno, closed, name, mode, and
the same errors (io.UnsupportedOperation for the wrong direction, ValueError once closed, OSError
EINVAL for a negative position). Each read and write is one accio request at the file position, so
large reads run the planned mechanism. The position is the RawFile's own (accio reads and writes
at offsets): it is not the descriptor's, so os.read(f.fileno()) does not move it, nor it os.read's.
"""
from __future__ import annotations

import errno
import io
import operator
import os
TYPE_CHECKING = False  # typing costs start-up time (see __init__)
if TYPE_CHECKING:
    from typing import Any

from . import _ext
from ._defaults import _resolve

# FileIO's mode attribute for each open mode ("r+" -> "rb+").
_MODES = {"r": "rb", "w": "wb", "a": "ab", "x": "xb", "r+": "rb+", "w+": "rb+", "a+": "ab+", "x+": "xb+"}


def _plain_mode(mode: str) -> str:
    """'r', 'w', 'a', 'x', 'r+', 'w+', 'a+' or 'x+' for a mode FileIO takes ('rb', 'br', 'b+r'...: its
    letters in any order, b any number of times); ValueError otherwise."""
    if not isinstance(mode, str):
        raise TypeError(f"mode must be a str, not {type(mode).__name__}")
    base = [c for c in mode if c in "rwax"]
    if len(base) != 1 or mode.count("+") > 1 or set(mode) - set("rwax+b"):
        raise ValueError(f"invalid mode: {mode!r} (use r, w, a, x, r+, w+, a+ or x+, each with or without b)")
    return base[0] + "+" * mode.count("+")


class RawFile(io.RawIOBase):
    """An accio file as an unbuffered binary stream (io.RawIOBase). mode: r, w, a, x, r+, w+, a+, x+,
    each with or without b. mechanism and other keywords: as accio.open()."""

    def __init__(self, path: str | bytes | os.PathLike[str] | os.PathLike[bytes], mode: str = "r",
                 mechanism: str | None = None, closefd: bool = True, **settings: Any) -> None:
        plain = _plain_mode(mode)
        if not closefd:  # FileIO's own refusal: closefd=False keeps a descriptor it was given, and a path is none
            raise ValueError("Cannot use closefd=False with file name")
        self._f = _ext.File(path, plain, _resolve({"mechanism": mechanism, **settings}))
        self.name = path
        self.mode = _MODES[plain]
        self._readable = plain not in ("w", "a", "x")
        self._writable = plain != "r"
        self._append = plain.startswith("a")
        self._pos = self._f.size() if self._append else 0  # FileIO starts appends at the end

    def __reduce_ex__(self, protocol):
        """As FileIO: no pickle, and no copy (copy.copy shared the handle, and the copy's close when it
        was collected closed the original's)."""
        raise TypeError(f"cannot pickle or copy accio.RawFile {self.name!r}: it owns an open descriptor")

    def __repr__(self) -> str:
        return f"<accio.RawFile name={self.name!r} mode={self.mode!r}{' closed' if self.closed else ''}>"

    def _check(self, need: str | None = None) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file")
        if need == "reading" and not self._readable or need == "writing" and not self._writable:
            raise io.UnsupportedOperation(f"File not open for {need}")

    def readable(self) -> bool:
        self._check()
        return self._readable

    def writable(self) -> bool:
        self._check()
        return self._writable

    def seekable(self) -> bool:
        self._check()
        return True

    def readinto(self, b) -> int:
        self._check("reading")
        n = self._f.read_into(b, self._pos, None)
        self._pos += n
        return n

    def read(self, size: int | None = -1) -> bytes:
        self._check("reading")
        return super().read(-1 if size is None else size)  # None: everything, as FileIO

    def readall(self) -> bytes:
        self._check()
        if not self._readable:  # FileIO reads the descriptor here, which refuses
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        buf = bytearray(max(self._f.size() - self._pos, 0))
        n = self._f.read_into(buf, self._pos, None) if buf else 0
        del buf[n:]
        self._pos += n
        while True:  # the file grew after size() (as FileIO, read to the end)
            more = bytearray(1 << 16)
            got = self._f.read_into(more, self._pos, None)
            if not got:
                return bytes(buf)
            buf += more[:got]
            self._pos += got

    def write(self, b) -> int:
        self._check("writing")
        if self._append:  # as O_APPEND: at the end, whatever the position
            offset, n = self._f.append(b)
            self._pos = offset + n
            return n
        n = self._f.write_from(b, self._pos)
        self._pos += n
        return n

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self._check()
        offset, whence = operator.index(offset), operator.index(whence)  # TypeError for 1.5, as FileIO
        if whence == os.SEEK_SET:
            pos = offset
        elif whence == os.SEEK_CUR:
            pos = self._pos + offset
        elif whence == os.SEEK_END:
            pos = self._f.size() + offset
        elif whence in (getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)):
            pos = os.lseek(self._f.fileno(), offset, whence)  # as FileIO: the kernel finds them (ENXIO past the end)
        else:  # FileIO passes it to lseek, which refuses it (use SEEK_SET, SEEK_CUR or SEEK_END)
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        if pos < 0:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        if pos > 2**63 - 1:  # FileIO's OverflowError; accepted, the next read failed with nanobind's TypeError
            raise OverflowError(f"seek to {pos}: beyond the largest file offset (2**63 - 1)")
        self._pos = pos
        return pos

    def tell(self) -> int:
        self._check()
        return self._pos

    def truncate(self, size: int | None = None) -> int:
        self._check("writing")
        size = self._pos if size is None else operator.index(size)
        os.ftruncate(self._f.fileno(), size)
        return size

    def fileno(self) -> int:
        self._check()
        return self._f.fileno()

    def isatty(self) -> bool:
        self._check()
        return False

    def close(self) -> None:
        f = getattr(self, "_f", None)  # None: __init__ failed before opening
        if self.closed or f is None:
            return super().close()
        try:
            f.close()
        finally:
            super().close()
