"""accio.Future: a concurrent.futures.Future for an engine request, awaitable from asyncio.

No thread polls: the engine tells it when its request completes (a completion callback, on the
engine worker that ran the request; accio._ext.Future). Until someone must be told, the worker does
not take the GIL: result(), exception() and done() wait for or look at the request themselves and
store its outcome. What concurrent.futures keeps for waiters and callbacks (a Condition and two
lists) is made on first use, by wait()/as_completed(), add_done_callback or `await`, and from then
on the worker settles the future at completion: it takes the GIL, sets the result or the exception,
wakes the waiters and runs the done-callbacks (on that worker, as ThreadPoolExecutor runs them on
its own: they must not wait for another accio request). At exit, the requests with waiters or
callbacks still in flight are waited for (accio._ext.futures_drain), so that no worker enters a
finalizing interpreter.
"""
from __future__ import annotations

import atexit
import concurrent.futures as _cf
import threading
from concurrent.futures._base import CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED, RUNNING

from . import _ext

_DONE = (CANCELLED, CANCELLED_AND_NOTIFIED, FINISHED)
# concurrent.futures.Future's attributes that only waiters and callbacks need: made by __getattr__.
_ON_FIRST_USE = {"_condition": threading.Condition, "_waiters": list, "_done_callbacks": list}


class Future(_cf.Future):
    """One request in flight (File.read_into_async, write_from_async, submit): result() is the byte
    count, or raises the request's accio.Error. Works with concurrent.futures.wait/as_completed and
    `await` (asyncio.wrap_future). The engine cannot cancel a running request: cancel() returns
    False and the request completes. Dropping a future whose request runs, with no done-callback,
    waits for the request (it writes into the buffer the future holds)."""

    # The state of a request in flight, until its outcome is stored in the instance.
    _state = RUNNING
    _result = None
    _exception = None

    def __init__(self, native) -> None:  # not concurrent.futures.Future's: see __getattr__
        self._native = native  # accio._ext.Future: holds the buffer until the request completes
        native.notify(self)

    def __getattr__(self, name: str):
        make = _ON_FIRST_USE.get(name)
        if make is None:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        self._native.observe()  # the worker settles self from now on (now, if it has completed)
        return self.__dict__.setdefault(name, make())  # atomic: two threads get the same one

    def _wait(self, timeout: float | None) -> None:
        if self._state != FINISHED and not self._native.wait(timeout):
            raise _cf.TimeoutError(f"the request is still running after {timeout} s")

    def result(self, timeout: float | None = None) -> int:
        self._wait(timeout)
        if self._exception is None:
            return self._result
        try:
            raise self._exception
        finally:
            self = None  # as concurrent.futures does: no cycle through the traceback's frame

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self._wait(timeout)
        return self._exception

    def done(self) -> bool:
        return self._state in _DONE or self._native.poll()

    def _settle(self, outcome, ok: bool) -> None:
        """accio._ext settles an observed future here, once: the worker's callback and a thread in
        result() may both get here."""
        try:
            if ok:
                self.set_result(outcome)
            else:
                self.set_exception(outcome)
        except _cf.InvalidStateError:  # the other one settled it first
            pass

    def __await__(self):
        import asyncio
        return asyncio.wrap_future(self).__await__()

    def __repr__(self) -> str:
        return "<accio.Future " + super().__repr__().split(" ", 1)[1]


atexit.register(_ext.futures_drain)
