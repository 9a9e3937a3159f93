// Shared test helpers: temporary directories, aligned buffers, random bytes, capability drops, a
// file size limit.
#pragma once
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace testing_accio {

// Where test files go: ACCIO_TEST_DIR, else /tmp.
inline std::string test_dir() {
  const char* base = std::getenv("ACCIO_TEST_DIR");
  return base && *base ? base : "/tmp";
}

class TempDir {
 public:
  TempDir() : TempDir(nullptr) {}
  // Under `under` when given, else test_dir().
  explicit TempDir(const char* under) {
    std::string tmpl = (under && *under ? std::string(under) : test_dir()) + "/accio-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) std::abort();
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A page-aligned allocation; data(shift) returns an address `shift` bytes past alignment.
class Buffer {
 public:
  explicit Buffer(size_t n) : n_(n + 4096) {
    void* p = nullptr;
    if (posix_memalign(&p, 4096, n_ ? n_ : 1) != 0) std::abort();
    p_.reset(static_cast<char*>(p));
  }
  char* data(size_t shift = 0) { return p_.get() + shift; }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  size_t n_;
  std::unique_ptr<char, Free> p_;
};

inline void fill_random(char* p, size_t n, std::mt19937_64& rng) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<char>(rng());
}

// Drops one capability from the calling thread's effective set for the scope (kept in permitted).
class DropCap {
 public:
  explicit DropCap(int cap) : cap_(cap) { set(false); }
  ~DropCap() { set(true); }

 private:
  void set(bool on) {
    __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct d[2]{};
    syscall(SYS_capget, &h, d);
    unsigned bit = 1u << (cap_ % 32);
    if (on) d[cap_ / 32].effective |= (d[cap_ / 32].permitted & bit);
    else d[cap_ / 32].effective &= ~bit;
    syscall(SYS_capset, &h, d);
  }
  int cap_;
};

// RLIMIT_FSIZE lowered to `bytes` for the scope, SIGXFSZ ignored (writes past it fail with EFBIG).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old_);
    old_sig_ = signal(SIGXFSZ, SIG_IGN);
    rlimit lim{bytes, old_.rlim_max};
    ok_ = setrlimit(RLIMIT_FSIZE, &lim) == 0;
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    signal(SIGXFSZ, old_sig_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  sighandler_t old_sig_ = SIG_DFL;
  bool ok_ = false;
};

inline size_t env_count(const char* name, size_t dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : dflt;
}

}  // namespace testing_accio
