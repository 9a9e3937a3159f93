"""The CUDA back end from Python.

Tests marked `gpu` need a real GPU (CuPy or PyTorch) and skip cleanly without one. The others run
everywhere: they build tests/fake_cuda (a stand-in libcuda and libcufile whose device memory faults
on any host access) and run accio in a subprocess pointed at it with ACCIO_LIBCUDA, or at a missing
library to check the fallbacks."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import compile_shared

import accio

ACCIO = [sys.executable, "-m", "accio.cli"]


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory):
    return compile_shared(tmp_path_factory, "fake_cuda/fake_cuda.c", "libfakecuda.so", "-pthread")


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


def test_submit_many_small_device_requests_under_gds(fake_lib, tmp_path):
    # gds runs them as cuFile batches; each future has its own result, errors included.
    run_py("""
        import os, accio, numpy as np
        data = np.random.default_rng(2).integers(0, 256, 1 << 20, dtype=np.uint8)
        data.tofile("in.bin")
        bufs = [accio.device_array(1000 + i) for i in range(200)]
        offs = [i * 5000 + 3 for i in range(200)]
        with accio.open("in.bin", mechanism="gds") as f:
            got = [fu.result() for fu in f.submit(zip(bufs, offs))]
            assert got == [1000 + i for i in range(200)], got
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
    """, fake_lib, tmp_path)


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
        except ValueError as e:
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
        files = {{m: accio.open("in.bin", mechanism=m, threads=2, task_size="1m") for m in ("posix", "parallel", "auto", "direct")}}
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
        host, zeros = np.empty_like(data), np.zeros_like(data)
        for m, f in files.items():
            assert cu.cuMemcpyHtoD_v2(ptr.value, zeros.ctypes.data, data.nbytes) == 0
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
    assert cols == {"naive", "staged", "gds", "host", "pinned-copy"}, cols
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


def test_kvikio_comparison_script_runs_and_checks_bytes(fake_lib, tmp_path):
    # bench/gpu_vs_kvikio.py measures on a GPU; here it runs accio's side against the fake driver so
    # the script cannot rot between GPU sessions. Without KvikIO it says so and gives no ratio.
    env = dict(os.environ, ACCIO_LIBCUDA=fake_lib, ACCIO_LIBCUFILE=fake_lib, ACCIO_QUIET="1", ACCIO_PROFILE="off")
    script = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu_vs_kvikio.py")
    r = subprocess.run([sys.executable, script, "--dir", str(tmp_path), "--size", "6m", "--task-size", "1m",
                        "--threads", "2", "--rounds", "2", "--no-peer", "--json", str(tmp_path / "k.json")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.load(open(tmp_path / "k.json"))
    assert res["checks"] == {"accio": {"read": True, "write": True}}
    assert set(res["samples_mib_s"]["accio"]) == {"hot-read", "write", "write+sync"}
    assert all(len(v) == 2 and min(v) > 0 for v in res["samples_mib_s"]["accio"].values())
    assert res["accio_over_kvikio"] is None and "--no-peer" in res["peer"]
    assert not [p for p in os.listdir(tmp_path) if p.startswith("accio-vs-kvikio")], "temporary files left"


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
    g = accio.read(tmp_path / "in", device="cuda:0")
    assert torch.as_tensor(g, device="cuda").cpu().numpy().tobytes() == data.tobytes()


def test_accio_run_serves_read_into_device_memory(fake_lib, tmp_path):
    """An unmodified program's read(2) into GPU memory fails with EFAULT; under `accio run` the shim
    hands it to the engine, which sees a device pointer and runs staged."""
    data = os.urandom(3 << 20)
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
    plain = subprocess.run([sys.executable, str(prog)], env=env, capture_output=True, text=True, check=True).stdout
    assert plain.startswith("read -1 14 ")  # EFAULT: the kernel cannot address device memory
    shim = subprocess.run([*ACCIO, "run", "--", sys.executable, str(prog)], env=env, capture_output=True, text=True,
                          check=True).stdout
    assert f"read {len(data)} " in shim and shim.strip().endswith("True"), shim
