// accio engine: File implementation.
#include "engine/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>

#include "base/error.hpp"
#include "base/fork.hpp"
#include "base/log.hpp"
#include "base/sys.hpp"
#include "engine/thread_pool.hpp"
#include "io/odirect.hpp"
#include "planner/profile.hpp"

namespace accio::engine {
using base::Error;

// ---- statistics ----
StatCounters::StatCounters() : nmech_(io::all().size()), mech_(std::make_unique<PerMechanism[]>(nmech_)) {}

void StatCounters::record(bool write, int mech, uint64_t bytes, uint64_t ns) {
  constexpr auto r = std::memory_order_relaxed;
  (write ? writes_ : reads_).fetch_add(1, r);
  (write ? bytes_written_ : bytes_read_).fetch_add(bytes, r);
  (write ? write_ns_ : read_ns_).fetch_add(ns, r);
  if (mech >= 0 && static_cast<size_t>(mech) < nmech_) {
    mech_[mech].calls.fetch_add(1, r);
    mech_[mech].bytes.fetch_add(bytes, r);
  }
  last_.store(mech, r);
}
void StatCounters::record_fsync(uint64_t ns) {
  fsyncs_.fetch_add(1, std::memory_order_relaxed);
  fsync_ns_.fetch_add(ns, std::memory_order_relaxed);
}
Stats StatCounters::snapshot() const {
  Stats s;
  s.reads = reads_.load();
  s.writes = writes_.load();
  s.fsyncs = fsyncs_.load();
  s.errors = errors_.load();
  s.bytes_read = bytes_read_.load();
  s.bytes_written = bytes_written_.load();
  s.read_ns = read_ns_.load();
  s.write_ns = write_ns_.load();
  s.fsync_ns = fsync_ns_.load();
  s.mechanisms.resize(nmech_);
  for (size_t i = 0; i < nmech_; ++i) s.mechanisms[i] = {mech_[i].calls.load(), mech_[i].bytes.load()};
  s.last_mechanism = last_.load();
  return s;
}
bool StatCounters::mechanism(int id, MechanismCount* out) const {
  if (id < 0 || static_cast<size_t>(id) >= nmech_) return false;
  *out = {mech_[id].calls.load(), mech_[id].bytes.load()};
  return true;
}
void StatCounters::reset() {
  for (auto* a : {&reads_, &writes_, &fsyncs_, &errors_, &bytes_read_, &bytes_written_, &read_ns_, &write_ns_, &fsync_ns_})
    a->store(0);
  for (size_t i = 0; i < nmech_; ++i) {
    mech_[i].calls.store(0);
    mech_[i].bytes.store(0);
  }
  last_.store(-1);
}
StatCounters& global_stats() {
  static auto* s = new StatCounters;
  return *s;
}

namespace {
uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}
std::atomic<uint64_t> g_next_id{1};
// Engine requests in flight in the process (a planner signal); a forked child starts from zero.
base::PerProcess<std::atomic<unsigned>> g_inflight;

struct Inflight {
  std::atomic<unsigned>& count = g_inflight.get();
  unsigned n = count.fetch_add(1, std::memory_order_relaxed) + 1;
  ~Inflight() { count.fetch_sub(1, std::memory_order_relaxed); }
};

}  // namespace

