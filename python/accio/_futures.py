"""accio.Future: a concurrent.futures.Future for an engine request, awaitable from asyncio.

result(), exception() and done() ask the engine's future (accio._ext.Future) directly, in the
calling thread. The engine's future has no completion callback, so the futures that someone must be
told about (add_done_callback, which `await` uses, and concurrent.futures.wait()/as_completed(),
which install waiters) go to one watcher thread per process (not one per future): it blocks on the
oldest of them and, while that one runs, looks at the younger ones with a wait that doubles from
50 us to 1 ms, so that a request finishing out of order is seen within a millisecond. Futures that
are only waited on with result() never reach the watcher and cost no thread switches.
"""
from __future__ import annotations

import atexit
import concurrent.futures as _cf
import os
import threading
import time
from collections import deque

from ._errors import Error

_MIN_WAIT, _MAX_WAIT = 50e-6, 1e-3


class Future(_cf.Future):
    """One request in flight (File.read_into_async, write_from_async, submit): result() is the byte
    count, or raises the request's accio.Error. Works with concurrent.futures.wait/as_completed and
    `await` (asyncio.wrap_future; no thread per future). The engine cannot cancel a running request:
    cancel() returns False."""

    def __init__(self, native) -> None:
        super().__init__()
        self._native = native  # accio._ext.Future until settled (holds the buffer until then)
        self._lock = threading.Lock()  # one thread at a time asks the engine's future
        self._watched = False
        self._waiters = _Waiters(self)
        self.set_running_or_notify_cancel()

    def _watch(self) -> None:
        """Someone will be told when this future is done: the watcher settles it then."""
        if not self._watched and self._native is not None:
            self._watched = True
            _watcher.add(self)

    def add_done_callback(self, fn) -> None:
        self._watch()
        super().add_done_callback(fn)

    def _settle(self, timeout: float | None, wait_for_lock: bool = True) -> bool:
        """Waits up to timeout (None: forever) for the engine's result and records it; False when it
        is not in yet (or, with wait_for_lock False, when another thread is asking)."""
        if self._native is None:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._lock.acquire(wait_for_lock, -1 if timeout is None or not wait_for_lock else timeout):
            return self._native is None
        try:
            native = self._native
            if native is None:
                return True
            try:
                n, exc = native.result(None if deadline is None else max(0.0, deadline - time.monotonic())), None
            except Error as e:  # the request failed (ETIMEDOUT's accio.Error is a TimeoutError too)
                n, exc = None, e.with_traceback(None)  # a traceback here would keep this frame, native too
            except TimeoutError:  # still running
                return False
            except BaseException as e:
                n, exc = None, e.with_traceback(None)
            self._native = None
        finally:
            self._lock.release()
        if exc is None:
            self.set_result(n)
        else:
            self.set_exception(exc)
        return True

    def _wait(self, timeout: float | None) -> None:
        if not self._settle(timeout):
            raise _cf.TimeoutError(f"the request is still running after {timeout} s")

    def result(self, timeout: float | None = None) -> int:
        self._wait(timeout)
        return super().result(0)

    def exception(self, timeout: float | None = None):
        self._wait(timeout)
        return super().exception(0)

    def done(self) -> bool:
        if self._native is not None and self._lock.acquire(False):
            try:
                ready = self._native is not None and self._native.done()
            finally:
                self._lock.release()
            if ready:
                self._settle(None)
        return super().done()

    def __await__(self):
        import asyncio
        return asyncio.wrap_future(self).__await__()

    def __repr__(self) -> str:
        return "<accio.Future " + super().__repr__().split(" ", 1)[1]


class _Waiters(list):
    """Future._waiters: concurrent.futures.wait() and as_completed() put their waiters here (as they
    do on every Future), which hands the future to the watcher."""

    def __init__(self, fut: Future) -> None:
        super().__init__()
        self._fut = fut

    def append(self, waiter) -> None:
        super().append(waiter)
        self._fut._watch()


class _Watcher:
    """The thread that settles futures nobody waits on (see the module's doc)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._pending: deque[Future] = deque()
        self._thread: threading.Thread | None = None

    def add(self, fut: Future) -> None:
        with self._cv:
            self._pending.append(fut)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="accio-futures", daemon=True)
                self._thread.start()
            self._cv.notify()

    def _run(self) -> None:
        wait = _MIN_WAIT
        while True:
            with self._cv:
                while not self._pending:
                    self._cv.wait()
                oldest = self._pending[0]
            asked = oldest._lock.locked()  # a caller waits on it: the watcher does not block on it
            if oldest._settle(wait, wait_for_lock=False):
                with self._cv:  # drain() may have emptied the queue meanwhile
                    if self._pending and self._pending[0] is oldest:
                        self._pending.popleft()
                wait = _MIN_WAIT
                continue
            with self._cv:
                younger = list(self._pending)[1:]
            settled = [f for f in younger if f._native is None or f.done()]
            if settled:
                with self._cv:
                    gone = set(map(id, settled))
                    self._pending = deque(f for f in self._pending if id(f) not in gone)
                wait = _MIN_WAIT
            else:
                if asked:
                    time.sleep(wait)
                wait = min(wait * 2, _MAX_WAIT)

    def _after_fork(self) -> None:  # the thread did not come along; the requests belong to the parent
        self._cv = threading.Condition()
        self._pending = deque()
        self._thread = None

    def drain(self) -> None:
        """At exit: waits for the requests still in flight (closing their files would) and lets go of
        them, so that no engine future outlives the interpreter."""
        with self._cv:
            pending, self._pending = list(self._pending), deque()
        for f in pending:
            f._settle(None)


_watcher = _Watcher()
os.register_at_fork(after_in_child=_watcher._after_fork)
atexit.register(_watcher.drain)
