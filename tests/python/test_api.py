"""Python API: open/read_into/write_from with every buffer kind and mechanism, async, batches,
convenience read/write, settings, stats, and errors as OSError subclasses."""
import errno
import mmap
import os
import subprocess
import sys

import numpy as np
import pytest

import accio
from conftest import POSIX_PROFILE


def test_version_and_mechanisms():
    assert accio.__version__ == "0.1.0"
    names = [m[0] for m in accio.mechanisms()]
    assert names == ["posix", "parallel", "direct", "uring", "naive", "staged", "gds", "pagecache"]
    assert [accio._ext.mechanism_is_device(n) for n in names] == [False] * 4 + [True] * 4


@pytest.mark.parametrize("kind", ["bytearray", "memoryview", "numpy", "numpy2d", "mmap", "dlpack"])
def test_round_trip_every_buffer_kind(tmp_path, mechanism, kind):
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, size=17 * 185_001, dtype=np.uint8)  # 3 MiB + 17 B, divisible by 17

    def make(n):
        if kind == "bytearray":
            return bytearray(n)
        if kind == "memoryview":
            return memoryview(bytearray(n))
        if kind == "numpy":
            return np.zeros(n, dtype=np.uint8)
        if kind == "numpy2d":
            return np.zeros((n // 17, 17), dtype=np.uint8)
        if kind == "mmap":
            return mmap.mmap(-1, n)
        return _DLPackOnly(np.zeros(n, dtype=np.uint8))

    p = tmp_path / "f.bin"
    with accio.open(p, "w+", mechanism=mechanism, task_size="256k", threads=3) as f:
        src = make(data.nbytes)
        np.frombuffer(_raw(src), dtype=np.uint8)[:] = data
        assert f.write_from(src, offset=5) == data.nbytes
        assert f.size == data.nbytes + 5
        dst = make(data.nbytes)
        assert f.read_into(dst, offset=5) == data.nbytes
        assert np.array_equal(np.frombuffer(_raw(dst), dtype=np.uint8), data)
        st = f.stats()
        assert st["reads"] == 1 and st["writes"] == 1 and st["bytes_written"] == data.nbytes
        assert st["last_mechanism"] in ("posix", "parallel", "direct", "uring")
    assert p.read_bytes()[5:] == data.tobytes()


class _DLPackOnly:
    """An object that offers only DLPack (like a PyTorch CPU tensor), not the buffer protocol."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, **kw):
        return self.arr.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


def _raw(buf):
    return buf.arr if isinstance(buf, _DLPackOnly) else buf


def test_bytes_is_accepted_for_writes_but_not_reads(tmp_path):
    with accio.open(tmp_path / "b", "w+") as f:
        assert f.write_from(b"hello world") == 11
        with pytest.raises((BufferError, TypeError)):
            f.read_into(b"immutable!!")


def test_dlpack_lanes_count_in_the_byte_size(tmp_path):
    """PyTorch 2.10+ exports float4_e2m1fn_x2 (one byte: two 4-bit values) as bits 4 x lanes 2;
    nanobind's byte count leaves the lanes out, which read and wrote half of such a tensor with no
    error (GPU audit, session 23). A packed sub-byte element (bits 4, lanes 1) is refused."""
    from dlpack_stub import Producer, host_float4_x2
    n = (1 << 20) + 3
    data = os.urandom(n)
    (tmp_path / "in").write_bytes(data)
    t, mem = host_float4_x2(n)
    with accio.open(tmp_path / "in") as f:
        assert f.read_into(t, 0) == n
    assert bytes(mem) == data
    assert accio.write(tmp_path / "out", host_float4_x2(n)[0]) == n
    with accio.open(tmp_path / "out2", "w") as f:
        assert f.write_from(t) == n
    assert (tmp_path / "out2").read_bytes() == data
    packed = Producer(t.address, 2 * n, 17, 4, 1, keep=mem)  # 2n 4-bit values, packed
    with accio.open(tmp_path / "in") as f, pytest.raises(TypeError, match=r"4 bits x 1 lanes .*not whole bytes.*uint8"):
        f.read_into(packed, 0)
    assert bytes(mem) == data  # refused before anything moved


def test_a_torch_tensor_whose_dtype_has_no_export_moves_as_its_uint8_view(tmp_path):
    """PyTorch before 2.10 exports no float8 tensor ("float8 types are not supported by dlpack",
    RuntimeError, later BufferError; no CAI typestr either): accio moves its uint8 view, the same
    memory. Only for torch tensors of one-byte elements; a view that fails too leaves the tensor's own
    error. A stand-in torch module and tensor class (GPU audit, session 23)."""
    (tmp_path / "in").write_bytes(bytes(range(256)) * 16)
    r = subprocess.run([sys.executable, "-c", """
import sys, types, numpy as np, accio
torch = types.ModuleType("torch")
torch.uint8 = "uint8"
sys.modules["torch"] = torch
class Tensor:
    __module__ = "torch"
    def __init__(self, a, err, view_ok=True, itemsize=1):
        self.a, self.err, self.view_ok = a, err, view_ok
        self.dtype = types.SimpleNamespace(itemsize=itemsize)  # torch.float8_e4m3fn's is 1
    def __dlpack_device__(self): return (1, 0)
    def __dlpack__(self, **kw): raise self.err("float8 types are not supported by dlpack")
    def view(self, dtype):
        assert dtype == "uint8"
        if not self.view_ok: raise RuntimeError("no view")
        return self.a
class Other(Tensor):
    __module__ = "jax"
want = np.fromfile("in", dtype=np.uint8)
for err in (RuntimeError, BufferError):
    a = np.zeros(4096, np.uint8)
    with accio.open("in") as f:
        assert f.read_into(Tensor(a, err)) == 4096
    assert (a == want).all()
    assert accio.write("out", Tensor(want, err)) == 4096
    assert (np.fromfile("out", dtype=np.uint8) == want).all()
for t in (Other(np.zeros(4096, np.uint8), BufferError), Tensor(np.zeros(4096, np.uint8), BufferError, view_ok=False),
          Tensor(np.zeros(4096, np.uint8), BufferError, itemsize=2)):  # not a one-byte dtype: no retry
    try:
        with accio.open("in") as f:
            f.read_into(t)
        raise SystemExit("accepted")
    except BufferError as e:
        assert "float8 types are not supported" in str(e), e
print("ok")
"""], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


class _ParameterLike:
    """A PyTorch nn.Parameter (or any tensor that requires grad) as accio sees it: requires_grad is
    True, DLPack and __cuda_array_interface__ exports are refused with torch's messages, and
    detach() is the same storage (here a numpy array)."""

    def __init__(self, arr, requires_grad=True):
        self.arr, self.requires_grad = arr, requires_grad

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, **kw):
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")

    def detach(self):
        return self.arr


def test_a_tensor_that_requires_grad_is_read_into_through_its_detach(tmp_path):
    """f.read_into(model.weight): torch refuses to export a parameter, whose detach() shares its
    storage; accio uses that, as load_state_dict copies into parameters."""
    data = np.random.default_rng(5).integers(0, 256, 70000, dtype=np.uint8)
    data.tofile(tmp_path / "w")
    weight = np.zeros(data.size, np.uint8)
    with accio.open(tmp_path / "w") as f:
        assert f.read_into(_ParameterLike(weight)) == data.size
    assert np.array_equal(weight, data)
    assert accio.write(tmp_path / "back", _ParameterLike(weight)) == data.size
    assert (tmp_path / "back").read_bytes() == data.tobytes()
    # Without requires_grad the export's own error stands: accio does not detach what it need not.
    with accio.open(tmp_path / "w") as f, pytest.raises(BufferError, match="require gradient"):
        f.read_into(_ParameterLike(weight, requires_grad=False))


def test_non_contiguous_array_is_rejected(tmp_path):
    with accio.open(tmp_path / "nc", "w+") as f:
        a = np.zeros((64, 64), dtype=np.uint8)[:, ::2]
        with pytest.raises((BufferError, ValueError)):
            f.write_from(a)


def test_read_and_write_convenience(tmp_path, mechanism):
    arr = np.arange(1_000_000, dtype=np.float64)
    p = tmp_path / "arr"
    assert accio.write(p, arr, mechanism=mechanism, fsync=True) == arr.nbytes
    back = accio.read(p, mechanism=mechanism)
    assert back.dtype == np.uint8 and back.nbytes == arr.nbytes
    assert np.array_equal(back.view(np.float64), arr)


def test_read_with_dtype_shape_and_out(tmp_path):
    # accio.read(path, *, device=None, framework=None, dtype=None, shape=None, out=None, **settings)
    arr = np.arange(24, dtype=np.float32)
    p = tmp_path / "f"
    arr.tofile(p)
    a = accio.read(p, dtype=np.float32)
    assert a.dtype == np.float32 and np.array_equal(a, arr)
    a = accio.read(p, dtype="<f4", shape=(2, -1), mechanism="parallel", threads=2)
    assert a.shape == (2, 12) and np.array_equal(a.ravel(), arr)
    a = accio.read(p, framework="numpy", shape=(4, 24))
    assert a.dtype == np.uint8 and a.tobytes() == arr.tobytes()
    for out in (bytearray(96), np.zeros((2, 12), np.float32), memoryview(bytearray(96))):
        assert accio.read(p, out=out) is out and bytes(out) == arr.tobytes()
    with pytest.raises(ValueError, match="not a whole number of .V7 elements .7 bytes each"):
        accio.read(p, dtype="V7")
    with pytest.raises(ValueError, match=r"shape \(5, 5\) of float32 needs 100"):
        accio.read(p, dtype=np.float32, shape=(5, 5))
    with pytest.raises(ValueError, match="at most one -1"):
        accio.read(p, shape=(-1, -1))
    with pytest.raises(ValueError, match="out holds 95"):
        accio.read(p, out=bytearray(95))
    with pytest.raises(TypeError, match="a read target must be writable: bytes is read-only"):
        accio.read(p, out=b"x" * 96)  # was the exporter's bare BufferError
    ro = np.zeros(96, np.uint8)
    ro.flags.writeable = False
    with pytest.raises(TypeError, match="is read-only"):
        accio.read(p, out=ro)  # through its DLPack export: was a ValueError
    with pytest.raises(TypeError, match="leave device, framework, dtype and shape unset"):
        accio.read(p, out=bytearray(96), dtype=np.float32)


@pytest.mark.parametrize("make", ["np.empty(12, dtype=object)", "np.zeros(8, dtype=[('a', '<i4'), ('b', 'O')])",
                                  "(ctypes.py_object * 12)()"], ids=["object", "structured", "ctypes"])
def test_memory_of_python_objects_is_refused_both_ways(tmp_path, make):
    """A NumPy array of dtype object exports its PyObject pointers through the buffer protocol:
    reading file bytes over them crashed the interpreter (SIGSEGV at the array's next decref), and
    writing one stored addresses. Refused with a TypeError either way; the buffer is released (the
    array stays usable) and a structured dtype with a field merely named O is data."""
    import ctypes
    p = tmp_path / "d"
    p.write_bytes(bytes(range(96)))
    code = f"""
import ctypes, numpy as np, accio
a = {make}
with accio.open({str(p)!r}) as f:
    try:
        f.read_into(a, 0)
    except TypeError as e:
        assert "holds Python objects" in str(e) and "pointers, not data" in str(e), e
    else:
        raise SystemExit("read over Python objects accepted")
del a
print("alive")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == "alive\n", (r.returncode, r.stdout, r.stderr)
    a = eval(make, {"np": np, "ctypes": ctypes})
    with accio.open(p, "r+") as f, pytest.raises(TypeError, match="holds Python objects"):
        f.write_from(a, 0)
    assert p.read_bytes() == bytes(range(96))
    if isinstance(a, np.ndarray):
        a.resize(0, refcheck=False)  # would raise BufferError had the view not been released
    named = np.zeros(8, dtype=[("O", "<i4")])
    with accio.open(p) as f:
        assert f.read_into(named, 0) == 32 and named["O"][1] == int.from_bytes(bytes(range(4, 8)), "little")
    with pytest.raises(TypeError):
        accio.read(p, "posix")  # mechanism is a keyword setting like the others
    with pytest.raises(ValueError, match="framework 'jax'"):
        accio.read(p, framework="jax")


def test_read_refuses_what_its_size_does_not_describe(tmp_path):
    """accio.read sizes its array by the file's size: a FIFO, a device or a /proc file gave an empty
    array (a FIFO's bytes consumed and lost). Now a ValueError before anything is read; an empty
    regular file is still an empty array."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    keep = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # both ends open: nothing blocks
    try:
        os.write(keep, b"hi")
        with pytest.raises(ValueError, match=r"a pipe \(FIFO\), not a regular file"):
            accio.read(fifo)
        assert os.read(keep, 16) == b"hi"  # the writer's bytes are still there
    finally:
        os.close(keep)
    with pytest.raises(ValueError, match="a character device"):
        accio.read("/dev/zero")
    with pytest.raises(ValueError, match="a directory"):
        accio.read(tmp_path)
    if os.path.exists("/proc/self/status"):
        with pytest.raises(ValueError, match="reports size 0 but holds bytes"):
            accio.read("/proc/self/status")
    (tmp_path / "empty").write_bytes(b"")
    assert accio.read(tmp_path / "empty").size == 0
    with pytest.raises(accio.Error) as info:
        accio.read(tmp_path / "missing")  # an accio.Error, as the engine's open raises it
    assert isinstance(info.value, accio.Error) and isinstance(info.value, FileNotFoundError)
    assert str(info.value) == f"open '{tmp_path / 'missing'}': No such file or directory (errno 2)"


@pytest.mark.parametrize("data", ["np.zeros((4, 4))[:, ::2]", "'text'", "None", "[1, 2]",
                                  "np.empty(3, dtype=object)"])
def test_write_refusing_its_data_leaves_the_file_as_it_was(tmp_path, data):
    """accio.write opened the file with "w" (truncating it) before it looked at the data: a refused
    argument destroyed the previous content."""
    p = tmp_path / "precious"
    p.write_bytes(b"precious" * 1000)
    with pytest.raises((TypeError, ValueError)):
        accio.write(p, eval(data))
    assert p.read_bytes() == b"precious" * 1000
    with pytest.raises((TypeError, ValueError)):
        accio.write(tmp_path / "new", eval(data))
    assert not (tmp_path / "new").exists()


def test_write_takes_every_host_array_type(tmp_path):
    data = np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8)
    p = tmp_path / "w"

    for src in (data.tobytes(), bytearray(data), memoryview(data), data, data.reshape(64, 64), _DLPackOnly(data)):
        assert accio.write(p, src, fsync=True) == data.nbytes
        assert p.read_bytes() == data.tobytes()
        back = np.zeros_like(data)
        assert accio.read(p, out=_DLPackOnly(back)).arr is back and back.tobytes() == data.tobytes()
    with pytest.raises(TypeError, match="expected a buffer, got dict"):
        accio.write(p, {})


def test_short_read_at_eof_is_a_count(tmp_path, mechanism):
    p = tmp_path / "s"
    p.write_bytes(b"x" * 10000)
    with accio.open(p, "r", mechanism=mechanism) as f:
        buf = bytearray(8192)
        assert f.read_into(buf, offset=5000) == 5000
        assert f.read_into(buf, offset=20000) == 0


def test_async_and_submit(tmp_path, mechanism):
    p = tmp_path / "a"
    chunks = [os.urandom(100_000 + i) for i in range(8)]
    offs = [i * 200_000 for i in range(8)]
    with accio.open(p, "w+", mechanism=mechanism) as f:
        futs = f.submit(zip(chunks, offs), write=True)
        assert [fu.result() for fu in futs] == [len(c) for c in chunks]
        fut = f.read_into_async(bytearray(10), 0)
        assert fut.result(timeout=30) == 10 and fut.done()
        outs = [bytearray(len(c)) for c in chunks]
        for fu in f.submit(zip(outs, offs)):
            fu.result()
        assert [bytes(o) for o in outs] == chunks
        wf = f.write_from_async(np.ones(1000, dtype=np.uint8), offset=0)
        assert wf.result() == 1000


def test_append_mode(tmp_path):
    p = tmp_path / "log"
    with accio.open(p, "a") as f:
        assert f.write_from(b"one,") == 4
        assert f.append(b"two,") == 4
    with accio.open(p, "a+") as f:
        f.write_from(b"three")
        buf = bytearray(13)
        assert f.read_into(buf) == 13
    assert p.read_bytes() == b"one,two,three"


# Appends are O_APPEND's (audit session 20, M3): at the file's current end whoever else writes there,
# nothing reserved by a failed one, never overlapping, under every mechanism.
def test_two_handles_appending_in_turn_keep_each_others_bytes(tmp_path, mechanism):
    p = tmp_path / "log"
    p.write_bytes(b"0123456789")
    with accio.open(p, "a", mechanism=mechanism) as f1, accio.open(p, "a", mechanism=mechanism) as f2:
        assert f1.append(b"AAAA") == 10
        assert f2.append(b"BBBB") == 14
        assert f1.write_from(b"CC") == 2
    assert p.read_bytes() == b"0123456789AAAABBBBCC"


def test_an_append_by_another_process_is_not_overwritten(tmp_path, mechanism):
    p = tmp_path / "log"
    p.write_bytes(b"0123456789")
    with accio.open(p, "a", mechanism=mechanism) as f:
        code = f"import os; fd = os.open({str(p)!r}, os.O_WRONLY | os.O_APPEND); os.write(fd, b'XYZ')"
        subprocess.run([sys.executable, "-c", code], check=True)
        assert f.append(b"Q") == 13
        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"!")
        os.close(fd)
        assert f.write_from(b"RS") == 2
    assert p.read_bytes() == b"0123456789XYZQ!RS"


def test_an_append_after_a_truncate_lands_at_the_new_end(tmp_path, mechanism):
    p = tmp_path / "log"
    p.write_bytes(b"0123456789")
    with accio.open(p, "a+", mechanism=mechanism) as f:
        os.ftruncate(f.fileno(), 4)
        assert f.append(b"ab") == 4
        os.ftruncate(f.fileno(), 0)
        assert f.append(b"x") == 0
    assert p.read_bytes() == b"x"


def test_an_explicit_offset_in_append_mode_writes_there(tmp_path):
    # docs/api.md: in a/a+ modes write_from(buf) (offset None) appends; an offset given is written at
    p = tmp_path / "log"
    p.write_bytes(b"0123456789")
    with accio.open(p, "a+") as f:
        assert f.write_from(b"ab", 2) == 2
        assert f.append(b"!") == 10
    assert p.read_bytes() == b"01ab456789!"


def test_read_takes_the_host_as_safetensors_names_it(tmp_path):
    """New-user audit, session 25: accio.read(device='cpu') was refused ("expected 'cuda' or 'cuda:N'")
    while accio.safetensors takes 'cpu'; a wrong name says what each kind of memory is called."""
    p = tmp_path / "x"
    p.write_bytes(b"abc")
    assert accio.read(p, device="cpu").tobytes() == b"abc"
    with pytest.raises(ValueError, match=r"device 'gpu': expected 'cuda', 'cuda:N' or a GPU number for GPU memory "
                                         r"\(None or 'cpu' for host memory"):
        accio.read(p, device="gpu")


def test_write_from_async_without_an_offset_in_append_mode_is_refused_and_loses_nothing(tmp_path):
    """New-user audit, session 25: write_from(buf) appends in a/a+ modes, but write_from_async(buf)
    wrote at 0, over the file's head (b"HELLO" became b"bbLLOAAA")."""
    p = tmp_path / "log"
    p.write_bytes(b"HELLO")
    for mode in ("a", "a+"):
        with accio.open(p, mode) as f:
            with pytest.raises(ValueError, match="needs an offset.*write_from\\(buf\\) or append\\(buf\\)"):
                f.write_from_async(b"bb")
            assert f.write_from_async(b"!", f.size).result() == 1
    assert p.read_bytes() == b"HELLO!!"
    with accio.open(p, "r+") as f:  # elsewhere no offset still means 0
        assert f.write_from_async(b"J").result() == 1
    assert p.read_bytes() == b"JELLO!!"


def test_an_append_past_the_file_size_limit_reserves_nothing(tmp_path, mechanism):
    # RLIMIT_FSIZE in a process of its own (Python ignores SIGXFSZ, so writes past it fail with EFBIG)
    p = tmp_path / "log"
    p.write_bytes(b"0123456789")
    code = f"""
import errno, resource, accio
f = accio.open({str(p)!r}, "a", mechanism={mechanism!r})
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
for limit in (10, 20):
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        f.append(b"B" * 100)
        raise SystemExit("the append past the limit succeeded")
    except OSError as e:
        assert e.errno == errno.EFBIG, e
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    print(f.append(b"abc"), f.size)
f.close()
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    first, second = [tuple(map(int, line.split())) for line in r.stdout.splitlines()]
    assert first == (10, 13)            # nothing fitted: nothing written, nothing reserved
    assert second[0] == 20 and second[1] == 23  # 7 bytes fitted and stay (as write(2)'s), no hole
    data = p.read_bytes()
    assert data == b"0123456789abc" + b"B" * 7 + b"abc"


def _records(data: bytes, size: int) -> dict[int, list[int]]:
    """Checks data is whole records of `size` bytes as _record makes them; the sequence numbers per writer."""
    assert len(data) % size == 0
    seen: dict[int, list[int]] = {}
    for at in range(0, len(data), size):
        w, seq = data[at], int.from_bytes(data[at + 1:at + 5], "little")
        assert data[at:at + size] == _record(w, seq, size), f"record at {at} is torn or overwritten"
        seen.setdefault(w, []).append(seq)
    return seen


def _record(writer: int, seq: int, size: int) -> bytes:
    head = bytes([writer]) + seq.to_bytes(4, "little")
    return head + bytes([(writer * 31 + seq * 7) % 256]) * (size - 5)


def test_appends_from_threads_of_one_handle_never_overlap(tmp_path, mechanism):
    # ...nor with a plain O_APPEND writer's records written meanwhile (writer 4)
    import threading
    p = tmp_path / "log"
    size, each = 150_000, 12
    offsets: dict[int, list[int]] = {}
    with accio.open(p, "a", mechanism=mechanism, task_size="64k", threads=3) as f:
        def run(w):
            offsets[w] = [f.append(_record(w, i, size)) for i in range(each)]

        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        assert os.write(fd, _record(4, 0, size)) == size  # after the open, before the threads

        def plain():
            for i in range(1, each):
                assert os.write(fd, _record(4, i, size)) == size
        ts = [threading.Thread(target=run, args=(w,)) for w in (1, 2, 3)] + [threading.Thread(target=plain)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        os.close(fd)
    data = p.read_bytes()
    assert len(data) == 4 * each * size
    seen = _records(data, size)
    assert {w: sorted(s) for w, s in seen.items()} == {w: list(range(each)) for w in (1, 2, 3, 4)}
    for w, offs in offsets.items():  # each append returned where its record is
        assert [data[o + 1:o + 5] for o in offs] == [i.to_bytes(4, "little") for i in range(each)]


def test_appends_from_two_processes_never_overlap(tmp_path, mechanism):
    p = tmp_path / "log"
    p.write_bytes(b"")
    size, each = 100_000, 30
    go = tmp_path / "go"
    code = f"""
import os, sys, time
import accio
def _record(writer, seq, size):
    return bytes([writer]) + seq.to_bytes(4, "little") + bytes([(writer * 31 + seq * 7) % 256]) * (size - 5)
w = int(sys.argv[1])
with accio.open({str(p)!r}, "a", mechanism={mechanism!r}, task_size="64k") as f:
    open({str(tmp_path)!r} + f"/opened{{w}}", "w").close()
    while not os.path.exists({str(go)!r}):  # both open, then both start
        time.sleep(0.001)
    for i in range({each}):
        assert f.append(_record(w, i, {size})) % {size} == 0
"""
    procs = [subprocess.Popen([sys.executable, "-c", code, str(w)], stderr=subprocess.PIPE) for w in (1, 2)]
    import time
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"opened{w}").exists() for w in (1, 2)) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.write_bytes(b"")
    for pr in procs:
        _, err = pr.communicate()
        assert pr.returncode == 0, err.decode()
    data = p.read_bytes()
    assert len(data) == 2 * each * size
    assert _records(data, size) == {1: list(range(each)), 2: list(range(each))}


@pytest.mark.parametrize("mech", ["direct", "uring"])
def test_distinct_buffer_sizes_keep_locked_memory_bounded(tmp_path, mech):
    # audit session 20 (S1): every distinct buffer_size locked a staging pool for the life of the
    # process. In a process of its own, so that VmLck counts this test's pools only.
    p = tmp_path / "data.bin"
    data = os.urandom((3 << 20) + 4321)
    p.write_bytes(data)
    code = f"""
import accio
def kb(key):
    return int(open("/proc/self/status").read().split(key + ":")[1].split()[0])
data = open({str(p)!r}, "rb").read()
base, peak = kb("VmLck"), 0
rss_base, rss_peak = kb("VmRSS"), 0  # pools are faulted in: RSS shows them where mlock is not allowed
for i in range(1, 21):
    with accio.open({str(p)!r}, mechanism={mech!r}, buffer_size=f"{{i}}m", buffer_count=2, realign="on") as f:
        out = bytearray(len(data) + 8)
        view = memoryview(out)[3:3 + len(data) - 5]  # unaligned: through the staging buffers
        assert f.read_into(view, 5) == len(data) - 5
        assert bytes(view) == data[5:], i
    peak = max(peak, kb("VmLck") - base)
    rss_peak = max(rss_peak, kb("VmRSS") - rss_base)
print(peak, rss_peak)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    peak_mib, rss_mib = (int(x) / 1024 for x in r.stdout.split())
    # in use plus 2 idle pools of at most 2 x 20 MiB (before: the sum of all 20, 420 MiB); RSS also
    # holds the file's bytes twice (7 MiB)
    assert peak_mib <= 3 * 2 * 22, f"{peak_mib:.0f} MiB locked"
    assert rss_mib <= 3 * 2 * 22 + 16, f"{rss_mib:.0f} MiB resident"


def test_settings_names_env_and_api(monkeypatch):
    s = accio.settings()
    core = {"mechanism", "threads", "task_size", "buffer_size", "buffer_count",
            "queue_depth", "ring_depth", "huge_pages", "direct", "profile", "cache_probe",
            "pagecache_min", "pagecache_chunk", "pagecache_pin_limit", "realign"}
    # plus the offload runtime's rows once libaccio_offload is loaded (another test may have)
    assert core <= set(s) and all(n.startswith("offload_") for n in set(s) - core)
    monkeypatch.setenv("ACCIO_TASK_SIZE", "8m")
    assert accio.settings()["task_size"] == str(8 << 20)
    assert accio.settings(task_size="1m")["task_size"] == str(1 << 20)  # API wins over environment
    assert accio.settings(direct=True)["direct"] == "on"


def test_a_bool_for_a_setting_without_on_off_is_refused_as_written(tmp_path):
    # threads=True reached the engine as 'on' and the error named a value the caller never wrote
    p = tmp_path / "f"
    p.write_bytes(b"x")
    with pytest.raises(accio.Error, match=r"threads=True is not valid: not an integer") as e:
        accio.open(p, threads=True)
    assert e.value.errno == errno.EINVAL and e.value.operation == "set setting"  # the engine's error, reworded
    with pytest.raises(accio.Error, match=r"task_size=False is not valid"):
        accio.settings(task_size=False)
    with pytest.raises(ValueError, match=r"threads=True is not valid"):  # as defaults.set reports others
        accio.defaults.set(threads=True)
    assert accio.defaults.current() == {}  # nothing set by the refused call
    with pytest.raises(accio.Error, match="unknown setting 'threds'"):
        accio.open(p, threds=True)
    with accio.open(p, direct=False, realign=True) as f:  # on/off settings take bools
        assert f.size == 1


def test_plan_and_auto_rule(tmp_path):
    # a file just written is in the page cache: the hot plans (a cold single 64 MiB read would be
    # direct, the built-in model's cold_start rule: tests/python/test_preload.py)
    (tmp_path / "p").write_bytes(bytes(64 << 20))
    with accio.open(tmp_path / "p", "r+", task_size="1m", threads=2) as f:
        assert f.plan(4096) == "posix"
        assert f.plan(64 << 20) == "parallel"
        assert f.setting("mechanism") == "auto"


def test_residency(tmp_path):
    p = tmp_path / "r"
    p.write_bytes(b"z" * (1 << 20))
    with accio.open(p, "r") as f:
        r = f.residency()
        assert r["total"] == 1 << 20 and 0 <= r["cached"] <= r["total"]


def test_global_stats():
    accio.reset_global_stats()
    before = accio.global_stats()
    assert before["reads"] == 0


def test_per_mechanism_stats_name_every_mechanism_and_count_the_one_that_ran(tmp_path):
    # Read through accio_file_mechanism_stats / accio_global_mechanism_stats: one entry per
    # registered mechanism, whatever their number.
    p = tmp_path / "m.bin"
    p.write_bytes(b"x" * 8192)
    accio.reset_global_stats()
    with accio.open(p, "r", mechanism="parallel") as f:
        buf = bytearray(8192)
        assert f.read_into(buf) == 8192 and bytes(buf) == b"x" * 8192
        st = f.stats()
    names = [n for n, _, _ in accio.mechanisms()]
    assert list(st["mechanisms"]) == names
    assert st["mechanisms"]["parallel"] == {"calls": 1, "bytes": 8192}
    assert all(m == {"calls": 0, "bytes": 0} for n, m in st["mechanisms"].items() if n != "parallel")
    assert st["last_mechanism"] == "parallel"
    g = accio.global_stats()
    assert list(g["mechanisms"]) == names and g["mechanisms"]["parallel"]["calls"] == 1


# ---- errors ----

def test_missing_path_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError) as ei:
        accio.open(tmp_path / "missing")
    e = ei.value
    assert isinstance(e, accio.Error) and isinstance(e, OSError)
    assert e.errno == errno.ENOENT and e.operation == "open"
    assert e.filename == str(tmp_path / "missing") and e.offset is None
    assert "missing" in str(e)


def test_directory_is_a_directory_error(tmp_path):
    with pytest.raises(IsADirectoryError):
        accio.open(tmp_path, "r")


def test_enospc_carries_offset():
    with accio.open("/dev/full", "w", mechanism="posix") as f:
        with pytest.raises(accio.Error) as ei:
            f.write_from(b"x" * 4096, offset=0)
    assert ei.value.errno == errno.ENOSPC and ei.value.operation == "pwrite" and ei.value.offset == 0


def test_bad_setting_and_mechanism(tmp_path):
    with pytest.raises(accio.Error) as ei:
        accio.open(tmp_path / "x", "w", threads="many")
    assert ei.value.errno == errno.EINVAL and "threads" in str(ei.value)
    with pytest.raises(accio.Error, match="unknown mechanism"):
        accio.open(tmp_path / "x", "w", mechanism="warp")


def test_a_bad_mechanism_or_profile_names_its_variable(tmp_path, monkeypatch):
    """ACCIO_MECHANISM and ACCIO_PROFILE are checked where they are read, as every other setting is
    (docs/api.md: a bad value is an EINVAL error naming the variable): not at the open, with a message
    that named neither the variable nor (for the profile) the setting."""
    p = tmp_path / "f"
    p.write_bytes(b"x")
    (tmp_path / "bad.json").write_text('{"schema": "accio.profile/1"}')
    (tmp_path / "good.json").write_text(POSIX_PROFILE)
    names = ", ".join(["auto"] + [name for name, _available, _why in accio.mechanisms()])
    for var, value, why in [
            ("ACCIO_MECHANISM", "bogus", f"unknown mechanism (one of {names})"),
            ("ACCIO_PROFILE", str(tmp_path / "missing.json"),
             "no such file (auto, off, or a profile file that `accio tune` wrote)"),
            ("ACCIO_PROFILE", str(tmp_path / "bad.json"), "not a profile: plans must be a non-empty array")]:
        monkeypatch.setenv(var, value)
        with pytest.raises(accio.Error) as e:
            accio.open(p)
        assert e.value.errno == errno.EINVAL
        assert str(e.value).startswith(f"read environment: {var}='{value}' is not valid: {why}"), str(e.value)
        monkeypatch.delenv(var)
    monkeypatch.setenv("ACCIO_PROFILE", str(tmp_path / "good.json"))
    assert accio.read(p).tobytes() == b"x"
    with pytest.raises(accio.Error, match=r"set setting: profile='.*missing.json' is not valid: no such file"):
        accio.open(p, profile=str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match=r"mechanism='warp' is not valid: unknown mechanism \(one of auto, posix"):
        accio.defaults.set(mechanism="warp")
    # A refused size says what a size is (new-user audit, session 25: "1.5k" was "unknown unit")
    for text, why in (("1.5k", "not a whole number of bytes (whole bytes with an optional binary unit: 4096, 64k, "
                                "16MiB, 1g; 1536k, not 1.5m)"),
                      ("12q", "unknown unit (whole bytes with an optional binary unit: 4096, 64k, 16MiB, 1g)"),
                      ("-1", "not a size (whole bytes with an optional binary unit: 4096, 64k, 16MiB, 1g)")):
        with pytest.raises(accio.Error) as e:
            accio.open(p, task_size=text)
        assert str(e.value).endswith(f"task_size='{text}' is not valid: {why} (errno 22)"), str(e.value)


def test_closed_file(tmp_path):
    """Every call on a closed file is EBADF naming the call and the file (all said `use: file is
    closed`, with no path)."""
    p = str(tmp_path / "c")
    f = accio.open(p, "w+")
    f.close()
    for call, op in [(lambda: f.read_into(bytearray(4)), "pread"), (lambda: f.write_from(b"x", 0), "pwrite"),
                     (lambda: f.stats(), "stats"), (lambda: f.size, "fstat"), (lambda: f.fsync(), "fsync"),
                     (lambda: f.plan(10), "plan"), (lambda: f.residency(0, 10), "residency")]:
        with pytest.raises(accio.Error) as ei:
            call()
        assert ei.value.errno == errno.EBADF and ei.value.filename == p and ei.value.operation == op, ei.value
        assert str(ei.value) == f"{op} '{p}': file is closed (errno 9)", str(ei.value)
    f.close()  # again: nothing to do


@pytest.mark.parametrize("call", ["f.stats()", "f.read_into(bytearray(4096), 0)", "f.plan(10)",
                                  "f.residency(0, 10)", "f.read_into_async(bytearray(4096), 0).result()"])
def test_close_racing_other_threads_calls_waits_for_them(tmp_path, call):
    """close() freed the handle under another thread's call on the same File: SIGSEGV in stats,
    read_into, plan, residency (and a message built from freed memory with submit). Now close waits
    for the calls in progress, and those after it get EBADF."""
    p = tmp_path / "r"
    p.write_bytes(b"x" * (1 << 20))
    code = f"""
import threading, time, errno, accio
for _ in range(150):
    f = accio.open({str(p)!r}, mechanism="posix")
    stop = False
    def worker():
        while not stop:
            try:
                {call}
            except accio.Error as e:
                assert e.errno == errno.EBADF, e
    ts = [threading.Thread(target=worker) for _ in range(2)]
    [t.start() for t in ts]
    time.sleep(0.0005)
    f.close()
    stop = True
    [t.join() for t in ts]
print("survived")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "ACCIO_PROFILE": "off"})
    assert r.returncode == 0 and r.stdout == "survived\n", (r.returncode, r.stderr[-2000:])


def test_close_from_inside_a_call_on_the_file_is_refused_not_a_hang(tmp_path):
    """Review NIT (session 20): Python code run inside a call on a file (a buffer's
    __cuda_array_interface__ or __dlpack__ property, the log sink) that closed the same file waited
    for ever for the call it ran in. It is a RuntimeError now, and the file stays open and usable."""
    p = tmp_path / "d"
    p.write_bytes(b"x" * 4096)
    code = f"""
import accio
f = accio.open({str(p)!r})
class Closer:
    @property
    def __cuda_array_interface__(self):
        f.close()
try:
    f.read_into(Closer())
except RuntimeError as e:
    print(e)
assert not f.closed and f.read_into(bytearray(10)) == 10
f.close()
assert f.closed
print("open until closed")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout == (f"close() of '{p}' from inside a call on the same file (a buffer property or the log sink): "
                        "close it after the call returns\nopen until closed\n"), r.stdout


def test_bad_setting_is_one_sentence_with_errno_once(tmp_path):
    """A bad ACCIO_* value: the variable, the value and the reason, errno once, no strerror tail."""
    p = tmp_path / "f"
    p.write_bytes(b"x")
    code = ("import accio\n"
            "try:\n"
            f"    accio.open({str(p)!r})\n"
            "except accio.Error as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "ACCIO_THREADS": "lots"},
                         capture_output=True, text=True, check=True).stdout.strip()
    assert out == "read environment: ACCIO_THREADS='lots' is not valid: not an integer (errno 22)"
    with pytest.raises(accio.Error) as e:
        accio.open(str(p), threads="lots")
    assert str(e.value) == "set setting: threads='lots' is not valid: not an integer (errno 22)"


def test_refusals_name_what_is_wrong_in_accios_words(tmp_path):
    """Audit S5, S6 and NITs: a strided memoryview was the exporter's BufferError, a datetime64 array
    DLPack's BufferError about dtypes the user never asked for; nb::hasattr swallowed a property's own
    exception (a KeyboardInterrupt, a bug in a tensor class) into "expected a buffer"; offsets of
    2**63, a shape given as a string or with floats, and a bytes path were nanobind's "incompatible
    function arguments" or silently wrong; a CAI shape whose size overflows was a 0-byte buffer."""
    p = tmp_path / "d"
    p.write_bytes(bytes(range(256)) * 16)
    with accio.open(p) as f:
        with pytest.raises(ValueError, match="memoryview is not contiguous: accio moves one contiguous range"):
            f.read_into(memoryview(bytearray(1000))[::2])
        stamps = np.zeros(3, dtype="datetime64[s]")  # neither export carries it: moved as its bytes
        assert f.read_into(stamps) == 24 and stamps.view("u1").tobytes() == bytes(range(24))
        with pytest.raises(TypeError, match="cannot give accio its memory: its buffer export says"):
            f.read_into(np.zeros(6, dtype="datetime64[s]")[::2])  # ...unless they are not one range

        class Interrupted:
            @property
            def __cuda_array_interface__(self):
                raise KeyboardInterrupt

        class Buggy:
            @property
            def requires_grad(self):
                raise RuntimeError("a bug in my tensor class")

            def detach(self):
                return self
        with pytest.raises(KeyboardInterrupt):
            f.read_into(Interrupted())
        with pytest.raises(RuntimeError, match="a bug in my tensor class"):
            f.read_into(Buggy())

        class Huge:
            __cuda_array_interface__ = {"data": (4096, False), "shape": (2**32, 2**32), "typestr": "<f4",
                                        "version": 3}
        with pytest.raises(TypeError, match="the shape's size in bytes overflows"):
            f.read_into(Huge())
        with pytest.raises(OverflowError, match=r"offset 9223372036854775808: outside what accio takes"):
            f.read_into(bytearray(4), 2**63)
        with pytest.raises(TypeError, match="offset must be an int, not str"):
            f.read_into(bytearray(4), "0")
        with pytest.raises(OverflowError, match="nbytes -1"):
            f.plan(-1)
    for shape in ("4096", (4096.7,)):
        with pytest.raises(TypeError, match="expected an int or a tuple of ints"):
            accio.read(p, shape=shape)
    with accio.open(os.fsencode(p)) as f:  # a bytes path, as os.open takes
        assert f.size == 4096
    stamps = np.arange(512).astype("datetime64[s]")
    stamps.view("u1").tofile(p)
    assert (accio.read(p, dtype="M8[s]") == stamps).all()  # read as their bytes


def test_a_nul_in_a_path_mode_or_setting_is_a_valueerror_and_touches_nothing(tmp_path):
    """The text went to open(2) as a C string, cut at the NUL: accio.open(q + "\\0.tmp", "w")
    emptied q (python API audit, session 26). ValueError, as os.open and open() give."""
    q = tmp_path / "victim"
    q.write_bytes(b"precious")
    for call in (lambda: accio.open(f"{q}\0.tmp", "w"), lambda: accio.write(f"{q}\0.tmp", b"X"),
                 lambda: accio.RawFile(f"{q}\0x", "w"), lambda: accio.open(q, "r\0w"),
                 lambda: accio.open(q, mechanism="posix\0junk")):
        with pytest.raises(ValueError, match="embedded null byte"):
            call()
    assert q.read_bytes() == b"precious"


def test_bytes_paths_and_names_that_are_not_utf8_work_everywhere(tmp_path):
    """A file name that is not UTF-8 (a Latin-1 dataset tree) failed in every front end with
    nanobind's overload listing, and RawFile refused every bytes path; errors name the path as
    os.fsdecode gives it back."""
    p = os.fsencode(tmp_path) + b"/\xff\xfe.bin"
    assert accio.write(p, b"hello") == 5
    assert accio.read(p).tobytes() == b"hello" == open(p, "rb").read()
    with accio.RawFile(p) as r:
        assert r.read() == b"hello"
    with accio.open(os.fsdecode(p)) as f:
        assert f.size == 5 and f.path == os.fsdecode(p)
    missing = os.fsencode(tmp_path) + b"/\xff-missing"
    with pytest.raises(FileNotFoundError) as e:
        accio.open(missing)
    assert e.value.filename == os.fsdecode(missing)


def test_numpy_arrays_of_dtypes_no_export_carries_are_moved_as_their_bytes(tmp_path):
    """ml_dtypes' bfloat16 (which accio.safetensors itself returns) has no buffer format and no DLPack
    type: every call refused it. Its uint8 view is the same memory; a non-contiguous one is still
    refused (a copy read into would lose the bytes)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    p = tmp_path / "bf16.bin"
    a = np.arange(64, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(8, 8)
    assert accio.write(p, a) == a.nbytes
    assert p.read_bytes() == a.tobytes()
    b = np.zeros_like(a)
    with accio.open(p) as f:
        assert f.read_into(b) == a.nbytes
        with pytest.raises(TypeError):
            f.read_into(np.zeros(16, ml_dtypes.bfloat16)[::2])
    assert (b == a).all()
    assert (accio.read(p, dtype=ml_dtypes.bfloat16, shape=(8, 8)) == a).all()


def _child(code: str, timeout: float = 60):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_an_open_lets_other_threads_run_and_ctrl_c_interrupts_it(tmp_path):
    """accio.open held the GIL through open(2): a thread opening a FIFO (or a file on a slow NFS or
    Lustre server) stopped every other thread (here the writer that would end it: the child hung). An
    interrupting signal whose handler returns is retried over (PEP 475), and one whose handler raises
    (Ctrl-C) raises that, not a RuntimeError holding its traceback's text."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    out = _child(f"""
import os, platform, signal, threading, time, accio
fifo = {str(fifo)!r}
OPENS = {{"x86_64": {{2, 257}}, "aarch64": {{56}}}}[platform.machine()]  # open, openat
def syscall(tid):
    with open(f"/proc/self/task/{{tid}}/syscall") as f:
        return f.read()
def blocked_in_open(tid):
    # the main thread blocked in the FIFO's open(2): the same call (number, arguments, stack) twice,
    # 0.1 s apart (a signal that lands before it, or in a quick open of another file on the way,
    # interrupts nothing, as in CPython's own open)
    a = syscall(tid)
    time.sleep(0.1)
    first = a.split()[0]
    return first.isdigit() and int(first) in OPENS and syscall(tid) == a
def when_main_opens(then):
    signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGALRM, signal.SIGINT}})  # signals go to the main thread
    while not blocked_in_open(os.getpid()):
        pass
    then()
