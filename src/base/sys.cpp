// accio base: default system-call table. The calls go to the kernel directly (syscall(2)), not
// through libc's pread/pwrite symbols: under accio's LD_PRELOAD shim those symbols are the shim's
// own wrappers, and the engine's tasks must never re-enter them.
#include "base/sys.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

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
    // EBADF means the call exists; ENOSYS that the kernel has none, EPERM that a seccomp filter
    // refuses it (every call would fail)
    return cachestat(-1, 0, 0, &c) || (errno != ENOSYS && errno != EPERM);
  }();
  return ok;
}

namespace {
const uint64_t kPage = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));

// Calls window(a, n) for the head and tail windows of [off, off+len) (the whole range up to
// kSampleWhole).
template <class F>
bool sample_windows(uint64_t off, uint64_t len, F&& window) {
  return len <= kSampleWhole ? window(off, len)
                                  : window(off, kSampleWindow) && window(off + len - kSampleWindow, kSampleWindow);
}
uint64_t pages_of(uint64_t a, uint64_t n) { return (a + n + kPage - 1) / kPage - a / kPage; }
}  // namespace

bool sample_cached(int fd, uint64_t off, uint64_t len, uint64_t* cached, uint64_t* pages) {
  if (!cachestat_available()) return sample_cached_mincore(fd, off, len, cached, pages);
  *cached = *pages = 0;
  return sample_windows(off, len, [&](uint64_t a, uint64_t n) {
    uint64_t c;
    if (!cachestat(fd, a, n, &c)) return false;
    *cached += c;
    *pages += pages_of(a, n);
    return true;
  });
}

bool sample_cached_mincore(int fd, uint64_t off, uint64_t len, uint64_t* cached, uint64_t* pages) {
  *cached = *pages = 0;
  return len == 0 || sample_windows(off, len, [&](uint64_t a, uint64_t n) {
           uint64_t c, p;
           if (!mincore_pages(fd, a, n, &c, &p)) return false;
           *cached += c;
           *pages += p;
           return true;
         });
}

bool mincore_pages(int fd, uint64_t off, uint64_t len, uint64_t* cached, uint64_t* pages) {
  *cached = 0;
  *pages = pages_of(off, len);
  if (len == 0) return true;
  const uint64_t base = off / kPage * kPage;
  const size_t maplen = static_cast<size_t>(off + len - base);
  void* m = mmap(nullptr, maplen, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(base));
  if (m == MAP_FAILED) return false;
  std::vector<unsigned char> vec(*pages);
  const int rc = mincore(m, maplen, vec.data());
  const int e = errno;
  munmap(m, maplen);
  if (rc != 0) {
    errno = e;
    return false;
  }
  for (unsigned char v : vec) *cached += v & 1;
  return true;
}

int aside_floor() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 3;
  const rlim_t soft = rl.rlim_cur;
  if (soft >= 1024 + 256) return 1024;
  return soft >= 3 + 256 + 1 ? static_cast<int>(soft) - 256 : 3;
}

int set_aside(int fd) {
  const int floor = aside_floor();
  if (fd < 0 || fd >= floor) return fd;
  const int saved = errno;
  // Closing fd would release every record lock (F_SETLK, lockf) this process holds on fd's file,
  // whatever descriptor took it. An open file description's lock test sees them (they conflict
  // with it, even in the same process): a file locked by anyone, or one it cannot tell of, keeps
  // its number. An io_uring ring has no locks.
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  if (syscall(SYS_fcntl, fd, F_OFD_GETLK, &fl) != 0 || fl.l_type != F_UNLCK) {
    errno = saved;
    return fd;
  }
  long moved = syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, floor);
  if (moved < 0 && fd < 3 && floor > 3) moved = syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 3);
  if (moved >= 0) {
#if defined(__SANITIZE_THREAD__)
    // ThreadSanitizer follows descriptors through libc's calls: a number closed behind its back and
    // then reused (memfd_create in another thread) was reported as a race on the old file. Its
    // builds close through libc; the preload shim, whose close() libc's would be, is never one.
    ::close(fd);
#else
    syscall(SYS_close, fd);
#endif
  }
  errno = saved;
  return moved >= 0 ? static_cast<int>(moved) : fd;
}

bool read_file(const char* path, std::string& out, size_t max) {
  out.clear();
  // O_NONBLOCK, then regular files only: a FIFO at a profile's path hung every open that looked
  // for it (tune audit, session 26). /proc and /sys files are regular; O_NONBLOCK does nothing there.
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  struct stat st;
  const bool seen = fstat(fd, &st) == 0;
  if (!seen || !S_ISREG(st.st_mode)) {
    const int e = seen ? EINVAL : errno;
    ::close(fd);
    errno = e;
    return false;
  }
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
