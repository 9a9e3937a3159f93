// accio mechanisms: registry and the helpers every mechanism shares.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "base/error.hpp"
#include "base/settings.hpp"
#include "base/sys.hpp"
#include "io/mechanism.hpp"
#include "mem/staging.hpp"

namespace accio::io {
using base::Error;

namespace {
std::vector<std::unique_ptr<Mechanism>>& owned() {
  static std::vector<std::unique_ptr<Mechanism>> v;
  return v;
}
}  // namespace

Registrar::Registrar(std::unique_ptr<Mechanism> m, std::vector<std::string> knobs) {
  m->knobs = std::move(knobs);
  owned().push_back(std::move(m));
}

bool Mechanism::reads(const std::string& knob) const {
  return std::find(knobs.begin(), knobs.end(), knob) != knobs.end();
}

const std::vector<const Mechanism*>& all() {
  // Never destroyed: it may first be built after an exit handler that reads it was registered (the
  // preload shim's, which collects statistics at exit), and that handler then runs after its
  // destructor would have (a process leaving a file open under `accio run --stats` crashed so).
  static const std::vector<const Mechanism*>* const list = new std::vector<const Mechanism*>([] {
    std::vector<const Mechanism*> v;
    for (auto& m : owned()) v.push_back(m.get());
    std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->rank() < b->rank(); });
    for (size_t i = 0; i < v.size(); ++i) const_cast<Mechanism*>(v[i])->id = static_cast<int>(i);
    return v;
  }());
  return *list;
}

const Mechanism* find(const std::string& name) {
  for (auto* m : all())
    if (name == m->name()) return m;
  return nullptr;
}

std::string names() {
  std::string s = "auto";
  for (auto* m : all()) s += std::string(", ") + m->name();
  return s;
}

namespace {
// The `mechanism` setting names auto or a registered mechanism: refused when it is set or read from
// ACCIO_MECHANISM (the error names the variable), not at the first open.
void check_mechanism(const std::string& v) {
  if (v != "auto" && !find(v)) throw std::invalid_argument("unknown mechanism (one of " + names() + ")");
}
[[maybe_unused]] const bool kMechanismChecked = (base::set_setting_check("mechanism", check_mechanism), true);
}  // namespace

