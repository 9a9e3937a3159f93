"""accio's one message channel in Python.

The engine issues each message once per cause and process (a fallback to a slower path, a resource
shortage, a setting it cannot honour) through the C API's log callback. In Python each becomes an
``accio.AccioWarning`` through :mod:`warnings` (filter it like any warning; ``ACCIO_QUIET=1``
silences it) and a record of the ``accio`` logger (which has a NullHandler, as libraries do: configure
logging to collect them). The record's ``accio_key`` names the cause, e.g. ``gds-register``.
Errors (level ERROR: the offload runtime's, key ``offload``, issued every time) are logger records
only: Python raises them where they occur (``accio.offload.OffloadError``).
"""
from __future__ import annotations

import os


class AccioWarning(UserWarning):
    """A message from accio's engine: it ran a slower path than asked, or could not use a resource."""


_logger = None


def _quiet() -> bool:
    """ACCIO_QUIET's rule, as src/base/quiet.h states it: anything but nothing, 0, false, off, no."""
    return os.environ.get("ACCIO_QUIET", "").lower() not in ("", "0", "false", "off", "no")


def _emit(level: int, key: str, message: str) -> None:
    """Called by the extension (GIL held) on the thread that issued the message."""
    global _logger
    import logging
    import warnings

    if _logger is None:
        _logger = logging.getLogger("accio")
        _logger.addHandler(logging.NullHandler())
    _logger.log(level, message, extra={"accio_key": key})
    if level <= logging.WARNING and not _quiet():  # errors (the offload runtime's) raise where they occur
        warnings.warn(message, AccioWarning, stacklevel=_callers_level())


def _callers_level() -> int:
    """The stacklevel, for warnings.warn in _emit, of the first frame outside the accio package: the
    line of the program that made the call (accio.open(...)), not accio's own wrapper."""
    import sys
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    try:
        level, frame = 2, sys._getframe(2)  # 2: _emit's caller
    except ValueError:  # none: an engine thread with no Python frames issued it
        return 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 2


def install(ext) -> None:
    """Routes the engine's messages here until the interpreter exits (then back to stderr)."""
    import atexit

    ext.set_log_sink(_emit)
    atexit.register(ext.set_log_sink, None)


def plain_stderr() -> None:
    """For the command line: print AccioWarnings as `accio: warning: ...` lines, as the C library does."""
    import sys
    import warnings

    previous = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, AccioWarning):
            print(f"accio: warning: {message}", file=file or sys.stderr)
        else:
            previous(message, category, filename, lineno, file, line)

    warnings.showwarning = show