std::shared_ptr<File> File::open(const std::string& path, const std::string& given, const base::Settings& s) {
  // fd has no O_APPEND in "a" and "a+": a write at an offset writes there (pwrite keeps offsets),
  // while append() writes through an O_APPEND descriptor of its own (appender()).
  // One "b" after the first letter is fopen's binary flag, which accio always is: "rb", "r+b", "rb+".
  std::string mode = given;
  if (const size_t b = mode.find('b', 1); b != std::string::npos) mode.erase(b, 1);
  int flags;
  if (mode == "r") flags = O_RDONLY;
  else if (mode == "r+" || mode == "rw") flags = O_RDWR;
  else if (mode == "w") flags = O_WRONLY | O_CREAT | O_TRUNC;
  else if (mode == "w+") flags = O_RDWR | O_CREAT | O_TRUNC;
  else if (mode == "a") flags = O_WRONLY | O_CREAT;
  else if (mode == "a+") flags = O_RDWR | O_CREAT;
  else if (mode == "x") flags = O_WRONLY | O_CREAT | O_EXCL;  // a new file, EEXIST if one is there (open(2)'s,
  else if (mode == "x+") flags = O_RDWR | O_CREAT | O_EXCL;  // Python's and C11 fopen's "x"), never a symlink's target
  else throw Error(EINVAL, "open", path, base::kNoOffset, "invalid mode '" + given + "' (use r, r+, w, w+, a, a+, x or x+, optionally with b: rb, r+b)");
  return open_as(path, path, flags, s);
}

std::shared_ptr<File> File::open_fd(int fd, const base::Settings& s) {
  const int fl = fcntl(fd, F_GETFL);
  if (fl < 0) throw Error(errno, "open_fd", "fd " + std::to_string(fd), base::kNoOffset);
  if (fl & O_PATH) throw Error(EBADF, "open_fd", "fd " + std::to_string(fd), base::kNoOffset, "an O_PATH descriptor");
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  char target[4096];
  const ssize_t len = readlink(proc.c_str(), target, sizeof target - 1);
  const std::string shown = len > 0 ? std::string(target, static_cast<size_t>(len)) : proc;
  // fd's durability comes along (O_SYNC, O_DSYNC: a program that opened its file so and handed it
  // over had lost it); O_APPEND does not, as in modes "a" and "a+": a write at an offset lands there,
  // and accio_append appends.
  return open_as(proc, shown, fl & (O_ACCMODE | O_SYNC | O_DSYNC), s);
}

std::shared_ptr<File> File::open_as(const std::string& path, const std::string& shown, int flags,
                                    const base::Settings& s) {
  const int acc = flags & O_ACCMODE;
  const bool rd = acc == O_RDONLY || acc == O_RDWR, wr = acc == O_WRONLY || acc == O_RDWR;
  const io::Mechanism* fixed = nullptr;
  if (s.mechanism != "auto") {
    fixed = io::find(s.mechanism);
    if (!fixed)  // only a Settings made without defaults() or from_env(), which check the name
      throw Error(EINVAL, "open", shown, base::kNoOffset,
                  "unknown mechanism '" + s.mechanism + "' (one of " + io::names() + ")");
  }

  // A profile named by the settings is loaded before the file is touched (a bad one fails the open
  // before O_TRUNC can empty anything); `auto` finds the filesystem's profile, and `off` the
  // built-in model of its device, once fd is open.
  std::shared_ptr<const planner::Profile> profile;
  if (!fixed && s.profile != "auto" && s.profile != "off") profile = planner::profile_for(-1, s.profile);

  int fd = base::sys::set_aside(::open(path.c_str(), flags | O_CLOEXEC, 0666));
  if (fd < 0) throw Error(errno, "open", shown, base::kNoOffset);
  struct stat st;
  if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    int e = S_ISDIR(st.st_mode) ? EISDIR : errno;
    ::close(fd);
    throw Error(e, "open", shown, base::kNoOffset);
  }

  std::shared_ptr<File> f(new File);
  f->ref_.path = shown;
  f->ref_.fd = fd;
  f->ref_.id = g_next_id.fetch_add(1);
  f->settings_ = s;
  f->readable_ = rd;
  f->writable_ = wr;
  f->end_.store(static_cast<uint64_t>(st.st_size));
  if (S_ISREG(st.st_mode)) {
    io::DirectOpen d = io::open_direct(path, acc | (flags & (O_SYNC | O_DSYNC)), fd);
    f->ref_.direct_fd = d.fd;
    f->ref_.no_direct = std::move(d.refused);
    f->ref_.off_align = d.off_align;
    f->ref_.mem_align = d.mem_align;
  } else {
    f->ref_.no_direct = "not a regular file";
  }
  if (fixed)
    f->planner_ = std::make_unique<planner::Planner>(*fixed, io::IoContext{f->ref_, s, ThreadPool::shared()});
  else
    f->planner_ = std::make_unique<planner::Planner>(profile ? profile : planner::profile_for(fd, s.profile), f->ref_, s);
  ThreadPool::shared().ensure(s.threads);
  return f;
}