size_t read_full(int fd, void* buf, size_t n, uint64_t off, const std::string& path, size_t eof_align) {
  auto* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < n) {
    ssize_t r = base::sys::ops().pread(fd, p + done, n - done, static_cast<off_t>(off + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(errno, "pread", path, static_cast<int64_t>(off + done));
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
    if (done < n && (off + done) % eof_align != 0) break;
  }
  return done;
}

void write_full(int fd, const void* buf, size_t n, uint64_t off, const std::string& path) {
  auto* p = static_cast<const char*>(buf);
  size_t done = 0;
  while (done < n) {
    ssize_t r = base::sys::ops().pwrite(fd, p + done, n - done, static_cast<off_t>(off + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(errno, "pwrite", path, static_cast<int64_t>(off + done));
    }
    if (r == 0) throw Error(EIO, "pwrite", path, static_cast<int64_t>(off + done), "write made no progress");
    done += static_cast<size_t>(r);
  }
}

// ---- realign: host copies whose buffer is misaligned against the file offset ----
//
// The kernel copies between the page cache and a program's buffer with `rep movsb` on CPUs with
// FSRM (copy_user_generic). On AMD Zen 3 and 4 that instruction is several times slower when the
// destination is not aligned like the source: a hot 1 GiB file read in 64 MiB preads on the 2-vCPU
// VM (AMD EPYC) ran at 10162 MiB/s into a page-aligned buffer, 5424 into a bytearray (16 bytes
// off) and 3121 into a buffer 8 bytes off (results/realign.json, realign=off); in development runs,
// at full speed when the buffer and the file offset were off by the same 16 bytes.
// A bytearray's or a numpy array's data sits 16 bytes into its allocation, so every Python read
// into one paid it. Where this CPU is slow so (measured once per process, below), posix and
// parallel read such a request through a per-thread aligned buffer placed at the file offset's
// page offset: the kernel's copy runs aligned, and the CPU's own vector copy, which does not care
// about alignment, moves the bytes on into the program's buffer (a 1 GiB hot file read in 64 MiB
// requests into a bytearray: posix 1.77x, parallel 1.78x, 0.95 and 1.00 of a page-aligned buffer;
// 8 bytes off 2.8x: results/realign.json). The rule is the 32-byte alignment: 32 bytes off read at
// full speed, 48 bytes off at 0.72x and 1.24x faster realigned (results/realign_offsets.json).
// Writes are left as they are: their destination, the page cache, is aligned, and in a development
// A/B the same detour made writes from a bytearray slower (0.89x).

const base::Knob kRealign{{"realign", "ACCIO_REALIGN",
                           "host reads (posix, parallel, uring buffered) into a buffer not 32-byte aligned like the file offset, "
                           "through an aligned buffer: auto (where this CPU's kernel copy is slow for "
                           "such buffers, measured once per process), on, off",
                           "choice", "auto", 0, 0, "auto|on|off"}};

namespace {
constexpr size_t kRealignMin = 64 << 10;  // smaller requests: the kernel's copy as it is

#if defined(__x86_64__)
inline void rep_movsb(void* d, const void* s, size_t n) {
  asm volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}

// Whether `rep movsb` into a destination 8 bytes off the source's alignment takes 1.5x the time of
// an aligned one here: the best of 9 copies of 64 KiB each way, in cache (a few hundred
// microseconds at most, once per process). Only on CPUs with FSRM, where the kernel copies with it.
// The signature of the CPUs above: on the VM's AMD EPYC 64 KiB copied at 56 GB/s aligned and at
// 3.2 GB/s 8 bytes off (16 bytes off: 48 GB/s in cache, but 6.7 against 17 GB/s for 64 MiB, out of
// it); Intel documents about 25% for a misaligned destination.
bool measure_slow_misaligned_copy() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 4))) return false;
  constexpr size_t kLen = 64 << 10;
  std::unique_ptr<char, decltype(&std::free)> src(static_cast<char*>(std::aligned_alloc(4096, kLen + 4096)), &std::free);
  std::unique_ptr<char, decltype(&std::free)> dst(static_cast<char*>(std::aligned_alloc(4096, kLen + 4096)), &std::free);
  if (!src || !dst) return false;
  std::memset(src.get(), 1, kLen + 4096);
  std::memset(dst.get(), 0, kLen + 4096);
  auto best = [&](char* to) {
    auto min = std::chrono::steady_clock::duration::max();
    for (int i = 0; i < 9; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      rep_movsb(to, src.get(), kLen);
      min = std::min(min, std::chrono::steady_clock::now() - t0);
    }
    return min.count();
  };
  best(dst.get());  // warm the caches
  const auto aligned = best(dst.get()), off = best(dst.get() + 8);
  return off * 2 > aligned * 3;
}

// Copies n bytes from src (the aligned buffer) to the program's dst with AVX2 stores, the
// destination aligned to 32 first. With `stream`, streaming stores: the bytes go to memory without
// first being read into the cache (for a request larger than the caches: 1.2x the plain stores in
// development measurements); without, a smaller request's bytes stay in the cache for the program.
template <bool stream>
__attribute__((target("avx2"))) void copy_out_avx2(char* dst, const char* src, size_t n) {
  size_t i = std::min(n, static_cast<size_t>((32 - (reinterpret_cast<uintptr_t>(dst) & 31)) & 31));
  std::memcpy(dst, src, i);
  for (; i + 128 <= n; i += 128) {
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    const __m256i v2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    const __m256i v3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    if constexpr (stream) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), v0);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), v1);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), v2);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), v3);
    } else {
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst + i), v0);
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst + i + 32), v1);
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst + i + 64), v2);
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst + i + 96), v3);
    }
  }
  if constexpr (stream) _mm_sfence();
  std::memcpy(dst + i, src + i, n - i);
}
#endif
}  // namespace

void copy_out(char* dst, const char* src, size_t n, bool stream) {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return stream ? copy_out_avx2<true>(dst, src, n) : copy_out_avx2<false>(dst, src, n);
#endif
  (void)stream;
  std::memcpy(dst, src, n);
}

