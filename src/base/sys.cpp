// accio base: default system-call table. The calls go to the kernel directly (syscall(2)), not
// through libc's pread/pwrite symbols: under accio's LD_PRELOAD shim those symbols are the shim's
// own wrappers, and the engine's tasks must never re-enter them.
#include "base/sys.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>

namespace accio::base::sys {
namespace {
ssize_t raw_pread(int fd, void* buf, size_t n, off_t off) { return syscall(SYS_pread64, fd, buf, n, off); }
ssize_t raw_pwrite(int fd, const void* buf, size_t n, off_t off) { return syscall(SYS_pwrite64, fd, buf, n, off); }
#ifndef RWF_NOWAIT
#define RWF_NOWAIT 0x00000008
#endif
ssize_t raw_pread_cached(int fd, void* buf, size_t n, off_t off) {
#if defined(SYS_preadv2) && __SIZEOF_LONG__ == 8
  iovec v{buf, n};
  // (fd, iov, count, offset low, offset high, flags): on 64-bit the low word is the whole offset
  return syscall(SYS_preadv2, static_cast<long>(fd), &v, 1L, static_cast<long>(off), 0L, static_cast<long>(RWF_NOWAIT));
#else
  (void)fd, (void)buf, (void)n, (void)off;
  errno = ENOSYS;
  return -1;
#endif
}
const Ops kReal{&raw_pread, &raw_pwrite, &raw_pread_cached};
Ops g_ops = kReal;

#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
struct CachestatRange {
  uint64_t off, len;
};
struct Cachestat {
  uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};
}  // namespace
Ops& ops() { return g_ops; }
const Ops& real_ops() { return kReal; }

bool cachestat(int fd, uint64_t off, uint64_t len, uint64_t* cached, uint64_t* dirty) {
  CachestatRange r{off, len};
  Cachestat cs{};
  if (syscall(__NR_cachestat, fd, &r, &cs, 0) != 0) return false;
  *cached = cs.nr_cache;
  if (dirty) *dirty = cs.nr_dirty;
  return true;
}

bool cachestat_available() {
  static const bool ok = [] {
    uint64_t c;
    return cachestat(-1, 0, 0, &c) || errno != ENOSYS;  // EBADF means the call exists
  }();
  return ok;
}

bool sample_cached(int fd, uint64_t off, uint64_t len, uint64_t* cached, uint64_t* pages) {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  constexpr uint64_t kWindow = 32 << 10;
  *cached = *pages = 0;
  if (!cachestat_available()) return false;
  auto window = [&](uint64_t a, uint64_t n) {
    uint64_t c;
    if (!cachestat(fd, a, n, &c)) return false;
    *cached += c;
    *pages += (a + n + page - 1) / page - a / page;
    return true;
  };
  return len <= 2 * kWindow ? window(off, len) : window(off, kWindow) && window(off + len - kWindow, kWindow);
}

bool read_file(const char* path, std::string& out, size_t max) {
  out.clear();
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[16384];
  int err = 0;
  for (;;) {
    const ssize_t n = syscall(SYS_read, fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    else if (out.size() + size_t(n) > max) err = EFBIG;
    if (n <= 0 || err) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  if (err) errno = err;
  return err == 0;
}
}  // namespace accio::base::sys
