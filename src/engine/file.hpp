// accio engine: File, the handle every front end uses. Opens the buffered and (where the filesystem
// allows) O_DIRECT descriptors, turns each request into a plan (the mechanism setting, or `auto`),
// runs it, and keeps per-handle and global statistics. Thread-safe for concurrent requests.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/fork.hpp"
#include "base/settings.hpp"
#include "engine/future.hpp"
#include "io/mechanism.hpp"
#include "planner/planner.hpp"

namespace accio::engine {

// Counters of one handle or of the process. Per mechanism: one entry per registered mechanism id,
// however many there are.
struct MechanismCount {
  uint64_t calls = 0, bytes = 0;
};
struct Stats {
  uint64_t reads = 0, writes = 0, fsyncs = 0, errors = 0;
  uint64_t bytes_read = 0, bytes_written = 0;
  uint64_t read_ns = 0, write_ns = 0, fsync_ns = 0;
  std::vector<MechanismCount> mechanisms;  // indexed by mechanism id (io::all())
  int last_mechanism = -1;
};

class StatCounters {
 public:
  StatCounters();  // one counter pair per registered mechanism
  void record(bool write, int mech, uint64_t bytes, uint64_t ns);
  void record_fsync(uint64_t ns);
  void record_error() { errors_.fetch_add(1, std::memory_order_relaxed); }
  Stats snapshot() const;
  // Mechanism `id`'s counters; false for an id that is not registered.
  bool mechanism(int id, MechanismCount* out) const;
  void reset();

 private:
  struct PerMechanism {
    std::atomic<uint64_t> calls{0}, bytes{0};
  };
  std::atomic<uint64_t> reads_{0}, writes_{0}, fsyncs_{0}, errors_{0};
  std::atomic<uint64_t> bytes_read_{0}, bytes_written_{0};
  std::atomic<uint64_t> read_ns_{0}, write_ns_{0}, fsync_ns_{0};
  size_t nmech_;
  std::unique_ptr<PerMechanism[]> mech_;
  std::atomic<int> last_{-1};
};
StatCounters& global_stats();

struct Request {
  void* buf;
  size_t size;
  uint64_t offset;
};

class File : public std::enable_shared_from_this<File> {
 public:
  // mode: r, r+ (= rw), w, w+, a, a+. Throws base::Error.
  static std::shared_ptr<File> open(const std::string& path, const std::string& mode, const base::Settings& s);
  // A new handle on the file behind descriptor fd, with fd's access mode: the file is reopened
  // through /proc/self/fd, so fd itself is neither used nor closed and its offset is untouched.
  static std::shared_ptr<File> open_fd(int fd, const base::Settings& s);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  size_t pread(void* buf, size_t n, uint64_t off);  // bytes read; short only at end of file
  size_t pwrite(const void* buf, size_t n, uint64_t off);  // n, or throws
  // Writes buf at the file's current end as O_APPEND does (one write(2) on an O_APPEND descriptor
  // of the handle's own, whatever the mechanism: atomic against other handles and processes, and a
  // failed append reserves nothing); returns the offset written at.
  uint64_t append(const void* buf, size_t n);
  Future pread_async(void* buf, size_t n, uint64_t off);
  Future pwrite_async(const void* buf, size_t n, uint64_t off);
  std::vector<Future> submit(const std::vector<Request>& reqs, bool write);
  void fsync();
  uint64_t size();
  int fd();      // the buffered descriptor (owned by the File); EBADF once closed
  void close();  // waits for requests in flight; further use fails with EBADF

  Stats stats() const { return stats_.snapshot(); }
  const StatCounters& counters() const { return stats_; }
  const base::Settings& settings() const { return settings_; }
  const io::FileRef& ref() const { return ref_; }
  // Which of its ways mechanism m serves this file by for memory at t, and why: Mechanism::way.
  // EBADF once closed.
  io::Mechanism::Way way(const io::Mechanism& m, const mem::cuda::Target& t) const;
  bool readable() const { return readable_; }
  bool writable() const { return writable_; }
  // The mechanism a request of n bytes at offset 0 from an aligned buffer would run (after `auto`
  // and fallbacks), its plan as text ("parallel(even)") and why it was chosen.
  const io::Mechanism& plan(size_t n, bool write) { return plan(nullptr, n, 0, write); }
  const io::Mechanism& plan(const void* buf, size_t n, uint64_t off, bool write, bool fresh_cache = false);
  struct Explanation {
    std::string mechanism, plan, why;
  };
  // A question: unlike plan() (the decision a request makes, which the preload shim takes for the
  // request it passes to libc), it leaves the stream and residency state as they were.
  Explanation explain(const void* buf, size_t n, uint64_t off, bool write, bool fresh_cache = false);
  // Which plans served this handle's requests, and why (auto); one entry for a fixed mechanism.
  std::vector<planner::PlanStat> plan_stats() const;
  // The smallest request at which this handle runs something other than posix (one request in
  // flight): the profile's crossing under auto, 0 for a fixed mechanism, UINT64_MAX for posix.
  uint64_t min_accelerated(bool write) const;

