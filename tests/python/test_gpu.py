"""The CUDA back end from Python.

Tests marked `gpu` need a real GPU (CuPy or PyTorch) and skip cleanly without one. The others run
everywhere: they build tests/fake_cuda (a stand-in libcuda and libcufile whose device memory faults
on any host access) and run accio in a subprocess pointed at it with ACCIO_LIBCUDA, or at a missing
library to check the fallbacks."""
import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import compile_shared, fake_cuda

import accio

ACCIO = [sys.executable, "-m", "accio.cli"]


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory):
    return fake_cuda(tmp_path_factory)


@pytest.fixture(scope="module")
def no_host_buffer(tmp_path_factory):
    """The directory of the compiled no_host_buffer module (tests/python/no_host_buffer.c): a type
    whose buffer export raises TypeError as CuPy's does; run_py's code imports it via PYTHONPATH."""
    so = compile_shared(tmp_path_factory, "python/no_host_buffer.c", "no_host_buffer.so",
                        "-I" + sysconfig.get_paths()["include"])
    return os.path.dirname(so)


# Device objects for run_py code, on accio.DeviceArray memory from the fake driver. Their buffer
# export raises as a CuPy array's does, so accio must recognise them before the buffer protocol.
DEVICE_OBJECTS = '''
import ctypes, os, sys, accio, numpy as np
from no_host_buffer import NoHostBuffer
fake = ctypes.CDLL(os.environ["ACCIO_LIBCUDA"])

class CuPyLike(NoHostBuffer):
    """__cuda_array_interface__ only (as Numba); cai entries override the DeviceArray's."""
    def __init__(self, a, **cai):
        self.a, self.cai = a, dict(a.__cuda_array_interface__, **cai)

    @property
    def __cuda_array_interface__(self):
        return self.cai

class DLPackOnly(NoHostBuffer):
    """DLPack only (as JAX); records the stream of each __dlpack__ call."""
    def __init__(self, a):
        self.a, self.streams = a, []

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.streams.append(stream)
        return self.a.__dlpack__(stream=stream, max_version=max_version)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

def syncs():
    """(stream, device transfers made before it) for each cuStreamSynchronize since the last reset."""
    h, t = (ctypes.c_uint64 * 64)(), (ctypes.c_uint64 * 64)()
    return [(h[i], t[i]) for i in range(fake.fake_cuda_stream_syncs(h, t, 64))]

def producer_syncs():
    """The synchronizations of streams that are not the fake's own (accio's staging streams)."""
    return [s for s in syncs() if s[0] < 4096]
'''


def run_py(code: str, lib: str | None, tmp_path, **env) -> subprocess.CompletedProcess:
    e = dict(os.environ, ACCIO_QUIET="1", ACCIO_PROFILE="off", **env)
    if lib is not None:
        e["ACCIO_LIBCUDA"] = e["ACCIO_LIBCUFILE"] = lib
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def test_device_arrays_round_trip_through_every_device_mechanism(fake_lib, tmp_path):
    run_py("""
        import os, accio, numpy as np
        class CAI:   # only __cuda_array_interface__ (as Numba or an old CuPy)
            def __init__(self, a): self.a = a; self.__cuda_array_interface__ = a.__cuda_array_interface__
        class DL:    # only DLPack (as JAX)
            def __init__(self, a): self.a = a
            def __dlpack__(self, **kw): return self.a.__dlpack__(**kw)
            def __dlpack_device__(self): return self.a.__dlpack_device__()
        rng = np.random.default_rng(1)
        for n in (0, 1, 4097, (5 << 20) + 3):
            data = rng.integers(0, 256, n, dtype=np.uint8)
            data.tofile("in.bin")
            for mech in ("naive", "staged", "gds", "auto"):
                for wrap in (lambda a: a, CAI, DL):
                    a = accio.device_array(n)
                    assert accio._ext.mem_kind(a) == ("device", 0)
                    with accio.open("in.bin", mechanism=mech, threads=3, task_size="1m", buffer_size="256k") as f:
                        assert f.read_into(wrap(a)) == n
                        ran = f.stats()["last_mechanism"]
                    assert n == 0 or ran == ("staged" if mech == "auto" else mech), (mech, ran)
                    assert a.to_bytes() == data.tobytes(), (n, mech)
                    with accio.open("out.bin", "w", mechanism=mech) as f:
                        assert f.write_from(wrap(a)) == n
                    assert np.fromfile("out.bin", dtype=np.uint8).tobytes() == data.tobytes(), (n, mech)
        print("ok")
    """, fake_lib, tmp_path)


def test_a_gpu_float4_x2_export_moves_every_byte(fake_lib, tmp_path):
    """PyTorch 2.10+ exports a float4_e2m1fn_x2 CUDA tensor as bits 4 x lanes 2 (one byte per
    element): every device mechanism reads and writes all of its bytes (GPU audit, session 23)."""
    run_py(f"""
        import os, sys, accio
        sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
        from dlpack_stub import Producer
        n = (3 << 20) + 1
        data = os.urandom(n)
        open("in.bin", "wb").write(data)
        for mech in ("naive", "staged", "gds", "auto"):
            a = accio.device_array(n)
            t = Producer(a.__cuda_array_interface__["data"][0], n, 17, 4, 2, device=(2, 0), keep=a)
            with accio.open("in.bin", mechanism=mech) as f:
                assert f.read_into(t) == n
            assert a.to_bytes() == data, mech
            assert accio.write("out.bin", t, mechanism=mech) == n
            assert open("out.bin", "rb").read() == data, mech
        print("ok")
    """, fake_lib, tmp_path)


def test_appends_of_device_buffers_are_whole_o_append_writes(fake_lib, tmp_path):
    """An append from GPU memory is copied whole to the host and written with one O_APPEND write
    (the session-20 append rework), under every device mechanism, after another writer's bytes."""
    run_py("""
        import os, accio, numpy as np
        rng = np.random.default_rng(5)
        for mech in ("naive", "staged", "gds", "auto"):
            with open("log.bin", "wb") as out:
                out.write(b"head")
            parts = [rng.integers(0, 256, n, dtype=np.uint8) for n in (1, 4097, (3 << 20) + 5)]
            want = b"head"
            with accio.open("log.bin", "a", mechanism=mech) as f:
                for i, data in enumerate(parts):
                    a = accio.device_array(len(data))
                    a.copy_from(data)
                    at = f.append(a)
                    assert at == len(want), (mech, i, at, len(want))
                    want += data.tobytes()
                    fd = os.open("log.bin", os.O_WRONLY | os.O_APPEND)  # another writer between ours
                    os.write(fd, b"X" * i)
                    os.close(fd)
                    want += b"X" * i
            assert open("log.bin", "rb").read() == want, mech
        print("ok")
    """, fake_lib, tmp_path)


def _gds_filesystem(path) -> bool:
    """Whether path is on a filesystem GPUDirect Storage takes the direct path on (ext4, xfs, Lustre,
    GPFS, BeeGFS, NFS: the filesystem magic numbers test_gpu.cpp's gds_filesystem lists)."""
    magic = subprocess.run(["stat", "-f", "-c", "%t", str(path)], capture_output=True, text=True).stdout.strip()
    return magic in ("ef53", "58465342", "bd00bd0", "47504653", "19830326", "6969")


@pytest.mark.parametrize("nvfs", ["0", "1"])
def test_submit_many_small_device_requests_under_gds(fake_lib, tmp_path, nvfs):
    # gds runs them as cuFile batches on the direct path (FAKE_CUFILE_NVFS=1, on a filesystem GDS
    # takes), one cuFile call each in compatibility mode (where a batch of 128 would wait for ever
    # for cuFile's 64 bounce buffers: the fake aborts); each future has its own result, errors included.
    batches = nvfs == "1"
    if batches and not _gds_filesystem(tmp_path):
        if os.environ.get("CI", "") not in ("", "false", "0"):
            pytest.fail(f"{tmp_path} is on a filesystem GDS does not take: the batch path would go untested")
        pytest.skip(f"{tmp_path} is on a filesystem GDS does not take")
    run_py(f"""
        import ctypes, os, accio, numpy as np
        fake = ctypes.CDLL(os.environ["ACCIO_LIBCUDA"])
        fake.fake_cufile_batch_ios.restype = ctypes.c_uint64
        data = np.random.default_rng(2).integers(0, 256, 1 << 20, dtype=np.uint8)
        data.tofile("in.bin")
        bufs = [accio.device_array(1000 + i) for i in range(200)]
        offs = [i * 5000 + 3 for i in range(200)]
        with accio.open("in.bin", mechanism="gds") as f:
            before = fake.fake_cufile_batch_ios()
            got = [fu.result() for fu in f.submit(zip(bufs, offs))]
            assert got == [1000 + i for i in range(200)], got
            batched = fake.fake_cufile_batch_ios() - before
            assert batched == (200 if {batches} else 0), batched
            assert f.stats()["reads"] == 200
            tail = accio.device_array(4096)
            assert [fu.result() for fu in f.submit([(tail, (1 << 20) - 10), (bufs[0], 1 << 21)])] == [10, 0]
        for b, o in zip(bufs, offs):
            assert b.to_bytes() == data[o:o + b.nbytes].tobytes()
        with accio.open("out.bin", "w", mechanism="gds") as f:
            assert [fu.result() for fu in f.submit(zip(bufs, offs), write=True)] == [b.nbytes for b in bufs]
        out = np.fromfile("out.bin", dtype=np.uint8)
        for b, o in zip(bufs, offs):
            assert out[o:o + b.nbytes].tobytes() == data[o:o + b.nbytes].tobytes()
        os.environ["FAKE_CUFILE_EIO_AT"] = str(offs[3])  # the fake fails any cuFile I/O at this offset
        with accio.open("in.bin", mechanism="gds") as f:
            futs = f.submit(zip(bufs[:10], offs))
            for i, fu in enumerate(futs):
                if i == 3:
                    try:
                        fu.result()
                        raise SystemExit("the failed request must raise")
                    except OSError as e:
                        assert "cuFileRead" in str(e) and str(offs[3]) in str(e), e
                else:
                    assert fu.result() == 1000 + i
        print("ok")
    """, fake_lib, tmp_path, FAKE_CUFILE_NVFS=nvfs)


