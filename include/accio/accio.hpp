// accio C++ API: RAII handles, futures and exceptions over the stable C API (accio.h), so C++
// programs get a modern interface without depending on the library's C++ ABI.
//
//   accio::File f("data.bin", "r", accio::Settings().set("mechanism", "parallel"));
//   std::vector<char> buf(f.size());
//   size_t n = f.pread(buf.data(), buf.size(), 0);
#pragma once
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "accio/accio.h"

namespace accio {

// Thrown by every failing call: errno as the error code, plus operation, path and offset.
class Error : public std::system_error {
 public:
  Error(int errnum, std::string op, std::string path, int64_t offset, const std::string& what)
      : std::system_error(errnum, std::generic_category(), what),
        op_(std::move(op)), path_(std::move(path)), offset_(offset), what_(what) {}
  // accio's message as it is: it already names the operation, path, offset and errno, so not
  // system_error's "<message>: <strerror>", which would say the errno a second time.
  const char* what() const noexcept override { return what_.c_str(); }
  // The calling thread's last error, as recorded by the C API.
  static Error last() {
    return Error(accio_last_errno(), accio_last_error_op(), accio_last_error_path(), accio_last_error_offset(),
                 accio_last_error());
  }
  int errnum() const noexcept { return code().value(); }
  const std::string& op() const noexcept { return op_; }
  const std::string& path() const noexcept { return path_; }
  int64_t offset() const noexcept { return offset_; }

 private:
  std::string op_, path_;
  int64_t offset_;
  std::string what_;
};

namespace detail {
// std::exchange(p, nullptr), which is C++14: this header keeps to C++11.
template <class T>
T* take(T*& p) noexcept {
  T* was = p;
  p = nullptr;
  return was;
}
inline int64_t check(int64_t rc) {
  if (rc < 0) throw Error::last();
  return rc;
}
// A C API call that copies text into (out, len) and returns its full length, as a std::string:
// called again with room for the whole text when the first buffer was short, so nothing is cut.
template <class Fill>
std::string read_string(Fill fill, size_t first = 256) {
  std::string out(first, '\0');
  for (;;) {
    const auto n = static_cast<size_t>(check(fill(&out[0], out.size())));  // data() is const before C++17
    if (n < out.size()) return out.substr(0, n);
    out.assign(n + 1, '\0');
  }
}
}  // namespace detail

class Settings {
 public:
  Settings() : s_(accio_settings_new()) {
    if (!s_) throw Error::last();
  }
  Settings(const Settings& o) : s_(accio_settings_copy(o.s_)) {}
  Settings& operator=(Settings o) {
    std::swap(s_, o.s_);
    return *this;
  }
  ~Settings() { accio_settings_free(s_); }
  Settings& set(const std::string& name, const std::string& value) {
    detail::check(accio_settings_set(s_, name.c_str(), value.c_str()));
    return *this;
  }
  std::string get(const std::string& name) const {  // a long profile path is not cut
    return detail::read_string([&](char* out, size_t len) { return accio_settings_get(s_, name.c_str(), out, len); });
  }
  const accio_settings* get() const { return s_; }

 private:
  accio_settings* s_;
};

// What an asynchronous request came to, as its completion callback (Future::on_complete) sees it.
class Completion {
 public:
  Completion(accio_future* f, int64_t result) : f_(f), r_(result) {}
  int64_t result() const { return r_; }  // bytes, or -errno
  bool ok() const { return r_ >= 0; }
  // The byte count, or throws the request's Error (operation, path, offset and errno).
  size_t get() const { return static_cast<size_t>(detail::check(r_ >= 0 ? r_ : accio_future_wait(f_))); }

 private:
  accio_future* f_;
  int64_t r_;
};

// The result of an asynchronous request; get() returns the byte count or throws Error.
class Future {
 public:
  Future() = default;
  explicit Future(accio_future* f) : f_(f) {}
  Future(Future&& o) noexcept : f_(detail::take(o.f_)) {}
  Future& operator=(Future&& o) noexcept {
    std::swap(f_, o.f_);
    return *this;
  }
  ~Future() { accio_future_free(f_); }
  size_t get() { return static_cast<size_t>(detail::check(accio_future_wait(f_))); }
  bool ready(int64_t timeout_ns = 0) { return accio_future_ready(f_, timeout_ns) == 1; }
  bool valid() const { return f_ != nullptr; }
  accio_future* handle() const { return f_; }
  // Calls fn(Completion) exactly once when the request completes: on the engine worker that completed
  // it (fn must return promptly), or now, on this thread, when it has completed already
  // (accio_future_on_complete). fn must not throw: an exception that leaves it ends the process
  // (std::terminate). Destroying the Future waits for fn to return. Throws Error (EBUSY) when a
  // callback is registered already.
  template <class F>
  void on_complete(F fn) {
    auto* held = new F(std::move(fn));
    const int rc = accio_future_on_complete(
        f_,
        [](accio_future* f, int64_t result, void* arg) noexcept {
          const std::unique_ptr<F> call(static_cast<F*>(arg));
          (*call)(Completion(f, result));
        },
        held);
    if (rc < 0) {
      delete held;
      throw Error::last();
    }
  }

