#!/usr/bin/env python3
"""The GPU benchmark: accio against KvikIO, what a PyTorch user writes, and safetensors (issue 17).

One section per stage of `make gpu-check` (benchmarks/gpu_check.py); each can run alone:

  hot-read     a hot file (4 GiB) into GPU memory at 4/8/16/32 threads, same task size: accio staged vs
               KvikIO in compatibility mode (and in GDS mode where nvidia-fs is loaded), with the two
               ceilings in the same rounds: accio parallel into host memory, and the pinned host-to-device
               copy. Staged is reported against KvikIO and against min(host, pinned) (goal 0.95).
  naive        accio naive vs torch.from_numpy(np.fromfile(p, np.uint8)).cuda() + synchronize (goal 1.0),
               and accio.read(p, device=..) as an accio user writes it.
  write        GPU memory to a new file (2 GiB, 8 threads): accio staged (and staged with O_DIRECT) vs
               KvikIO (its defaults, and with buffered writes) vs the host's own write of the same bytes
               (accio parallel from host memory); then each with fsync. Goals: staged >= 1.2x KvikIO,
               >= 0.9x host.
  safetensors  a 4 GiB safetensors file (64 bf16 tensors) and a sharded 4 x 2 GiB checkpoint (index.json) into
               GPU memory: accio.safetensors.load_file vs safetensors.torch.load_file(device="cuda") (goal 5x)
               vs fastsafetensors with its defaults and with the best of a sweep of its settings (goal 1.5x),
               and accio.read of the whole file; save_file from GPU memory vs safetensors.torch.save_file
               (goal 1.5x); the file as F16 into host memory: accio.safetensors (NumPy) vs
               safetensors.numpy.load_file (goal 2x); VmHWM's rise over one GPU load in a fresh process
               (goal: <= the staging pool).
  cold-read    the page cache dropped before every sample (drop_caches as root, else posix_fadvise, checked
               with a residency query): staged, staged+direct, KvikIO.
  zerocopy     pagecache (DMA straight from registered page-cache pages, issue 24) on the hot file at each
               thread count: its first read (registration included: pagecache_pin_limit 0) and its
               repeated reads (registrations kept) vs staged, KvikIO compat and pinned H2D (goals on the
               first read: >= 0.9x pinned, >= 1.15x KvikIO compat and staged), with the CPU time per GiB
               (getrusage user+system) of each; the file half cached (second half dropped before every
               sample) vs staged (goal 1.0); 4 KiB, 64 KiB and 1 MiB requests through auto's GPU path
               (pagecache, which runs them staged) vs staged (goal 1.0).

Statistics (accio.stats, docs/methodology.md): contenders interleaved in rotating order, >= 7 samples
each after one untimed warm-up, median ratios with 95% bootstrap intervals, "within noise" only inside
+-5%. Every sample that lands in GPU memory is checked in full (the sum of its 32-bit words, and every
4 KiB page's 8-byte stamp, which holds its file offset), after the buffer was zeroed; host reads check
every page stamp per sample and the full sum at the end; written files are checked in full once per
contender. A contender whose bytes differ gets no ratio. Peers that are missing are reported as skipped
with the reason, never faked.

    python benchmarks/gpu_bench.py hot-read,naive --dir /data --json out.json [--size 4g] [--threads 4,8,16,32]

The JSON (schema accio.gpu-bench/1) is rewritten after every round, so a run that is cut off keeps
what it measured; benchmarks/gpu_check.py merges the sections into results/gpu/<date>-<gpu>.json and .md.
"""
from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import platform
import sys
import tempfile
import time
import traceback

import numpy as np

import accio
from accio import stats
from accio._system import drop_pages, fmt_size, fsync_path, parse_size, residency

MiB = 1 << 20
PAGE = 4096
SECTIONS = ("hot-read", "naive", "write", "safetensors", "cold-read", "zerocopy")
PEERS = ("kvikio", "torch", "safetensors", "fastsafetensors")
DEFAULT_ROUNDS = {"hot-read": 11, "naive": 7, "write": 7, "safetensors": 7, "cold-read": 7, "zerocopy": 7}
SCHEMA = "accio.gpu-bench/1"


