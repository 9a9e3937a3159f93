"""accio.offload (the VEO API from Python) and `accio offload-bench`, against real worker processes.
The kernels are tests/offload/kernels.c, compiled here with the system C compiler."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import compile_shared

from accio import offload



@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return compile_shared(tmp_path_factory, "offload/kernels.c", "libkernels.so", "-fopenmp")


@pytest.fixture(params=["shm", "socket"])
def proc(request):
    with offload.Proc(transport=request.param) as p:
        yield p


def test_calls_with_types(proc, kernels):
    lib = proc.load_library(kernels)
    ctx = proc.open_context()
    f = lib.k_types.args_type("int64_t", "uint64_t", "int32_t", "uint32_t", "int16_t", "uint16_t",
                              "int8_t", "uint8_t", "double", "float").ret_type("int64_t")
    args = (-1234567890123, 9876543210, -100000, 4000000000, -300, 60000, -100, 200, 3.25, 1.5)
    expect = int(sum(args[:8]) + 3.25 * 1000 + 1.5 * 100)
    assert f(ctx, *args).wait_result() == expect
    div = lib.find_function("k_ddiv").args_type("double", "double").ret_type("double")
    assert div(ctx, 1.0, 8.0).wait_result() == 0.125
    mul = lib.k_fmul.args_type("float", "float").ret_type("float")
    assert mul(ctx, 1.5, -3.0).wait_result() == -4.5
    many = lib.k_many32.args_type(*["uint64_t"] * 32)
    vals = [i * 1000 + 7 for i in range(32)]
    assert many(ctx, *vals).wait_result() == sum((i + 1) * v for i, v in enumerate(vals))
    with pytest.raises(TypeError):
        many(ctx, 1, 2)
    with pytest.raises(ValueError):
        lib.k_add.args_type("struct foo")
    with pytest.raises(AttributeError, match="no_such"):
        lib.no_such_kernel
    # untyped: ints as 64-bit
    assert proc.call_sync(lib.get_symbol("k_add"), 40, 2) == 42


def test_stack_arguments(proc, kernels):
    lib = proc.load_library(kernels)
    ctx = proc.open_context()
    for n in (1, 100, 4096, 1 << 20):
        data = (np.arange(n) * 13 % 256).astype(np.uint8)
        f = lib.k_sum_in.args_type("unsigned char *", "uint64_t")
        assert f(ctx, offload.OnStack(data), n).wait_result() == int(data.sum())
        out = np.zeros(n, dtype=np.uint8)
        g = lib.k_fill_out.args_type("unsigned char *", "uint64_t", "uint64_t")
        assert g(ctx, offload.OnStack(out, inout=offload.INTENT_OUT), n, 5).wait_result() == n
        assert np.array_equal(out, ((np.arange(n) + 5) % 256).astype(np.uint8))
        h = lib.k_inc_inout.args_type("unsigned char *", "uint64_t")
        before = out.copy()
        h(ctx, offload.OnStack(out, inout=offload.INTENT_INOUT), n).wait_result()
        assert np.array_equal(out, (before + 1).astype(np.uint8))
    assert lib.k_sum_in(ctx, offload.OnStack(b"\x01\x02\x03"), 3).wait_result() == 6  # read-only IN
    with pytest.raises(ValueError):
        offload.OnStack(b"abc", inout=offload.INTENT_OUT)


@pytest.mark.parametrize("n", [0, 1, 4095, 1 << 20, (9 << 20) + 3])
def test_memory_round_trip(proc, kernels, n):
    lib = proc.load_library(kernels)
    src = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    ptr = proc.alloc_mem(max(n, 1))
    proc.write_mem(ptr, src)
    back = np.empty(n, dtype=np.uint8)
    proc.read_mem(back, ptr)
    assert np.array_equal(src, back)
    ctx = proc.open_context()
    if n > 1:
        r1 = ctx.async_write_mem(ptr + 1, src[:-1])
        got = np.zeros(n - 1, dtype=np.uint8)
        r2 = ctx.async_read_mem(got, ptr + 1)
        r1.wait_result()
        r2.wait_result()
        assert np.array_equal(got, src[:-1])
        # The buffer of a request in flight is held: it cannot move (resize) while the worker writes it.
        held = bytearray(n - 1)
        r3 = ctx.async_read_mem(held, ptr + 1)
        with pytest.raises(BufferError):
            held.extend(b"x" * (1 << 20))
        r3.wait_result()
        assert bytes(held) == src[:-1].tobytes()
        stack = bytearray(n)
        arg = offload.OnStack(stack, inout=offload.INTENT_OUT)
        with pytest.raises(BufferError):
            stack.extend(b"x")  # held from OnStack() to its use
        del arg
        stack.extend(b"x")
    s = lib.k_mem_sum.args_type("void *", "uint64_t")
    proc.write_mem(ptr, src)
    assert s(ctx, ptr, n).wait_result() == int(src.sum())
    proc.free_mem(ptr)
    with pytest.raises(offload.OffloadError, match="not allocated"):
        proc.free_mem(ptr)


def test_contexts_requests_and_threads(proc, kernels):
    lib = proc.load_library(kernels)
    add = lib.k_add.args_type("uint64_t", "uint64_t")
    ctxs = [proc.open_context() for _ in range(4)]
    assert proc.num_contexts == 4
    reqs = [(i, add(ctxs[i % 4], i, 1)) for i in range(2000)]
    assert all(r.wait_result() == i + 1 for i, r in reqs)
    slow = lib.k_sleep_ms.args_type("uint64_t")
    r = slow(ctxs[1], 100)
    with pytest.raises(offload.OffloadError) as e:
        r.peek_result()
    assert e.value.state == offload.COMMAND_UNFINISHED
    ctxs[1].sync()
    assert r.peek_result() == 100
    import threading
    errors = []

    def work(k):
        c = proc.open_context()
        for i in range(300):
            if add(c, i, k).wait_result() != i + k:
                errors.append((k, i))

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    ctxs[2].close()
    assert proc.num_contexts == 7


def test_kernel_exception_and_killed_worker(kernels):
    with offload.Proc() as p:
        lib = p.load_library(kernels)
        ctx = p.open_context()
        pending = lib.k_sleep_ms.args_type("uint64_t")(p.open_context(), 10000)
        t0 = time.monotonic()
        with pytest.raises(offload.KernelException) as e:
            lib.k_segv(ctx).wait_result()
        assert e.value.signal == signal.SIGSEGV and "Segmentation fault" in str(e.value)
        with pytest.raises(offload.OffloadError):
            pending.wait_result()
        assert time.monotonic() - t0 < 1.0
        assert ctx.state == "exit"
        with pytest.raises(offload.OffloadError):
            lib.k_add(ctx, 1, 2)
    with offload.Proc() as p:
        lib = p.load_library(kernels)
        r = lib.k_sleep_ms.args_type("uint64_t")(p.open_context(), 10000)
        time.sleep(0.05)
        os.kill(p.pid, signal.SIGKILL)
        with pytest.raises(offload.OffloadError, match="signal 9"):
            r.wait_result()


def test_openmp_and_unload(kernels, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    with offload.Proc() as p:
        lib = p.load_library(kernels)
        assert p.call_sync(lib.k_omp_threads) == 2
        assert p.call_sync(lib.k_omp_sum, 1000) == 500500
        assert p.call_sync(lib.k_count) == 1
        assert p.call_sync(lib.k_count) == 2
        lib.unload()
        lib = p.load_library(kernels)
        assert p.call_sync(lib.k_count) == 1
        assert p.get_function("accio_offload_echo") is not None  # symbols of the worker program


def test_errors():
    with pytest.raises(offload.OffloadError, match="nope"):
        offload.Proc(worker="/nope/accio-offload-worker")
    with pytest.raises(ValueError):
        offload.Proc(transport="carrier-pigeon")
    with offload.Proc() as p:
        with pytest.raises(offload.OffloadError, match="missing.so"):
            p.load_library("/missing.so")
    with pytest.raises(offload.OffloadError, match="destroyed"):
        p.load_library("/x.so")
    assert "accio" in offload.version()


def test_offload_bench_quick(tmp_path):
    out = tmp_path / "ob.json"
    r = subprocess.run([sys.executable, "-m", "accio.cli", "offload-bench", "--quick", "--reps", "1",
                        "--max-bytes", "1m", "--transports", "shm,socket", "--json", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "Test 1" in r.stdout and "Socket transport / shm" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["schema"] == "accio.offload-bench/1"
    for t in ("shm", "socket"):
        assert set(doc["summary"][t]) == {"test1", "test2", "test3", "test4", "read_1b", "write_1b"}
        assert all(v > 0 for v in doc["summary"][t].values())
    assert {row["n"] for row in doc["runs"]["shm"]["latency"]} == {1, 10, 100, 1000, 10000}
    bad = subprocess.run([sys.executable, "-m", "accio.cli", "offload-bench", "--transports", "pigeon"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "pigeon" in bad.stderr
