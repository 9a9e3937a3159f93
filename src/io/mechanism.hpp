// accio mechanisms: the one interface every way of moving bytes implements (fio ioengines and
// IOR aiori style). A new mechanism is one file in src/io plus one ACCIO_REGISTER_MECHANISM line,
// which names the settings it reads; a knob of its own is a base::Knob in the same file.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "accio/accio.h"  // ACCIO_MIN_EVEN_TASK
#include "base/settings.hpp"
#include "mem/cuda.hpp"

namespace accio::mem {
class StagingPool;
}

namespace accio::io {

// The open file as mechanisms see it. Owned by the engine's File.
struct FileRef {
  std::string path;
  int fd = -1;            // buffered descriptor
  int direct_fd = -1;     // O_DIRECT descriptor, -1 where the filesystem refuses O_DIRECT
  std::string no_direct;  // why direct_fd is -1
  uint64_t id = 0;        // unique per open handle, never reused
  size_t off_align = 4096;  // file offset/length alignment for O_DIRECT (>= page size)
  size_t mem_align = 4096;  // buffer address alignment for O_DIRECT
  // Set once this file refused preadv2(RWF_NOWAIT) (tmpfs: EOPNOTSUPP): realign's cached reads are
  // not tried on it again (read_host). Per file, not per process: other filesystems keep them.
  struct OnceFlag {
    mutable std::atomic<bool> set{false};
    OnceFlag() = default;
    OnceFlag(const OnceFlag& o) : set(o.set.load(std::memory_order_relaxed)) {}
    OnceFlag& operator=(const OnceFlag& o) {
      set.store(o.set.load(std::memory_order_relaxed), std::memory_order_relaxed);
      return *this;
    }
  };
  OnceFlag no_cached_reads;
  // The staging pool the handle's requests took last (direct, uring), held until the handle closes:
  // StagingPool::shared frees the pools nobody holds beyond the two most recent idle ones, so
  // handles with different buffer settings used in turn rebuilt a locked pool per request. A copy
  // holds nothing of its own.
  struct PoolHold {
    mutable std::mutex mu;
    mutable std::shared_ptr<mem::StagingPool> pool;
    PoolHold() = default;
    PoolHold(const PoolHold&) {}
    PoolHold& operator=(const PoolHold&) { return *this; }
  };
  PoolHold pool_hold;
};

// Runs fn(0..ntasks-1) with at most `width` tasks at once, the caller taking part. Implemented by
// the engine's thread pool; tasks must not throw (split_run catches for them).
class TaskRunner {
 public:
  virtual ~TaskRunner() = default;
  virtual void run(size_t ntasks, unsigned width, const std::function<void(size_t)>& fn) = 0;
};

// One request of a batch (File::submit): the mechanism sets `done` (bytes moved; short only at end
// of file for reads) or `error`.
struct BatchItem {
  void* buf;
  size_t n;
  uint64_t off;
  size_t done = 0;
  std::exception_ptr error;
};

struct IoContext {
  const FileRef& file;
  const base::Settings& settings;
  TaskRunner& runner;
  mem::cuda::Target target{};  // where the request's buffer lives (host unless a device mechanism runs)
  // Whether file bytes [off, off+len) are all in the page cache, page by page (cachestat, else
  // mincore), set by the engine; a range it cannot see counts as not cached, so pagecache reads it
  // staged (always correct) rather than pinning pages that would first have to be read from the
  // device. Null (cache_probe=off): every range counts as cached. The planner's own check
  // (mostly_cached) samples instead and takes what it cannot see as cached: it picks a plan, where
  // a wrong guess costs speed only.
  bool (*resident)(int fd, uint64_t off, uint64_t len) = nullptr;
};

// How a mechanism served a handle's requests below its name (pagecache: the bytes it moved zero-copy
// and those it read through staged, with why); the handle's plan statistics list them.
struct Detail {
  std::string path, why;
  uint64_t calls = 0, bytes = 0;
};

class Mechanism {
 public:
  virtual ~Mechanism() = default;
  virtual const char* name() const = 0;
  virtual int rank() const = 0;  // display order
  // Device mechanisms (naive, staged, gds) serve buffers in GPU memory; the others serve host memory.
  virtual bool device() const { return false; }
  // Whether this mechanism can move bytes to and from memory at `t` (gds: not managed memory).
  // Host mechanisms serve host memory; device ones GPU memory of a primary context (their streams
  // belong to it: memory of a context the program made itself goes to naive, Target::own_context).
  virtual bool serves(const mem::cuda::Target& t) const {
    return t.on_device() == device() && !(device() && t.own_context);
  }
  // Whether the CPU may copy to or from the request's buffer (staging, fixed buffers). posix and
  // parallel hand it to the kernel, which answers EFAULT for GPU memory: the engine lets them
  // classify buffers with mem::cuda's cheaper, possibly stale look and reroutes on EFAULT. Where
  // they realign a read (read_host), the CPU does copy into the buffer: read_host takes the
  // engine's answer where the engine asked the driver (Target::asked), else looks again
  // (mem::cuda::classify with recheck) before it does, and leaves a GPU buffer to the kernel.
  virtual bool cpu_touches_buffer() const { return true; }
  // Whether the mechanism can run on this machine at all; `why` says what is missing.
  virtual bool available(std::string* why) const {
    (void)why;
    return true;
  }
  // The mechanism that will really run for this file: itself, or a fallback after one warning.
  virtual const Mechanism& resolve(const IoContext&) const { return *this; }
  // Why this mechanism cannot serve the file for memory at c.target, though it runs on this
  // machine ("" when it can; gds: cuFile refuses to register the file). resolve() falls back then.
  virtual std::string refusal(const IoContext& c) const {
    (void)c;
    return {};
  }
  // Which of its ways the mechanism serves this file by, for memory at c.target, where it has
  // several, and why (gds: 1 cuFile's direct path, 0 its compatibility mode, 2 cuFile refuses the
  // file so that staged serves it: accio_gds_mode); code -1 where it has one way only.
  struct Way {
    int code = -1;
    std::string why;
  };
  virtual Way way(const IoContext& c) const {
    (void)c;
    return {};
  }
  // The mechanism that runs one request of n bytes: itself, or one it hands such requests to
  // (pagecache: staged for writes and small reads), so that statistics name what ran.
  virtual const Mechanism& route(const IoContext& c, size_t n, bool write) const {
    (void)c, (void)n, (void)write;
    return *this;
  }
  // Reads up to n bytes at off; returns the bytes read (short only at end of file).
  virtual size_t read(const IoContext&, void* buf, size_t n, uint64_t off) const = 0;
  // Writes exactly n bytes at off or throws base::Error.
  virtual void write(const IoContext&, const void* buf, size_t n, uint64_t off) const = 0;
  // How many requests of n bytes this mechanism runs together through batch() (gds: one cuFile
  // batch); 0 when it has no batch path for them and File::submit runs them one by one.
  virtual size_t batch_limit(const IoContext&, size_t n) const {
    (void)n;
    return 0;
  }
  // Runs items[0..count) together (count <= batch_limit); never throws: each item gets its result.
  virtual void batch(const IoContext&, BatchItem* items, size_t count, bool write) const {
    (void)items, (void)count, (void)write;
  }
  // The handle `file_id` is closing: drop anything cached for it.
  virtual void forget(uint64_t file_id) const { (void)file_id; }
  // How this mechanism served the handle `file_id` beyond its own counts (empty for most).
  virtual std::vector<Detail> details(uint64_t file_id) const {
    (void)file_id;
    return {};
  }