 private:
  File() = default;
  // path: what to open; shown: the name errors and statistics use; flags: open(2) flags.
  static std::shared_ptr<File> open_as(const std::string& path, const std::string& shown, int flags,
                                       const base::Settings& s);
  size_t transfer(void* buf, size_t n, uint64_t off, bool write);
  // Runs one read or write on m; a write moves end_. Returns the bytes moved.
  size_t move(const io::Mechanism& m, const io::IoContext& ctx, void* buf, size_t n, uint64_t off, bool write);
  void extend(uint64_t end);  // end_ = max(end_, end)
  // Appends: an O_APPEND descriptor reopened from fd (/proc/self/fd), one append at a time per
  // handle, so that its position after a write tells where that write landed. Made on the first
  // append in each process (a forked child must not share the position with its parent).
  struct Appender {
    std::mutex mu;
    int fd = -1;  // -1: the reopen was refused; pwritev2(RWF_APPEND) on ref_.fd instead
    unsigned forks = base::fork_count();
  };
  Appender& appender();
  // One append of host memory; *wrote: whether any byte reached the file.
  uint64_t append_host(const void* buf, size_t n, bool* wrote);
  // Whether a request's offset, size and buffer can be served at all; check() throws why not.
  static bool valid(const void* buf, size_t n, uint64_t off);
  void check(const void* buf, size_t n, uint64_t off, bool write) const;
  // EINVAL for a size above INT64_MAX bytes or an offset + size beyond it, as check() says them.
  void check_range(size_t n, uint64_t off, const char* op) const;
  // Requests submit() hands a fixed mechanism (the planner's only plan) as one batch (Mechanism::batch), with a result each.
  struct BatchJob {
    mem::cuda::Target target;
    std::vector<io::BatchItem> items;
    std::vector<Promise> results;
  };
  void run_batch(BatchJob& job, bool write);
  // The handle's lock and its count of requests in flight, one per process. In a forked child the
  // parent's count is of requests that run in the parent only, and its lock may be held there by a
  // parent's thread that was in begin() or end() at the fork (every request takes it twice), which
  // does not exist in the child: the child's first request on the handle waited for ever. The
  // child's first look makes a Gate of its own; the parent's is leaked.
  struct Gate {
    explicit Gate(unsigned f) : forks(f) {}
    const unsigned forks;  // base::fork_count() when made
    std::mutex mu;         // also guards closed_ and appender_
    std::condition_variable idle;
    unsigned inflight = 0;
  };
  Gate& gate();
  // Every request runs between begin() (checks the handle is open and, when `write` is given, its
  // access mode; counts the request in flight in the Gate it returns) and end() of that Gate, which
  // a Scope calls on every path (a request a child forked inside ends in its parent's count).
  Gate& begin(const char* op, int64_t off, std::optional<bool> write);
  static void end(Gate& g);
  struct Scope {
    Gate& g;
    explicit Scope(Gate& gate) : g(gate) {}
    ~Scope() { end(g); }
  };
  Future async(void* buf, size_t n, uint64_t off, bool write);
  // What the planner sees of a request; `inflight` counts the engine requests in flight, this one included.
  planner::Signals signals(const void* buf, size_t n, uint64_t off, bool write, unsigned inflight) const;
  // The plan for a request and the planner that chose it (whose record() counts the request), with
  // where the buffer lives in *t. The buffer is classified first: under auto a buffer in GPU memory
  // asks its GPU's device planner (Planner::device) only, so a GPU request pays one residency probe
  // and leaves the host planner's stream state alone. `recheck`: look again whether libcuda has
  // arrived (mem::cuda::classify), which is also done when the host plan's CPU touches the buffer.
  planner::Choice choose(const planner::Signals& s, bool recheck, mem::cuda::Target* t, const planner::Planner** by) const;
  // Under auto, the device planner's choice for a buffer found in GPU memory after the host plan
  // was chosen (File::transfer's retry of a GPU buffer taken for host memory): returns that
  // planner, or nullptr when `c` stands.
  const planner::Planner* for_device(const mem::cuda::Target& t, planner::Choice& c, const planner::Signals& s) const;
  // The mechanism that serves a buffer at `t` when the planned one cannot address that memory
  // (staged for GPU buffers under a fixed host mechanism, parallel for host buffers under a
  // device mechanism), or the fallback of a device mechanism that cannot serve this file (gds when
  // cuFile refuses it: Mechanism::resolve); nullptr when the planned one runs. *why says so.
  const io::Mechanism* for_target(const io::Mechanism& planned, const mem::cuda::Target& t, std::string* why) const;

  io::FileRef ref_;
  base::Settings settings_;
  // The plan for each request: a fixed mechanism's one plan, or auto's profile compiled for the file.
  std::unique_ptr<planner::Planner> planner_;
  bool readable_ = false, writable_ = false;
  std::atomic<uint64_t> end_{0};  // highest byte written by this handle or the size at open (a planner signal)
  Appender* appender_ = nullptr;  // under gate().mu; a parent's is leaked in a forked child
  StatCounters stats_;
  std::atomic<Gate*> gate_{new Gate(base::fork_count())};
  bool closed_ = false;  // under gate().mu
};

}  // namespace accio::engine