File::~File() {
  try {
    close();
  } catch (...) {
  }
  Gate* g = gate_.load();
  if (g->forks == base::fork_count()) delete g;  // else a parent's, whose lock a parent's thread may hold
}

File::Gate& File::gate() {
  Gate* g = gate_.load(std::memory_order_acquire);
  while (g->forks != base::fork_count()) {  // the first look in a forked child
    Gate* mine = new Gate(base::fork_count());
    if (gate_.compare_exchange_strong(g, mine, std::memory_order_acq_rel)) return *mine;
    delete mine;  // another thread of the child made one first: g is now that one
  }
  return *g;
}

void File::close() {
  Gate& gt = gate();
  std::unique_lock lk(gt.mu);
  if (closed_) return;
  closed_ = true;
  gt.idle.wait(lk, [&] { return gt.inflight == 0; });
  for (auto* m : io::all()) m->forget(ref_.id);
  {
    std::lock_guard g(ref_.pool_hold.mu);
    ref_.pool_hold.pool.reset();  // idle from now on: StagingPool::shared may free it
  }
  if (appender_) {
    if (appender_->fd >= 0) ::close(appender_->fd);  // in a forked child: the child's copy
    if (appender_->forks == base::fork_count()) delete appender_;  // else a parent's thread may hold its mutex
    appender_ = nullptr;
  }
  if (ref_.direct_fd >= 0) ::close(ref_.direct_fd);
  int rc = ::close(ref_.fd);
  ref_.fd = ref_.direct_fd = -1;
  if (rc != 0 && errno != EINTR) throw Error(errno, "close", ref_.path, base::kNoOffset);
}

File::Gate& File::begin(const char* op, int64_t off, std::optional<bool> write) {
  Gate& g = gate();
  std::lock_guard lk(g.mu);
  if (closed_) throw Error(EBADF, op, ref_.path, off, "file is closed");
  if (write && (*write ? !writable_ : !readable_))
    throw Error(EBADF, op, ref_.path, off,
                *write ? "file not opened for writing (open it with mode r+, w, w+, a, a+, x or x+ to write)"
                       : "file not opened for reading (open it with mode r, r+, w+, a+ or x+ to read)");
  ++g.inflight;
  return g;
}

void File::end(Gate& g) {
  std::lock_guard lk(g.mu);
  if (--g.inflight == 0) g.idle.notify_all();
}

planner::Signals File::signals(const void* buf, size_t n, uint64_t off, bool write, unsigned inflight) const {
  return planner::Signals{buf, n, off, write, inflight, end_.load(std::memory_order_relaxed)};
}

const planner::Planner* File::for_device(const mem::cuda::Target& t, planner::Choice& c, const planner::Signals& s) const {
  if (!t.on_device() || planner_->fixed()) return nullptr;
  const planner::Planner& d = planner_->device(t.device);
  c = d.choose(s);
  return &d;
}

planner::Choice File::choose(const planner::Signals& s, bool recheck, mem::cuda::Target* t, const planner::Planner** by) const {
  *by = planner_.get();
  if (planner_->fixed()) {  // one plan, whatever the buffer: the buffer is looked at for for_target
    const planner::Choice c = planner_->choose(s);
    *t = mem::cuda::classify(s.buf, recheck || c.plan->mechanism->cpu_touches_buffer());
    return c;
  }
  *t = mem::cuda::classify(s.buf, recheck);
  if (!t->on_device()) {
    const planner::Choice c = planner_->choose(s);
    // A plan whose CPU touches the buffer would fault on a GPU buffer taken for host memory: look
    // again whether libcuda has arrived since this thread last looked.
    if (recheck || !c.plan->mechanism->cpu_touches_buffer()) return c;
    *t = mem::cuda::classify(s.buf, true);
    if (!t->on_device()) return c;
  }
  *by = &planner_->device(t->device);
  return (*by)->choose(s);
}