def test_managed_memory_and_read_into_device(fake_lib, tmp_path):
    r = run_py("""
        import accio, numpy as np
        data = np.arange(3 << 20, dtype=np.uint32).view(np.uint8)
        data.tofile("in.bin")
        a = accio.device_array(data.nbytes, managed=True)
        assert accio._ext.mem_kind(a) == ("managed", 0)
        for mech in ("naive", "staged", "gds"):
            with accio.open("in.bin", mechanism=mech) as f:
                assert f.read_into(a) == data.nbytes
                print(mech, f.stats()["last_mechanism"])
            assert a.to_bytes() == data.tobytes()
        g = accio.read("in.bin", device="cuda:0")      # no CuPy here: an accio.DeviceArray
        assert isinstance(g, accio.DeviceArray) and g.nbytes == data.nbytes and g.to_bytes() == data.tobytes()
        assert g.__dlpack_device__() == (2, 0)
        # read-only device memory cannot be read into
        class RO:
            __cuda_array_interface__ = dict(g.__cuda_array_interface__, data=(g.ptr, True))
        try:
            accio.open("in.bin").read_into(RO())
        except TypeError as e:
            print("refused:", e)
    """, fake_lib, tmp_path)
    assert "gds staged" in r.stdout, r.stdout  # cuFile does not take managed memory: staged ran
    assert "refused: the device array is read-only" in r.stdout


def test_host_buffers_under_a_device_mechanism_and_device_buffers_under_a_host_one(fake_lib, tmp_path):
    r = run_py("""
        import os, accio, numpy as np
        data = np.random.default_rng(2).integers(0, 256, 1 << 20, dtype=np.uint8); data.tofile("in.bin")
        host = np.empty_like(data)
        with accio.open("in.bin", mechanism="staged") as f:
            f.read_into(host); print("host buffer ran", f.stats()["last_mechanism"])
        dev = accio.device_array(data.nbytes)
        with accio.open("in.bin", mechanism="posix") as f:
            print("explain", f.explain(data.nbytes)["mechanism"])  # no buffer given: host
            f.read_into(dev); print("device buffer ran", f.stats()["last_mechanism"])
        assert host.tobytes() == data.tobytes() == dev.to_bytes()
        print(accio._ext.warnings())
    """, fake_lib, tmp_path)
    assert "host buffer ran parallel" in r.stdout
    assert "device buffer ran staged" in r.stdout
    assert "mechanism posix cannot serve cuda:0 memory" in r.stdout


def test_gpu_buffer_from_a_libcuda_loaded_after_accio_looked(fake_lib, tmp_path):
    # posix and parallel look for libcuda only every 256th request per thread (the look takes the
    # loader's lock). A GPU buffer in between reaches the kernel, which answers EFAULT; the engine
    # then looks again and serves it staged. Here libcuda arrives behind accio's back (ctypes, as a
    # framework would load it) right after this thread's first, libcuda-less request.
    r = run_py(f"""
        import ctypes, accio, numpy as np
        data = np.random.default_rng(5).integers(0, 256, (3 << 20) + 5, dtype=np.uint8)
        data.tofile("in.bin")
        files = {{m: accio.open("in.bin", mechanism=m, threads=2, task_size="1m", realign="on")
                 for m in ("posix", "parallel", "auto", "direct")}}
        for f in files.values():
            f.read_into(bytearray(4096))  # this thread has looked: no libcuda
        cu = ctypes.CDLL({fake_lib!r})
        cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        cu.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        cu.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
        assert cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
        assert cu.cuCtxPushCurrent_v2(ctx) == 0 and cu.cuMemAlloc_v2(ctypes.byref(ptr), data.nbytes) == 0
        class Raw:
            __cuda_array_interface__ = {{"data": (ptr.value, False), "shape": (data.nbytes,), "typestr": "|u1",
                                         "version": 3}}
        class Off8:  # 8 bytes in: misaligned against the file offset, so posix and parallel would
            # read it through their aligned buffer (realign=on) if they took it for host memory
            __cuda_array_interface__ = {{"data": (ptr.value + 8, False), "shape": (data.nbytes - 8,),
                                         "typestr": "|u1", "version": 3}}
        host, zeros = np.empty_like(data), np.zeros_like(data)
        for m, f in files.items():
            assert cu.cuMemcpyHtoD_v2(ptr.value, zeros.ctypes.data, data.nbytes) == 0
            assert f.read_into(Off8()) == data.nbytes - 8, m
            assert cu.cuMemcpyDtoH_v2(host.ctypes.data, ptr.value, data.nbytes) == 0
            assert host.tobytes()[8:] == data.tobytes()[:-8], m
            assert f.read_into(Raw()) == data.nbytes, m
            assert cu.cuMemcpyDtoH_v2(host.ctypes.data, ptr.value, data.nbytes) == 0
            assert host.tobytes() == data.tobytes(), m
            print(m, "ran", f.stats()["last_mechanism"], "errors", f.stats()["errors"])
            f.close()
        with accio.open("out.bin", "w", mechanism="posix") as f:
            assert f.write_from(Raw()) == data.nbytes
        assert np.fromfile("out.bin", dtype=np.uint8).tobytes() == data.tobytes()
    """, fake_lib, tmp_path)
    for m in ("posix", "parallel", "auto", "direct"):
        assert f"{m} ran staged errors 0" in r.stdout, r.stdout


def test_realign_asks_the_driver_once_per_request(fake_lib, tmp_path):
    """With libcuda loaded, a host read that realigns asks the driver about its buffer once (the
    engine's classification), not a second time in realign's check, nor once per parallel task."""
    r = run_py(FAKE_COUNTERS + """
        import accio, numpy as np
        data = np.random.default_rng(6).integers(0, 256, 4 << 20, dtype=np.uint8)
        data.tofile("in.bin")
        accio.device_array(1)  # the driver is loaded and initialized
        buf = bytearray((4 << 20) + 8)
        view = memoryview(buf)[8:]  # 8 bytes off the file offset's alignment: realign=on copies
        for mech in ("posix", "parallel"):
            with accio.open("in.bin", mechanism=mech, realign="on", threads=2, task_size="1m") as f:
                f.read_into(view, 0)
                fake.fake_cuda_reset_counters()
                for _ in range(5):
                    assert f.read_into(view, 0) == 4 << 20
                print(mech, counters()[POINTER_QUERIES], f.stats()["last_mechanism"])
            assert bytes(view) == data.tobytes(), mech
    """, fake_lib, tmp_path)
    assert r.stdout.split("\n")[:2] == ["posix 5 posix", "parallel 5 parallel"], r.stdout


def test_without_libcuda_everything_host_still_works(tmp_path):
    r = run_py("""
        import accio, errno, numpy as np
        ok, why = accio.cuda_available()
        print("available", ok, why)
        assert accio.gpus() == []
        try:
            accio.device_array(16)
        except OSError as e:
            print("alloc errno", e.errno)
        data = np.arange(1000, dtype=np.uint8); data.tofile("in.bin")
        for mech in ("naive", "staged", "gds"):
            assert accio.read("in.bin", mechanism=mech).tobytes() == data.tobytes()
        print({n: ok for n, ok, _ in accio.mechanisms()})
    """, None, tmp_path, ACCIO_LIBCUDA="/nonexistent/libcuda.so.1")
    assert "available False cannot load /nonexistent/libcuda.so.1" in r.stdout
    assert "alloc errno 19" in r.stdout  # ENODEV
    assert "'naive': False, 'staged': False, 'gds': False" in r.stdout


def test_driver_without_gpus(fake_lib, tmp_path):
    r = run_py("import accio; print(accio.cuda_available())", fake_lib, tmp_path, FAKE_CUDA_DEVICES="0")
    assert "False" in r.stdout and "no GPU" in r.stdout


