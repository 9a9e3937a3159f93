"""Exit statuses and error lines shared by every `accio` sub-command (docs/api.md, "Exit status").

    2    called wrongly: a bad option or value, options that do not go together (argparse's own
         errors are 2 as well); the line is `accio CMD: one sentence` on stderr
    1    ran and failed: a path that does not exist or cannot be used, an I/O error, a failed run
    141  stdout's reader went away (`| head`): no message, as coreutils (128 + SIGPIPE)
    accio run returns the program's own status, 126 when it cannot be run, 127 when it is not
    found and 125 for accio's own errors, usage errors included (as `env` and `nohup` do).

A sub-command raises UsageError for a usage mistake; the CLI's guard prints it and exits 2 (125
under `accio run`). Output options that take a FILE take '-' for stdout (output_file), never a
file named '-'.
"""
from __future__ import annotations

import os
import sys

USAGE = 2
FAILURE = 1
# The reader of stdout went away (`accio tune DIR --show | head -5`): quiet, with the status of a
# coreutils writer killed by SIGPIPE (128 + 13), as a shell reports `seq 1000000 | head -1`'s.
READER_GONE = 141
# accio run, as env(1): the program's own status, or _ext.RUN_OWN_ERROR (125), RUN_CANNOT_EXECUTE
# (126), RUN_NOT_FOUND (127): defined once, with the native launcher (src/preload/run_cli.h).


class UsageError(Exception):
    """The command was called wrongly, or asked for what this machine lacks (a package, a tool, a GPU),
    found before anything runs; str() is one sentence without the `accio CMD:` prefix."""


def describe(e: BaseException) -> str:
    """An error as one sentence that names the path and errno (an accio.Error already does)."""
    from ._errors import Error
    if isinstance(e, OSError) and not isinstance(e, Error) and e.errno and e.strerror:
        where = f"{e.filename}: " if e.filename else ""
        return f"{where}{e.strerror[:1].lower() + e.strerror[1:]} (errno {e.errno})"
    return str(e)


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe or socket whose reader has gone (poll says POLLERR/POLLHUP), so that
    a BrokenPipeError from elsewhere (a child's pipe, a socket) stays an error."""
    import select
    try:
        p = select.poll()
        p.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _fd, ev in p.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def reader_gone() -> int:
    """After a BrokenPipeError on stdout: /dev/null over stdout (so that the interpreter's last flush
    does not complain), and the quiet exit status, READER_GONE (Python's recommended pattern)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return READER_GONE


def report(command: str, message: str) -> None:
    print(f"accio {command}: {message}" if command else f"accio: {message}", file=sys.stderr)


def stdout_outputs(**options: str | None) -> str | None:
    """Of output options given as {option name: FILE}, the one that is '-' (stdout), if any;
    UsageError when several are: stdout holds one of them."""
    dash = [name for name, value in options.items() if value == "-"]
    if len(dash) > 1:
        raise UsageError(f"{' and '.join(dash)} both ask for stdout ('-'); give one of them a file name")
    return dash[0] if dash else None


def check_creatable(option: str, path: str, *, directory: bool = False) -> None:
    """Refuses, before any work is done, a FILE (or with directory, a DIR) that could not be made at
    the end with the folders above it: a directory where a file is wanted (or a file where a
    directory is), or a path whose nearest existing folder takes no new file (tried by making and
    removing one there: permissions alone do not tell for root)."""
    import tempfile
    if os.path.exists(path) and os.path.isdir(path) != directory:
        raise (NotADirectoryError(20, "Not a directory", f"{option} {path}") if directory else
               IsADirectoryError(21, "Is a directory", f"{option} {path}"))
    parent = os.path.abspath(path) if directory and os.path.isdir(path) else os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise NotADirectoryError(20, "Not a directory", f"{option} {path}: {parent}")
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=".accio-check.")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise type(e)(e.errno, e.strerror, f"{option} {path}: cannot write in {parent}") from None


def file_identity(path: str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of what path names (links and other spellings of it agree), None when it
    cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def distinct_files(**paths: str | None) -> None:
    """UsageError when two of the files named as {option: FILE} are one file (outputs, and the
    inputs they would overwrite): `bench report r.json -o r.json` replaced the run's only copy with
    HTML, `--json X --csv X` kept only the CSV. '-' and None are not files."""
    seen: dict = {}
    for option, path in paths.items():
        if path is None or path == "-":
            continue
        key = file_identity(path) or os.path.realpath(path)  # one not made yet: by its name
        if key in seen:
            raise UsageError(f"{seen[key]} and {option} name the same file ({path}): give each its own file")
        seen[key] = option


class output_file:  # noqa: N801 (used as a function: `with output_file(path) as f`)
    """open(path, 'w'), where '-' is stdout (flushed, not closed). A class rather than
    contextlib.contextmanager: `accio run` imports this module and pays for every import per launch."""

    def __init__(self, path: str, newline: str | None = None):
        self.path, self.newline, self.f = path, newline, None

    def __enter__(self):
        self.f = sys.stdout if self.path == "-" else open(self.path, "w", newline=self.newline)
        return self.f

    def __exit__(self, *exc) -> None:
        if self.f is sys.stdout:
            sys.stdout.flush()
        else:
            self.f.close()


def write_json(path: str, doc: dict, allow_nan: bool = True) -> None:
    """A command's JSON result to FILE ('-': stdout), indented, with a final newline."""
    import json
    with output_file(path) as f:
        json.dump(doc, f, indent=1, allow_nan=allow_nan)
        f.write("\n")


def check_output_path(option: str, path: str | None) -> None:
    """Refuses, before any work is done, an output FILE that cannot be written: a directory, or a
    file in a directory that does not exist or takes no new file (exit 1: the file system said no).
    Tried by making and removing a file there, as check_creatable does: permissions alone do not
    tell for root (`--json /proc/x.json` passed os.access and failed after the whole run)."""
    if path is None or path == "-":
        return
    if os.path.isdir(path):
        raise IsADirectoryError(21, "Is a directory", f"{option} {path}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise FileNotFoundError(2, "No such file or directory", f"{option} {path}: {parent}")
    import stat
    try:
        st = os.stat(path)
    except FileNotFoundError:
        check_creatable(option, path)  # made at the end: a file must be creatable in parent
        return
    if stat.S_ISREG(st.st_mode):  # rewritten at the end, in place: it must open for writing (not truncated here)
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC))
        except OSError as e:
            raise type(e)(e.errno, e.strerror, f"{option} {path}") from None