namespace {
// This thread's aligned buffer: kRealignChunk bytes plus a page, so that a chunk can start at any
// page offset. Kept for the thread's life (1 MiB per thread that realigned a read). Null where it
// cannot be allocated: the read then goes to the kernel as it is.
char* realign_buffer() {
  thread_local std::unique_ptr<char, decltype(&std::free)> b(nullptr, &std::free);
  if (!b) b.reset(static_cast<char*>(std::aligned_alloc(4096, kRealignChunk + 4096)));
  return b.get();
}
}  // namespace

// Whether a request takes the aligned buffer: the realign setting (auto: this CPU is slow for such
// copies), a buffer off the file offset's alignment, large enough, and host memory (a GPU buffer
// taken for host memory, because libcuda arrived after this thread last looked, must reach the
// kernel, which refuses it with EFAULT so that the engine serves it where it lives: the CPU's own
// copy would fault). Where the engine asked the driver about the buffer (libcuda loaded), its
// answer stands: asking again would cost every realigned request a second driver call.
bool realigns(const IoContext& c, const void* buf, size_t n, uint64_t off) {
  if (n < kRealignMin || ((reinterpret_cast<uintptr_t>(buf) - off) & 31) == 0) return false;
  const std::string& mode = kRealign.text(c.settings);
  if (mode == "off" || (mode == "auto" && !slow_misaligned_copy())) return false;
  return !(c.target.asked ? c.target : mem::cuda::classify(buf, true)).on_device();
}

bool slow_misaligned_copy() {
#if defined(__x86_64__)
  static const bool slow = measure_slow_misaligned_copy();
  return slow;
#else
  return false;
#endif
}

namespace {
// Reads what of [at, at+n) the page cache holds into p without waiting for the device: the bytes
// read, short where a page is missing (or at the end of the file); n where such reads cannot be
// made on this file (read_full then reads it all).
size_t read_cached(const FileRef& file, char* p, size_t n, uint64_t at) {
  const base::sys::Ops& ops = base::sys::ops();
  const auto cached = ops.pread_cached;
  // The kernel's cached read goes with the kernel's pread: a table whose pread was replaced (a test
  // gating or failing reads) sees every read through it, unless it replaced this entry too.
  const bool coherent = ops.pread == base::sys::real_ops().pread || cached != base::sys::real_ops().pread_cached;
  if (cached && coherent && !file.no_cached_reads.set.load(std::memory_order_relaxed)) {
    for (;;) {
      const ssize_t r = cached(file.fd, p, n, static_cast<off_t>(at));
      if (r >= 0) return static_cast<size_t>(r);
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return 0;
      if (errno == EOPNOTSUPP || errno == ENOSYS) {  // this filesystem, or this kernel, takes none
        file.no_cached_reads.set.store(true, std::memory_order_relaxed);
        break;
      }
      if (errno == EINVAL) break;  // whatever it is, the plain read below reports it
      throw Error(errno, "preadv2", file.path, static_cast<int64_t>(at));
    }
  }
  return read_full(file.fd, p, n, at, file.path);
}
}  // namespace

// Through the aligned buffer, piece by piece. With ColdRealign::kStraight (posix: one thread reads
// the whole request) only while the pieces are in the page cache: a piece the kernel would wait for
// the device for (RWF_NOWAIT read short) ends realigning, and the rest of the request is read
// straight into the program's buffer in one call, which keeps the kernel's readahead and the
// device's queue as deep as a plain read's (for such a read the device, not the copy, sets the
// pace). Piece by piece, posix read a cold 512 MiB file in 64 MiB requests into a bytearray at
// 0.86-0.88x of the straight read (results/realign_cold_ab.json: after/before 1.14x and 1.16x).
// With kPieces (parallel's tasks) every piece goes through the buffer, cold or not: there the
// pieces ran 1.07x faster than one straight read per task in the same A/B's first run (second run
// 1.06x, undecided [0.91-1.03] for straight / pieces).
size_t read_host(const IoContext& c, void* buf, size_t n, uint64_t off, ColdRealign cold) {
  char* const b = realigns(c, buf, n, off) ? realign_buffer() : nullptr;
  if (!b) return read_full(c.file.fd, buf, n, off, c.file.path);
  auto* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < n) {
    const uint64_t at = off + done;
    char* const chunk = b + at % 4096;  // aligned like the file offset
    const size_t want = std::min(n - done, kRealignChunk);
    const size_t got = cold == ColdRealign::kStraight ? read_cached(c.file, chunk, want, at)
                                                      : read_full(c.file.fd, chunk, want, at, c.file.path);
    copy_out(p + done, chunk, got, n >= kRealignChunk);  // a request of 1 MiB or more: streaming
    done += got;
    if (got == want) continue;
    if (cold == ColdRealign::kPieces) break;  // end of file
    return done + read_full(c.file.fd, p + done, n - done, off + done, c.file.path);  // not cached, or the end
  }
  return done;
}

