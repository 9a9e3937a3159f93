"""accio.Future (issue 21): a concurrent.futures.Future that the engine settles when its request
completes (the engine's completion callback, on the worker that ran the request: no thread polls),
awaitable from asyncio, with concurrent.futures' semantics for wait/as_completed, callbacks,
cancellation and exceptions, and nothing harmful at interpreter exit with requests in flight."""
from __future__ import annotations

import asyncio
import concurrent.futures as cf
import errno
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import numpy as np
import pytest

import accio
from accio._system import drop_pages


@pytest.fixture
def big(tmp_path):
    """A file whose whole read takes milliseconds: long enough to still be in flight a moment later."""
    p = tmp_path / "big.bin"
    content = os.urandom(32 << 20)
    p.write_bytes(content)
    return p, content


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
        assert fired.wait(60), "the engine never settled the future"
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
    """Stands in for an engine future (accio._ext.Future) that completes when the test says, so that
    timing cannot decide what the tests see: finish() settles the accio.Future as the engine's
    callback does an observed one (_settle), wait() and poll() as _ext's do."""

    def __init__(self, value=0):
        self.value, self.owner, self.ev = value, None, threading.Event()

    def notify(self, owner):
        self.owner = owner

    def observe(self):
        pass

    def finish(self, exc=None):
        self.owner._settle(self.value if exc is None else exc, exc is None)
        self.ev.set()

    def wait(self, timeout):
        return self.ev.wait(timeout)

    def poll(self):
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