const io::Mechanism& File::plan(const void* buf, size_t n, uint64_t off, bool write, bool fresh_cache) {
  check_range(n, off, "plan");  // the plan of a request that pread would refuse is none
  planner::Signals s = signals(buf, n, off, write, g_inflight->load(std::memory_order_relaxed) + 1);
  s.fresh_cache = fresh_cache;
  mem::cuda::Target target;
  const planner::Planner* by;
  const planner::Choice c = choose(s, false, &target, &by);
  const io::Mechanism* other = for_target(*c.plan->mechanism, target, nullptr);
  return (other ? other : c.plan->mechanism)->route({ref_, other ? settings_ : c.plan->settings, ThreadPool::shared(), target}, n, write);
}

File::Explanation File::explain(const void* buf, size_t n, uint64_t off, bool write, bool fresh_cache) {
  check_range(n, off, "explain");
  planner::Signals s = signals(buf, n, off, write, g_inflight->load() + 1);
  s.fresh_cache = fresh_cache;
  s.peek = true;  // a question: what the next request runs stays as it was
  mem::cuda::Target target;
  const planner::Planner* by;
  const planner::Choice c = choose(s, true, &target, &by);
  std::string why;
  const io::Mechanism* other = for_target(*c.plan->mechanism, target, &why);
  const io::Mechanism* m = other ? other : c.plan->mechanism;
  const io::Mechanism& r = m->route({ref_, other ? settings_ : c.plan->settings, ThreadPool::shared(), target}, n, write);
  if (!other)
    why = by != planner_.get() ? "the buffer is in " + target.name() + " memory: " + by->why(c.route) : by->why(c.route);
  if (&r != m) why += std::string("; ") + m->name() + " hands this request to " + r.name();
  if (other || &r != m) return {r.name(), r.name(), why};
  return {c.plan->mechanism->name(), c.plan->label, why};
}

const io::Mechanism* File::for_target(const io::Mechanism& planned, const mem::cuda::Target& t, std::string* why) const {
  if (planned.serves(t)) {
    // A device mechanism may still be unable to serve this file (gds: cuFile refuses it).
    if (!t.on_device()) return nullptr;
    const io::Mechanism& r = planned.resolve({ref_, settings_, ThreadPool::shared(), t});
    if (&r == &planned) return nullptr;
    if (why) *why = std::string(planned.name()) + " cannot serve this file here (see the warning): it runs as " + r.name();
    return &r;
  }
  // A fixed mechanism for the other kind of memory, or a device plan of auto for memory it does not
  // take (gds: managed memory): staged for GPU buffers, parallel for host ones.
  const bool fixed = planner_->fixed();
  const std::string& was = settings_.mechanism;
  const io::Mechanism* m = io::find(!t.on_device() ? "parallel" : t.own_context ? "naive" : "staged");
  if (t.on_device()) {
    io::IoContext ctx{ref_, settings_, ThreadPool::shared(), t};
    m = &m->resolve(ctx);
  }
  const std::string where = t.on_device() ? t.name() : "host";
  if (fixed)
    base::warn_once("target:" + was + ":" + where, "mechanism " + was + " cannot serve " + where + " memory: those requests run " +
                                                      m->name());
  if (why)
    *why = "the buffer is in " + where + " memory: " + m->name() + " (" +
           (fixed ? "mechanism=" + was : std::string(planned.name())) + " cannot serve it)";
  return m;
}

io::Mechanism::Way File::way(const io::Mechanism& m, const mem::cuda::Target& t) const {
  if (closed_) throw Error(EBADF, "way", ref_.path, base::kNoOffset, "file is closed");
  return m.way({ref_, settings_, ThreadPool::shared(), t});
}

