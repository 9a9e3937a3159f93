"""The Python API's KvikIO-parity parts (issue 21): accio.defaults, File.closed/fileno and 'b' modes,
accio.Future as a concurrent.futures.Future and an awaitable, accio.pinned_empty."""
from __future__ import annotations

import asyncio
import concurrent.futures as cf
import errno
import os
import subprocess
import sys
import threading
import textwrap

import numpy as np
import pytest

import accio


@pytest.fixture
def data(tmp_path):
    p = tmp_path / "data.bin"
    content = os.urandom((4 << 20) + 123)
    p.write_bytes(content)
    return p, content


@pytest.fixture(autouse=True)
def clean_defaults():
    accio.defaults.reset()
    yield
    accio.defaults.reset()


# ---- defaults ----

def test_defaults_apply_to_files_opened_after_and_keywords_still_win(data):
    p, _ = data
    accio.defaults.set(threads=3, mechanism="parallel")
    with accio.open(p) as f:
        assert (f.setting("threads"), f.setting("mechanism")) == ("3", "parallel")
    with accio.open(p, threads=5) as f:
        assert f.setting("threads") == "5"
    with accio.RawFile(p) as r:  # every way to open a file reads them
        assert r._f.setting("threads") == "3"
    assert accio.settings()["threads"] == "3" and accio.defaults.get("threads") == "3"
    assert accio.defaults.current() == {"threads": "3", "mechanism": "parallel"}


def test_defaults_as_a_with_block_restore_what_each_name_had_and_nest():
    before = accio.settings()["threads"]
    accio.defaults.set(task_size="1M")
    with accio.defaults.set(threads=2, task_size="2M"):
        assert accio.settings()["threads"] == "2"
        with accio.defaults.set({"threads": 4}, direct_io_threshold=None):
            assert accio.settings()["threads"] == "4"
        assert accio.settings()["threads"] == "2" and accio.settings()["task_size"] == str(2 << 20)
    assert accio.settings()["threads"] == before
    assert accio.defaults.current() == {"task_size": "1M"}  # set before the block: kept


def test_defaults_come_after_the_environment(monkeypatch):
    monkeypatch.setenv("ACCIO_THREADS", "6")
    assert accio.settings()["threads"] == "6"
    with accio.defaults.set(threads=7):
        assert accio.settings()["threads"] == "7"
    assert accio.settings()["threads"] == "6"
    with accio.defaults.set(threads=None):  # None: no default of its own, so the environment's
        assert accio.settings()["threads"] == "6"


@pytest.mark.parametrize("kw,match", [({"threads": "lots"}, "threads='lots' is not valid"),
                                      ({"nonsense": 1}, "unknown setting 'nonsense'"),
                                      ({"mechanism": "teleport"}, "teleport")])
def test_a_bad_default_raises_valueerror_and_changes_nothing(kw, match):
    accio.defaults.set(threads=3)
    with pytest.raises(ValueError, match=match):
        accio.defaults.set(task_size="2M", **kw)
    assert accio.defaults.current() == {"threads": "3"}
    with pytest.raises(KeyError, match="nonsense"):
        accio.defaults.get("nonsense")


def test_defaults_are_one_consistent_table_across_threads(data):
    """Writers flip two settings together; every file opened meanwhile sees a pair from one set()."""
    p, _ = data
    stop, seen = threading.Event(), []

    def flip():
        i = 0
        while not stop.is_set():
            accio.defaults.set(threads=2 + i % 2, task_size=f"{1 + i % 2}M")
            i += 1

    writers = [threading.Thread(target=flip) for _ in range(2)]
    for w in writers:
        w.start()
    try:
        for _ in range(200):
            with accio.open(p) as f:
                seen.append((f.setting("threads"), f.setting("task_size")))
    finally:
        stop.set()
        for w in writers:
            w.join()
    assert set(seen) <= {("2", str(1 << 20)), ("3", str(2 << 20))}


# ---- File: modes, closed, fileno ----

@pytest.mark.parametrize("mode,readable,writable", [("rb", True, False), ("r+b", True, True), ("rb+", True, True),
                                                    ("wb", False, True), ("ab", False, True), ("w+b", True, True)])
