"""accio errors: OSError subclasses that carry errno, the operation, the path and the offset.

Every failure raises an ``accio.Error`` that is also the matching built-in OSError subclass
(``FileNotFoundError``, ``PermissionError``, ...), so both ``except accio.Error`` and
``except FileNotFoundError`` work.
"""
from __future__ import annotations

import errno as _errno
import os as _os


class Error(OSError):
    """An accio operation failed. Attributes: errno, strerror, filename, operation, offset.
    str(e) is the whole message (operation, path, offset and errno); strerror is os.strerror(errno)
    alone, as Python's own OSErrors have it, so that f"{e.strerror}: {e.filename}" names the path once."""

    operation: str = ""
    offset: int | None = None

    def __init__(self, *args) -> None:
        super().__init__(*args)
        if len(args) > 1 and isinstance(self.errno, int):  # args[1], the full message, stays for __str__
            self.strerror = _os.strerror(self.errno)

    def __str__(self) -> str:  # the native message already names op, path, offset and errno
        return self.args[1] if len(self.args) > 1 else super().__str__()

    def __reduce__(self):
        # The errno subclasses (accio.FileNotFoundError...) are made at run time, so pickle cannot
        # find them by name: an accio error raised in a worker process (multiprocessing, a
        # DataLoader worker) failed to reach its parent. Rebuilt from errno and args instead.
        return (_unpickle, (self.errno, self.args, self.filename), self.__dict__ or None)


Error.__module__ = "accio"  # tracebacks say accio.Error, the name users catch (accio exports it)


_BUILTIN = {
    _errno.ENOENT: FileNotFoundError,
    _errno.EEXIST: FileExistsError,
    _errno.EISDIR: IsADirectoryError,
    _errno.ENOTDIR: NotADirectoryError,
    _errno.EACCES: PermissionError,
    _errno.EPERM: PermissionError,
    _errno.EINTR: InterruptedError,
    _errno.EAGAIN: BlockingIOError,
    _errno.ETIMEDOUT: TimeoutError,
}
_classes: dict[type, type] = {}


def error_class(err: int) -> type:
    """The accio.Error subclass for an errno value (also a subclass of the builtin one)."""
    base = _BUILTIN.get(err)
    if base is None:
        return Error
    if base not in _classes:
        _classes[base] = type(base.__name__, (Error, base), {"__module__": "accio"})
    return _classes[base]


def _unpickle(err: int | None, args: tuple, filename: str | None = None) -> Error:
    cls = error_class(err) if err is not None else Error
    return cls(*args, filename) if filename is not None and len(args) == 2 else cls(*args)


def make_error(err: int, operation: str, path: str, offset: int | None, message: str) -> Error:
    exc = error_class(err)(err, message, path or None)
    exc.operation = operation
    exc.offset = offset if offset is not None and offset >= 0 else None
    return exc


def from_native(err: int, operation: str, path: str, offset: int, message: str) -> Error:
    """Called by the extension to turn a native accio error into a Python exception."""
    return make_error(err, operation, path, offset, message)


def file_shrank(path, got: int, n: int) -> Error:
    """A file that became shorter while it was read (accio.read, accio.safetensors): EIO."""
    return Error(_errno.EIO, f"read '{path}': {got} of {n} bytes (file shrank while being read)")