uint64_t File::min_accelerated(bool write) const { return planner_->min_accelerated(write); }

std::vector<planner::PlanStat> File::plan_stats() const {
  const Stats s = stats_.snapshot();
  std::vector<planner::PlanStat> out = planner_->stats(s.reads + s.writes, s.bytes_read + s.bytes_written);
  for (const io::Mechanism* m : io::all())
    for (io::Detail& d : m->details(ref_.id)) out.push_back({std::move(d.path), std::move(d.why), d.calls, d.bytes});
  return out;
}

bool File::valid(const void* buf, size_t n, uint64_t off) {
  // n above INT64_MAX wrapped the subtraction and passed (SIZE_MAX "read" -1 bytes under parallel)
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  return n <= kMax && off <= kMax - n && (buf || !n);
}

void File::check(const void* buf, size_t n, uint64_t off, bool write) const {
  if (valid(buf, n, off)) return;
  const char* op = write ? "pwrite" : "pread";
  if (!buf && n) throw Error(EFAULT, op, ref_.path, static_cast<int64_t>(off), "null buffer");
  check_range(n, off, op);
}

void File::check_range(size_t n, uint64_t off, const char* op) const {
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (n > kMax)
    throw Error(EINVAL, op, ref_.path, static_cast<int64_t>(off),
                "size " + std::to_string(n) + " is above the largest request (INT64_MAX bytes)");
  if (off > kMax - n) throw Error(EINVAL, op, ref_.path, static_cast<int64_t>(off), "offset + size overflows");
}

size_t File::transfer(void* buf, size_t n, uint64_t off, bool write) {
  check(buf, n, off, write);
  const Inflight inflight;
  const planner::Signals sig = signals(buf, n, off, write, inflight.n);
  mem::cuda::Target target;
  const planner::Planner* by;  // the planner whose choice runs (device(): a GPU buffer's)
  planner::Choice choice = choose(sig, false, &target, &by);
  const io::Mechanism* other = nullptr;
  const io::Mechanism* m = nullptr;
  const uint64_t t0 = now_ns();
  size_t got;
  try {
    for (;;) {
      other = for_target(*choice.plan->mechanism, target, nullptr);
      const io::IoContext ctx{ref_, other ? settings_ : choice.plan->settings, ThreadPool::shared(), target,
                              settings_.cache_probe == "off" ? nullptr : &planner::resident};
      m = &(other ? other : choice.plan->mechanism)->route(ctx, n, write);
      try {
        got = move(*m, ctx, buf, n, off, write);
        break;
      } catch (const Error& e) {
        // A GPU buffer taken for host memory because libcuda arrived after this thread last looked
        // (mem::cuda::loaded): the kernel refused it, having moved nothing. Look again and serve
        // it where it lives.
        if (e.errnum() != EFAULT || target.on_device()) throw;
        target = mem::cuda::classify(buf, true);
        if (std::string why; !target.on_device() && mem::cuda::forked_child() && !mem::cuda::load(&why))
          throw Error(EFAULT, e.op(), ref_.path, static_cast<int64_t>(off),
                      "the buffer is not host memory; if it is GPU memory: " + why);
        if (!target.on_device()) throw;
        if (const planner::Planner* d = for_device(target, choice, sig)) by = d;
      }
    }
  } catch (...) {
    stats_.record_error();
    global_stats().record_error();
    throw;
  }
  const uint64_t dt = now_ns() - t0;
  by->record(choice, got, other != nullptr);
  stats_.record(write, m->id, got, dt);
  global_stats().record(write, m->id, got, dt);
  return got;
}

size_t File::move(const io::Mechanism& m, const io::IoContext& ctx, void* buf, size_t n, uint64_t off, bool write) {
  if (!write) return m.read(ctx, buf, n, off);
  m.write(ctx, buf, n, off);
  if (n) extend(off + n);
  return n;
}

