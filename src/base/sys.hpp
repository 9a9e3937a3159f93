// accio base: the system calls that move bytes, behind a table of function pointers so tests can
// inject EINTR, short transfers and errors deterministically (liburing's tests do the same with
// their own wrappers). Production code never changes the table. The default entries call the
// kernel with syscall(2), not libc's pread/pwrite, which under the preload shim are the shim's own
// wrappers (sys.cpp). Also read_file, for the probes.
#pragma once
#include <signal.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>

namespace accio::base::sys {

struct Ops {
  ssize_t (*pread)(int fd, void* buf, size_t n, off_t off);
  ssize_t (*pwrite)(int fd, const void* buf, size_t n, off_t off);
  // preadv2(RWF_NOWAIT): what the page cache holds, without waiting for the device (-1 and EAGAIN
  // where nothing is; EOPNOTSUPP or ENOSYS where the kernel or the filesystem takes no such read).
  // Null in a table that leaves it out: callers then use pread, as they do where a table replaced
  // pread but kept the real entry here (a cached read must not go around a test's pread).
  ssize_t (*pread_cached)(int fd, void* buf, size_t n, off_t off) = nullptr;
};

Ops& ops();            // the live table
const Ops& real_ops();  // the default entries: pread64/pwrite64 through syscall(2)

// cachestat(2) (Linux 6.5+) of [off, off+len): the range's pages in the page cache, and of them
// dirty (dirty may be null). false with errno where it cannot say (ENOSYS: the kernel has none).
bool cachestat(int fd, uint64_t off, uint64_t len, uint64_t* cached, uint64_t* dirty = nullptr);
bool cachestat_available();
// The page cache's hold on a range in under a microsecond (cachestat walks every page of its range,
// about 5 ns each): a 32 KiB window at the head and one at the tail (the whole range up to 128 KiB,
// which costs less than two calls),
// *cached of *pages. Where the kernel has no cachestat (before 6.5), the same windows by mmap and
// mincore (a few microseconds). false where neither can say. The planner's hot/cold signal (more
// than half) and uring's realign (all of them) read it.
bool sample_cached(int fd, uint64_t off, uint64_t len, uint64_t* cached, uint64_t* pages);
constexpr uint64_t kSampleWindow = 32 << 10;  // sample_cached's window
constexpr uint64_t kSampleWhole = 128 << 10;  // sample_cached counts ranges up to this whole
// The mincore half of sample_cached, on its own (tests compare it with cachestat).
bool sample_cached_mincore(int fd, uint64_t off, uint64_t len, uint64_t* cached, uint64_t* pages);
// mincore(2) of [off, off+len) of fd, mapped for the call (no page is touched): the range's pages in
// the page cache, of *pages. false with errno where it cannot be mapped or asked.
bool mincore_pages(int fd, uint64_t off, uint64_t len, uint64_t* cached, uint64_t* pages);

// Reads a whole small file (a /proc or /sys entry, a profile) into out with open(2) and read(2),
// the latter straight to the kernel as above. No iostreams: the probes run on first use inside
// users' processes and must not lean on the C++ runtime's locale machinery (issue 17). false, with
// errno set, when the file cannot be opened or read or holds more than max bytes.
bool read_file(const char* path, std::string& out, size_t max = size_t{64} << 20);

// A descriptor accio keeps for itself (a file's own descriptor and its O_DIRECT twin, an append
// descriptor, an io_uring ring), moved out of the numbers a program uses: open(2) gives the lowest
// free number, so the engine's took the program's. A program that closed its stdout (fd 1) and
// then read a file with `accio run` had its writes to stdout land in the file; its next open() got
// another number than without accio (shim audit, session 24, RISK 14). The descriptor is moved to
// the lowest free number from aside_floor() up (close-on-exec), or above the standard three where
// none is free up there; left where it is otherwise. Returns the descriptor to use (fd itself or
// its new number: fd is closed then). Raw system calls, as the table's: under the preload shim,
// fcntl and close are the shim's.
int set_aside(int fd);
// Where set_aside puts descriptors, from the soft RLIMIT_NOFILE: 1024 (above select()'s
// FD_SETSIZE, so a program's own descriptors keep every number select takes) where the limit
// leaves 256 numbers above it; otherwise the top 256 numbers below the limit; 3 under 260.
int aside_floor();

// Every asynchronous signal blocked in the calling thread for the object's life (the faults a
// thread raises itself, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, stay open). Inline: the
// offload runtime, which sees libaccio's C API only, uses it too.
class SignalsBlocked {
 public:
  SignalsBlocked() {
    sigset_t all;
    sigfillset(&all);
    for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) sigdelset(&all, s);
    pthread_sigmask(SIG_BLOCK, &all, &old_);
  }
  ~SignalsBlocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SignalsBlocked(const SignalsBlocked&) = delete;
  SignalsBlocked& operator=(const SignalsBlocked&) = delete;

 private:
  sigset_t old_;
};

// A thread of accio's own (the engine's pool, the offload runtime's): it starts with every
// asynchronous signal blocked, so that a signal for the process goes to one of the program's
// threads, as without accio. The pool's workers took the mask of the thread that first needed them:
// a program that blocked SIGTERM afterwards to read it from a signalfd or sigwait was killed by it,
// delivered to a worker (shim audit, session 24).
template <class F, class... A>
std::thread quiet_thread(F&& f, A&&... a) {
  SignalsBlocked blocked;
  return std::thread(std::forward<F>(f), std::forward<A>(a)...);
}

}  // namespace accio::base::sys