size_t task_bytes(const base::Settings& s, uint64_t n, unsigned width, size_t align) {
  uint64_t t = s.task_size;
  if (t == 0) t = std::max<uint64_t>(kMinEvenTask, (n + std::max(width, 1u) - 1) / std::max(width, 1u));
  return static_cast<size_t>(align_up(t, std::max<size_t>(align, 4096)));
}

std::shared_ptr<mem::StagingPool> staging_pool(const IoContext& c) {
  const auto& s = c.settings;
  std::shared_ptr<mem::StagingPool> p = mem::StagingPool::shared(s.buffer_size, s.buffer_count, s.huge_pages);
  std::lock_guard<std::mutex> g(c.file.pool_hold.mu);
  if (c.file.pool_hold.pool != p) c.file.pool_hold.pool = p;  // the old one, if any, goes idle
  return p;
}

size_t split_run(TaskRunner& runner, unsigned width, uint64_t off, size_t n, size_t task,
                 const std::function<size_t(uint64_t, size_t, size_t)>& fn) {
  if (n == 0) return 0;
  const uint64_t end = off + n;
  const size_t ntasks = static_cast<size_t>((align_up(end, task) - align_down(off, task)) / task);
  if (ntasks == 1) return fn(off, n, 0);

  auto task_start = [&](size_t i) { return i == 0 ? off : align_down(off, task) + i * task; };
  std::atomic<uint64_t> short_at{end};  // lowest offset where data stopped (EOF or error)
  std::mutex mu;
  std::exception_ptr err;
  uint64_t err_off = end;
  auto one = [&](size_t i) {
    const uint64_t s = task_start(i), e = std::min<uint64_t>(end, task_start(i + 1));
    if (s >= short_at.load(std::memory_order_relaxed)) return;  // past EOF or an error: skip
    try {
      size_t got = fn(s, static_cast<size_t>(e - s), static_cast<size_t>(s - off));
      if (got < e - s) {
        uint64_t at = s + got, cur = short_at.load();
        while (at < cur && !short_at.compare_exchange_weak(cur, at)) {}
      }
    } catch (...) {
      std::lock_guard lk(mu);
      if (s < err_off) {
        err_off = s;
        err = std::current_exception();
      }
      uint64_t cur = short_at.load();
      while (s < cur && !short_at.compare_exchange_weak(cur, s)) {}
    }
  };
  // In waves: a request far larger than the file (a 1 TiB buffer for a small file, or a bogus
  // size) stops at the first wave past its end instead of skipping 2^k tasks one by one (n =
  // INT64_MAX made 2^41 of them: hours). A wave is at least 4096 tasks and 1 GiB: each wave ends
  // in a barrier, which small tasks (4 KiB: 16 MiB a wave in 4096 tasks) would meet too often.
  const size_t wave = std::max<size_t>(4096, static_cast<size_t>((uint64_t{1} << 30) / task));
  for (size_t first = 0; first < ntasks && task_start(first) < short_at.load(); first += wave)
    runner.run(std::min(wave, ntasks - first), width, [&](size_t j) { one(first + j); });
  if (err) std::rethrow_exception(err);
  return static_cast<size_t>(short_at.load() - off);
}

}  // namespace accio::io