void File::extend(uint64_t end) {
  uint64_t e = end_.load();
  while (end > e && !end_.compare_exchange_weak(e, end)) {}
}

size_t File::pread(void* buf, size_t n, uint64_t off) {
  const Scope scope(begin("pread", static_cast<int64_t>(off), false));
  return transfer(buf, n, off, false);
}

size_t File::pwrite(const void* buf, size_t n, uint64_t off) {
  const Scope scope(begin("pwrite", static_cast<int64_t>(off), true));
  return transfer(const_cast<void*>(buf), n, off, true);
}

File::Appender& File::appender() {
  std::lock_guard lk(gate().mu);
  if (appender_ && appender_->forks == base::fork_count()) return *appender_;
  if (appender_ && appender_->fd >= 0) ::close(appender_->fd);  // the parent's, shared position and all
  appender_ = new Appender;
  // A new open file description of the same file (not of whatever the path names now), with a
  // position of its own. Refused (no /proc, or the file's mode no longer lets this user write it):
  // pwritev2(RWF_APPEND) on fd, which moves fd's position.
  const std::string self = "/proc/self/fd/" + std::to_string(ref_.fd);
  const int fl = fcntl(ref_.fd, F_GETFL);  // O_SYNC and O_DSYNC as fd's (accio_open_fd keeps them)
  appender_->fd = base::sys::set_aside(::open(self.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | (fl > 0 ? fl & (O_SYNC | O_DSYNC) : 0)));
  return *appender_;
}

uint64_t File::append_host(const void* buf, size_t n, bool* wrote) {
  if (n == 0) {  // nothing to write: where it would have gone
    struct stat st;
    if (fstat(ref_.fd, &st) != 0) throw Error(errno, "append", ref_.path, base::kNoOffset);
    return static_cast<uint64_t>(st.st_size);
  }
  Appender& a = appender();
  std::lock_guard lk(a.mu);
  const int fd = a.fd >= 0 ? a.fd : ref_.fd;
  const char* p = static_cast<const char*>(buf);
  // Linux moves at most MAX_RW_COUNT (2 GiB - 4 KiB) per write: a larger append is several O_APPEND
  // writes in a row, each atomic, which another process's append may come between.
  constexpr size_t kMaxWrite = 0x7ffff000;
  int64_t at = -1;  // where the first write landed
  for (size_t done = 0; done < n;) {
    const size_t len = std::min(n - done, kMaxWrite);
    ssize_t w;
    if (a.fd >= 0) {
      w = syscall(SYS_write, fd, p + done, len);  // the kernel's, not a preload shim's write
    } else {
      iovec v{const_cast<char*>(p + done), len};
      w = syscall(SYS_pwritev2, fd, &v, 1, -1L, -1L, RWF_APPEND);
    }
    if (w < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      throw Error(e, "append", ref_.path, at < 0 ? base::kNoOffset : at + static_cast<int64_t>(done),
                  done ? std::string(std::strerror(e)) + " after " + std::to_string(done) + " of " + std::to_string(n) +
                             " bytes, which stay at the end"
                       : std::string());
    }
    if (w > 0) *wrote = true;
    if (at < 0) {
      const off_t pos = static_cast<off_t>(syscall(SYS_lseek, fd, 0L, SEEK_CUR));
      // A FIFO (ESPIPE) or a device whose driver has no position (EINVAL): 0. Otherwise no offset
      // is invented: the bytes are there, where is unknown.
      if (pos < 0 && errno != ESPIPE && errno != EINVAL) {
        const int e = errno;
        throw Error(e, "append", ref_.path, base::kNoOffset,
                    "wrote " + std::to_string(done + static_cast<size_t>(w)) + " of " + std::to_string(n) +
                        " bytes, which stay at the end, but cannot tell where they landed (lseek: " + std::strerror(e) + ")");
      }
      at = pos >= w ? pos - w : 0;
    }
    if (w == 0) throw Error(EIO, "append", ref_.path, at + static_cast<int64_t>(done), "write moved no byte");
    done += static_cast<size_t>(w);
  }
  return static_cast<uint64_t>(at);
}