  // Whether a request to this mechanism needs its buffer, offset and length aligned (always
  // O_DIRECT: direct); with `direct`, the settings say (uring, staged).
  virtual bool always_direct() const { return false; }
  // Whether the mechanism reads `knob` (one of knobs).
  bool reads(const std::string& knob) const;

  int id = -1;                     // index in all(), assigned by the registry
  std::vector<std::string> knobs;  // the settings it reads (its registration line names them)
};

// Every registered mechanism, ordered by rank; ids are indexes into this list.
const std::vector<const Mechanism*>& all();
const Mechanism* find(const std::string& name);  // nullptr if unknown
std::string names();                              // "auto, posix, parallel, ...": what `mechanism` takes

struct Registrar {
  Registrar(std::unique_ptr<Mechanism> m, std::vector<std::string> knobs);
};
// ACCIO_REGISTER_MECHANISM(Class, "knob", ...): the settings this mechanism reads (rows of the
// settings table: the planner shows them in plan labels, the docs list who reads what).
#define ACCIO_REGISTER_MECHANISM(Class, ...) \
  static const ::accio::io::Registrar accio_registrar_##Class{std::make_unique<Class>(), {__VA_ARGS__}}

// ---- helpers shared by mechanisms (src/io/common.cpp) ----

// pread until n bytes, end of file, or an error (EINTR retried). A short read that ends at an
// offset not multiple of `eof_align` is taken as end of file (O_DIRECT semantics).
size_t read_full(int fd, void* buf, size_t n, uint64_t off, const std::string& path, size_t eof_align = 1);
// pwrite until all n bytes are written (EINTR and short writes retried) or throws.
void write_full(int fd, const void* buf, size_t n, uint64_t off, const std::string& path);

// read_full on the buffered descriptor for a buffer in host memory (posix, parallel): a request of
// 64 KiB or more whose buffer is not 32-byte aligned like the file offset goes through a per-thread
// aligned buffer where the realign setting says so (auto: where slow_misaligned_copy). What of it
// the page cache does not hold: kStraight reads it straight into buf in one call from the first
// piece that would wait for the device (a whole request read by one thread: posix), kPieces through
// the aligned buffer too (parallel's tasks); common.cpp has the measurements.
enum class ColdRealign { kStraight, kPieces };
size_t read_host(const IoContext& c, void* buf, size_t n, uint64_t off, ColdRealign cold);
// Whether a read takes an aligned buffer (read_host; uring's buffered reads through its staging
// buffers): the realign setting, a buffer of n >= 64 KiB not 32-byte aligned like off, host memory.
bool realigns(const IoContext& c, const void* buf, size_t n, uint64_t off);
// The bytes one realigned piece moves: small enough to be copied on while still in the CPU's cache.
inline constexpr size_t kRealignChunk = size_t{1} << 20;
// memcpy into the program's buffer with AVX2 stores aligned on dst (streaming stores with `stream`:
// for requests of kRealignChunk or more, whose bytes would only push others out of the cache).
void copy_out(char* dst, const char* src, size_t n, bool stream);
// Whether this CPU's kernel copy (`rep movsb`, with FSRM) is slow for a buffer misaligned against
// the page cache (AMD Zen 3 and 4): measured once per process, on first use.
bool slow_misaligned_copy();

// Splits [off, off+n) at absolute multiples of `task` (a multiple of every alignment in use) and
// runs fn(task_off, task_len, buf_offset) -> bytes on the runner with `width` tasks at once.
// Returns the bytes that are contiguous from off (a short task ends the result); rethrows the
// error of the lowest failing offset.
// The staging pool of c's settings (StagingPool::shared), held by the request that asks and by
// c's file until it closes (FileRef::pool_hold).
std::shared_ptr<mem::StagingPool> staging_pool(const IoContext& c);

size_t split_run(TaskRunner& runner, unsigned width, uint64_t off, size_t n, size_t task,
                 const std::function<size_t(uint64_t, size_t, size_t)>& fn);

// Bytes per task for a request of n bytes: the task_size setting, or with task_size 0 an even split
// into `width` tasks of at least kMinEvenTask; rounded up to a multiple of `align`.
inline constexpr size_t kMinEvenTask = ACCIO_MIN_EVEN_TASK;
size_t task_bytes(const base::Settings& s, uint64_t n, unsigned width, size_t align);

inline uint64_t align_down(uint64_t v, uint64_t a) { return v / a * a; }
inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
inline bool is_aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

}  // namespace accio::io