def test_info_lists_gpus_and_cufile_mode(fake_lib, tmp_path):
    env = dict(os.environ, ACCIO_LIBCUDA=fake_lib, ACCIO_LIBCUFILE=fake_lib, ACCIO_QUIET="1")
    out = subprocess.run([*ACCIO, "info", "--json"], env=env, capture_output=True, text=True, check=True).stdout
    g = json.loads(out)["gpus"]
    assert g["available"] and g["devices"][0]["pci_bus_id"] == "0000:17:00.0"
    assert g["cufile"]["loaded"] and g["cufile"]["direct"] is False  # fake cuFile without nvidia-fs
    assert "compat mode" in g["cufile"]["mode"]
    text = subprocess.run([*ACCIO, "info"], env=dict(env, FAKE_CUFILE_NVFS="1"), capture_output=True, text=True,
                          check=True).stdout
    assert "gpu 0         accio fake GPU 0" in text and "gds here      direct path" in text
    assert "batch API present (submit() runs up to 128 small requests as one batch)" in text
    assert "features: none" in text
    # cuFile's feature flags named; PCI P2PDMA without nvidia-fs (cuFile 1.14) stays compat mode, saying so
    p2p = subprocess.run([*ACCIO, "info", "--json"], env=dict(env, FAKE_CUFILE_FFLAGS=str(0b10010 | 1 << 9)),
                         capture_output=True, text=True, check=True).stdout
    cf = json.loads(p2p)["gpus"]["cufile"]
    assert "features: batch I/O, PCI P2PDMA, bit 9" in cf["detail"] and cf["direct"] is False, cf
    assert "cuFile also reports PCI P2PDMA support" in cf["mode"], cf
    bare = subprocess.run([*ACCIO, "info"], env=dict(os.environ, ACCIO_LIBCUDA="/nonexistent.so"),
                          capture_output=True, text=True, check=True).stdout
    assert "gpus          none (cannot load /nonexistent.so" in bare