uint64_t File::append(const void* buf, size_t n) {
  const Scope scope(begin("append", base::kNoOffset, true));
  // Checked before anything is written; an offset is known only once the kernel chose it.
  if (!buf && n) throw Error(EFAULT, "append", ref_.path, base::kNoOffset, "null buffer");
  if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw Error(EINVAL, "append", ref_.path, base::kNoOffset, "size overflows");
  const Inflight inflight;
  const uint64_t t0 = now_ns();
  // Where the buffer lives: host memory is written by the kernel straight from it; GPU memory is
  // copied to host memory first, in one piece, so that the append stays one write.
  mem::cuda::Target target = mem::cuda::classify(buf, false);
  uint64_t off;
  try {
    for (;;) {
      bool wrote = false;
      try {
        if (!target.on_device()) {
          off = append_host(buf, n, &wrote);
        } else {
          std::unique_ptr<char[]> host(new (std::nothrow) char[n ? n : 1]);
          if (!host) throw Error(ENOMEM, "append", ref_.path, base::kNoOffset, "no host memory to stage a GPU buffer of " + std::to_string(n) + " bytes");
          mem::cuda::copy(host.get(), buf, n);
          off = append_host(host.get(), n, &wrote);
        }
        break;
      } catch (const Error& e) {
        // A GPU buffer taken for host memory (libcuda arrived after this thread last looked): the
        // kernel refused it, having written nothing. Look again (as transfer() does).
        if (e.errnum() != EFAULT || wrote || target.on_device()) throw;
        target = mem::cuda::classify(buf, true);
        if (!target.on_device()) throw;
      }
    }
  } catch (...) {
    stats_.record_error();
    global_stats().record_error();
    throw;
  }
  const uint64_t dt = now_ns() - t0;
  static const int posix = io::find("posix")->id;
  static const io::Mechanism* naive = io::find("naive");
  const int id = target.on_device() && naive ? naive->id : posix;  // what moved it: a plain write, or a copy and one
  stats_.record(true, id, n, dt);
  global_stats().record(true, id, n, dt);
  if (n) extend(off + n);
  return off;
}

Future File::async(void* buf, size_t n, uint64_t off, bool write) {
  Gate* g = &begin(write ? "pwrite_async" : "pread_async", static_cast<int64_t>(off), write);
  Promise promise;
  Future fut = promise.get_future();
  ThreadPool::shared().submit([self = shared_from_this(), g, promise, buf, n, off, write]() mutable {
    size_t done;
    try {  // the request leaves the handle (Scope) before it completes: close() never waits for a callback
      const Scope scope(*g);
      done = self->transfer(buf, n, off, write);
    } catch (...) {
      promise.set_error(std::current_exception());
      return;
    }
    promise.set_value(done);
  });
  return fut;
}

Future File::pread_async(void* buf, size_t n, uint64_t off) { return async(buf, n, off, false); }
Future File::pwrite_async(const void* buf, size_t n, uint64_t off) {
  return async(const_cast<void*>(buf), n, off, true);
}

