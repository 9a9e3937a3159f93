// accio mechanisms: registry and the helpers every mechanism shares.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <exception>
#include <mutex>

#include "base/error.hpp"
#include "base/sys.hpp"
#include "io/mechanism.hpp"

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

size_t task_bytes(const base::Settings& s, uint64_t n, unsigned width, size_t align) {
  uint64_t t = s.task_size;
  if (t == 0) t = std::max<uint64_t>(kMinEvenTask, (n + std::max(width, 1u) - 1) / std::max(width, 1u));
  return static_cast<size_t>(align_up(t, std::max<size_t>(align, 4096)));
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
  runner.run(ntasks, width, [&](size_t i) {
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
  });
  if (err) std::rethrow_exception(err);
  return static_cast<size_t>(short_at.load() - off);
}

}  // namespace accio::io