def test_binary_modes_open_as_their_plain_letters(data, mode, readable, writable):
    p, content = data
    with accio.open(p, mode) as f:
        buf = bytearray(10)
        if readable:
            assert f.read_into(buf, 0) == (10 if mode in ("rb", "r+b", "rb+") else 0)
        else:
            with pytest.raises(accio.Error, match="not opened for reading"):
                f.read_into(buf, 0)
        if writable:
            f.write_from(b"abc", 0) if not mode.startswith("a") else f.append(b"abc")
        else:
            with pytest.raises(accio.Error, match="not opened for writing"):
                f.write_from(b"abc", 0)


def test_closed_and_fileno(data):
    p, content = data
    f = accio.open(p, "rb")
    assert not f.closed
    fd = f.fileno()
    assert os.fstat(fd).st_size == len(content) and os.pread(fd, 5, 0) == content[:5]
    f.close()
    assert f.closed
    f.close()  # again: nothing
    with pytest.raises(ValueError, match="closed"):
        f.fileno()
    with pytest.raises(accio.Error, match="closed"):
        f.read_into(bytearray(1), 0)
    with accio.open(p) as g:
        pass
    assert g.closed
    with pytest.raises(accio.Error, match="invalid mode 'rt'"):
        accio.open(p, "rt")


# ---- futures ----

def test_futures_are_concurrent_futures_for_wait_and_as_completed(data):
    p, content = data
    n = 16
    size = len(content) // n
    with accio.open(p, mechanism="parallel", threads=4) as f:
        bufs = [bytearray(size) for _ in range(n)]
        futs = f.submit([(bufs[i], i * size) for i in range(n)])
        assert all(isinstance(x, cf.Future) and isinstance(x, accio.Future) for x in futs)
        done, not_done = cf.wait(futs, timeout=60)
        assert len(done) == n and not not_done
        assert sorted(x.result() for x in cf.as_completed(futs, timeout=60)) == [size] * n
    assert b"".join(bufs) == content[: n * size]
    assert not futs[0].cancel() and not futs[0].cancelled()


def test_done_callbacks_fire_without_anyone_waiting(data):
    p, content = data
    got, fired = [], threading.Event()
    with accio.open(p) as f:
        buf = bytearray(len(content))
        fut = f.read_into_async(buf, 0)
        fut.add_done_callback(lambda x: (got.append(x.result()), fired.set()))
        assert fired.wait(60), "the watcher never settled the future"
    assert got == [len(content)] and bytes(buf) == content


def test_futures_are_awaitable_from_asyncio(data):
    p, content = data

    async def main():
        with accio.open(p) as f:
            bufs = [bytearray(1 << 20) for _ in range(4)]
            counts = await asyncio.gather(*(f.read_into_async(b, i << 20) for i, b in enumerate(bufs)))
            return counts, b"".join(bufs)

    counts, got = asyncio.run(main())
    assert counts == [1 << 20] * 4 and got == content[: 4 << 20]
    assert threading.active_count() < 10  # one watcher thread, not a thread per future


