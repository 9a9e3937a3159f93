"""Writing a file whole without ever truncating the old one: under a temporary name beside it, renamed
over it at the end (accio.safetensors.save_file, accio.write(atomic=True)), so that a write that fails
part way (ENOSPC, RLIMIT_FSIZE, a bad buffer) leaves the old content, and readers that mapped the old
file keep it. A target that exists and is not a regular file (a character or block device, a FIFO)
is written in place instead: a rename would replace the node itself with a regular file (as root,
save_file(..., "/dev/null") made /dev/null a regular file for the whole machine; audit s26 #8).
"""
from __future__ import annotations

import contextlib
import os
import stat

import accio


def special(path: str) -> int | None:
    """The st_mode of an existing path that is neither a regular file nor a directory (a device, a
    FIFO, a socket; a symbolic link counts as what it points to: a link to /dev/null is a device),
    else None (what does not exist, or cannot be looked at, is left to the write to report)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else mode


def temporary_beside(path: str, what: str) -> tuple[str, int | None]:
    """A new empty file in path's directory (created exclusively, with the mode a new file gets) and
    the permission bits to give it: an existing regular file's, else None. what names the caller for
    the error (what writes there)."""
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
            raise type(e)(e.errno, f"cannot create a temporary file beside '{path}' ({e.strerror}): {what} writes "
                          "there and renames it over the target, so that an existing file is never "
                          "truncated", path) from None
    raise FileExistsError(f"cannot find a free temporary name beside '{path}'")


@contextlib.contextmanager
def replacing(path: str, fsync: bool, what: str):
    """Yields a temporary path beside path to write; renames it over path when the block ends
    normally (with path's permission bits, where path was a regular file), removes it when the block
    raises. fsync=True also makes the new directory entry durable (the block fsyncs the file)."""
    tmp, mode = temporary_beside(path, what)
    try:
        yield tmp
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


def write_in_place(path: str, mode: int, requests: list, fsync: bool, settings: dict) -> int:
    """Writes requests, (buffer, offset) pairs that tile the content from offset 0 in order, into
    path, an existing device or FIFO (special()'s mode), through the node itself; returns the bytes
    written. Where the node has positions (a block device, /dev/null) the requests run as one
    batch at their offsets; where it has none (a FIFO, a terminal) one after another, in order.
    fsync=True syncs a block device (a FIFO or a character device has nothing to sync)."""
    # Opened here first: a FIFO waits for its reader in os.open, which lets other threads run (the
    # reader among them), and accio's own open below then finds the reader there.
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        with accio.File(path, "w", **settings) as f:
            try:
                os.lseek(f.fileno(), 0, os.SEEK_CUR)
                positional = True
            except OSError:  # ESPIPE
                positional = False
            n = 0
            if positional:
                for fut in f.submit(requests, write=True):
                    n += fut.result()
            else:
                for buf, _ in requests:  # each one write(2) (or several in a row), as O_APPEND
                    n += f._f.append(buf)[1]
            if fsync and stat.S_ISBLK(mode):
                f.fsync()
    finally:
        os.close(fd)
    return n