 private:
  accio_future* f_ = nullptr;
};

struct Request {
  void* buf;
  size_t size;
  int64_t offset;
};

class File {
 public:
  File(const std::string& path, const std::string& mode = "r", const Settings* settings = nullptr) : path_(path) {
    detail::check(accio_open(&f_, path.c_str(), mode.c_str(), settings ? settings->get() : nullptr));
  }
  File(const std::string& path, const std::string& mode, const Settings& settings) : File(path, mode, &settings) {}
  File(File&& o) noexcept : f_(detail::take(o.f_)), path_(std::move(o.path_)) {}
  File& operator=(File&& o) noexcept {
    std::swap(f_, o.f_);
    std::swap(path_, o.path_);
    return *this;
  }
  ~File() { accio_close(f_); }

  size_t pread(void* buf, size_t n, int64_t off) { return static_cast<size_t>(detail::check(accio_pread(h("pread"), buf, n, off))); }
  size_t pwrite(const void* buf, size_t n, int64_t off) {
    return static_cast<size_t>(detail::check(accio_pwrite(h("pwrite"), buf, n, off)));
  }
  int64_t append(const void* buf, size_t n) { return detail::check(accio_append(h("append"), buf, n)); }
  Future pread_async(void* buf, size_t n, int64_t off) {
    accio_future* fut;
    detail::check(accio_pread_async(h("pread"), buf, n, off, &fut));
    return Future(fut);
  }
  Future pwrite_async(const void* buf, size_t n, int64_t off) {
    accio_future* fut;
    detail::check(accio_pwrite_async(h("pwrite"), buf, n, off, &fut));
    return Future(fut);
  }
  std::vector<Future> submit(const std::vector<Request>& reqs, accio_op op) {
    std::vector<accio_request> rs;
    for (auto& r : reqs) rs.push_back({r.buf, r.size, r.offset});
    std::vector<accio_future*> fs(reqs.size());
    detail::check(accio_submit(h("submit"), op, rs.data(), rs.size(), fs.data()));
    std::vector<Future> out;
    for (auto* p : fs) out.emplace_back(p);
    return out;
  }
  void fsync() { detail::check(accio_fsync(h("fsync"))); }
  uint64_t size() { return static_cast<uint64_t>(detail::check(accio_size(h("fstat")))); }
  void close() {
    int rc = accio_close(detail::take(f_));
    detail::check(rc);
  }
  std::string plan(size_t n, accio_op op) {
    const char* m = accio_mechanism_for(h("plan"), n, op);
    if (!m) throw Error::last();
    return m;
  }
  struct Explanation {
    std::string plan, why;
  };
  // The plan a request would run now and why (auto: profile and live signals).
  // accio_explain cuts each text to its buffer: called again with twice the room while one fills it.
  Explanation explain(const void* buf, size_t n, int64_t off, accio_op op) {
    std::string plan(256, '\0'), why(1024, '\0');
    for (;;) {
      detail::check(accio_explain(h("explain"), buf, n, off, op, &plan[0], plan.size(), &why[0], why.size()));
      const bool cut_plan = std::char_traits<char>::length(plan.c_str()) + 1 >= plan.size();
      const bool cut_why = std::char_traits<char>::length(why.c_str()) + 1 >= why.size();
      if (!cut_plan && !cut_why) return {plan.c_str(), why.c_str()};
      if (cut_plan) plan.assign(2 * plan.size(), '\0');
      if (cut_why) why.assign(2 * why.size(), '\0');
    }
  }
  // The plans that served this handle's requests.
  std::vector<accio_plan_stat> plans() const {
    int n = static_cast<int>(detail::check(accio_file_plans(h("stats"), nullptr, 0)));
    std::vector<accio_plan_stat> out(static_cast<size_t>(n));
    n = static_cast<int>(detail::check(accio_file_plans(h("stats"), out.data(), n)));
    out.resize(std::min(out.size(), static_cast<size_t>(n)));
    return out;
  }
  accio_stats stats() const {
    accio_stats s;
    accio_file_stats(h("stats"), &s);
    return s;
  }
  struct MechanismStats {
    uint64_t calls, bytes;
  };
  // Calls and bytes of mechanism `id` on this handle (any id below accio_mechanism_count()).
  MechanismStats mechanism_stats(int id) const {
    MechanismStats m{};
    detail::check(accio_file_mechanism_stats(h("stats"), id, &m.calls, &m.bytes));
    return m;
  }
  accio_file* handle() const { return h(); }

 private:
  // The open handle; after close() every call throws EBADF like the C API does on a closed file,
  // naming the call and the file. (Not guarded against a close() racing other calls, as std::fstream:
  // the Python binding guards its own.)
  accio_file* h(const char* op = "use") const {
    if (!f_) throw Error(EBADF, op, path_, -1, std::string(op) + " '" + path_ + "': file is closed (errno 9)");
    return f_;
  }
  accio_file* f_ = nullptr;
  std::string path_;
};

inline std::string version() { return accio_version(); }

}  // namespace accio
