"""accio.defaults: process-wide settings that code sets (as kvikio.defaults.set), also for a block.

Where a File's settings come from, each overriding the one before:
  1. the table's defaults (the C++ settings table: `accio info`, docs/api.md),
  2. the ACCIO_<NAME> environment variables, read when each file is opened (as the C API's
     accio_settings_new() does),
  3. accio.defaults: what this process's Python code set,
  4. the keywords of accio.open()/read()/write() (mechanism="staged", threads=8).

    accio.defaults.set(threads=8)            # from now on, in every thread
    with accio.defaults.set(mechanism="parallel", task_size="4M"):
        accio.read("x.bin")                   # parallel here; the previous defaults come back after

Values are checked by the engine when set (a bad one raises ValueError and changes nothing). The
defaults are one table for the process, not per thread: set() replaces it whole under a lock, and
each open() reads one consistent table, so a file never sees half of a set() call. A `with` block
puts back, on exit, the values its names had on entry, so blocks nest; blocks that overlap in time in
different threads undo one another's changes in the order they exit (as kvikio's do): set once at
start-up for threaded code, or pass the settings to open() in each thread. The defaults belong to
the Python package: code calling the C or C++ API in the same process, and `accio run` (which
configures with ACCIO_* variables), do not see them.
"""
from __future__ import annotations

import _thread
TYPE_CHECKING = False  # typing costs start-up time (see __init__)
if TYPE_CHECKING:
    from typing import Any

from . import _ext

_lock = _thread.allocate_lock()  # _thread: threading costs start-up time
_table: dict[str, str] = {}  # replaced, never mutated: readers take it without the lock


_bools_taken: set[tuple[str, str]] = set()  # (name, "on"/"off") the engine accepted: checked once


def _text(name: str, value: Any) -> str:
    """A setting value as the engine parses it: True/False as on/off, the rest as str(). A bool given
    to a setting that takes no on/off is refused naming what the caller wrote (`threads=True`), not
    the 'on' the engine would have been given."""
    if not isinstance(value, bool):
        return str(value)
    text = "on" if value else "off"
    if (name, text) not in _bools_taken:
        try:
            _ext.settings([(name, text)])
        except OSError as e:
            error = type(e)(e.errno, str(e).replace(f"{name}={text!r}", f"{name}={value!r}"), *e.args[2:])
            error.__dict__.update(e.__dict__)  # accio.Error's operation and offset
            raise error from None
        _bools_taken.add((name, text))
    return text


def current() -> dict[str, str]:
    """What code set (names to text), without the environment and the table: a copy (the table is
    replaced, never changed, and readers take it without the lock; set() changes it)."""
    return dict(_table)


def _resolve(overrides: dict[str, Any]) -> list[tuple[str, str]]:
    """The defaults, then overrides (None values skipped), as the (name, value) pairs the engine takes."""
    merged = dict(_table)
    merged.update((k, _text(k, v)) for k, v in overrides.items() if v is not None)
    return list(merged.items())


def _check(values: dict[str, str]) -> None:
    try:
        _ext.settings(list(values.items()))
    except OSError as e:  # accio.Error(EINVAL): an unknown name or a bad value (an unknown mechanism too)
        raise ValueError(str(e)) from None


class _Restore:
    """What set() returns: nothing to do when ignored; as a context manager, puts the names' previous
    values back on exit."""

    def __init__(self, previous: dict[str, str | None]) -> None:
        self._previous = previous

    def __enter__(self) -> "_Restore":
        return self

    def __exit__(self, *exc) -> None:
        global _table
        with _lock:
            table = dict(_table)
            for k, v in self._previous.items():
                if v is None:
                    table.pop(k, None)
                else:
                    table[k] = v
            _table = table


def set(values: dict[str, Any] | None = None, /, **settings: Any) -> _Restore:
    """Sets process-wide defaults by name (threads=8, mechanism="parallel", or a dict). A value None
    removes the name's default (back to the environment and the table). Returns a context manager
    that restores the previous values: `with accio.defaults.set(threads=8): ...`."""
    global _table
    given = {**(values or {}), **settings}
    with _lock:
        table = dict(_table)
        previous = {k: table.get(k) for k in given}
        for k, v in given.items():
            if v is None:
                table.pop(k, None)
                continue
            try:
                table[k] = _text(k, v)
            except OSError as e:  # a bool where no on/off is taken: as _check reports a bad value
                raise ValueError(str(e)) from None
        _check(table)
        _table = table
    return _Restore(previous)


def get(name: str) -> str:
    """The value a file opened now gets for name (table, environment, then these defaults)."""
    for n, _env, _doc, value in _ext.settings(list(_table.items())):
        if n == name:
            return value
    raise KeyError(f"no setting named {name!r}: accio.settings() lists them")


def reset() -> None:
    """Forgets every default code set (back to the environment and the table)."""
    global _table
    with _lock:
        _table = {}