# another thread blocked in the open: this one goes on, and ends it
t = threading.Thread(target=lambda: accio.open(fifo).close()); t.start()
time.sleep(0.2)
os.close(os.open(fifo, os.O_WRONLY)); t.join(); print("other threads ran")
# a handler that returns: the open goes on
ran = []
signal.signal(signal.SIGALRM, lambda *a: ran.append(1))
def alarm_then_write():
    os.kill(os.getpid(), signal.SIGALRM)
    time.sleep(0.3)
    os.close(os.open(fifo, os.O_WRONLY))
w = threading.Thread(target=when_main_opens, args=(alarm_then_write,)); w.start()
accio.open(fifo).close(); w.join(); print("retried after a handler", ran)
# Ctrl-C: KeyboardInterrupt. Python's own handler, whatever was inherited: a shell runs a background
# job with SIGINT ignored, and Python then installs none (the CI's runs had it so)
signal.signal(signal.SIGINT, signal.default_int_handler)
done = threading.Event()
def interrupt():
    os.kill(os.getpid(), signal.SIGINT)
    if not done.wait(10):  # the signal missed the open (it landed before it): end it, and fail below
        os.close(os.open(fifo, os.O_WRONLY))
threading.Thread(target=when_main_opens, args=(interrupt,), daemon=True).start()
try:
    accio.open(fifo)
    print("the open was not interrupted")
except KeyboardInterrupt:
    print("KeyboardInterrupt")
done.set()
""")
    assert out.split("\n")[:3] == ["other threads ran", "retried after a handler [1]", "KeyboardInterrupt"], out


def test_cuda_memory_without_a_cuda_driver_is_an_error_not_a_crash():
    """A __cuda_array_interface__ object's pointer was taken for host memory where no driver is
    loaded, and the CPU copies of realign and direct crashed the interpreter (SIGSEGV)."""
    ok, _ = accio.cuda_available()
    if ok:
        pytest.skip("a CUDA driver is here")
    out = _child("""
import accio, tempfile, os
class Fake:
    __cuda_array_interface__ = {"shape": (1 << 20,), "typestr": "|u1", "data": (0x10001, False), "version": 3}
d = tempfile.mkdtemp(); p = os.path.join(d, "x"); open(p, "wb").write(b"x" * (1 << 20))
for mech, extra in (("posix", {"realign": "on"}), ("direct", {})):
    with accio.open(p, mechanism=mech, **extra) as f:
        try:
            f.read_into(Fake())
        except OSError as e:
            print(e.errno, "no CUDA driver" in str(e))
""")
    assert out.split("\n")[:2] == ["19 True", "19 True"], out