def test_a_failed_request_is_the_futures_exception(tmp_path):
    """pread on a FIFO fails in the engine's worker (ESPIPE): the future holds that accio.Error."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with accio.open(fifo, "r+", mechanism="posix") as f:  # O_RDWR: opening a FIFO does not block
        fut = f.read_into_async(bytearray(4), 0)
        assert isinstance(fut.exception(timeout=60), accio.Error) and fut.exception().errno == errno.ESPIPE
        with pytest.raises(accio.Error, match="pread .* at offset 0"):
            fut.result()
        (failed,) = cf.wait([f.read_into_async(bytearray(4), 0)], timeout=60).done
        with pytest.raises(accio.Error):
            failed.result()

        async def main():
            return await f.read_into_async(bytearray(4), 0)

        with pytest.raises(accio.Error):
            asyncio.run(main())


class Native:
    """Stands in for an engine future (accio._ext.Future: result(timeout), done()) that finishes when
    the test says, so that timing cannot decide what the tests see."""

    def __init__(self, value=0):
        self.value, self.exc, self.ev = value, None, threading.Event()

    def finish(self, exc=None):
        self.exc = exc
        self.ev.set()

    def result(self, timeout):
        if not self.ev.wait(timeout):
            raise TimeoutError("request still running")
        if self.exc:
            raise self.exc
        return self.value

    def done(self):
        return self.ev.is_set()


def test_result_with_a_timeout_raises_concurrent_futures_timeouterror():
    n = Native(42)
    fut = accio.Future(n)
    with pytest.raises(cf.TimeoutError):
        fut.result(timeout=0.05)
    with pytest.raises(cf.TimeoutError):
        fut.exception(timeout=0)
    assert not fut.done() and fut.running()
    n.finish()
    assert fut.result(timeout=60) == 42 and fut.done() and fut.exception() is None


def test_a_request_finishing_out_of_order_is_seen_while_an_older_one_runs():
    old, young = Native(1), Native(2)
    futs = [accio.Future(old), accio.Future(young)]
    young.finish()
    done, pending = cf.wait(futs, timeout=30, return_when=cf.FIRST_COMPLETED)
    assert done == {futs[1]} and pending == {futs[0]}
    old.finish()
    assert [f.result() for f in cf.as_completed(futs, timeout=30)] in ([1, 2], [2, 1])


def test_an_errno_timeout_from_the_engine_is_the_requests_error_not_a_wait_timeout():
    n = Native()
    fut = accio.Future(n)
    err = accio._errors.from_native(errno.ETIMEDOUT, "pread", "/x", 0, "pread '/x' at offset 0: timed out (errno 110)")
    assert isinstance(err, TimeoutError)
    n.finish(err)
    assert fut.exception(timeout=30) is err


def test_many_threads_waiting_on_one_future_all_get_its_result():
    n = Native(7)
    fut = accio.Future(n)
    with cf.ThreadPoolExecutor(8) as pool:
        waits = [pool.submit(fut.result, 30) for _ in range(16)] + [pool.submit(fut.done) for _ in range(16)]
        n.finish()
        assert [w.result() for w in waits[:16]] == [7] * 16


def test_a_future_works_after_fork(data):
    """The watcher thread does not survive fork; the child gets its own when it submits."""
    p, content = data
    code = textwrap.dedent(f"""
        import os, accio, concurrent.futures as cf
        with accio.open({str(p)!r}) as f:
            f.read_into_async(bytearray(10), 0).result()
            pid = os.fork()
            if pid == 0:
                fut = f.read_into_async(bytearray(10), 0)
                done, _ = cf.wait([fut], timeout=60)
                os._exit(0 if done and fut.result() == 10 else 1)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, status
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, ACCIO_QUIET="1"))
    assert r.returncode == 0, r.stderr


# ---- pinned memory ----

def test_pinned_empty_is_zeroed_writable_host_memory_that_says_how_it_is_pinned(data):
    p, content = data
    b = accio.pinned_empty(len(content))
    assert isinstance(b, accio.PinnedBuffer) and len(b) == b.nbytes == len(content)
    assert b.pinned in ("cuda", "mlock", "pageable") and f"pinned={b.pinned}" in repr(b)
    assert b.address % 4096 == 0
    view = np.frombuffer(b, np.uint8)
    assert not view.any()
    with accio.open(p) as f:
        assert f.read_into(b, 0) == len(content)
    assert view.tobytes() == content
    del b  # the array keeps the memory
    assert view.tobytes() == content
    assert accio._ext.mem_kind(view)[0] in ("host", "pinned")


def test_pinned_empty_refuses_what_it_cannot_give():
    with pytest.raises(accio.Error, match="size is 0"):
        accio.pinned_empty(0)
    with pytest.raises((accio.Error, OverflowError, TypeError)):
        accio.pinned_empty(-1)
    with pytest.raises(MemoryError if False else accio.Error):
        accio.pinned_empty(1 << 60)  # more than any machine maps: ENOMEM, nothing leaked


def test_only_futures_someone_is_told_about_go_to_the_watcher(data):
    """result() alone asks the engine in the calling thread; wait/as_completed and callbacks hand
    the future to the watcher (which is what settles them for the waiter)."""
    from accio import _futures
    p, _ = data
    with accio.open(p) as f:
        plain = f.read_into_async(bytearray(4096), 0)
        assert plain.result(timeout=60) == 4096 and not plain._watched
        waited = f.read_into_async(bytearray(4096), 0)
        cf.wait([waited], timeout=60)
        assert waited._watched and waited.result() == 4096
        called = f.read_into_async(bytearray(4096), 0)
        called.add_done_callback(lambda _: None)
        assert called._watched
    assert plain not in _futures._watcher._pending