def test_a_future_works_after_fork(big):
    """A forked child settles its own requests. The parent's requests in flight at the fork run in the
    parent only: in the child their futures fail with ECANCELED instead of waiting for ever, also
    when waited on with no timeout (concurrent.futures.wait, await), and the child closes the file
    and exits normally (it used to hang in both); in the parent they complete."""
    p, content = big
    code = textwrap.dedent(f"""
        import asyncio, errno, os, signal, sys, accio, concurrent.futures as cf
        with accio.open({str(p)!r}) as f:
            f.read_into_async(bytearray(10), 0).result()
            bufs = [bytearray({len(content)}) for _ in range(12)]  # made first: the reads queue up
            held = [f.read_into_async(b, 0) for b in bufs]
            held[0].add_done_callback(lambda x: None)
            pid = os.fork()
            if pid == 0:
                signal.alarm(60)  # a hang ends the child instead of leaving it behind
                fut = f.read_into_async(bytearray(10), 0)
                done, _ = cf.wait([fut], timeout=60)
                ok = done and fut.result() == 10
                # The last ones are still in flight at the fork, unless the parent was quick (below).
                cf.wait([held[-1]])  # no timeout: must not wait for the parent's request
                async def main():
                    return await asyncio.wait_for(held[-2], None)
                try:
                    asyncio.run(main())
                except accio.Error:
                    pass
                if held[-1].exception() is None or held[-2].exception() is None:
                    os._exit(3)  # completed in the parent before the fork: nothing was tested
                errs = [x.exception() for x in held if x.exception()]
                ok = ok and all(isinstance(e, accio.Error) and e.errno == errno.ECANCELED for e in errs)
                held[-1].add_done_callback(lambda x: None)  # a settled one calls back at once
                sys.exit(0 if ok else 1)  # closes f (the with block) and exits normally
            _, status = os.waitpid(pid, 0)
            assert [x.result(timeout=60) for x in held] == [{len(content)}] * 12
            sys.exit(os.waitstatus_to_exitcode(status))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, ACCIO_QUIET="1"))
    if r.returncode == 3:
        pytest.skip("the last requests had completed in the parent at the fork")
    assert r.returncode == 0, r.stderr


def test_the_engine_worker_settles_it_and_no_thread_polls(big):
    """A done-callback added while the request runs is called on the engine worker that completed
    it (a thread Python did not start), and accio starts no thread of its own."""
    p, content = big
    before = {t.name for t in threading.enumerate()}
    seen = []
    with accio.open(p, mechanism="posix") as f:
        # a request that completed before add_done_callback calls back at once: try again (a loaded
        # machine can pre-empt this thread for the whole read; the pages are dropped where the
        # file system allows, so the read waits for the disk)
        for _ in range(50):
            buf = bytearray(len(content))
            drop_pages(str(p))
            fut = f.read_into_async(buf, 0)
            fired = threading.Event()
            fut.add_done_callback(lambda x: (seen.append((threading.get_ident(), x.result())), fired.set()))
            assert fired.wait(60)
            if seen[-1][0] != threading.get_ident():
                break
    assert seen[-1] == (seen[-1][0], len(content)) and bytes(buf) == content
    assert seen[-1][0] != threading.get_ident(), "every request completed before its callback was added"
    assert not any("accio" in t.name for t in threading.enumerate() if t.name not in before)


def test_a_future_nobody_waited_on_is_settled_without_a_lock(data):
    """Until someone waits or adds a callback, no Condition exists: the engine stores the result as
    is, done() and result() read it. A waiter that came first is woken through the Condition."""
    p, content = data
    with accio.open(p) as f:
        plain = f.read_into_async(bytearray(4096), 0)
        deadline = time.monotonic() + 60
        while not plain.done():
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert "_condition" not in plain.__dict__ and plain.result() == 4096 and plain.exception() is None
        waited = f.read_into_async(bytearray(len(content)), 0)
        assert cf.wait([waited], timeout=60).done == {waited} and waited.result() == len(content)
        assert "_condition" in waited.__dict__


def test_asyncio_gather_of_many_reads_wakes_the_loop(data):
    """Hundreds of reads awaited at once, on two mechanisms: every count and byte right. The loop has
    nothing else to wake it (no timer before 60 s, no polling thread): completions must."""
    p, content = data

    async def main(mech):
        with accio.open(p, mechanism=mech) as f:
            small = [bytearray(4096) for _ in range(300)]
            large = [bytearray(256 << 10) for _ in range(16)]
            reads = [f.read_into_async(b, i * 4096) for i, b in enumerate(small)]
            reads += [f.read_into_async(b, i << 18) for i, b in enumerate(large)]
            t = time.monotonic()
            counts = await asyncio.wait_for(asyncio.gather(*reads), 60)
            return counts, small, large, time.monotonic() - t

    for mech in ("posix", "parallel"):
        counts, small, large, took = asyncio.run(main(mech))
        assert counts == [4096] * 300 + [256 << 10] * 16, mech
        assert all(bytes(b) == content[i * 4096:(i + 1) * 4096] for i, b in enumerate(small)), mech
        assert b"".join(large) == content[: 16 << 18], mech
        assert took < 60, mech


def test_cancel_refuses_a_running_request_which_completes(big):
    """The engine cannot cancel a request: cancel() is False while it runs and after, the request
    completes and its data arrives. Cancelling an asyncio task that awaits it cancels the task only."""
    p, content = big
    with accio.open(p) as f:
        buf = bytearray(len(content))
        fut = f.read_into_async(buf, 0)
        assert not fut.cancel() and not fut.cancelled()
        assert fut.result(timeout=60) == len(content) and bytes(buf) == content
        assert not fut.cancel() and not fut.cancelled() and fut.done()

        async def main():
            fut = f.read_into_async(buf2, 0)
            task = asyncio.ensure_future(asyncio.wrap_future(fut))
            # Cancelled before the loop runs again: the request's completion reaches the asyncio
            # side only through the loop, so the task cannot be done yet however fast the read is
            # (yielding first let a hot read finish and the cancel come too late).
            assert task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return fut

        buf2 = bytearray(len(content))
        fut = asyncio.run(main())
        assert fut.result(timeout=60) == len(content) and not fut.cancelled() and bytes(buf2) == content


def test_errors_arrive_as_accio_errors_of_the_right_type(tmp_path, data):
    """An error in the worker is the future's exception (accio.Error, an OSError with errno), for
    result(), exception(), wait() and await alike; a request on a closed handle or of the wrong
    direction is refused at once with EBADF, and closing waits for the requests in flight."""
    p, content = data
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with accio.open(fifo, "r+", mechanism="posix") as f:  # pread on a FIFO fails in the worker: ESPIPE
        futs = [f.read_into_async(bytearray(4), 0) for _ in range(20)]
        for fut in cf.as_completed(futs, timeout=60):
            e = fut.exception()
            assert isinstance(e, accio.Error) and isinstance(e, OSError) and e.errno == errno.ESPIPE
            assert e.operation == "pread" and e.filename == str(fifo) and e.offset == 0
    f = accio.open(p)
    bufs = [bytearray(1 << 20) for _ in range(4)]
    inflight = [f.read_into_async(b, i << 20) for i, b in enumerate(bufs)]
    f.close()  # waits for them: they succeed
    assert [x.result(timeout=60) for x in inflight] == [1 << 20] * 4 and b"".join(bufs) == content[: 4 << 20]
    with pytest.raises(accio.Error, match="closed") as e:
        f.read_into_async(bytearray(4), 0)
    assert e.value.errno == errno.EBADF
    with accio.open(p) as r, pytest.raises(accio.Error) as e:
        r.write_from_async(b"x", 0)
    assert e.value.errno == errno.EBADF


def test_a_done_callback_that_raises_does_not_stop_the_others(data):
    p, _ = data
    got, fired = [], threading.Event()

    def bad(_):
        raise RuntimeError("callback failed")

    with accio.open(p) as f:
        fut = f.read_into_async(bytearray(4096), 0)
        fut.add_done_callback(bad)
        fut.add_done_callback(lambda x: (got.append(x.result()), fired.set()))
        assert fired.wait(60) and got == [4096] and fut.result() == 4096


def test_many_threads_waiting_on_one_request(big):
    p, content = big
    with accio.open(p) as f:
        fut = f.read_into_async(bytearray(len(content)), 0)
        with cf.ThreadPoolExecutor(8) as pool:
            waits = [pool.submit(fut.result, 60) for _ in range(16)]
            assert [w.result() for w in waits] == [len(content)] * 16


def test_a_settled_future_lets_go_of_its_buffer(data):
    """Nothing keeps a completed request's buffer or future alive: not the engine's callback, not a
    reference cycle through the native future."""
    p, _ = data
    with accio.open(p) as f:
        arr = np.empty(1 << 20, np.uint8)
        buf_gone, fut = weakref.ref(arr), f.read_into_async(arr, 0)
        fut_gone = weakref.ref(fut)
        assert fut.result(timeout=60) == 1 << 20
        del arr, fut
        deadline = time.monotonic() + 30  # the callback drops its reference just after settling
        while (buf_gone() is not None or fut_gone() is not None) and time.monotonic() < deadline:
            gc.collect()
            time.sleep(0.01)
        assert buf_gone() is None and fut_gone() is None
        dropped = weakref.ref(arr := np.empty(4096, np.uint8))
        f.read_into_async(arr, 0)  # nobody holds the future: it completes all the same
        del arr
        deadline = time.monotonic() + 30
        while dropped() is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert dropped() is None


def test_exit_with_requests_in_flight_is_clean(big):
    """A script that ends with requests in flight (held, dropped, with callbacks) exits 0 with
    nothing on stderr, and every callback has run before the interpreter goes: at exit accio waits
    for its requests. A handler registered before accio's (so run after it) counts them, and how many
    completed after the script's last line (in flight at exit: at least once in a few runs)."""
    p, content = big
    code = textwrap.dedent(f"""
        import atexit, sys, accio
        done, ended = [], False
        atexit.register(lambda: print(len(done), sum(late for late, _ in done), set(n for _, n in done)))
        f = accio.open({str(p)!r})
        for i in range(8):
            f.read_into_async(bytearray(1 << 20), i << 20)  # dropped at once
        buf = bytearray(8 << 20)  # 64 reads into one buffer: half a GiB to copy, far longer than the rest
        held = f.submit([(buf, (i % 4) << 23) for i in range(64)])
        for x in held:
            x.add_done_callback(lambda x: done.append((ended, x.result())))
        ended = True
    """)
    lates = []
    for _ in range(4):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, ACCIO_QUIET="1"))
        assert r.returncode == 0 and r.stderr == "", r.stderr
        count, late, sizes = r.stdout.split(" ", 2)
        assert int(count) == 64 and sizes.strip() == str({8 << 20}), r.stdout
        lates.append(int(late))
    assert max(lates) > 0, f"no request was still in flight at exit in {len(lates)} runs"


def test_a_future_observed_after_the_exit_drain_is_settled_by_its_thread(data):
    """An atexit handler that runs after accio's (registered before it) starts a read and adds a
    callback: no worker may enter the interpreter then, so the observing thread waits for the
    request and settles the future itself; the callback runs, the exit is clean."""
    p, content = data
    code = textwrap.dedent(f"""
        import atexit, accio
        f = accio.open({str(p)!r})
        def late():
            fut = f.read_into_async(bytearray(1 << 20), 0)
            fut.add_done_callback(lambda x: print("late", x.result(), flush=True))
            print("done" if fut.done() else "not done", flush=True)
        atexit.register(late)
        f.read_into_async(bytearray(10), 0).result()  # imports accio._futures: its drain runs first
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, ACCIO_QUIET="1"))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.splitlines() == [f"late {1 << 20}", "done"], r.stdout