def log(msg: str) -> None:
    print(f"[gpu_bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def one_line(text: str, limit: int = 300) -> str:
    """An error's first line, shortened: reasons go into tables."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[:limit - 3] + "..."






# ---------------------------------------------------------------------------------------------
# Test data: random bytes in which the first 8 bytes of every 4 KiB page hold the page's file offset,
# so a misplaced page is caught; the sum of all 32-bit words catches wrong content.

class DataFile:
    """A generated file and what a correct copy of it sums to. Reused across runs when its sidecar
    (PATH.json) matches the file's size and modification time."""

    def __init__(self, path: str, size: int, data_start: int, data_sum: int, file_sum: int):
        self.path, self.size, self.data_start, self.data_sum, self.file_sum = path, size, data_start, data_sum, file_sum

    @classmethod
    def load(cls, path: str):
        try:
            with open(path + ".json") as f:
                d = json.load(f)
            st = os.stat(path)
            if st.st_size == d["size"] and st.st_mtime_ns == d["mtime_ns"]:
                return cls(path, d["size"], d["data_start"], d["data_sum"], d["file_sum"])
        except (OSError, ValueError, KeyError):
            pass
        return None

    def save(self) -> None:
        with open(self.path + ".json", "w") as f:
            json.dump({"size": self.size, "data_start": self.data_start, "data_sum": self.data_sum,
                       "file_sum": self.file_sum, "mtime_ns": os.stat(self.path).st_mtime_ns}, f)


def word_sum(buf) -> int:
    a = np.frombuffer(buf, dtype=np.int32) if not isinstance(buf, np.ndarray) else buf.view(np.int32)
    return int(a.sum(dtype=np.int64))


def write_stamped(f, start: int, nbytes: int, seed: int) -> int:
    """Writes nbytes of stamped random data that begin at file offset start (page aligned);
    returns their word sum."""
    assert start % PAGE == 0 and nbytes % PAGE == 0
    rng = np.random.default_rng(seed)
    block = 64 * MiB
    base = rng.integers(0, 2**63, block // 8, dtype=np.uint64)
    buf = np.empty_like(base)
    total, done = 0, 0
    while done < nbytes:
        n = min(block, nbytes - done)
        words = buf[:n // 8]
        np.bitwise_xor(base[:n // 8], np.uint64(rng.integers(0, 2**63)), out=words)
        words[::PAGE // 8] = np.arange(start + done, start + done + n, PAGE, dtype=np.uint64)
        f.write(memoryview(words).cast("B"))
        total += word_sum(words)
        done += n
    return total


def data_file(directory: str, size: int, seed: int = 1) -> DataFile:
    path = os.path.join(directory, f"accio-gpu-bench.{size}.dat")
    ref = DataFile.load(path)
    if ref:
        return ref
    log(f"writing {fmt_size(size)} of test data to {path}")
    with open(path, "wb") as f:
        s = write_stamped(f, 0, size, seed)
    ref = DataFile(path, size, 0, s, s)
    ref.save()
    return ref


def safetensors_file(directory: str, size: int, tensors: int, seed: int = 2, tag: str = "",
                     dtype: str = "BF16") -> tuple[DataFile, list[tuple[str, int, int]]]:
    """A safetensors file of `tensors` bf16 tensors of size/tensors bytes each, named TAG + layer.NNN.weight
    (a tag makes the file and its names distinct: shards). The header is padded with spaces so that the
    data starts page aligned. Returns the file and (name, start, end) in file offsets for every tensor."""
    per = size // tensors
    if per % PAGE or per < PAGE:
        raise ValueError(f"--st-size / --st-tensors must be a multiple of 4 KiB ({per} bytes per tensor)")
    cols = 8192 if per % (2 * 8192) == 0 else per // 2
    rows = per // 2 // cols
    path = os.path.join(directory, f"accio-gpu-bench.{tag}{size}.{tensors}{'' if dtype == 'BF16' else '.' + dtype}"
                               ".safetensors")
    header = {"__metadata__": {"format": "pt", "producer": "accio benchmarks/gpu_bench.py"}}
    for i in range(tensors):
        header[f"{tag}layer.{i:03d}.weight"] = {"dtype": dtype, "shape": [rows, cols], "data_offsets": [i * per, (i + 1) * per]}
    text = json.dumps(header, separators=(",", ":")).encode()
    hlen = -(-(8 + len(text)) // PAGE) * PAGE - 8
    text += b" " * (hlen - len(text))
    start = 8 + hlen
    spans = [(f"{tag}layer.{i:03d}.weight", start + i * per, start + (i + 1) * per) for i in range(tensors)]
    ref = DataFile.load(path)
    if ref:
        return ref, spans
    log(f"writing a {fmt_size(size)} safetensors file ({tensors} {dtype} tensors) to {path}")
    head = hlen.to_bytes(8, "little") + text
    with open(path, "wb") as f:
        f.write(head)
        s = write_stamped(f, start, per * tensors, seed)
    ref = DataFile(path, start + per * tensors, start, s, s + word_sum(head))
    ref.save()
    return ref, spans




def warm(path: str) -> float:
    """Reads the file once (untimed) unless it is already in the page cache; returns the cached share."""
    if residency(path, empty=1.0) < 0.999:
        with open(path, "rb", buffering=0) as f:
            while f.read(64 * MiB):
                pass
    return residency(path, empty=1.0)


def drop_cache(path: str, method: str) -> None:
    if method == "drop_caches":
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    else:
        drop_pages(path, 0, 0)


def check_file(path: str, start: int, nbytes: int, want_sum: int) -> str | None:
    """None when the file's bytes [start, start+nbytes) sum and stamp as written, else what differs."""
    if os.path.getsize(path) < start + nbytes:
        return f"{path}: {os.path.getsize(path)} bytes, expected {start + nbytes}"
    m = np.memmap(path, dtype=np.uint8, mode="r", offset=start, shape=(nbytes,))
    try:
        return check_host(m, start, want_sum)
    finally:
        del m


def check_stamps_host(a: np.ndarray, start: int) -> str | None:
    st = a[:a.size - a.size % PAGE].view(np.uint64)[::PAGE // 8]
    want = np.arange(start, start + st.size * PAGE, PAGE, dtype=np.uint64)
    bad = int(np.count_nonzero(st != want))
    return f"{bad} of {st.size} pages misplaced or missing" if bad else None


def check_host(a: np.ndarray, start: int, want_sum: int) -> str | None:
    bad = check_stamps_host(a, start)
    if bad:
        return bad
    s = word_sum(a)
    return None if s == want_sum else f"word sum {s} != {want_sum}"


# ---------------------------------------------------------------------------------------------
# GPU memory through whichever array library is here: PyTorch, else CuPy, else accio.DeviceArray.

class Gpu:
    def __init__(self, device: int, torch_mod=None):
        self.device = device
        self.torch = torch_mod
        self.cupy = None
        if torch_mod is None:
            try:
                import cupy
                cupy.cuda.runtime.getDeviceCount()
                self.cupy = cupy
            except Exception:  # noqa: BLE001 - no CuPy or no usable GPU for it: accio's own arrays
                self.cupy = None
        self.kind = "torch" if self.torch else ("cupy" if self.cupy else "accio.DeviceArray")

    def empty(self, n: int):
        if self.torch:
            return self.torch.empty(n, dtype=self.torch.uint8, device=f"cuda:{self.device}")
        if self.cupy:
            with self.cupy.cuda.Device(self.device):
                return self.cupy.empty(n, dtype=self.cupy.uint8)
        return accio.device_array(n, device=self.device)

    def zero(self, a) -> None:
        if self.torch:
            a.zero_()
        elif self.cupy:
            a.fill(0)
        else:
            a.copy_from(np.zeros(a.nbytes, np.uint8))
        self.sync()

    def sync(self) -> None:
        if self.torch:
            self.torch.cuda.synchronize(self.device)
        elif self.cupy:
            self.cupy.cuda.Device(self.device).synchronize()

    def view(self, a):
        """a flat uint8 view that can be sliced (a host copy for accio.DeviceArray)."""
        if self.torch:
            return a.reshape(-1).view(self.torch.uint8)
        if self.cupy:
            return a.ravel().view(self.cupy.uint8)
        if isinstance(a, np.ndarray):
            return a.reshape(-1).view(np.uint8)
        return np.frombuffer(a.to_bytes(), np.uint8)

    def measure(self, b, start: int) -> tuple[int, int, int]:
        """For a flat uint8 view b of bytes that begin at file offset start: (pages whose stamp is
        wrong, pages, sum of b's 32-bit words)."""
        pages = len(b) // PAGE if not self.torch else b.numel() // PAGE
        if self.torch:
            t = self.torch
            st = b[:pages * PAGE].view(t.int64)[::PAGE // 8]
            want = t.arange(start, start + pages * PAGE, PAGE, dtype=t.int64, device=b.device)
            return int((st != want).sum().item()), pages, int(b.view(t.int32).sum(dtype=t.int64).item())
        if self.cupy and not isinstance(b, np.ndarray):
            cp = self.cupy
            st = b[:pages * PAGE].view(cp.int64)[::PAGE // 8]
            want = cp.arange(start, start + pages * PAGE, PAGE, dtype=cp.int64)
            return int(cp.count_nonzero(st != want)), pages, int(b.view(cp.int32).sum(dtype=cp.int64))
        st = b[:pages * PAGE].view(np.uint64)[::PAGE // 8]
        want = np.arange(start, start + pages * PAGE, PAGE, dtype=np.uint64)
        return int(np.count_nonzero(st != want)), pages, word_sum(b)

    def check(self, a, start: int, want_sum: int) -> str | None:
        """None when a holds the stamped bytes that begin at file offset start and sum to want_sum."""
        bad, pages, s = self.measure(self.view(a), start)
        if bad:
            return f"{bad} of {pages} pages misplaced or missing"
        return None if s == want_sum else f"word sum {s} != {want_sum}"


# ---------------------------------------------------------------------------------------------
# Peers: each loaded once; a missing or unusable one is a reason, not an error.

class Peers:
    def __init__(self, wanted: set[str], device: int):
        self.mods: dict[str, object] = {}
        self.info: dict[str, dict] = {}
        self.device = device
        for name in PEERS:
            if name not in wanted:
                self.info[name] = {"available": False, "reason": "not asked for (--peers)"}
                continue
            try:
                mod, info = getattr(self, "_load_" + name)()
                self.mods[name] = mod
                self.info[name] = {"available": True, **info}
            except Exception as e:  # noqa: BLE001 - reported per peer
                self.info[name] = {"available": False, "reason": one_line(f"{type(e).__name__}: {e}")}

    def get(self, name: str):
        return self.mods.get(name)

    def reason(self, name: str) -> str:
        return self.info[name].get("reason", "")

    def _load_torch(self):
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError(f"torch {torch.__version__} sees no CUDA device")
        return torch, {"version": torch.__version__, "cuda": torch.version.cuda}

    def _load_safetensors(self):
        if "torch" not in self.mods:
            raise RuntimeError("needs torch with CUDA: " + self.info["torch"].get("reason", ""))
        import safetensors
        import safetensors.torch
        return safetensors.torch, {"version": getattr(safetensors, "__version__", "?")}

    def _load_fastsafetensors(self):
        if "torch" not in self.mods:
            raise RuntimeError("needs torch with CUDA: " + self.info["torch"].get("reason", ""))
        import fastsafetensors
        return fastsafetensors, {"version": getattr(fastsafetensors, "__version__", "?")}

    def _load_kvikio(self):
        k = Kvikio()
        return k, {"version": k.version, "api": k.api, "compat_mode_preferred": k.compat_preferred(),
                   "defaults": k.effective()}


def nvidia_fs_loaded() -> bool:
    return os.path.exists("/proc/driver/nvidia-fs/stats") or os.path.isdir("/sys/module/nvidia_fs")


class Kvikio:
    """KvikIO's settings across versions: 25.x and later have kvikio.defaults.set({...})/get(name)
    (compat_mode is a kvikio.CompatMode); older ones had compat_mode_reset(), num_threads_reset()
    and task_size_reset()."""

    def __init__(self):
        import kvikio
        import kvikio.defaults as d
        self.k, self.d = kvikio, d
        self.version = getattr(kvikio, "__version__", "?")
        self.api = "set/get" if hasattr(d, "set") and hasattr(d, "get") else "reset"

    def _mode(self, gds: bool):
        cm = getattr(self.k, "CompatMode", None)
        return (cm.OFF if gds else cm.ON) if cm is not None else (not gds)

    def set_mode(self, gds: bool, **extra) -> None:
        """The mode and per-variant settings, before every sample (cheap: the thread pool is left alone)."""
        if self.api == "set/get":
            self.d.set({"compat_mode": self._mode(gds), **extra})
        else:
            self.d.compat_mode_reset(self._mode(gds))

    def configure(self, *, gds: bool, threads: int, task_size: int, **extra) -> None:
        if self.api == "set/get":
            self.d.set({"compat_mode": self._mode(gds), "num_threads": threads, "task_size": task_size, **extra})
            return
        if extra:
            raise RuntimeError(f"KvikIO {self.version} has no setting {', '.join(extra)}")
        self.d.compat_mode_reset(self._mode(gds))
        (getattr(self.d, "num_threads_reset", None) or self.d.thread_pool_nthreads_reset)(threads)
        self.d.task_size_reset(task_size)

    def has(self, name: str) -> bool:
        if self.api != "set/get":
            return False
        try:
            self.d.get(name)
            return True
        except Exception:  # noqa: BLE001 - an unknown name raises KeyError or similar
            return False

    def effective(self) -> dict:
        out = {}
        names = ("compat_mode", "num_threads", "task_size", "bounce_buffer_size", "gds_threshold",
                 "auto_direct_io_read", "auto_direct_io_write")
        for n in names:
            try:
                v = self.d.get(n) if self.api == "set/get" else getattr(self.d, {"num_threads": "get_num_threads"}.get(n, n))()
            except Exception:  # noqa: BLE001 - not in this version
                continue
            out[n] = getattr(v, "name", v)
        return out

    def compat_preferred(self):
        f = getattr(self.d, "is_compat_mode_preferred", None)
        try:
            return bool(f()) if f else None
        except Exception:  # noqa: BLE001
            return None


# ---------------------------------------------------------------------------------------------
# Contenders: run() does one timed transfer and returns seconds; check() says what differs (None: ok).

class Contender:
    name = "?"
    nbytes = 0
    checks = "none"      # what check() and final_check() verify
    ran = ""             # the path that really ran (accio: the engine's last mechanism)

    def before(self) -> None:
        """Untimed, before every sample (zero the output, drop the cache, remove the old file)."""

    def run(self) -> float:
        raise NotImplementedError

    def check(self) -> str | None:
        """Untimed, after every sample: None when the sample's bytes are right, else what differs."""
        return None

    def final_check(self) -> str | None:
        """After the warm-up and after the last sample: the checks too slow for every sample."""
        return None

    def close(self) -> None:
        pass


def timed(fn, sync=None) -> float:
    t0 = time.perf_counter()
    fn()
    if sync:
        sync()
    return time.perf_counter() - t0


class GpuRead(Contender):
    """A read of ref's data region into one GPU buffer, zeroed before every sample."""
    checks = "every sample: word sum and page stamps on the GPU"

    def __init__(self, name, gpu: Gpu, buf, ref: DataFile, reader, ran_of=None, setup=None):
        self.name, self.gpu, self.buf, self.ref, self.reader, self.ran_of = name, gpu, buf, ref, reader, ran_of
        self.setup = setup
        self.nbytes = ref.size

    def before(self):
        self.gpu.zero(self.buf)
        if self.setup:
            self.setup()

    def run(self):
        t = timed(self.reader, self.gpu.sync)
        if self.ran_of:
            self.ran = self.ran_of()
        return t

    def check(self):
        return self.gpu.check(self.buf, 0, self.ref.file_sum)


def accio_reader(path: str, buf, **settings):
    f = accio.open(path, **settings)
    size = f.size

    def read():
        got = f.read_into(buf)
        if got != size:
            raise RuntimeError(f"accio read {got} of {size} bytes")
    return f, read, lambda: f.stats()["last_mechanism"] or settings.get("mechanism", "")


def accio_last() -> str:
    """The mechanism of the process's last accio request (for calls that open their own file)."""
    return accio.global_stats()["last_mechanism"]


def kvikio_reader(kv: Kvikio, path: str, buf, size: int):
    f = kv.k.CuFile(path, "r")

    def read():
        got = f.read(buf)
        if got != size:
            raise RuntimeError(f"KvikIO read {got} of {size} bytes")
    return f, read


class HostRead(Contender):
    """accio parallel into host memory: the host read ceiling. Page stamps poisoned and checked per
    sample, the full word sum after the last."""
    checks = "every sample: page stamps; last sample: word sum"

    def __init__(self, ref: DataFile, host: np.ndarray, threads: int, task_size: int):
        self.name, self.ref, self.host = "host (accio parallel)", ref, host
        self.nbytes = ref.size
        self.f, self.read, self.ran_of = accio_reader(ref.path, host, mechanism="parallel", threads=threads,
                                                      task_size=task_size)

    def before(self):
        self.host.view(np.uint64)[::PAGE // 8] = np.uint64(0xFFFFFFFFFFFFFFFF)

    def run(self):
        t = timed(self.read)
        self.ran = self.ran_of()
        return t

    def check(self):
        return check_stamps_host(self.host, 0)

    def final_check(self):
        return check_host(self.host, 0, self.ref.file_sum)

    def close(self):
        self.f.close()


class PinnedCopy(Contender):
    """The pinned host-to-device copy ceiling (accio_cuda_copy_seconds): no file, nothing to check."""
    checks = "none (no data: a copy ceiling)"

    def __init__(self, device: int, nbytes: int, chunk: int, threads: int, to_device: bool = True):
        self.name = "pinned h2d" if to_device else "pinned d2h"
        self.device, self.nbytes, self.chunk, self.threads, self.to_device = device, nbytes, chunk, threads, to_device
        self.ran = "pinned-copy"

    def run(self):
        return accio._ext.cuda_copy_seconds(self.device, self.to_device, self.nbytes, self.chunk, self.threads)


class NewTensor(Contender):
    """A read that makes its own GPU tensor(s) (what a user's code gets), checked and dropped per sample."""
    checks = "every sample: word sum and page stamps on the GPU"

    def __init__(self, name, gpu: Gpu, nbytes: int, make, verify, ran_of=None):
        self.name, self.gpu, self.nbytes, self.make, self.verify, self.ran_of = name, gpu, nbytes, make, verify, ran_of
        self.result = None

    def before(self):
        self.result = None

    def run(self):
        holder = {}
        t = timed(lambda: holder.setdefault("r", self.make()), self.gpu.sync)
        self.result = holder["r"]
        if self.ran_of:
            self.ran = self.ran_of()
        return t

    def check(self):
        try:
            return self.verify(self.result)
        finally:
            self.result = None


class FileWrite(Contender):
    """GPU (or host) memory to a new file; the timed part opens, writes, (fsyncs) and closes. Every
    sample's file is checked in full and then removed, so no contender's dirty pages or disk space
    are left for the next one."""
    checks = "every sample: the written file's word sum and page stamps"

    def __init__(self, name, path: str, nbytes: int, want_sum: int, write, sync: bool, setup=None):
        self.name, self.path, self.nbytes, self.want_sum, self.write, self.sync = name, path, nbytes, want_sum, write, sync
        self.setup = setup

    def before(self):
        if os.path.exists(self.path):
            os.unlink(self.path)
        os.sync()  # every sample starts with no dirty data of earlier ones
        if self.setup:
            self.setup()

    def run(self):
        t0 = time.perf_counter()
        self.ran = self.write(self.path, self.sync) or self.ran
        return time.perf_counter() - t0

    def check(self):
        try:
            return check_file(self.path, 0, self.nbytes, self.want_sum)
        finally:
            if os.path.exists(self.path):
                os.unlink(self.path)

    def close(self):
        if os.path.exists(self.path):
            os.unlink(self.path)


# ---------------------------------------------------------------------------------------------
# One group: contenders measured side by side, with comparisons.

class Section:
    """A section's JSON, saved after every round by the Recorder."""

    def __init__(self, rec: "Recorder", name: str, params: dict, budget_s: float):
        self.rec, self.name = rec, name
        self.t0 = time.monotonic()
        self.budget_s = budget_s
        self.doc = {"status": "running", "params": params, "groups": [], "notes": []}
        rec.doc["sections"][name] = self.doc
        rec.save()

    def note(self, text: str) -> None:
        log(f"{self.name}: {text}")
        self.doc["notes"].append(text)
        self.rec.save()

    def group(self, label: str, params: dict, contenders: list[Contender], skipped: dict[str, str],
              comparisons: list[tuple], rounds: int, groups_left: int = 1) -> dict:
        """Warm-up (untimed, checked), then `rounds` interleaved rounds; comparisons are
        (a, b, goal) with b a contender name or ('min', x, y) for the per-round lower of two."""
        g = {"label": label, "params": params, "rounds_asked": rounds, "contenders": {}, "comparisons": []}
        for name, why in skipped.items():
            g["contenders"][name] = {"skipped": why}
        self.doc["groups"].append(g)
        live: dict[str, Contender] = {}
        for c in contenders:
            entry = g["contenders"][c.name] = {"samples_mib_s": [], "checks": c.checks}
            try:
                c.before()
                c.run()
                bad = c.check() or c.final_check()
            except Exception as e:  # noqa: BLE001 - a contender that fails is reported, the others go on
                entry["failed"] = one_line(f"{type(e).__name__}: {e}")
                log(f"{self.name} {label}: {c.name} failed in its warm-up: {entry['failed']}")
                traceback.print_exc(file=sys.stderr)
                continue
            if bad:
                entry["check"] = f"DIFFERS (warm-up): {bad}"
                log(f"{self.name} {label}: {c.name}: bytes differ in the warm-up: {bad}")
                continue
            entry["ran"] = c.ran
            live[c.name] = c
        self.rec.save()

        failed_checks: dict[str, str] = {}
        round_started = [time.monotonic()]

        def sample_of(c: Contender):
            def one() -> float:
                if c.name in failed_checks:
                    return float("nan")
                try:
                    c.before()
                    sec = c.run()
                    bad = c.check()
                except Exception as e:  # noqa: BLE001
                    failed_checks[c.name] = one_line(f"failed: {type(e).__name__}: {e}")
                    return float("nan")
                if bad:
                    failed_checks[c.name] = f"DIFFERS: {bad}"
                if sec <= 0:
                    failed_checks[c.name] = f"failed: a sample timed at {sec} s"
                    return float("nan")
                return c.nbytes / MiB / sec
            return one

        def after_round(r: int, samples: dict[str, list[float]]) -> bool:
            for n, v in samples.items():  # JSON has no NaN: a sample after a failure is null
                g["contenders"][n]["samples_mib_s"] = [x if x == x else None for x in v]
            g["rounds"] = r + 1
            took = time.monotonic() - round_started[0]
            round_started[0] = time.monotonic()
            self.rec.save()  # before saying so: what a line reports is on disk
            log(f"{self.name} {label} round {r + 1}/{rounds} ({took:.1f} s): " +
                ", ".join(f"{n} {v[-1]:.0f}" for n, v in samples.items()) + " MiB/s")
            left = self.budget_s - (time.monotonic() - self.t0)
            if r + 1 >= stats.MIN_SAMPLES and r + 1 < rounds and took * (rounds - r - 1) > left / groups_left:
                self.note(f"{label}: stopped after {r + 1} of {rounds} rounds to stay within the "
                          f"section's {self.budget_s:.0f} s budget")
                return True
            return False

        stats.interleave({n: sample_of(c) for n, c in live.items()}, rounds, on_round=after_round)

        for n, c in live.items():
            e = g["contenders"][n]
            if n in failed_checks:
                e["check"] = failed_checks[n]
            else:
                try:
                    bad = c.final_check()
                except Exception as ex:  # noqa: BLE001
                    bad = f"check failed: {type(ex).__name__}: {ex}"
                e["check"] = f"DIFFERS: {bad}" if bad else "ok"
            e["ran"] = c.ran
            e.update(stats.summary([x for x in e["samples_mib_s"] if x is not None]))
            c.close()
        ok = {n for n, e in g["contenders"].items() if e.get("check") == "ok" and e.get("n", 0) > 0}
        for a, b, target in comparisons:
            g["comparisons"].append(compare(g, ok, a, b, target))
        self.rec.save()
        return g

    def finish(self, status: str = "done") -> None:
        self.doc["status"] = status
        self.doc["duration_s"] = round(time.monotonic() - self.t0, 1)
        checks = [e.get("check") for g in self.doc["groups"] for e in g["contenders"].values() if "check" in e]
        self.doc["checks_ok"] = all(c == "ok" for c in checks)
        self.doc["contenders_failed"] = sorted({f"{n}: {e['failed']}" for g in self.doc["groups"]
                                                for n, e in g["contenders"].items() if "failed" in e})
        self.rec.save()


def compare(g: dict, ok: set[str], a: str, b, target: float | None) -> dict:
    label_b = b if isinstance(b, str) else f"min({b[1]}, {b[2]})"
    out = {"a": a, "b": label_b, "goal": target}
    names = [a] + ([b] if isinstance(b, str) else [b[1], b[2]])
    missing = [n for n in names if n not in ok]
    if missing:
        why = []
        for n in missing:
            e = g["contenders"].get(n, {})
            why.append(f"{n}: " + (e.get("skipped") or e.get("failed") or e.get("check") or "no samples"))
        out["withheld"] = "; ".join(why)
        # skipped: a peer is not here (said in the contender's row); otherwise something failed or differs
        out["withheld_because"] = ("skipped" if all("skipped" in g["contenders"].get(n, {}) for n in missing)
                                   else "failed")
        return out
    sa = g["contenders"][a]["samples_mib_s"]
    if isinstance(b, str):
        sb = g["contenders"][b]["samples_mib_s"]
    else:
        sb = [min(x, y) for x, y in zip(g["contenders"][b[1]]["samples_mib_s"], g["contenders"][b[2]]["samples_mib_s"])]
    try:
        r = stats.ratio(sa, sb, paired=True)
    except ValueError as e:  # e.g. a sample timed at zero: reported, the section goes on
        out["withheld"], out["withheld_because"] = f"no ratio: {e}", "failed"
        return out
    out.update(r.as_dict())
    out["verdict"] = stats.verdict(r)
    if target is not None:
        out["goal_verdict"] = stats.goal(r, target)
    if not stats.enough(sa) or not stats.enough(sb):
        out["note"] = f"fewer than {stats.MIN_SAMPLES} samples: not a result"
    return out


# ---------------------------------------------------------------------------------------------

class Recorder:
    def __init__(self, path: str | None, doc: dict):
        self.path, self.doc = path, doc

    def save(self) -> None:
        if not self.path:
            return
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=1, default=str)
            f.write("\n")
        os.replace(tmp, self.path)


def cuda_driver_version() -> str | None:
    try:
        lib = ctypes.CDLL(os.environ.get("ACCIO_LIBCUDA") or "libcuda.so.1")
        v = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(v)) == 0:
            return f"{v.value // 1000}.{v.value % 1000 // 10}"
    except OSError:
        pass
    return None


def nvidia_driver_version() -> str | None:
    try:
        with open("/proc/driver/nvidia/version") as f:
            line = f.readline()
        for tok in line.split():
            if tok[:1].isdigit() and "." in tok:
                return tok
    except OSError:
        pass
    return None


def machine(directory: str, peers: Peers, gpu: Gpu | None) -> dict:
    from accio.bench import block_device
    from accio.info import gather
    info = gather(directory)
    g = info["gpus"]
    return {"gpus": [{k: d[k] for k in ("name", "memory", "compute_capability", "pci_bus_id", "link", "numa_node")}
                     for d in g["devices"]],
            "nvidia_driver": nvidia_driver_version(), "cuda_driver_api": cuda_driver_version(),
            "cufile": g.get("cufile"), "nvidia_fs_loaded": nvidia_fs_loaded(),
            "cpu": info["cpu"], "memory_kib": info["memory"]["total_kib"], "kernel": info["kernel"],
            "filesystem": info["path"], "block_device": block_device(info["path"].get("device", "")),
            "huge_pages": info["huge_pages"], "root": os.geteuid() == 0,
            "python": platform.python_version(), "numpy": np.__version__,
            "gpu_arrays": gpu.kind if gpu else None, "peers": peers.info,
            "accio_settings": {s["name"]: s["value"] for s in info["settings"]}}


# ---------------------------------------------------------------------------------------------
# The sections.


def sec_hot_read(a, rec: Recorder, peers: Peers, gpu: Gpu) -> None:
    s = Section(rec, "hot-read", {"size": a.size, "threads": a.threads, "task_size": a.task_size,
                                  "rounds": a.rounds_of("hot-read")}, a.budget_s)
    ref = data_file(a.dir, a.size)
    s.doc["params"]["cached_before"] = warm(ref.path)
    buf = gpu.empty(ref.size)
    host = np.empty(ref.size, np.uint8)
    host[::PAGE] = 0  # fault the pages in before anything is timed
    chunk = int(accio.settings()["buffer_size"])
    s.doc["params"]["pinned_copy_chunk"] = chunk
    ceiling = ("min", "host (accio parallel)", "pinned h2d")
    for i, t in enumerate(a.threads):
        cs, skipped, handles = [], {}, []
        f, read, ran = accio_reader(ref.path, buf, mechanism="staged", threads=t, task_size=a.task_size)
        handles.append(f)
        cs.append(GpuRead("accio staged", gpu, buf, ref, read, ran))
        for c, h in kvikio_reads(a, peers, gpu, buf, ref, t, skipped):
            cs.append(c)
            handles.append(h)
        cs.append(HostRead(ref, host, t, a.task_size))
        cs.append(PinnedCopy(a.device, ref.size, chunk, t))
        comps = [("accio staged", "kvikio compat", None), ("accio staged", "kvikio gds", None),
                 ("accio staged", ceiling, 0.95), ("kvikio compat", ceiling, None)]
        try:
            s.group(f"{t} threads", {"threads": t, "task_size": a.task_size, "size": ref.size}, cs, skipped, comps,
                    a.rounds_of("hot-read"), len(a.threads) - i)
        finally:
            for h in handles:
                h.close()
    s.finish()


def kvikio_reads(a, peers: Peers, gpu: Gpu, buf, ref: DataFile, threads: int, skipped: dict, setup=None,
                 direct_variant: bool = False):
    """KvikIO in compatibility mode (its defaults; with direct_variant also with auto_direct_io_read
    on), and in GDS mode where nvidia-fs is loaded: [(contender, handle)]. Every sample sets its
    variant's settings first, since the variants take turns."""
    kv = peers.get("kvikio")
    variants = [("kvikio compat", False, {})]
    if direct_variant:
        variants.append(("kvikio compat+direct", False, {"auto_direct_io_read": True}))
    variants.append(("kvikio gds", True, {}))
    base = {}
    if kv and kv.has("auto_direct_io_read"):
        base = {"auto_direct_io_read": kv.effective()["auto_direct_io_read"]}  # KvikIO's own default
    out = []
    for name, gds, extra in variants:
        if not kv:
            skipped[name] = peers.reason("kvikio")
            continue
        if gds and not nvidia_fs_loaded():
            skipped[name] = ("nvidia-fs is not loaded: KvikIO's GDS mode would only reach cuFile's own "
                             "compatibility mode")
            continue
        if extra and not all(kv.has(k) for k in extra):
            skipped[name] = f"KvikIO {kv.version} has no {', '.join(extra)} setting"
            continue
        settings = {**base, **extra}
        try:
            kv.configure(gds=gds, threads=threads, task_size=a.task_size, **settings)
            kf, kread = kvikio_reader(kv, ref.path, buf, ref.size)
        except Exception as e:  # noqa: BLE001 - reported as skipped with the reason
            skipped[name] = one_line(f"{type(e).__name__}: {e}")
            continue

        def prep(gds=gds, settings=settings):
            kv.set_mode(gds, **settings)
            if setup:
                setup()
        out.append((GpuRead(name, gpu, buf, ref, kread, lambda n=name: n, prep), kf))
    return out


def sec_naive(a, rec: Recorder, peers: Peers, gpu: Gpu) -> None:
    s = Section(rec, "naive", {"size": a.size, "rounds": a.rounds_of("naive")}, a.budget_s)
    ref = data_file(a.dir, a.size)
    s.doc["params"]["cached_before"] = warm(ref.path)
    buf = gpu.empty(ref.size)
    f, read, ran = accio_reader(ref.path, buf, mechanism="naive")
    cs: list[Contender] = [GpuRead("accio naive", gpu, buf, ref, read, ran)]
    skipped = {}
    torch = peers.get("torch")
    user = "torch from_numpy(np.fromfile()).cuda()"
    verify = lambda t: gpu.check(t, 0, ref.file_sum)  # noqa: E731
    if torch:
        dev = a.device
        cs.append(NewTensor(user, gpu, ref.size,
                            lambda: torch.from_numpy(np.fromfile(ref.path, np.uint8)).cuda(dev), verify))
    else:
        skipped[user] = peers.reason("torch")
    fw = "torch" if torch else None
    cs.append(NewTensor("accio.read(device)", gpu, ref.size,
                        lambda: accio.read(ref.path, device=a.device, framework=fw), verify, accio_last))
    comps = [("accio naive", user, 1.0), ("accio.read(device)", user, None),
             ("accio.read(device)", "accio naive", None)]
    try:
        s.group("hot file", {"size": ref.size, "accio.read framework": fw or "default"}, cs, skipped, comps,
                a.rounds_of("naive"))
    finally:
        f.close()
    s.finish()


def sec_write(a, rec: Recorder, peers: Peers, gpu: Gpu) -> None:
    t, size = a.write_threads, a.write_size
    s = Section(rec, "write", {"size": size, "threads": t, "task_size": a.task_size,
                               "rounds": a.rounds_of("write")}, a.budget_s)
    ref = data_file(a.dir, size, seed=3)
    warm(ref.path)
    src = gpu.empty(size)
    with accio.open(ref.path, mechanism="staged") as f:
        f.read_into(src)
    bad = gpu.check(src, 0, ref.file_sum)
    if bad:
        raise RuntimeError(f"the GPU source buffer differs from {ref.path}: {bad}")
    host = np.empty(size, np.uint8)
    with accio.open(ref.path, mechanism="parallel") as f:
        f.read_into(host)
    bad = check_host(host, 0, ref.file_sum)
    if bad:
        raise RuntimeError(f"the host source buffer differs from {ref.path}: {bad}")
    kv = peers.get("kvikio")
    out = lambda tag: os.path.join(a.dir, f"accio-gpu-bench.{os.getpid()}.out.{tag}")  # noqa: E731

    def accio_write(buf, mech, **extra):
        def w(path, sync):
            with accio.open(path, "w", mechanism=mech, threads=t, task_size=a.task_size, **extra) as f:
                n = f.write_from(buf)
                if n != size:
                    raise RuntimeError(f"accio wrote {n} of {size} bytes")
                if sync:
                    f.fsync()
                return f.stats()["last_mechanism"] or mech
        return w

    def kvikio_write(path, sync):
        f = kv.k.CuFile(path, "w")
        try:
            n = f.write(src)
        finally:
            f.close()
        if n != size:
            raise RuntimeError(f"KvikIO wrote {n} of {size} bytes")
        if sync:
            fsync_path(path)
        return "kvikio compat"

    own = {}
    if kv:
        s.doc["params"]["kvikio_defaults"] = kv.effective()
        if kv.has("auto_direct_io_write"):  # KvikIO's default, set again before each of its samples
            own = {"auto_direct_io_write": s.doc["params"]["kvikio_defaults"]["auto_direct_io_write"]}
        kv.configure(gds=False, threads=t, task_size=a.task_size)
    for test, sync in (("write", False), ("write+sync", True)):
        # staged+direct: O_DIRECT from the staging ring, as KvikIO writes by default; with the fsync
        # timed, KvikIO led staged 1843 to 1370 MiB/s on the H200 machine (2026-11-26).
        cs: list[Contender] = [FileWrite("accio staged", out("staged"), size, ref.file_sum, accio_write(src, "staged"), sync),
                               FileWrite("accio staged+direct", out("staged-direct"), size, ref.file_sum,
                                         accio_write(src, "staged", direct=True), sync)]
        skipped = {}
        for name, extra in (("kvikio", own), ("kvikio buffered", {"auto_direct_io_write": False})):
            if not kv:
                skipped[name] = peers.reason("kvikio")
            elif name == "kvikio buffered" and not own:
                skipped[name] = f"KvikIO {kv.version} has no auto_direct_io_write setting (its writes are buffered)"
            else:
                cs.append(FileWrite(name, out(name.replace(" ", "-")), size, ref.file_sum, kvikio_write, sync,
                                    lambda extra=extra: kv.set_mode(False, **extra)))
        cs.append(FileWrite("host (accio parallel)", out("host"), size, ref.file_sum, accio_write(host, "parallel"), sync))
        comps = [("accio staged", "kvikio", 1.2), ("accio staged", "host (accio parallel)", 0.9),
                 ("accio staged", "kvikio buffered", None), ("kvikio", "host (accio parallel)", None),
                 ("accio staged+direct", "kvikio", None), ("accio staged+direct", "accio staged", None)]
        s.group(test, {"test": test, "threads": t, "size": size, "file": "new, page cache" + (", fsync timed" if sync else "")},
                cs, skipped, comps, a.rounds_of("write"), 2 - (test == "write+sync"))
    s.finish()


# fastsafetensors' settings swept (max_threads, bbuf_size_kb): its defaults (16, 16 MiB) first
FST_SWEEP = [(16, 16 * 1024), (8, 16 * 1024), (32, 16 * 1024), (16, 64 * 1024), (32, 64 * 1024)]
HWM_ALLOWANCE = 16 << 20
ST_GOALS = {"safetensors.numpy": 2.0, "safetensors load_file": 5.0, "fastsafetensors (best of sweep)": 1.5, "safetensors save_file": 1.5}


def fst_loader(fst, files: list[str], dev: str, nogds: bool, threads: int | None = None, bbuf_kb: int | None = None):
    """fastsafetensors loading files into GPU memory: its fastsafe_open (what its README shows) with
    no settings, or its SafeTensorsFileLoader with max_threads and bbuf_size_kb (what fastsafe_open
    does not expose)."""
    if threads is None:
        def load():
            with fst.fastsafe_open(filenames=files, framework="pt", device=dev, nogds=nogds) as fo:
                return {k: fo.get_tensor(k) for k in fo.keys()}
        return load

    def load_with():
        loader = fst.SafeTensorsFileLoader(None, dev, bbuf_size_kb=bbuf_kb, max_threads=threads, nogds=nogds,
                                           framework="pytorch")
        try:
            loader.add_filenames({0: files})
            fb = loader.copy_files_to_device()
            try:  # the tensors keep their memory after close() (fastsafetensors' owning mode)
                return {k: fb.get_tensor(k) for k in fb.key_to_rank_lidx}
            finally:
                fb.close()
        finally:
            loader.close()
    return load_with


def vmhwm_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


HWM_PROBE = r"""
import json, os, sys, time
import accio
dev, path, who, fw = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
torch = None
if fw == "torch":
    import torch
    torch.empty(1, device=f"cuda:{dev}"); torch.cuda.synchronize(dev)
else:
    accio.device_array(1, dev)
import accio.safetensors
def hwm():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmHWM:")) * 1024
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")   # VmHWM := VmRSS now (Linux 4.0+)
    reset = True
except OSError:
    reset = False
before = hwm()
t0 = time.perf_counter()
if who == "accio":
    out = accio.safetensors.load_file(path, device=dev, framework=fw)
elif who == "safetensors":
    import safetensors.torch
    out = safetensors.torch.load_file(path, device=f"cuda:{dev}")
else:
    import fastsafetensors
    nogds = not (os.path.exists("/proc/driver/nvidia-fs/stats") or os.path.isdir("/sys/module/nvidia_fs"))
    with fastsafetensors.fastsafe_open(filenames=[path], framework="pt", device=f"cuda:{dev}", nogds=nogds) as fo:
        out = {k: fo.get_tensor(k) for k in fo.keys()}
if torch is not None:
    torch.cuda.synchronize(dev)
print(json.dumps({"hwm_before": before, "hwm_after": hwm(), "rise": hwm() - before, "reset": reset,
                  "seconds": time.perf_counter() - t0, "tensors": len(out)}))
"""


def hwm_rise(a, path: str, who: str, fw: str) -> dict:
    """The rise of VmHWM over one load in a fresh process, from after CUDA start-up to the end of the load."""
    import subprocess
    r = subprocess.run([sys.executable, "-c", HWM_PROBE, str(a.device), path, who, fw], capture_output=True,
                       text=True, timeout=600)
    if r.returncode:
        return {"failed": one_line(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}")}
    return json.loads(r.stdout.strip().splitlines()[-1])


class SafetensorsWrite(FileWrite):
    """A save of the loaded tensors: the written file must parse with the same tensors, and its data
    section must hold the source file's data section (same order: all BF16, sorted names)."""

    def __init__(self, name, path, ref: DataFile, names: set, write):
        super().__init__(name, path, ref.size - ref.data_start, ref.data_sum, write, False)
        self.ref, self.names = ref, names

    def check(self):
        try:
            import accio.safetensors as ast
            with accio.open(self.path) as f:
                h = ast.read_header(f)
            if set(h.tensors) != self.names:
                return f"{len(set(h.tensors) ^ self.names)} tensor names differ"
            m = np.memmap(self.path, dtype=np.uint8, mode="r", offset=h.data_start, shape=(h.data_len,))
            try:
                bad = check_stamps_host(m, self.ref.data_start)
                return bad or (None if word_sum(m) == self.ref.data_sum else "word sum differs")
            finally:
                del m
        except ValueError as e:
            return one_line(str(e))
        finally:
            if os.path.exists(self.path):
                os.unlink(self.path)


def sec_safetensors(a, rec: Recorder, peers: Peers, gpu: Gpu) -> None:
    import accio.safetensors as ast
    rounds = a.rounds_of("safetensors")
    s = Section(rec, "safetensors", {"size": a.st_size, "tensors": a.st_tensors, "dtype": "BF16", "rounds": rounds,
                                     "shards": a.st_shards, "shard_size": a.st_shard_size,
                                     "fastsafetensors_sweep": FST_SWEEP}, a.budget_s)
    ref, spans = safetensors_file(a.dir, a.st_size, a.st_tensors)
    shard_refs = [safetensors_file(a.dir, a.st_shard_size, a.st_tensors, seed=10 + k, tag=f"shard{k}.")
                  for k in range(a.st_shards)]
    index = os.path.join(a.dir, f"accio-gpu-bench.{a.st_shard_size}x{a.st_shards}.safetensors.index.json")
    with open(index, "w") as f:
        json.dump({"metadata": {"total_size": sum(r.size - r.data_start for r, _ in shard_refs)},
                   "weight_map": {n: os.path.basename(r.path) for r, sp in shard_refs for n, _, _ in sp}}, f)
    shard_files = [r.path for r, _ in shard_refs]
    shard_bytes = sum(r.size for r, _ in shard_refs)
    s.doc["params"]["file_size"] = ref.size
    s.doc["params"]["cached_before"] = min(warm(p) for p in [ref.path, *shard_files])
    torch = peers.get("torch")
    dev = f"cuda:{a.device}"
    fw = "torch" if torch else "accio"  # accio.safetensors' own DeviceTensor without PyTorch
    s.doc["params"]["accio_framework"] = fw
    nogds = not nvidia_fs_loaded()
    st, fst = peers.get("safetensors"), peers.get("fastsafetensors")
    fst_tag = "nogds" if nogds else "gds"

    def flat(t):
        if isinstance(t, ast.DeviceTensor):
            return gpu.cupy.asarray(t) if gpu.cupy else np.frombuffer(t.to_bytes(), np.uint8)
        return gpu.view(t)

    def verifier(parts: list[tuple[DataFile, list]]):
        names = {n for _, sp in parts for n, _, _ in sp}
        want = sum(r.data_sum for r, _ in parts)

        def verify(d) -> str | None:
            if set(d) != names:
                return f"{len(set(d) ^ names)} tensor names differ"
            total = 0
            for _, sp in parts:
                for name, start, end in sp:
                    v = flat(d[name])
                    n = v.numel() if torch else len(v)
                    if n != end - start:
                        return f"{name}: {n} bytes, expected {end - start}"
                    bad, pages, w = gpu.measure(v, start)
                    if bad:
                        return f"{name}: {bad} of {pages} pages misplaced or missing"
                    total += w
            return None if total == want else f"word sum {total} != {want}"
        return verify

    def verify_file(arr) -> str | None:
        v = gpu.view(arr)
        bad, pages, w = gpu.measure(v[ref.data_start:], ref.data_start)
        if bad:
            return f"{bad} of {pages} pages misplaced or missing"
        w += gpu.measure(v[:ref.data_start], 0)[2]
        return None if w == ref.file_sum else f"word sum {w} != {ref.file_sum}"

    # 1. fastsafetensors' settings: a short sweep (not a claim: 2 rounds) whose best median is then measured.
    best = None
    if fst:
        cs = [NewTensor(f"fastsafetensors ({fst_tag}, max_threads={t}, bbuf_size_kb={kb})", gpu, ref.size,
                        fst_loader(fst, [ref.path], dev, nogds, t, kb), verifier([(ref, spans)]))
              for t, kb in FST_SWEEP]
        g = s.group("fastsafetensors sweep", {"file_size": ref.size, "note": "picks the settings for the groups below"},
                    cs, {}, [], a.st_sweep_rounds, 5)
        ok = [(e["median"], n) for n, e in g["contenders"].items() if e.get("check") == "ok" and e.get("n")]
        if ok:
            best = FST_SWEEP[[c.name for c in cs].index(max(ok)[1])]
            s.doc["params"]["fastsafetensors_best"] = {"max_threads": best[0], "bbuf_size_kb": best[1]}
    else:
        s.note("fastsafetensors sweep skipped: " + peers.reason("fastsafetensors"))

    def load_group(label, target, files, parts, nbytes, groups_left, raw: bool):
        # raw: also fastsafetensors with its defaults and accio's raw read (the single file only: the
        # sharded group, 8 GiB a sample, would not fit in the stage's time with them)
        cs: list[Contender] = [NewTensor("accio.safetensors load_file", gpu, nbytes,
                                         lambda: ast.load_file(target, device=a.device, framework=fw),
                                         verifier(parts), accio_last)]
        skipped = {}
        if st:
            cs.append(NewTensor("safetensors load_file", gpu, nbytes,   # shard after shard, as transformers does
                                lambda: {k: v for p in files for k, v in st.load_file(p, device=dev).items()},
                                verifier(parts)))
        else:
            skipped["safetensors load_file"] = peers.reason("safetensors")
        for name, settings in ((f"fastsafetensors ({fst_tag}, defaults)", None), ("fastsafetensors (best of sweep)", best)):
            if name.endswith("defaults)") and not raw:
                continue
            if not fst:
                skipped[name] = peers.reason("fastsafetensors")
            elif name.endswith("sweep)") and not settings:
                skipped[name] = "the sweep found no working settings"
            else:
                cs.append(NewTensor(name, gpu, nbytes, fst_loader(fst, files, dev, nogds, *(settings or ())),
                                    verifier(parts)))
        if raw:
            cs.append(NewTensor("accio.read(device) whole file", gpu, nbytes,
                                lambda: accio.read(ref.path, device=a.device, framework="torch" if torch else None),
                                verify_file, accio_last))
        a_ = "accio.safetensors load_file"
        comps = [(a_, "safetensors load_file", ST_GOALS["safetensors load_file"]),
                 (a_, "fastsafetensors (best of sweep)", ST_GOALS["fastsafetensors (best of sweep)"]),
                 ("fastsafetensors (best of sweep)", "safetensors load_file", None)]
        if raw:
            comps += [(a_, f"fastsafetensors ({fst_tag}, defaults)", None), (a_, "accio.read(device) whole file", None)]
        s.group(label, {"file_size": nbytes, "files": len(files)}, cs, skipped, comps, rounds, groups_left)

    # 2. one 4 GiB file; 3. the sharded checkpoint through its index (accio reads the shards in parallel)
    load_group("hot file", ref.path, [ref.path], [(ref, spans)], ref.size, 4, True)
    load_group(f"hot sharded {a.st_shards} x {fmt_size(a.st_shard_size)}", index, shard_files, shard_refs,
               shard_bytes, 3, False)

    # 4. saving the loaded tensors from GPU memory
    # copies: safetensors.torch.save_file refuses views of one storage (accio's default load)
    src = ast.load_file(ref.path, device=a.device, framework=fw, copy=True)
    names = {n for n, _, _ in spans}
    out = lambda tag: os.path.join(a.dir, f"accio-gpu-bench.{os.getpid()}.out.{tag}.safetensors")  # noqa: E731
    meta = {"format": "pt"}

    def accio_save(path, sync):
        ast.save_file(src, path, metadata=meta)
        return accio_last()
    cs = [SafetensorsWrite("accio.safetensors save_file", out("accio"), ref, names, accio_save)]
    skipped = {}
    if st and torch:
        def st_save(path, sync):
            st.save_file(src, path, metadata=meta)
            return "safetensors"
        cs.append(SafetensorsWrite("safetensors save_file", out("st"), ref, names, st_save))
    else:
        skipped["safetensors save_file"] = peers.reason("safetensors")
    s.group("save from GPU", {"file_size": ref.size, "file": "new, page cache, no fsync"}, cs, skipped,
            [("accio.safetensors save_file", "safetensors save_file", ST_GOALS["safetensors save_file"])], rounds, 2)
    del src

    # 5. into host memory (NumPy): the same bytes as F16, which safetensors.numpy can load (not BF16)
    href, hspans = safetensors_file(a.dir, a.st_size, a.st_tensors, dtype="F16")
    warm(href.path)

    def host_verify(d) -> str | None:
        if set(d) != {n for n, _, _ in hspans}:
            return "tensor names differ"
        total = 0
        for name, start, end in hspans:
            v = d[name].reshape(-1).view(np.uint8)
            if v.size != end - start:
                return f"{name}: {v.size} bytes, expected {end - start}"
            bad = check_stamps_host(v, start)
            if bad:
                return f"{name}: {bad}"
            total += word_sum(v)
        return None if total == href.data_sum else f"word sum {total} != {href.data_sum}"

    import types
    host = types.SimpleNamespace(sync=lambda: None)  # NewTensor's "gpu": host results need no sync
    cs = [NewTensor("accio.safetensors load_file (numpy)", host, href.size,
                    lambda: ast.load_file(href.path, framework="numpy"), host_verify, accio_last),
          NewTensor("accio.read whole file (host)", host, href.size, lambda: accio.read(href.path),
                    lambda arr: check_host(arr[href.data_start:], href.data_start, href.data_sum), accio_last)]
    skipped = {}
    if "safetensors" in a.peers_wanted:
        try:
            import safetensors.numpy as stn
            cs.append(NewTensor("safetensors.numpy load_file", host, href.size, lambda: stn.load_file(href.path),
                                host_verify))
        except ImportError as e:
            skipped["safetensors.numpy load_file"] = one_line(f"ImportError: {e}")
    else:
        skipped["safetensors.numpy load_file"] = "not asked for (--peers)"
    s.group("host memory, NumPy", {"file_size": href.size, "dtype": "F16", "cpus": os.cpu_count()}, cs, skipped,
            [("accio.safetensors load_file (numpy)", "safetensors.numpy load_file", ST_GOALS["safetensors.numpy"]),
             ("accio.safetensors load_file (numpy)", "accio.read whole file (host)", None)], rounds, 1)

    # 6. host memory a GPU load takes: VmHWM's rise in a fresh process (goal: no more than the staging pool)
    cfg = accio.settings()
    pool = int(cfg["threads"]) * int(cfg["ring_depth"]) * int(cfg["buffer_size"])
    mem = {"staging_pool_bytes": pool, "pool": f"threads {cfg['threads']} x ring_depth {cfg['ring_depth']} x "
           f"buffer_size {cfg['buffer_size']}", "file_size": ref.size, "loads": {}}
    for who, ok in (("accio", True), ("safetensors", bool(st)), ("fastsafetensors", bool(fst))):
        mem["loads"][who] = hwm_rise(a, ref.path, who, fw) if ok else {"skipped": peers.reason(who)}
    r = mem["loads"]["accio"]
    if "rise" in r:  # the allowance: the header, the tensors' Python objects, the interpreter's own arenas
        mem["goal"] = f"accio's VmHWM rise <= the staging pool + {HWM_ALLOWANCE >> 20} MiB (no copy of the file)"
        mem["goal_verdict"] = "met" if r["rise"] <= pool + HWM_ALLOWANCE else "missed"
        if gpu.kind == "accio.DeviceArray" and "fake" in str(accio.gpus()[a.device].get("name", "")):
            mem["note"] = "a fake driver's device memory is host memory: it counts in VmHWM here"
    s.doc["host_memory"] = mem
    s.finish()


def sec_cold_read(a, rec: Recorder, peers: Peers, gpu: Gpu) -> None:
    method = a.cold_method
    if method == "auto":
        method = "drop_caches" if os.geteuid() == 0 else "fadvise"
    t = a.cold_threads
    s = Section(rec, "cold-read", {"size": a.size, "threads": t, "task_size": a.task_size, "drop": method,
                                   "rounds": a.rounds_of("cold-read")}, a.budget_s)
    ref = data_file(a.dir, a.size)
    try:
        drop_cache(ref.path, method)
    except OSError as e:
        if a.cold_method != "auto" or method != "drop_caches":
            raise
        method = s.doc["params"]["drop"] = "fadvise"  # root, but /proc/sys read-only (a container)
        s.note(f"drop_caches refused ({e}): posix_fadvise(DONTNEED) per file instead")
        drop_cache(ref.path, method)
    left = residency(ref.path, empty=1.0)
    if left > 0.01:
        s.doc["reason"] = (f"the page cache cannot be dropped here: {left:.0%} of the file stays cached after "
                           f"{method} (a tmpfs, or no permission)")
        s.finish("skipped")
        return
    cached: list[float] = []

    def drop():
        drop_cache(ref.path, method)
        cached.append(residency(ref.path, empty=1.0))

    buf = gpu.empty(ref.size)
    cs: list[Contender] = []
    skipped: dict[str, str] = {}
    handles = []
    for name, extra in (("accio staged", {}), ("accio staged+direct", {"direct": True})):
        f, read, ran = accio_reader(ref.path, buf, mechanism="staged", threads=t, task_size=a.task_size, **extra)
        handles.append(f)
        cs.append(GpuRead(name, gpu, buf, ref, read, ran, drop))
    for c, h in kvikio_reads(a, peers, gpu, buf, ref, t, skipped, drop, direct_variant=True):
        cs.append(c)
        handles.append(h)
    comps = [("accio staged+direct", "kvikio compat", None), ("accio staged", "kvikio compat", None),
             ("accio staged+direct", "kvikio compat+direct", None), ("accio staged+direct", "accio staged", None),
             ("accio staged+direct", "kvikio gds", None)]
    try:
        g = s.group(f"{t} threads", {"threads": t, "size": ref.size}, cs, skipped, comps, a.rounds_of("cold-read"))
    finally:
        for h in handles:
            h.close()
    g["params"]["residency_max"] = max(cached, default=None)
    if cached and max(cached) > 0.01:
        s.note(f"some samples were not cold: up to {max(cached):.1%} of the file was cached after the drop")
    s.finish()

class CpuTimed(Contender):
    """Wraps a contender and keeps the process's CPU time (getrusage user+system) of each sample."""

    def __init__(self, inner: Contender):
        self.inner, self.name, self.nbytes, self.checks = inner, inner.name, inner.nbytes, inner.checks
        self.cpu_s: list[float] = []

    def before(self):
        self.inner.before()

    def run(self):
        import resource
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t = self.inner.run()
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        self.cpu_s.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
        self.ran = self.inner.ran
        return t

    def check(self):
        return self.inner.check()

    def final_check(self):
        return self.inner.final_check()

    def close(self):
        self.inner.close()


def cpu_per_gib(g: dict, cs: list[Contender]) -> None:
    """Adds each CpuTimed contender's median CPU seconds per GiB moved (warm-up excluded) to the group."""
    for c in cs:
        if isinstance(c, CpuTimed) and len(c.cpu_s) > 1 and c.nbytes:
            v = sorted(c.cpu_s[1:])
            g["contenders"][c.name]["cpu_s_per_gib"] = round(v[len(v) // 2] / (c.nbytes / (1 << 30)), 4)


class DevicePart:
    """n bytes of GPU memory at ptr, as a CAI v3 object (a slice of any GPU array)."""

    def __init__(self, ptr: int, n: int):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False), "version": 3,
                                         "strides": None, "stream": None}


class ManyReads(Contender):
    """Requests of `req` bytes covering ref's data region, one after another, into one GPU buffer."""
    checks = "every sample: word sum and page stamps on the GPU"

    def __init__(self, name, gpu: Gpu, buf, ref: DataFile, req: int, **settings):
        self.name, self.gpu, self.buf, self.ref, self.req = name, gpu, buf, ref, req
        self.nbytes = ref.size
        self.f = accio.open(ref.path, **settings)
        base = buf.__cuda_array_interface__["data"][0]
        self.parts = [(DevicePart(base + o, min(req, ref.size - o)), o) for o in range(0, ref.size, req)]

    def before(self):
        self.gpu.zero(self.buf)

    def run(self):
        def go():
            for part, o in self.parts:
                self.f.read_into(part, o)
        t = timed(go, self.gpu.sync)
        self.ran = self.f.stats()["last_mechanism"]
        return t

    def check(self):
        return self.gpu.check(self.buf, 0, self.ref.file_sum)

    def close(self):
        self.f.close()


def best_thread_counts(s: Section, hot: list[dict]) -> None:
    """The issue-24 goals at each contender's best thread count: pagecache's first read at its best
    group against each peer at its own best (an unpaired ratio: the groups ran in different rounds).
    Each side's group is chosen by the same samples the ratio is made of, so the estimate leans
    towards the larger of several noisy medians (the winner's curse, statistics audit, session 24):
    the row says so (`selection`), and a goal met here by a small margin wants the two thread counts
    measured again, interleaved."""
    def best(name):
        runs = [(g["contenders"][name]["median"], g) for g in hot if g["contenders"].get(name, {}).get("check") == "ok"
                and g["contenders"][name].get("n", 0) > 0]
        return max(runs, key=lambda x: x[0])[1] if runs else None
    first = "accio pagecache first read"
    out = s.doc["best_thread_counts"] = []
    ga = best(first)
    for peer, target in (("pinned h2d", 0.9), ("kvikio compat", 1.15), ("accio staged", 1.15)):
        gb = best(peer)
        row = {"a": first, "b": peer, "goal": target}
        if not ga or not gb:
            row["withheld"] = f"no checked samples of {first if not ga else peer}"
        else:
            sa = [x for x in ga["contenders"][first]["samples_mib_s"] if x is not None]
            sb = [x for x in gb["contenders"][peer]["samples_mib_s"] if x is not None]
            r = stats.ratio(sa, sb, paired=False)
            row.update(r.as_dict(), a_threads=ga["params"]["threads"], b_threads=gb["params"]["threads"],
                       verdict=stats.verdict(r), goal_verdict=stats.goal(r, target),
                       selection="each side at the thread count its own samples rank best: biased upwards")
        out.append(row)
    s.rec.save()


def sec_zerocopy(a, rec: Recorder, peers: Peers, gpu: Gpu) -> None:
    s = Section(rec, "zerocopy", {"size": a.size, "threads": a.threads, "rounds": a.rounds_of("zerocopy")},
                a.budget_s)
    ref = data_file(a.dir, a.size)
    s.doc["params"]["cached_before"] = warm(ref.path)
    buf = gpu.empty(ref.size)
    chunk = int(accio.settings()["buffer_size"])
    groups = len(a.threads) + 2
    for i, t in enumerate(a.threads):
        cs, skipped, handles = [], {}, []
        for name, keep in (("accio pagecache first read", 0), ("accio pagecache repeated", ref.size + (64 << 20))):
            f, read, ran = accio_reader(ref.path, buf, mechanism="pagecache", threads=t, pagecache_pin_limit=keep)
            handles.append(f)
            cs.append(CpuTimed(GpuRead(name, gpu, buf, ref, read, ran)))
        f, read, ran = accio_reader(ref.path, buf, mechanism="staged", threads=t, task_size=a.task_size)
        handles.append(f)
        cs.append(CpuTimed(GpuRead("accio staged", gpu, buf, ref, read, ran)))
        for c, h in kvikio_reads(a, peers, gpu, buf, ref, t, skipped):
            cs.append(CpuTimed(c))
            handles.append(h)
        cs.append(PinnedCopy(a.device, ref.size, chunk, t))
        first = "accio pagecache first read"
        comps = [(first, "pinned h2d", 0.9), (first, "kvikio compat", 1.15), (first, "accio staged", 1.15),
                 ("accio pagecache repeated", first, None), ("accio staged", "kvikio compat", None)]
        try:
            g = s.group(f"hot, {t} threads", {"threads": t, "size": ref.size}, cs, skipped, comps,
                        a.rounds_of("zerocopy"), groups - i)
            cpu_per_gib(g, cs)
        finally:
            for h in handles:
                h.close()
        s.rec.save()
    best_thread_counts(s, [g for g in s.doc["groups"] if g["label"].startswith("hot, ")])
    t = max(a.threads)
    half = ref.size // 2 // PAGE * PAGE

    def half_cached():
        warm(ref.path)
        drop_pages(ref.path, half, 0)
    cs, handles = [], []
    for name, mech in (("accio pagecache", "pagecache"), ("accio staged", "staged")):
        f, read, ran = accio_reader(ref.path, buf, mechanism=mech, threads=t)
        handles.append(f)
        cs.append(CpuTimed(GpuRead(name, gpu, buf, ref, read, ran, setup=half_cached)))
    try:
        g = s.group(f"half cached, {t} threads", {"threads": t, "size": ref.size, "cached": half}, cs, {},
                    [("accio pagecache", "accio staged", 1.0)], a.rounds_of("zerocopy"), 2)
        cpu_per_gib(g, cs)
    finally:
        for h in handles:
            h.close()
    s.rec.save()
    warm(ref.path)
    small = data_file(a.dir, min(ref.size, 256 << 20), seed=3)
    sbuf = gpu.empty(small.size)
    cs = []
    for req in (4096, 64 << 10, 1 << 20):
        cs.append(ManyReads(f"auto {fmt_size(req)}", gpu, sbuf, small, req, threads=t))
        cs.append(ManyReads(f"staged {fmt_size(req)}", gpu, sbuf, small, req, mechanism="staged", threads=t))
    comps = [(f"auto {fmt_size(r)}", f"staged {fmt_size(r)}", 1.0) for r in (4096, 64 << 10, 1 << 20)]
    s.group("small requests", {"threads": t, "size": small.size}, cs, {}, comps, a.rounds_of("zerocopy"), 1)
    s.finish()


SECTION_RUN = {"hot-read": sec_hot_read, "naive": sec_naive, "write": sec_write, "safetensors": sec_safetensors,
               "cold-read": sec_cold_read, "zerocopy": sec_zerocopy}


def wanted_peers(text: str) -> set[str]:
    return set() if text == "none" else {x.strip() for x in text.split(",") if x.strip()}


def page_size(text: str) -> int:
    n = parse_size(text)
    if n <= 0 or n % PAGE:
        raise argparse.ArgumentTypeError(f"{text}: must be a positive multiple of 4 KiB")
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sections", nargs="?", default="all", help=f"comma-separated: {', '.join(SECTIONS)}, or all (all)")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where the test files go (kept for the next run)")
    ap.add_argument("--json", help="write results here (rewritten after every round)")
    ap.add_argument("--size", type=page_size, default=4 << 30, help="file size for hot-read, naive, cold-read (4g)")
    ap.add_argument("--threads", default="4,8,16,32", help="hot-read thread counts (4,8,16,32)")
    ap.add_argument("--task-size", type=parse_size, default=4 << 20, help="task size for accio and KvikIO (4m)")
    ap.add_argument("--write-size", type=page_size, default=2 << 30, help="bytes per write sample (2g)")
    ap.add_argument("--write-threads", type=int, default=8)
    ap.add_argument("--cold-threads", type=int, default=8)
    ap.add_argument("--cold-method", choices=("auto", "drop_caches", "fadvise"), default="auto",
                    help="auto: drop_caches as root, else posix_fadvise(DONTNEED)")
    ap.add_argument("--st-size", type=page_size, default=4 << 30, help="safetensors data bytes (4g)")
    ap.add_argument("--st-tensors", type=int, default=64, help="tensors per safetensors file, shards too (64)")
    ap.add_argument("--st-shards", type=int, default=4, help="shards of the sharded checkpoint (4)")
    ap.add_argument("--st-shard-size", type=page_size, default=2 << 30, help="data bytes per shard (2g)")
    ap.add_argument("--st-sweep-rounds", type=int, default=2, help="rounds per fastsafetensors setting in its "
                    "sweep (2: a sweep picks settings, it claims nothing)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds per group (default: hot-read 11, others 7)")
    ap.add_argument("--budget-s", type=float, default=420, help="a section stops adding rounds past the minimum "
                    "of 7 when more would not fit in this many seconds (420)")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--peers", default=",".join(PEERS), help=f"peers to try: {','.join(PEERS)} or none")
    ap.add_argument("--machine-json", metavar="FILE", help="only write the machine's description (GPU, driver, "
                    "CUDA, CPUs, kernel, filesystem of --dir, cuFile mode, peers) to FILE")
    a = ap.parse_args(argv)
    names = list(SECTIONS) if a.sections == "all" else [x.strip() for x in a.sections.split(",") if x.strip()]
    bad = [n for n in names if n not in SECTIONS]
    if bad or not names:
        ap.error(f"unknown section(s) {', '.join(bad) or a.sections!r}; choose from {', '.join(SECTIONS)} or all")
    if a.machine_json:
        os.makedirs(a.dir, exist_ok=True)
        peers = Peers(wanted_peers(a.peers), a.device)
        ok, _why = accio.cuda_available()
        gpu = Gpu(a.device, peers.get("torch")) if ok else None
        Recorder(a.machine_json, machine(a.dir, peers, gpu)).save()
        return 0
    a.threads = sorted({int(x) for x in a.threads.split(",")})
    a.rounds_of = lambda name: a.rounds or DEFAULT_ROUNDS[name]
    wanted = wanted_peers(a.peers)
    a.peers_wanted = wanted
    os.makedirs(a.dir, exist_ok=True)

    doc = {"schema": SCHEMA, "command": " ".join(["python3", *sys.argv]) if argv is None else " ".join(argv),
           "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
           "accio": {"version": accio.__version__, "git_commit": accio._ext.git_commit()},
           "sections": {}}
    rec = Recorder(a.json, doc)
    ok, why = accio.cuda_available()
    if not ok:
        for n in names:
            doc["sections"][n] = {"status": "skipped", "reason": f"no GPU: {why}"}
        rec.save()
        log(f"no GPU: {why}")
        return 3
    peers = Peers(wanted, a.device)
    gpu = Gpu(a.device, peers.get("torch"))
    doc["machine"] = machine(a.dir, peers, gpu)
    rec.save()
    log(f"GPU arrays: {gpu.kind}; peers: " + ", ".join(
        f"{n} {p.get('version', '')}".strip() if p["available"] else f"{n} skipped ({p['reason']})"
        for n, p in peers.info.items()))
    status = 0
    for n in names:
        log(f"section {n}")
        try:
            SECTION_RUN[n](a, rec, peers, gpu)
        except Exception as e:  # noqa: BLE001 - the section fails, the next one runs
            traceback.print_exc(file=sys.stderr)
            sec = doc["sections"].setdefault(n, {})
            sec.update(status="failed", error=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
            rec.save()
            status = 1
            continue
        sec = doc["sections"][n]
        if sec.get("status") == "done" and (not sec.get("checks_ok", True) or sec.get("contenders_failed")):
            status = 1  # bytes differ, or a contender (accio's or a peer's) failed: see the section
    doc["finished"] = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    rec.save()
    return status


if __name__ == "__main__":
    sys.exit(main())