std::vector<Future> File::submit(const std::vector<Request>& reqs, bool write) {
  std::vector<Future> out(reqs.size());
  // Requests the fixed mechanism runs together (gds: small requests into GPU memory, one cuFile
  // batch), grouped by the memory they address; the others run one by one.
  struct Group {
    mem::cuda::Target target;
    size_t limit;
    std::vector<size_t> reqs;  // indexes into reqs
  };
  std::vector<Group> groups;
  const planner::Plan* only = planner_->only_plan();  // batches need the plan before requests run
  const io::Mechanism* m = only ? only->mechanism : nullptr;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const Request& r = reqs[i];
    if (m && r.size && valid(r.buf, r.size, r.offset)) {
      const mem::cuda::Target t = mem::cuda::classify(r.buf, m->cpu_touches_buffer());
      const size_t limit = !for_target(*m, t, nullptr) ? m->batch_limit({ref_, only->settings, ThreadPool::shared(), t}, r.size) : 0;
      if (limit > 1) {
        auto g = std::find_if(groups.begin(), groups.end(), [&](const Group& x) {
          return x.target.device == t.device && x.target.ctx == t.ctx;
        });
        if (g == groups.end()) g = groups.insert(groups.end(), Group{t, limit, {}});
        g->reqs.push_back(i);
        continue;
      }
    }
    out[i] = async(r.buf, r.size, r.offset, write);
  }
  for (const Group& g : groups)
    for (size_t first = 0; first < g.reqs.size(); first += g.limit) {
      const size_t count = std::min(g.limit, g.reqs.size() - first);
      if (count == 1) {  // nothing to batch with
        const Request& r = reqs[g.reqs[first]];
        out[g.reqs[first]] = async(r.buf, r.size, r.offset, write);
        continue;
      }
      Gate* held = &begin(write ? "pwrite_async" : "pread_async", base::kNoOffset, write);
      auto job = std::make_shared<BatchJob>();
      job->target = g.target;
      for (size_t k = first; k < first + count; ++k) {
        const Request& r = reqs[g.reqs[k]];
        job->items.push_back({r.buf, r.size, r.offset, 0, nullptr});
        out[g.reqs[k]] = job->results.emplace_back().get_future();
      }
      ThreadPool::shared().submit([self = shared_from_this(), held, job, write] {
        const Scope scope(*held);
        self->run_batch(*job, write);
      });
    }
  return out;
}

void File::run_batch(BatchJob& job, bool write) {
  const planner::Plan& plan = *planner_->only_plan();  // submit() batches only for a fixed mechanism
  const io::Mechanism& m = *plan.mechanism;
  const io::IoContext ctx{ref_, plan.settings, ThreadPool::shared(), job.target};
  const Inflight inflight;
  const uint64_t t0 = now_ns();
  try {
    m.batch(ctx, job.items.data(), job.items.size(), write);
  } catch (...) {  // the batch failed as a whole: each of its requests fails with its error
    for (Promise& r : job.results) {
      stats_.record_error();
      global_stats().record_error();
      r.set_error(std::current_exception());
    }
    return;
  }
  const uint64_t dt = now_ns() - t0;  // each request is charged the batch's time, as if run alone
  for (size_t i = 0; i < job.items.size(); ++i) {
    io::BatchItem& it = job.items[i];
    if (it.error) {
      stats_.record_error();
      global_stats().record_error();
      // Moved, not copied: the future's state then holds the only reference, so the exception is
      // freed by whoever drops that state last, never by this thread behind the reader's back.
      job.results[i].set_error(std::move(it.error));
      continue;
    }
    if (write) extend(it.off + it.n);
    stats_.record(write, m.id, it.done, dt);
    global_stats().record(write, m.id, it.done, dt);
    job.results[i].set_value(it.done);
  }
}

void File::fsync() {
  const Scope scope(begin("fsync", base::kNoOffset, std::nullopt));
  const uint64_t t0 = now_ns();
  int rc;
  do rc = ::fsync(ref_.fd);
  while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    stats_.record_error();
    global_stats().record_error();
    throw Error(errno, "fsync", ref_.path, base::kNoOffset);
  }
  stats_.record_fsync(now_ns() - t0);
  global_stats().record_fsync(now_ns() - t0);
}

int File::fd() {
  std::lock_guard lk(gate().mu);
  if (closed_) throw Error(EBADF, "fileno", ref_.path, base::kNoOffset, "file is closed");
  return ref_.fd;
}

uint64_t File::size() {
  std::lock_guard lk(gate().mu);
  if (closed_) throw Error(EBADF, "fstat", ref_.path, base::kNoOffset, "file is closed");
  struct stat st;
  if (fstat(ref_.fd, &st) != 0) throw Error(errno, "fstat", ref_.path, base::kNoOffset);
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace accio::engine