def test_bench_target_cuda_has_device_columns_and_both_ceilings(fake_lib, tmp_path):
    env = dict(os.environ, ACCIO_LIBCUDA=fake_lib, ACCIO_LIBCUFILE=fake_lib, ACCIO_QUIET="1", ACCIO_PROFILE="off")
    r = subprocess.run([*ACCIO, "bench", "--target", "cuda:0", "-s", "8m", "-r", "1m", "-t", "2", "-T", "write,reread",
                        "-i", "2", "-q", "-d", str(tmp_path), "--json", str(tmp_path / "b.json")],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    res = json.load(open(tmp_path / "b.json"))
    cols = {x["mechanism"] for x in res["results"]}
    assert cols == {"naive", "staged", "gds", "pagecache", "auto", "host", "pinned-copy"}, cols
    assert all(x["target"] == "cuda:0" for x in res["results"])
    assert "staged against its ceilings" in r.stdout and "x naive" in r.stdout
    # Host mechanisms are refused on a device target; an unknown GPU is a clear error.
    bad = subprocess.run([*ACCIO, "bench", "--target", "cuda:0", "-m", "posix", "-q"], env=env, capture_output=True,
                         text=True)
    assert bad.returncode != 0 and "serves host memory" in bad.stderr
    bad = subprocess.run([*ACCIO, "bench", "--target", "cuda:3", "-q"], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "1 GPU(s)" in bad.stderr
    none = subprocess.run([*ACCIO, "bench", "--target", "cuda:0", "-q"],
                          env=dict(env, ACCIO_LIBCUDA="/nonexistent.so"), capture_output=True, text=True)
    assert none.returncode != 0 and "no NVIDIA driver" in none.stderr


def run_dev(code: str, lib: str, helper: str, tmp_path, **env) -> subprocess.CompletedProcess:
    """run_py with DEVICE_OBJECTS defined first."""
    return run_py(DEVICE_OBJECTS + textwrap.dedent(code), lib, tmp_path, PYTHONPATH=helper, **env)


def test_device_objects_whose_buffer_export_raises_work_in_every_entry_point(fake_lib, no_host_buffer, tmp_path):
    # issue 17: a CuPy array raised "Accessing a CuPy ndarray on CPU is not allowed" everywhere,
    # because the buffer protocol was tried first.
    run_dev("""
        for make in (CuPyLike, DLPackOnly):
            try:
                memoryview(make(accio.device_array(1)))
                raise SystemExit("the helper's buffer export must raise, as CuPy's does")
            except TypeError as e:
                assert "on CPU is not allowed" in str(e), e
        n = (3 << 20) + 5
        data = np.random.default_rng(7).integers(0, 256, n, dtype=np.uint8)
        data.tofile("in.bin")
        half = n // 2
        def out_file():
            return np.fromfile("out.bin", dtype=np.uint8).tobytes()
        for make in (CuPyLike, DLPackOnly, lambda a: a):
            for mech in ("naive", "staged", "gds", "auto"):
                a = accio.device_array(n)
                with accio.open("in.bin", mechanism=mech, threads=2, task_size="1m", buffer_size="512k") as f:
                    assert f.read_into(make(a)) == n
                assert a.to_bytes() == data.tobytes(), mech
                with accio.open("out.bin", "w", mechanism=mech) as f:
                    assert f.write_from(make(a)) == n
                assert out_file() == data.tobytes(), mech
            a = accio.device_array(n)
            assert accio._ext.mem_kind(make(a)) == ("device", 0)
            v = accio._ext.HeldView(make(a))
            assert (v.nbytes, v.where, v.device) == (n, "device", 0)
            with accio.open("in.bin") as f:
                assert f.read_into_async(make(a)).result() == n
                assert a.to_bytes() == data.tobytes()
                lo, hi = accio.device_array(half), accio.device_array(n - half)
                assert [fu.result() for fu in f.submit([(make(lo), 0), (make(hi), half)])] == [half, n - half]
                assert lo.to_bytes() + hi.to_bytes() == data.tobytes()
            with accio.open("out.bin", "w") as f:
                assert f.write_from_async(make(a)).result() == n
            assert out_file() == data.tobytes()
            with accio.open("out.bin", "w") as f:
                assert [fu.result() for fu in f.submit([(make(hi), half), (make(lo), 0)], write=True)] == [n - half, half]
            assert out_file() == data.tobytes()
            assert accio.write("out.bin", make(a), fsync=True) == n and out_file() == data.tobytes()
            b = accio.device_array(n)
            target = make(b)
            assert accio.read("in.bin", out=target, mechanism="staged") is target
            assert b.to_bytes() == data.tobytes()
            c = accio.device_array(n)
            c.copy_from(make(b))
            assert c.to_bytes() == data.tobytes()
            d = accio.device_array(n)
            accio._ext.copy(make(d), make(c))
            assert d.to_bytes() == data.tobytes()
        print("ok")
    """, fake_lib, no_host_buffer, tmp_path)


def test_producer_streams_are_synchronized_before_the_transfer(fake_lib, no_host_buffer, tmp_path):
    # CAI v3: stream absent or None = ready; 1 legacy, 2 per-thread, else a handle, synchronized
    # before accio touches the memory. DLPack: accio passes stream=1 and synchronizes that stream.
    # The fake logs each synchronization with the device transfers made before it.
    r = run_dev("""
        n = (1 << 20) + 7
        np.random.default_rng(8).integers(0, 256, n, dtype=np.uint8).tofile("in.bin")
        a = accio.device_array(n)
        def read(obj, mech="staged"):
            fake.fake_cuda_reset_counters()
            with accio.open("in.bin", mechanism=mech) as f:
                assert f.read_into(obj) == n
            return producer_syncs()
        for mech in ("naive", "staged", "gds"):
            # gds then waits for the legacy default stream itself (cuFile's DMA follows no stream)
            assert read(CuPyLike(a, stream=7), mech) == [(7, 0)] + [(1, 0)] * (mech == "gds"), mech
        # The default streams belong to the current context (the fake refuses them without one).
        assert read(CuPyLike(a, stream=1)) == [(1, 0)]
        assert read(CuPyLike(a, stream=2)) == [(2, 0)]
        assert read(CuPyLike(a)) == []
        assert read(CuPyLike(a, stream=None)) == []
        v2 = {k: v for k, v in a.__cuda_array_interface__.items() if k != "stream"}
        assert read(CuPyLike(a, **dict(v2, version=2))) == []
        fake.fake_cuda_reset_counters()
        assert accio.write("out.bin", CuPyLike(a, stream=9)) == n
        assert producer_syncs() == [(9, 0)]
        fake.fake_cuda_reset_counters()
        with accio.open("out.bin", "w") as f:
            assert f.write_from_async(CuPyLike(a, stream=11)).result() == n
        assert producer_syncs() == [(11, 0)]
        # DLPack: the producer gets stream=1 (the legacy default stream), which accio synchronizes.
        d = DLPackOnly(a)
        assert read(d) == [(1, 0)] and d.streams == [1]
        class BeforeMaxVersion(DLPackOnly):  # DLPack 0.x producers: no max_version keyword
            def __dlpack__(self, stream=None):
                self.streams.append(stream)
                return self.a.__dlpack__(stream=stream)
        class NoKeywords(DLPackOnly):        # no stream keyword either: it assumes the legacy stream
            def __dlpack__(self):
                self.streams.append("called")
                return self.a.__dlpack__()
        for cls, seen in ((BeforeMaxVersion, [1]), (NoKeywords, ["called"])):
            d = cls(a)
            assert read(d) == [(1, 0)] and d.streams == seen, (cls, d.streams)
        # An empty array has nothing to wait for.
        e = accio.device_array(0)
        fake.fake_cuda_reset_counters()
        with accio.open("in.bin") as f:
            assert f.read_into(CuPyLike(e, shape=(0,), stream=7)) == 0
        assert producer_syncs() == []
        print("ok")
    """, fake_lib, no_host_buffer, tmp_path)
    assert r.stdout.strip().endswith("ok")


def test_a_pinned_torch_cpu_tensor_is_host_memory(fake_lib, no_host_buffer, tmp_path):
    # PyTorch's pin_memory() tensors (a DataLoader(pin_memory=True)'s batches) report CUDA-host memory
    # from __dlpack_device__ (kDLCUDAHost, 3), refuse a stream ("stream should be None on cpu.", an
    # AssertionError, since pytorch#150217; older releases ignore it) and export a kDLCPU capsule.
    # accio took them for GPU memory: it passed stream=1, so every entry point raised that
    # AssertionError, or refused the CPU capsule of an older torch, and it waited for GPU 0's
    # legacy stream for host memory. The stand-ins below behave as torch does.
    run_dev("""
        class PinnedTorchLike:
            def __init__(self, a): self.a, self.streams = a, []
            def __dlpack_device__(self): return (3, 0)
            def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
                self.streams.append(stream)
                if stream is not None and stream != -1:
                    raise AssertionError("stream should be None on cpu.")
                return self.a.__dlpack__()
        class OldPinnedTorchLike(PinnedTorchLike):   # before DLPack 1.0 and the stream check
            def __dlpack__(self, stream=None):
                self.streams.append(stream)
                return self.a.__dlpack__()
        n = (1 << 20) + 5
        data = np.random.default_rng(12).integers(0, 256, n, dtype=np.uint8)
        data.tofile("in.bin")
        for cls in (PinnedTorchLike, OldPinnedTorchLike):
            pin = accio.pinned_empty(n)
            a = np.frombuffer(pin, dtype=np.uint8)
            t = cls(a)
            fake.fake_cuda_reset_counters()
            for mech in ("auto", "posix", "parallel"):
                a[:] = 0
                with accio.open("in.bin", mechanism=mech) as f:
                    assert f.read_into(t) == n
                    assert f.read_into_async(t, offset=0).result() == n
                    assert f.submit([(t, 0)])[0].result() == n
                assert a.tobytes() == data.tobytes(), (cls.__name__, mech)
            assert accio.write("out.bin", t) == n
            assert np.fromfile("out.bin", dtype=np.uint8).tobytes() == data.tobytes()
            with accio.open("out.bin", "r+") as f:
                assert f.write_from(t, offset=n) == n
            assert producer_syncs() == [], "host memory: no GPU stream waited for"
            assert all(s is None for s in t.streams), (cls.__name__, t.streams)
        print("ok")
    """, fake_lib, no_host_buffer, tmp_path)


def test_a_gpu_array_is_exported_with_its_own_gpu_current(fake_lib, no_host_buffer, tmp_path):
    # PyTorch refuses to export a tensor of another GPU than the current one ("BufferError: Can't
    # export tensors on a different CUDA device index", in its CUDA 13 builds), and CuPy and older
    # PyTorch order their pending work on the current GPU's stream. accio asked for the export with
    # whatever GPU the calling thread had current: GPU 0 in a fresh thread, so reads into a tensor on
    # cuda:1 failed. The stand-in asks the fake driver which GPU is current, as torch's check does.
    run_dev("""
        import threading
        fake.cuCtxGetCurrent.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        fake.cuCtxGetDevice.argtypes = [ctypes.POINTER(ctypes.c_int)]
        def current_device():
            ctx, dev = ctypes.c_void_p(), ctypes.c_int(-1)
            assert fake.cuCtxGetCurrent(ctypes.byref(ctx)) == 0
            if not ctx.value:
                return 0  # the runtime's device without a current context
            assert fake.cuCtxGetDevice(ctypes.byref(dev)) == 0
            return dev.value
        class TorchLike(DLPackOnly):
            def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
                if current_device() != self.a.__dlpack_device__()[1]:
                    raise BufferError("Can't export tensors on a different CUDA device index")
                return super().__dlpack__(stream=stream, max_version=max_version)
        n = (1 << 20) + 3
        data = np.random.default_rng(13).integers(0, 256, n, dtype=np.uint8)
        data.tofile("in.bin")
        a = accio.device_array(n, device=1)
        t = TorchLike(a)
        assert t.__dlpack_device__() == (2, 1)
        def current_context():
            ctx = ctypes.c_void_p()
            assert fake.cuCtxGetCurrent(ctypes.byref(ctx)) == 0
            return ctx.value
        def read():
            before = current_context()
            for mech in ("naive", "staged", "gds", "auto"):
                a.copy_from(np.zeros(n, np.uint8))
                with accio.open("in.bin", mechanism=mech) as f:
                    assert f.read_into(t) == n, mech
                assert a.to_bytes() == data.tobytes(), mech
            assert accio.write("out.bin", t) == n
            assert np.fromfile("out.bin", dtype=np.uint8).tobytes() == data.tobytes()
            assert current_context() == before, "the caller's current context is its own again"
            return "done"
        assert read() == "done"
        results = []
        th = threading.Thread(target=lambda: results.append(read()))
        th.start(); th.join()
        assert results == ["done"], "a fresh thread (no GPU current) exports it too"
        print("ok")
    """, fake_lib, no_host_buffer, tmp_path, FAKE_CUDA_DEVICES="2")


# in_child(body): runs body() in a forked child and asserts it returned (a failure's traceback is
# printed there, exit status 3), for the fork tests' run_py code.
IN_CHILD = """
import os, traceback
def in_child(body):
    pid = os.fork()
    if pid == 0:
        try:
            body()
            os._exit(0)
        except BaseException:
            traceback.print_exc()
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
"""


def test_a_forked_child_runs_as_without_a_driver(fake_lib, tmp_path):
    # CUDA does not survive fork(): in a child of a process that initialized it the driver answers
    # CUDA_ERROR_NOT_INITIALIZED to every call (the fake does too). accio went on calling it there:
    # pinning memory warned (a DataLoader worker's stderr), gds was offered, and a GPU buffer's error
    # did not say why. Now the child runs as on a machine without a driver, silently.
    r = run_py(IN_CHILD + textwrap.dedent("""
        import os, accio, numpy as np
        from accio import _ext
        n = (1 << 20) + 3
        data = np.random.default_rng(9).integers(0, 256, n, dtype=np.uint8)
        data.tofile("in.bin")
        a = accio.device_array(n)
        with accio.open("in.bin") as f:
            assert f.read_into(a) == n        # the driver is initialized in the parent
        before = _ext.warnings()
        def child():
            pin = accio.pinned_empty(n)   # mlock'ed or pageable: no driver to register it with
            b = np.frombuffer(pin, dtype=np.uint8)
            for mech in ("auto", "parallel", "staged"):
                b[:] = 0
                with accio.open("in.bin", mechanism=mech) as f:
                    assert f.read_into(b) == n
                assert b.tobytes() == data.tobytes(), mech
            ok, why = accio.cuda_available()
            assert not ok and "fork()" in why, why
            try:
                with accio.open("in.bin") as f:
                    f.read_into(a)
                raise SystemExit("a read into the parent's GPU memory did not fail in the child")
            except OSError as e:
                assert "fork()" in str(e), str(e)
            new = _ext.warnings()[len(before):]
            assert "staged cannot serve host memory" in new or new == "", new
            assert "cuMemHostRegister" not in new and "CUDA_ERROR" not in new, new
            import ctypes
            fake = ctypes.CDLL(os.environ["ACCIO_LIBCUDA"])
            fake.fake_cuda_forked_calls.restype = ctypes.c_uint64
            assert fake.fake_cuda_forked_calls() == 0, "accio called the driver in the child"
        in_child(child)
        with accio.open("in.bin") as f:
            assert f.read_into(a) == n        # the parent's driver is untouched
        print("ok")
    """), fake_lib, tmp_path)
    assert r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_a_forked_child_of_a_framework_that_initialized_cuda(fake_lib, tmp_path):
    # The common DataLoader case: a framework initialized CUDA in the parent and accio never asked
    # the driver there; in the worker accio's own cuInit is refused (CUDA_ERROR_NOT_INITIALIZED).
    # That is the fork case too: cuda_available() and a read into the parent's GPU memory name it.
    r = run_py(IN_CHILD + textwrap.dedent("""
        import ctypes, os, accio, numpy as np
        fake = ctypes.CDLL(os.environ["ACCIO_LIBCUDA"])
        fake.fake_cuda_forked_calls.restype = ctypes.c_uint64
        ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
        n = 1 << 20
        assert fake.cuInit(0) == 0                     # "the framework"
        assert fake.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
        assert fake.cuCtxPushCurrent_v2(ctx) == 0
        assert fake.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(n)) == 0
        np.random.default_rng(10).integers(0, 256, n, dtype=np.uint8).tofile("in.bin")
        class Tensor:  # the framework's GPU array, by its interface
            __cuda_array_interface__ = {"data": (ptr.value, False), "shape": (n,), "typestr": "|u1", "version": 3}
        def child():
            ok, why = accio.cuda_available()
            assert not ok and "fork()" in why, why
            b = bytearray(n)
            with accio.open("in.bin") as f:
                assert f.read_into(b) == n
            try:
                with accio.open("in.bin") as f:
                    f.read_into(Tensor())
                raise SystemExit("a read into the parent's GPU memory did not fail in the child")
            except OSError as e:
                assert "fork()" in str(e), str(e)
            calls = fake.fake_cuda_forked_calls()
            assert calls == 1, f"{calls} driver calls in the child: only the one cuInit that tells the fork"
        in_child(child)
        print("ok")
    """), fake_lib, tmp_path)
    assert r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_cai_stream_orders_a_producers_pending_copy_before_accio_reads_the_array(fake_lib, no_host_buffer,
                                                                                  tmp_path):
    # A producer queued a slow copy into the array on its own non-blocking stream and exported the
    # array with that stream. Without the stream, accio writes the old bytes (the control case, which
    # shows the race is real in the fake: naive copies at once); with it, the new ones.
    run_dev("""
        fake.cuStreamCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
        fake.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
        fake.cuMemcpyHtoDAsync_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        ctx, stream = ctypes.c_void_p(), ctypes.c_void_p()
        n = 1 << 20
        new = np.random.default_rng(3).integers(1, 256, n, dtype=np.uint8)
        a = accio.device_array(n)
        assert fake.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0 and fake.cuCtxPushCurrent_v2(ctx) == 0
        assert fake.cuStreamCreate(ctypes.byref(stream), 1) == 0  # CU_STREAM_NON_BLOCKING
        def write_after_pending_copy(mech, **cai):
            a.copy_from(np.zeros(n, np.uint8))
            os.environ["FAKE_CUDA_COPY_US"] = "400000"   # this copy sleeps 0.4 s on the producer's stream
            assert fake.cuMemcpyHtoDAsync_v2(a.ptr, new.ctypes.data, n, stream) == 0
            os.environ["FAKE_CUDA_COPY_US"] = "0"        # accio's own copies do not
            accio.write("out.bin", CuPyLike(a, **cai), mechanism=mech, buffer_size="1m")
            assert fake.cuStreamSynchronize(stream) == 0
            return np.fromfile("out.bin", dtype=np.uint8)
        assert not write_after_pending_copy("naive").any(), "control: without the stream accio must not wait"
        for mech in ("naive", "staged"):
            assert write_after_pending_copy(mech, stream=stream.value).tobytes() == new.tobytes(), mech
        print("ok")
    """, fake_lib, no_host_buffer, tmp_path)


def test_bad_device_objects_get_errors_that_say_what_was_given(fake_lib, no_host_buffer, tmp_path):
    r = run_dev("""
        n = 4096
        np.zeros(n, np.uint8).tofile("in.bin")
        a = accio.device_array(n)
        f = accio.open("in.bin")
        def error(obj, write=False):
            try:
                f.write_from(obj) if write else f.read_into(obj)
            except Exception as e:
                return f"{type(e).__name__}: {e}"
            raise SystemExit(f"accepted {obj!r}")
        print(error(CuPyLike(a, mask=CuPyLike(a))))
        print(error(CuPyLike(a, stream=0)))
        print(error(CuPyLike(a, stream="7")))
        print(error(CuPyLike(a, shape=(n // 2,), strides=(2,))))
        print(error(CuPyLike(a, shape=(64, 64), strides=(1, 64))))    # Fortran order
        print(error(CuPyLike(a, data=(a.ptr, True))))
        print(error(CuPyLike(a, typestr="<f")))
        cai = dict(a.__cuda_array_interface__); del cai["typestr"]
        class NoTypestr(NoHostBuffer):
            __cuda_array_interface__ = cai
        print(error(NoTypestr()))
        class Rocm(DLPackOnly):
            def __dlpack_device__(self): return (10, 0)
        print(error(Rocm(a)))
        class Plain(NoHostBuffer): pass
        print(error(Plain()))
        print(error([1, 2, 3]))
        # What is allowed: C-contiguous explicit strides, and writing from a read-only array.
        assert f.read_into(CuPyLike(a, shape=(64, 64), strides=(64, 1))) == n
        assert accio.write("out.bin", CuPyLike(a, data=(a.ptr, True))) == n
        # A CPU DLPack array whose buffer export raises is taken through DLPack.
        class CpuDLPack(NoHostBuffer):
            def __init__(self, arr): self.arr = arr
            def __dlpack__(self, **kw): return self.arr.__dlpack__(**kw)
            def __dlpack_device__(self): return self.arr.__dlpack_device__()
        host = np.ones(n, np.uint8)
        assert f.read_into(CpuDLPack(host)) == n and not host.any()
        print(error(CpuDLPack(np.zeros(n, np.uint8)[::2])))
        ro = np.zeros(n, np.uint8)
        ro.flags.writeable = False
        print(error(CpuDLPack(ro)))
        assert accio.write("out.bin", CpuDLPack(ro)) == n
    """, fake_lib, no_host_buffer, tmp_path)
    out = r.stdout
    assert "ValueError: __main__.CuPyLike is a masked array" in out
    assert "ValueError: __main__.CuPyLike.__cuda_array_interface__ has stream 0, which CAI v3 disallows" in out
    assert "TypeError: __main__.CuPyLike.__cuda_array_interface__: stream is a str, not an int" in out
    assert out.count("CuPyLike is not C-contiguous") == 2
    assert "TypeError: the device array is read-only" in out
    assert "TypeError: __main__.CuPyLike.__cuda_array_interface__: typestr <f" in out
    assert "TypeError: __main__.NoTypestr.__cuda_array_interface__: no 'typestr' entry" in out
    assert "TypeError: __main__.Rocm lives on DLPack device type 10, which accio cannot address" in out
    assert "TypeError: Accessing a Plain on CPU is not allowed" in out  # the object's own refusal
    assert "TypeError: expected a buffer, got list: accio takes a contiguous buffer" in out
    assert "ValueError: __main__.CpuDLPack is not C-contiguous" in out
    assert "TypeError: __main__.CpuDLPack is read-only (its DLPack export says so)" in out


def test_read_returns_the_framework_asked_for(fake_lib, no_host_buffer, tmp_path):
    # accio.read(path, *, device, framework, dtype, shape, out, **settings). CuPy and PyTorch are not
    # installed here: first the errors that says so, then stand-ins with their allocation calls whose
    # arrays, like theirs, refuse the buffer protocol (the `gpu` tests run the real ones).
    r = run_dev("""
        import importlib.util, types
        n = 1 << 16
        data = np.random.default_rng(9).integers(0, 256, n, dtype=np.uint8)
        data.tofile("in.bin")
        def error(**kw):
            try:
                accio.read("in.bin", **kw)
            except Exception as e:
                return f"{type(e).__name__}: {e}"
            raise SystemExit(f"accepted {kw}")
        if importlib.util.find_spec("cupy") is None:
            print(error(framework="cupy", device=0))
            print(error(device=0, dtype="float32"))
            g = accio.read("in.bin", device=0)      # no CuPy: an accio.DeviceArray of bytes
            assert isinstance(g, accio.DeviceArray) and g.to_bytes() == data.tobytes()
        if importlib.util.find_spec("torch") is None:
            print(error(framework="torch"))
        print(error(framework="jax"))
        print(error(framework="numpy", device="cuda:0"))
        print(error(out=accio.device_array(n), device=0))
        print(error(out=accio.device_array(n - 1)))

        cupy = types.ModuleType("cupy")
        cupy.devices = []
        class CuArray(DLPackOnly):
            def __init__(self, shape, dtype):
                self.shape, self.dtype = tuple(shape), np.dtype(dtype)
                super().__init__(accio.device_array(int(np.prod(shape)) * self.dtype.itemsize, cupy.devices[-1]))
            @property
            def __cuda_array_interface__(self):   # CuPy has both; DLPack must be the one used
                raise SystemExit("CAI used although DLPack is there")
        class Device:
            def __init__(self, i): cupy.devices.append(i)
            def __enter__(self): return self
            def __exit__(self, *e): pass
        cupy.empty = lambda shape, dtype: CuArray(shape, dtype)
        cupy.cuda = types.SimpleNamespace(Device=Device, runtime=types.SimpleNamespace(getDevice=lambda: 0))
        sys.modules["cupy"] = cupy
        g = accio.read("in.bin", device=0)
        assert isinstance(g, CuArray) and g.a.to_bytes() == data.tobytes() and g.streams == [1]
        g = accio.read("in.bin", framework="cupy", dtype="<u4", shape=(-1, 4), mechanism="naive")
        assert g.shape == (n // 16, 4) and g.dtype == np.uint32 and g.a.to_bytes() == data.tobytes()
        assert cupy.devices == [0, 0]
        print(error(framework="cupy", dtype="float64", shape=(3, -1)))
        print(error(framework="cupy", shape=(n + 1,)))

        torch = types.ModuleType("torch")
        class dtype:
            def __init__(self, name, size): self.name, self.size = name, size
        torch.dtype = dtype
        for name, size in (("uint8", 1), ("float32", 4), ("bfloat16", 2)):
            setattr(torch, name, dtype(name, size))
        class Tensor:   # PyTorch tensors: DLPack, no buffer protocol
            def __init__(self, shape, dtype, device):
                self.shape, self.dt, self.device, self.streams = tuple(shape), dtype, device, []
                nbytes = int(np.prod(shape)) * dtype.size
                self.mem = np.zeros(nbytes, np.uint8) if device == "cpu" else accio.device_array(nbytes, device)
            def element_size(self): return self.dt.size
            def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
                self.streams.append(stream)
                return self.mem.__dlpack__(stream=stream, max_version=max_version)
            def __dlpack_device__(self): return self.mem.__dlpack_device__()
            def to_bytes(self): return self.mem.tobytes() if self.device == "cpu" else self.mem.to_bytes()
        torch.empty = lambda shape, dtype, device="cpu": Tensor(shape, dtype, device)
        sys.modules["torch"] = torch
        t = accio.read("in.bin", framework="torch")   # a CPU tensor, through CPU DLPack
        assert t.device == "cpu" and t.shape == (n,) and t.to_bytes() == data.tobytes()
        t = accio.read("in.bin", device="cuda:0", framework="torch", dtype="bfloat16", shape=(2, -1))
        assert t.device == "cuda:0" and t.shape == (2, n // 4) and t.dt is torch.bfloat16 and t.streams == [1]
        assert t.to_bytes() == data.tobytes()
        t = accio.read("in.bin", device=0, framework="torch", dtype=torch.float32)
        assert t.shape == (n // 4,) and t.to_bytes() == data.tobytes()
        t = accio.read("in.bin", device=0, framework="torch", dtype=np.float32)   # numpy names map over
        assert t.dt is torch.float32
        print(error(framework="torch", dtype="complex64"))
        print("ok")
    """, fake_lib, no_host_buffer, tmp_path)
    out = r.stdout
    assert out.strip().endswith("ok")
    assert "ValueError: framework 'jax': expected 'numpy', 'cupy' or 'torch'" in out
    assert "ValueError: framework='numpy' holds host memory, not device='cuda:0'" in out
    assert "TypeError: accio.read(out=...) fills out as it is" in out
    assert f"ValueError: read 'in.bin': the file has {1 << 16} bytes, out holds {(1 << 16) - 1}" in out
    assert "do not fill shape (3, -1) of float64" in out
    assert f"the file has {1 << 16} bytes; shape ({(1 << 16) + 1},) of uint8 needs {(1 << 16) + 1}" in out
    assert "TypeError: dtype 'complex64': PyTorch has no complex64 type" in out
    import importlib.util
    if importlib.util.find_spec("cupy") is None:
        assert "ImportError: accio.read(framework='cupy') needs cupy" in out and "pip install cupy-cuda12x" in out
        assert "ImportError: accio.read(device=..., dtype/shape) returns a typed GPU array" in out
    if importlib.util.find_spec("torch") is None:
        assert "ImportError: accio.read(framework='torch') needs torch" in out and "pip install torch" in out


def test_offload_memory_calls_take_device_arrays(fake_lib, no_host_buffer, tmp_path, tmp_path_factory):
    # The worker addresses host memory: GPU arrays go through a host copy, in and out.
    kernels = compile_shared(tmp_path_factory, "offload/kernels.c", "libkernels.so", "-fopenmp")
    run_dev(f"""
        from accio import offload
        n = (1 << 20) + 3
        src = np.random.default_rng(4).integers(0, 256, n, dtype=np.uint8)
        plus = lambda k: ((np.arange(n) + k) % 256).astype(np.uint8).tobytes()
        with offload.Proc() as proc:
            lib = proc.load_library({kernels!r})
            ctx = proc.open_context()
            ptr = proc.alloc_mem(n)
            sum_in = lib.k_sum_in.args_type("unsigned char *", "uint64_t")
            fill = lib.k_fill_out.args_type("unsigned char *", "uint64_t", "uint64_t")
            inc = lib.k_inc_inout.args_type("unsigned char *", "uint64_t")
            for make in (CuPyLike, DLPackOnly, lambda a: a):
                dev = accio.device_array(n)
                dev.copy_from(src)
                proc.write_mem(ptr, make(dev))
                back = accio.device_array(n)
                proc.read_mem(make(back), ptr)
                assert back.to_bytes() == src.tobytes()
                got = accio.device_array(n - 1)
                ctx.async_write_mem(ptr + 1, make(dev), n - 1).wait_result()
                ctx.async_read_mem(make(got), ptr + 1).wait_result()
                assert got.to_bytes() == src[:-1].tobytes()
                assert sum_in(ctx, offload.OnStack(make(dev)), n).wait_result() == int(src.sum())
                out = accio.device_array(n)
                assert fill(ctx, offload.OnStack(make(out), inout=offload.INTENT_OUT), n, 5).wait_result() == n
                assert out.to_bytes() == plus(5)
                inc(ctx, offload.OnStack(make(out), inout=offload.INTENT_INOUT), n).wait_result()
                assert out.to_bytes() == plus(6)
                proc.call_sync(inc, offload.OnStack(make(out), inout=offload.INTENT_INOUT), n)
                assert out.to_bytes() == plus(7)
                try:
                    proc.read_mem(make(back), ptr, n + 1)
                    raise SystemExit("nbytes larger than the buffer accepted")
                except ValueError as e:
                    assert f"nbytes {{n + 1}} does not fit the buffer ({{n}} bytes)" in str(e), e
        print("ok")
    """, fake_lib, no_host_buffer, tmp_path)


# ---- a real GPU ----
def _gpu_lib(name):
    ok, why = accio.cuda_available()
    if not ok:
        pytest.skip(why)
    return pytest.importorskip(name)


@pytest.mark.gpu
@pytest.mark.parametrize("mech", ["naive", "staged", "staged+direct", "gds", "auto"])
@pytest.mark.parametrize("n", [0, 1, 4095, (16 << 20) + 5, 1 << 30])
def test_cupy_round_trip(mech, n, tmp_path):
    cp = _gpu_lib("cupy")
    name, _, direct = mech.partition("+")
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    data.tofile(tmp_path / "in")
    with accio.open(tmp_path / "in", mechanism=name, direct=bool(direct)) as f:
        a = cp.empty(n + 3, dtype=cp.uint8)[3:]  # unaligned device address
        assert f.read_into(a, 0) == n
    assert cp.asnumpy(a).tobytes() == data.tobytes()
    with accio.open(tmp_path / "out", "w", mechanism=name, direct=bool(direct)) as f:
        assert f.write_from(a, 4093) == n
    assert np.fromfile(tmp_path / "out", dtype=np.uint8)[4093:].tobytes() == data.tobytes()


@pytest.mark.gpu
def test_cupy_through_read_write_and_every_entry_point(tmp_path):
    cp = _gpu_lib("cupy")
    n = (8 << 20) + 3
    data = np.random.default_rng(5).integers(0, 256, n, dtype=np.uint8)
    data.tofile(tmp_path / "in")
    g = accio.read(tmp_path / "in", device=0)  # the default on a device with CuPy installed
    assert isinstance(g, cp.ndarray) and g.dtype == cp.uint8 and cp.asnumpy(g).tobytes() == data.tobytes()
    g = accio.read(tmp_path / "in", device="cuda:0", framework="cupy", mechanism="staged")
    assert isinstance(g, cp.ndarray) and cp.asnumpy(g).tobytes() == data.tobytes()
    (tmp_path / "f4").write_bytes(data[:n - 3].tobytes())
    g = accio.read(tmp_path / "f4", device=0, framework="cupy", dtype="float32", shape=(-1, 2))
    assert g.shape == ((n - 3) // 8, 2) and cp.asnumpy(g).tobytes() == data[:n - 3].tobytes()
    out = cp.zeros(n, dtype=cp.uint8)
    assert accio.read(tmp_path / "in", out=out) is out and cp.asnumpy(out).tobytes() == data.tobytes()
    assert accio.write(tmp_path / "out", g) == n - 3
    assert (tmp_path / "out").read_bytes() == data[:n - 3].tobytes()
    half = n // 2
    lo, hi = cp.empty(half, dtype=cp.uint8), cp.empty(n - half, dtype=cp.uint8)
    with accio.open(tmp_path / "in") as f:
        assert [x.result() for x in f.submit([(lo, 0), (hi, half)])] == [half, n - half]
        assert f.read_into_async(out).result() == n
    assert cp.asnumpy(cp.concatenate([lo, hi])).tobytes() == data.tobytes()
    with accio.open(tmp_path / "out", "w") as f:
        assert f.write_from_async(out).result() == n
    assert (tmp_path / "out").read_bytes() == data.tobytes()
    assert accio._ext.mem_kind(out) == ("device", 0)


@pytest.mark.gpu
def test_work_queued_on_a_side_stream_is_waited_for(tmp_path):
    # The producer's kernel runs on a non-blocking stream when accio is called: CuPy's and PyTorch's
    # DLPack exports make accio's stream wait for it, and accio synchronizes before copying.
    cp = _gpu_lib("cupy")
    n = 512 << 20
    for rep in range(3):
        with cp.cuda.Stream(non_blocking=True):
            a = (cp.arange(n, dtype=cp.uint32) * 2654435761 % 251 + rep).astype(cp.uint8)
            accio.write(tmp_path / "out", a, mechanism="staged")
            want = cp.asnumpy(a)
        assert np.fromfile(tmp_path / "out", dtype=np.uint8).tobytes() == want.tobytes(), rep
    torch = pytest.importorskip("torch")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        t = (torch.arange(n, device="cuda", dtype=torch.int64) * 2654435761 % 251).to(torch.uint8)
        accio.write(tmp_path / "out", t, mechanism="naive")
        want = t.cpu().numpy()
    assert np.fromfile(tmp_path / "out", dtype=np.uint8).tobytes() == want.tobytes()


@pytest.mark.gpu
@pytest.mark.parametrize("mech", ["naive", "staged", "gds"])
def test_torch_round_trip_and_read_to_device(mech, tmp_path):
    torch = _gpu_lib("torch")
    data = np.random.default_rng(3).integers(0, 256, (32 << 20) + 7, dtype=np.uint8)
    data.tofile(tmp_path / "in")
    t = torch.empty(data.size, dtype=torch.uint8, device="cuda")
    with accio.open(tmp_path / "in", mechanism=mech, threads=4) as f:
        assert f.read_into(t) == data.size
    assert t.cpu().numpy().tobytes() == data.tobytes()
    with accio.open(tmp_path / "out", "w", mechanism=mech) as f:
        f.write_from(t)
    assert np.fromfile(tmp_path / "out", dtype=np.uint8).tobytes() == data.tobytes()
    g = accio.read(tmp_path / "in", device="cuda:0", framework="torch", mechanism=mech)
    assert isinstance(g, torch.Tensor) and g.is_cuda and g.cpu().numpy().tobytes() == data.tobytes()
    g = accio.read(tmp_path / "in", device=0, framework="torch", dtype=torch.uint8, shape=(1, -1))
    assert g.shape == (1, data.size) and g.cpu().numpy().tobytes() == data.tobytes()
    out = torch.zeros(data.size, dtype=torch.uint8, device="cuda")
    assert accio.read(tmp_path / "in", out=out) is out and out.cpu().numpy().tobytes() == data.tobytes()
    assert accio.write(tmp_path / "out", out) == data.size
    assert np.fromfile(tmp_path / "out", dtype=np.uint8).tobytes() == data.tobytes()
    c = accio.read(tmp_path / "in", framework="torch")  # a CPU tensor
    assert c.device.type == "cpu" and c.numpy().tobytes() == data.tobytes()


@pytest.mark.gpu
def test_torch_pinned_cpu_tensor(tmp_path):
    """A DataLoader(pin_memory=True) batch: a pinned CPU tensor, kDLCUDAHost from __dlpack_device__,
    read into and written from as host memory (test_a_pinned_torch_cpu_tensor_is_host_memory is
    the fake-driver version)."""
    torch = _gpu_lib("torch")
    data = np.random.default_rng(5).integers(0, 256, (8 << 20) + 3, dtype=np.uint8)
    data.tofile(tmp_path / "in")
    t = torch.empty(data.size, dtype=torch.uint8, pin_memory=True)
    assert t.is_pinned()
    for mech in ("auto", "posix", "parallel"):
        t.zero_()
        with accio.open(tmp_path / "in", mechanism=mech) as f:
            assert f.read_into(t) == data.size
        assert t.numpy().tobytes() == data.tobytes(), mech
    assert accio.write(tmp_path / "out", t) == data.size
    assert np.fromfile(tmp_path / "out", dtype=np.uint8).tobytes() == data.tobytes()
    assert t.cuda(non_blocking=True).cpu().numpy().tobytes() == data.tobytes()


@pytest.mark.gpu
def test_appends_from_a_cuda_tensor_and_cuda_as_the_current_gpu(tmp_path):
    """On the real runtime, what the twentieth session proved on the fake only: an append from GPU
    memory (copied whole to the host, one O_APPEND write) lands after the file's bytes and after
    another writer's; and "cuda" without an index is the calling thread's current GPU as
    torch.cuda.set_device makes it, seen by the C function too (accio_cuda_current_device: the GPU
    of the thread's current context, which set_device makes current)."""
    torch = _gpu_lib("torch")
    log = tmp_path / "log"
    log.write_bytes(b"head")
    data = torch.randint(0, 256, ((3 << 20) + 5,), dtype=torch.uint8, device="cuda:0")
    with accio.open(log, "a") as f:
        assert f.append(data) == 4
        with open(log, "ab") as other:
            other.write(b"XY")
        assert f.append(data[:4097]) == 6 + data.numel()
    host = data.cpu().numpy().tobytes()
    assert log.read_bytes() == b"head" + host + b"XY" + host[:4097]
    for dev in range(torch.cuda.device_count()):
        torch.cuda.set_device(dev)
        assert accio._ext.cuda_current_device() == dev
        got = accio.read(log, device="cuda", framework="torch")
        assert got.device == torch.device("cuda", dev) and got.cpu().numpy().tobytes() == log.read_bytes()
    torch.cuda.set_device(0)


@pytest.mark.gpu
def test_torch_float4_tensors_move_every_byte(tmp_path):
    """A real float4_e2m1fn_x2 CUDA tensor (PyTorch 2.10+: DLPack bits 4 x lanes 2), read into and
    written from whole."""
    torch = _gpu_lib("torch")
    if not hasattr(torch, "float4_e2m1fn_x2"):
        pytest.skip(f"torch {torch.__version__} has no float4_e2m1fn_x2")
    n = (1 << 20) + 3
    data = os.urandom(n)
    (tmp_path / "in").write_bytes(data)
    t = torch.empty(n, dtype=torch.float4_e2m1fn_x2, device="cuda")
    with accio.open(tmp_path / "in") as f:
        assert f.read_into(t) == n
    assert t.view(torch.uint8).cpu().numpy().tobytes() == data
    assert accio.write(tmp_path / "out", t) == n
    assert (tmp_path / "out").read_bytes() == data


@pytest.mark.gpu
def test_torch_tensor_on_a_second_gpu_from_any_thread(tmp_path):
    """PyTorch refuses to export a tensor of another GPU than the current one: accio makes the
    tensor's GPU current for the export, whichever GPU the calling thread had (two GPUs needed)."""
    torch = _gpu_lib("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU here")
    import threading
    data = np.random.default_rng(6).integers(0, 256, (4 << 20) + 1, dtype=np.uint8)
    data.tofile(tmp_path / "in")
    t = torch.empty(data.size, dtype=torch.uint8, device="cuda:1")
    results = []
    def read():
        with accio.open(tmp_path / "in", mechanism="staged") as f:
            results.append(f.read_into(t))
    read()
    th = threading.Thread(target=read)
    th.start()
    th.join()
    assert results == [data.size] * 2 and t.cpu().numpy().tobytes() == data.tobytes()
    g = accio.read(tmp_path / "in", device="cuda:1", framework="torch")
    assert g.device.index == 1 and g.cpu().numpy().tobytes() == data.tobytes()


@pytest.fixture(scope="module")
def msync_fails(tmp_path_factory):
    return compile_shared(tmp_path_factory, "python/msync_fails.c", "msync_fails.so")


@pytest.mark.parametrize("unmapped", [False, True], ids=["mapped", "unmapped"])
@pytest.mark.parametrize("size", [3 << 20, (9 << 20) + 5])
def test_accio_run_serves_read_into_device_memory(fake_lib, msync_fails, tmp_path, size, unmapped):
    """An unmodified program's read(2) into GPU memory fails with EFAULT; under `accio run` the shim
    hands it to the engine, which sees a device pointer and runs staged. `unmapped`: the device
    memory lies in no mapping of the process (msync says ENOMEM, as a real GPU's may: the fake's is
    a PROT_NONE mapping); the shim passed such buffers to libc until the eighteenth session."""
    data = os.urandom(size)
    (tmp_path / "in").write_bytes(data)
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(f"""
        import ctypes, os, accio
        libc = ctypes.CDLL(None, use_errno=True)
        a = accio.device_array({len(data)})
        fd = os.open({str(tmp_path / 'in')!r}, os.O_RDONLY)
        r = libc.read(fd, ctypes.c_void_p(a.ptr), ctypes.c_size_t({len(data)}))
        print("read", r, ctypes.get_errno(), a.to_bytes() == open({str(tmp_path / 'in')!r}, "rb").read())
    """))
    env = dict(os.environ, ACCIO_LIBCUDA=fake_lib, ACCIO_QUIET="1", ACCIO_PROFILE="off")
    if unmapped:
        env["LD_PRELOAD"] = msync_fails  # accio run puts the shim in front of it
    plain = subprocess.run([sys.executable, str(prog)], env=env, capture_output=True, text=True, check=True).stdout
    assert plain.startswith("read -1 14 ")  # EFAULT: the kernel cannot address device memory
    shim = subprocess.run([*ACCIO, "run", "--", sys.executable, str(prog)], env=env, capture_output=True, text=True,
                          check=True).stdout
    assert f"read {len(data)} " in shim and shim.strip().endswith("True"), shim


@pytest.mark.gpu
def test_accio_run_serves_read_into_real_device_memory(tmp_path, record_property):
    """The same on a real GPU: a program's read(2) into a PyTorch CUDA tensor's memory, whatever
    mapping (or none) the driver gives its address in the process."""
    _gpu_lib("torch")
    data = os.urandom((9 << 20) + 5)
    (tmp_path / "in").write_bytes(data)
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(f"""
        import ctypes, os, torch
        libc = ctypes.CDLL(None, use_errno=True)
        t = torch.zeros({len(data)}, dtype=torch.uint8, device="cuda")
        fd = os.open({str(tmp_path / 'in')!r}, os.O_RDONLY)
        page = t.data_ptr() & ~4095
        mapped = libc.msync(ctypes.c_void_p(page), ctypes.c_size_t(4096), 1) == 0  # MS_ASYNC
        r = libc.read(fd, ctypes.c_void_p(t.data_ptr()), ctypes.c_size_t({len(data)}))
        print("mapped", mapped)
        print("read", r, ctypes.get_errno(), bytes(t.cpu().numpy()) == open({str(tmp_path / 'in')!r}, "rb").read())
    """))
    env = dict(os.environ, ACCIO_QUIET="1")
    shim = subprocess.run([*ACCIO, "run", "--", sys.executable, str(prog)], env=env, capture_output=True, text=True,
                          check=True).stdout
    # which case the driver's addresses are (recorded for make gpu-check: the fake cannot say), then
    # the read either way
    record_property("device_address_in_a_host_mapping", shim.splitlines()[0].split()[-1])
    assert f"read {len(data)} " in shim and shim.strip().endswith("True"), shim


def test_pinned_empty_registers_with_the_driver_and_falls_back_to_mlock(fake_lib, tmp_path):
    """With a driver, accio.pinned_empty's memory is registered (the driver calls it pinned) and
    unregistered when freed; when the driver refuses, it is mlock'ed, with one warning naming why."""
    code = '''
        import ctypes, gc, os, warnings, accio, numpy as np
        b = accio.pinned_empty(3 << 20)
        kind = accio._ext.mem_kind(b)[0]
        fake = ctypes.CDLL(os.environ["ACCIO_LIBCUDA"])
        np.frombuffer(b, np.uint8)[:] = 7
        d = accio.device_array(len(b))
        accio._ext.copy(d, b)
        addr = b.address
        print(b.pinned, kind, d.to_bytes() == bytes([7]) * len(b))
        del b; gc.collect()
    '''
    r = run_py(code, fake_lib, tmp_path)
    assert r.stdout.split() == ["cuda", "pinned", "True"], r.stdout + r.stderr
    r = run_py('''
        import os, warnings
        os.environ.pop("ACCIO_QUIET")  # run_py sets it; this test wants the warning
        import accio
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            b = accio.pinned_empty(1 << 20)
        print(b.pinned, accio._ext.mem_kind(b)[0])
        print("|".join(str(x.message) for x in w))
    ''', fake_lib, tmp_path, FAKE_CUDA_FAIL_REGISTER="1")
    first, warned = r.stdout.splitlines()
    assert first == "mlock host"
    assert "cuMemHostRegister" in warned and "mlock" in warned


# The fake driver's counters (fake_counters_t: 22 uint64) for code run by run_py, indented as its
# code strings are: counters(), and pinned() for the bytes registered now.
FAKE_COUNTERS = """
        import ctypes, os
        fake = ctypes.CDLL(os.environ["ACCIO_LIBCUDA"])
        REGISTERED_BYTES, READONLY_REFUSED, POINTER_QUERIES = 18, 20, 21  # fake_counters_t's members
        def counters():
            c = (ctypes.c_uint64 * 22)()
            fake.fake_cuda_counters(c)
            return c
        def pinned():
            return counters()[REGISTERED_BYTES]
        def read_whole(path, n, **kw):  # a device array read from path: (array, plans by name, warnings)
            import accio, warnings
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                with accio.open(path, **kw) as f:
                    b = accio.device_array(n)
                    assert f.read_into(b, 0) == n
                    return b, {p["plan"]: p for p in f.stats()["plans"]}, w
"""


def test_pagecache_reads_device_arrays_from_the_page_cache_and_reports_fallbacks(fake_lib, tmp_path):
    """pagecache (issue 24) from Python: every device array kind, accio.read, auto's routing by size,
    the plan statistics, nothing left pinned, and a memlock refusal that runs staged with the reason."""
    r = run_py(FAKE_COUNTERS + """
        os.environ["ACCIO_QUIET"] = "0"  # the warning is part of the test
        import accio, numpy as np
        class CAI:
            def __init__(self, a): self.a = a; self.__cuda_array_interface__ = a.__cuda_array_interface__
        n = (9 << 20) + 5
        data = np.random.default_rng(2).integers(0, 256, n, dtype=np.uint8)
        data.tofile("in.bin")
        before = pinned()
        kw = dict(mechanism="pagecache", pagecache_min=0, pagecache_chunk="1m", threads=3)
        for wrap in (lambda a: a, CAI):
            a = accio.device_array(n)
            with accio.open("in.bin", **kw) as f:
                assert f.read_into(wrap(a), 0) == n
                st = f.stats()
            assert st["last_mechanism"] == "pagecache", st
            plans = {p["plan"]: p for p in st["plans"]}
            assert plans["pagecache(zero-copy)"]["bytes"] > 0, plans
            assert a.to_bytes() == data.tobytes()
        g = accio.read("in.bin", device="cuda:0", **kw)
        assert g.to_bytes() == data.tobytes()
        assert pinned() == before, "every registration released"
        # auto (built-in device rule): staged at every size.
        a = accio.device_array(n)
        with accio.open("in.bin") as f:
            f.read_into(a, 0)
            big = f.stats()["last_mechanism"]
            small = accio.device_array(1 << 20)
            f.read_into(small, 4096)
            assert f.stats()["last_mechanism"] == "staged"
            assert small.to_bytes() == data[4096:4096 + (1 << 20)].tobytes()
        assert big == "staged" and a.to_bytes() == data.tobytes(), big
        # A memlock limit that binds: staged runs, the reason is in the statistics and a warning.
        before = pinned()  # staging rings (kept for the process) registered since
        os.environ["FAKE_CUDA_MEMLOCK"] = str(before)
        b, plans, w = read_whole("in.bin", n, **kw)
        del os.environ["FAKE_CUDA_MEMLOCK"]
        assert b.to_bytes() == data.tobytes()
        assert "registration refused: cuMemHostRegister: CUDA_ERROR_OUT_OF_MEMORY" in plans["pagecache(staged)"]["why"], plans
        assert plans["pagecache(staged)"]["bytes"] == n and "pagecache(zero-copy)" not in plans, plans
        assert any("pagecache cannot pin page-cache pages" in str(x.message) for x in w), [str(x.message) for x in w]
        assert pinned() == before
        print("ok")
    """, fake_lib, tmp_path)
    assert "ok" in r.stdout


def test_pagecache_asks_once_per_worker_and_heeds_a_device_without_read_only_registration(fake_lib, tmp_path):
    """A refused registration is not retried chunk after chunk (one refusal per worker, the rest of
    its range staged), and a device that reports no READ_ONLY host registration
    (CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED = 0) runs staged without trying, with the
    reason in the statistics and one warning."""
    code = FAKE_COUNTERS + """
        os.environ["ACCIO_QUIET"] = "0"
        import accio, numpy as np
        n = (9 << 20) + 5
        data = np.random.default_rng(3).integers(0, 256, n, dtype=np.uint8)
        data.tofile("in.bin")
        kw = dict(mechanism="pagecache", pagecache_min=0, pagecache_chunk="1m", threads=3)
        if os.environ.get("LIMIT"):
            # staged's rings (kept for the process) registered first, by a read as wide as the one
            # below, then the limit at what is pinned: only pagecache's pins are refused after it
            with accio.open("in.bin", mechanism="staged", threads=3) as f:
                f.read_into(accio.device_array(n), 0)
            os.environ["FAKE_CUDA_MEMLOCK"] = str(pinned())
        # pagecache's pins only (READ_ONLY): a worker that falls back to staged may also find no
        # staging ring free and have one registered (refused under the limit too), depending on how
        # many rings the read above left, which depends on how the pool ran its tasks
        refused = counters()[READONLY_REFUSED]
        b, plans, w = read_whole("in.bin", n, **kw)
        assert b.to_bytes() == data.tobytes()
        print(counters()[READONLY_REFUSED] - refused)
        print(plans["pagecache(staged)"]["why"], plans["pagecache(staged)"]["bytes"] == n, "pagecache(zero-copy)" in plans)
        print(sum("pagecache" in str(x.message) for x in w))
    """
    r = run_py(code, fake_lib, tmp_path, LIMIT="1")
    refusals, why, warned = r.stdout.splitlines()
    assert 1 <= int(refusals) <= 3, r.stdout + r.stderr  # one per worker at most, not one per 1 MiB chunk
    assert why.startswith("registration refused: cuMemHostRegister") and why.endswith("True False"), why
    assert warned == "1", r.stdout
    r = run_py(code, fake_lib, tmp_path, FAKE_CUDA_NO_READONLY_REGISTER="1")
    refusals, why, warned = r.stdout.splitlines()
    assert refusals == "0", r.stdout + r.stderr
    assert "READ_ONLY_HOST_REGISTER_SUPPORTED is 0" in why and why.endswith("True False"), why
    assert warned == "1", r.stdout


def test_ctrl_c_stops_waiting_for_a_future(fake_lib, no_host_buffer, tmp_path):
    """Future.result() waited in one uninterruptible call until the request completed; Ctrl-C now
    stops the wait, as it stops concurrent.futures' (the request itself runs on). A device copy the
    fake makes last 3 s stands in for a long request."""
    r = run_dev("""
        import signal, time
        n = 1 << 20
        np.zeros(n, np.uint8).tofile("in.bin")
        a = accio.device_array(n)
        def interrupt(*_):
            raise KeyboardInterrupt
        signal.signal(signal.SIGALRM, interrupt)
        with accio.open("in.bin", mechanism="staged") as f:  # its copies are the fake's slow async ones
            fut = f.read_into_async(a)
            t0 = time.monotonic()
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            try:
                fut.result()
                raise SystemExit("the wait was not interrupted")
            except KeyboardInterrupt:
                waited = time.monotonic() - t0
            assert waited < 2.0, waited  # the copy takes 3 s
            assert fut.result() == n     # waited for again: the request ran on
        print("ok")
    """, fake_lib, no_host_buffer, tmp_path, FAKE_CUDA_COPY_US="3000000")
    assert r.stdout.strip().endswith("ok")
