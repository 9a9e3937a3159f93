/* accio preload shim (libaccio_preload.so): `accio run -- program` puts this library in LD_PRELOAD.
 * It interposes the read/write family (read, pread, readv, preadv, preadv2, write, pwrite, writev,
 * pwritev, pwritev2, their 64-bit names and the __*_chk fortify variants) with Darshan-style
 * dlsym(RTLD_NEXT) wrappers. Requests below the gate cost one compare and go straight to libc (the
 * gate: the threshold, raised to the planner's crossing point once the engine has opened a file).
 * Larger requests on regular files go through the engine (libaccio.so, loaded only when the first
 * such request arrives) when the planner would run something other than posix for them, on a
 * handle of their own, while the program's descriptor keeps its exact POSIX meaning: the file
 * offset is reserved with lseek(SEEK_CUR) before the transfer and set back on a short one;
 * O_APPEND, O_SYNC and O_DSYNC descriptors, non-regular files and unmapped buffers pass through;
 * and a request the engine fails is redone by libc, so errno and partial counts are the kernel's
 * own. Sequential readers of small requests on cold files get their stream asked for ahead
 * (posix_fadvise WILLNEED; see "Prefetch"). With ACCIO_PRELOAD_STATS_DIR set, each process writes
 * per-file counters there at exit (<pid>.json), which `accio run --stats` merges. */
#define _GNU_SOURCE
/* The shim defines both names of each large-file function (pread and pread64, fcntl and fcntl64):
 * with 64-bit file offsets selected, the header would make the first an alias of the second. */
#if defined(_FILE_OFFSET_BITS) && _FILE_OFFSET_BITS == 64
#error "build preload.c without _FILE_OFFSET_BITS=64: it defines the *64 functions itself"
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <linux/magic.h>

#include "accio/accio.h"
#include "base/quiet.h"
#include "run_cli.h"

_Static_assert(sizeof(off_t) == 8, "the shim assumes a 64-bit off_t (LP64 Linux)");

#define EXPORT __attribute__((visibility("default")))
#define TLS __thread __attribute__((tls_model("initial-exec")))

/* ---------------------------------------------------------------------------------------------
 * The real functions. Until dlsym has answered (calls made by other libraries' constructors, or by
 * dlsym itself), the kernel is called directly, so symbol resolution can never recurse. */
static struct {
  ssize_t (*read)(int, void*, size_t);
  ssize_t (*pread)(int, void*, size_t, off_t);
  ssize_t (*readv)(int, const struct iovec*, int);
  ssize_t (*preadv)(int, const struct iovec*, int, off_t);
  ssize_t (*preadv2)(int, const struct iovec*, int, off_t, int);
  ssize_t (*write)(int, const void*, size_t);
  ssize_t (*pwrite)(int, const void*, size_t, off_t);
  ssize_t (*writev)(int, const struct iovec*, int);
  ssize_t (*pwritev)(int, const struct iovec*, int, off_t);
  ssize_t (*pwritev2)(int, const struct iovec*, int, off_t, int);
  int (*close)(int);
  int (*dup2)(int, int);
  int (*dup3)(int, int, int);
  size_t (*fread)(void*, size_t, size_t, FILE*);
  size_t (*fread_unlocked_)(void*, size_t, size_t, FILE*); /* the name is a macro in glibc's stdio.h */
  off_t (*lseek)(int, off_t, int);
  int (*fclose)(FILE*);
  FILE* (*freopen)(const char*, const char*, FILE*);
  int (*pclose)(FILE*);
  void (*doallocbuf)(FILE*); /* glibc's _IO_doallocbuf, looked up at run time: see fread_large */
  int (*posix_fadvise)(int, off_t, off_t, int);
  int (*dup)(int);
  int (*fcntl)(int, int, ...);
  int (*fcntl64)(int, int, ...);
  void (*closefrom)(int);
  int (*lockf)(int, int, off_t);
  int (*lockf64)(int, int, off_t);
} real;

static ssize_t k_read(int fd, void* b, size_t n) { return syscall(SYS_read, fd, b, n); }
static ssize_t k_pread(int fd, void* b, size_t n, off_t o) { return syscall(SYS_pread64, fd, b, n, o); }
static ssize_t k_readv(int fd, const struct iovec* v, int c) { return syscall(SYS_readv, fd, v, c); }
static ssize_t k_preadv(int fd, const struct iovec* v, int c, off_t o) { return syscall(SYS_preadv, fd, v, c, o, 0); }
static ssize_t k_preadv2(int fd, const struct iovec* v, int c, off_t o, int f) {
  return syscall(SYS_preadv2, fd, v, c, o, 0, f);
}
static ssize_t k_write(int fd, const void* b, size_t n) { return syscall(SYS_write, fd, b, n); }
static ssize_t k_pwrite(int fd, const void* b, size_t n, off_t o) { return syscall(SYS_pwrite64, fd, b, n, o); }
static ssize_t k_writev(int fd, const struct iovec* v, int c) { return syscall(SYS_writev, fd, v, c); }
static ssize_t k_pwritev(int fd, const struct iovec* v, int c, off_t o) { return syscall(SYS_pwritev, fd, v, c, o, 0); }
static ssize_t k_pwritev2(int fd, const struct iovec* v, int c, off_t o, int f) {
  return syscall(SYS_pwritev2, fd, v, c, o, 0, f);
}
static int k_close(int fd) { return (int)syscall(SYS_close, fd); }
/* lseek is interposed (it moves the file offset: see the memo); the shim's own calls go here, the
 * program's to the next lseek (another preload's, or libc's) through REAL(lseek). */
static off_t k_lseek(int fd, off_t off, int whence) { return (off_t)syscall(SYS_lseek, fd, off, whence); }
static int k_dup3(int o, int n, int f) { return (int)syscall(SYS_dup3, o, n, f); }
static int k_dup2(int o, int n) {
#ifdef SYS_dup2
  return (int)syscall(SYS_dup2, o, n);
#else
  if (o == n) return fcntl(o, F_GETFD) < 0 ? -1 : n; /* dup3 refuses o == n; dup2 checks o */
  return k_dup3(o, n, 0);
#endif
}
/* stdio has no system call of its own: until dlsym answers, a fread reads nothing (EAGAIN). That can
 * only be a call from another library's constructor while this one resolves. */
static size_t k_fread(void* b, size_t s, size_t n, FILE* f) {
  (void)b, (void)s, (void)n, (void)f;
  errno = EAGAIN;
  return 0;
}
#define k_fread_unlocked_ k_fread
static int k_fclose(FILE* f) {
  (void)f;
  errno = EAGAIN;
  return EOF;
}
static FILE* k_freopen(const char* p, const char* m, FILE* f) {
  (void)p, (void)m, (void)f;
  errno = EAGAIN;
  return NULL;
}
#define k_pclose k_fclose
static void k_doallocbuf(FILE* f) { (void)f; } /* none: the stream keeps no buffer, libc's fread reads it */
static int k_posix_fadvise(int fd, off_t o, off_t n, int a) { return syscall(SYS_fadvise64, fd, o, n, a) ? errno : 0; }
static int k_dup(int fd) { return (int)syscall(SYS_dup, fd); }
static int k_fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return (int)syscall(SYS_fcntl, fd, cmd, arg);
}
#define k_fcntl64 k_fcntl
/* lockf as glibc makes it (fcntl record locks from the file offset), should dlsym not find it. */
static int k_lockf(int fd, int cmd, off_t len) {
  struct flock fl = {.l_whence = SEEK_CUR, .l_start = 0, .l_len = len};
  switch (cmd) {
    case F_TEST:
      fl.l_type = F_RDLCK;
      if (syscall(SYS_fcntl, fd, F_GETLK, &fl) < 0) return -1;
      if (fl.l_type == F_UNLCK || fl.l_pid == (pid_t)syscall(SYS_getpid)) return 0;
      errno = EACCES;
      return -1;
    case F_ULOCK: fl.l_type = F_UNLCK; return (int)syscall(SYS_fcntl, fd, F_SETLK, &fl);
    case F_LOCK: fl.l_type = F_WRLCK; return (int)syscall(SYS_fcntl, fd, F_SETLKW, &fl);
    case F_TLOCK: fl.l_type = F_WRLCK; return (int)syscall(SYS_fcntl, fd, F_SETLK, &fl);
  }
  errno = EINVAL;
  return -1;
}
#define k_lockf64 k_lockf
static void k_closefrom(int lowfd) {
#ifdef SYS_close_range
  syscall(SYS_close_range, (unsigned)lowfd, ~0U, 0);
#else
  (void)lowfd;
#endif
}

static TLS int t_inside; /* this thread is inside the shim or the engine: everything passes through */

/* Each function is resolved on its first use (a program that never calls it pays nothing). A
 * call made while dlsym runs, from any thread, goes to the kernel. */
static void* resolve(void* const* where, const char* sym, const char* alt) {
  static TLS int resolving;
  if (resolving) return NULL;
  resolving = 1;
  void* f = dlsym(RTLD_NEXT, sym);
  if (!f && alt) f = dlsym(RTLD_NEXT, alt);
  __atomic_store_n((void**)where, f, __ATOMIC_RELEASE);
  resolving = 0;
  return f;
}

static const char* const kSym[][2] = {
    {"read", NULL},        {"pread64", "pread"},           {"readv", NULL},  {"preadv64", "preadv"},
    {"preadv64v2", "preadv2"}, {"write", NULL},            {"pwrite64", "pwrite"}, {"writev", NULL},
    {"pwritev64", "pwritev"}, {"pwritev64v2", "pwritev2"}, {"close", NULL}, {"dup2", NULL},
    {"dup3", NULL}, {"fread", NULL}, {"fread_unlocked", NULL}, {"lseek64", "lseek"}, {"fclose", NULL},
    {"freopen64", "freopen"}, {"pclose", NULL}, {"_IO_doallocbuf", NULL}, {"posix_fadvise", NULL},
    {"dup", NULL}, {"fcntl", NULL}, {"fcntl64", "fcntl"}, {"closefrom", NULL}, {"lockf", NULL},
    {"lockf64", "lockf"},
};
enum { S_read, S_pread, S_readv, S_preadv, S_preadv2, S_write, S_pwrite, S_writev, S_pwritev, S_pwritev2, S_close,
       S_dup2, S_dup3, S_fread, S_fread_unlocked_, S_lseek, S_fclose, S_freopen,
       S_pclose, S_doallocbuf, S_posix_fadvise, S_dup, S_fcntl, S_fcntl64, S_closefrom, S_lockf, S_lockf64 };

#define REAL(name)                                                                                     \
  (__builtin_expect(real.name != NULL, 1)                                                              \
       ? real.name                                                                                     \
       : (resolve((void* const*)&real.name, kSym[S_##name][0], kSym[S_##name][1]) ? real.name : k_##name))

/* ---------------------------------------------------------------------------------------------
 * Configuration (read once at start-up). */
static size_t g_gate = ACCIO_PRELOAD_THRESHOLD_DEFAULT; /* ACCIO_PRELOAD_THRESHOLD; below it nothing is even looked at */
static int g_gate_set = 0;         /* the threshold was given: it rules over the profile's */
/* The pass-through gate for [read, write]: a request below it goes straight to libc after one
 * compare. It starts at g_floor; unless the threshold was given, once the engine has opened a file
 * it is the smallest size at which the planner's model (profile or built-in) runs anything but
 * posix on any file opened so far (accio_min_accelerated): below that the engine cannot win here. */
static size_t g_pass[2] = {ACCIO_PRELOAD_THRESHOLD_DEFAULT, ACCIO_PRELOAD_THRESHOLD_DEFAULT};
static int g_pass_learned = 0;
/* Below g_floor[w] a request on a buffered descriptor goes to libc without loading the engine: the
 * threshold, or, where the planner decides (no threshold and no mechanism given), the floor the
 * launcher of `accio run` computed (ACCIO_PRELOAD_FLOOR="<read>,<write>",
 * src/planner/model_floor.h): the smallest request that the built-in model or any tuning profile
 * the engine could load runs with anything but posix, if higher. Without it the first request from
 * the threshold up loads the engine to learn that posix runs it (about 1.5 ms; a hot 2 GiB
 * `dd bs=1M` on 2 CPUs, where the model splits reads only from 1.5 MiB, ran at 0.97x of plain). An O_DIRECT descriptor
 * is not held to it: the engine runs `direct` for those at every size from the threshold up. The
 * gate starts at the floor, so a descriptor not seen yet takes the slow path once (an fstat and an
 * fcntl) to tell which it is. */
static size_t g_floor[2] = {ACCIO_PRELOAD_THRESHOLD_DEFAULT, ACCIO_PRELOAD_THRESHOLD_DEFAULT};
/* Descriptors whose file the engine has looked at (its crossing point is in g_pass), or that the
 * floor passed (buffered). A request from the threshold up on a descriptor not seen yet goes to
 * the slow path once, so that a file whose own crossing point is lower than those of the files
 * before it (another filesystem, another profile) can lower the gate instead of being shut out by
 * it. Cleared at close(). */
#define SEEN_MAX_FD 4096
static unsigned char g_fd_seen[SEEN_MAX_FD];
/* The posix_fadvise advice the program gave each descriptor (POSIX_FADV_NORMAL, the kernel's
 * default for a new open file description, until it gives another): see advise_like. */
static unsigned char g_fd_advice[SEEN_MAX_FD];
/* Descriptors made from one another (dup, dup2, dup3, fcntl F_DUPFD) share an open file
 * description, and so its advice: they carry the same nonzero group number, and advice given
 * through one is recorded for all of them. 0: not known to share its description. */
static unsigned g_fd_group[SEEN_MAX_FD];
static unsigned g_groups;    /* the last group number given */
static unsigned g_group_top; /* 1 + the highest descriptor ever given a group (posix_fadvise's scan) */
/* Whether a request of n bytes on fd goes straight to libc: below the gate, and below the
 * threshold or on a descriptor already seen (two compares and, in the band between, one load). */
static inline int below_gate(int fd, size_t n, int w) {
  return n < g_pass[w] && (n < g_gate || ((unsigned)fd < SEEN_MAX_FD && g_fd_seen[fd]));
}
/* The pass-back memo, per descriptor and direction: the size of the last request the planner passed
 * back to libc (posix would have run it), and how many more bytes of requests of exactly that size
 * go straight to libc without asking again (the window). A program reading a hot file in 1 MiB
 * requests, where the planner runs posix, would otherwise pay the slow path (fstat, fcntl, the
 * handle's lock, lseek, the planner's decision and, where a tuning profile runs another plan on
 * cold ranges of that size, its residency probe: a few microseconds, ~5% of a hot 1 MiB read) on
 * every call. The window starts at kMemoBytes and doubles each time the planner, asked again when
 * it ran out, passes the same size back, up to kMemoMaxBytes: a decision that keeps holding is
 * asked about less and less often, so that a passed call costs a few nanoseconds whether the
 * decision came from a profile or the built-in model (benchmarks/preload_decision.c; under a
 * profile whose cold 1 MiB reads run uring, the fixed 16 MiB window cost 240 ns per passed 1 MiB
 * call on a loaded 2-vCPU VM, the built-in model 2 ns). The price: after the file's cache state
 * changes, requests of that size run posix where the planner would now choose otherwise, for up to
 * a window: when the window has passed, the planner is asked to probe the page cache anew
 * (ACCIO_OP_FRESH_CACHE; its own verdicts otherwise serve 4 MiB of the requests asked about, which
 * would be four windows for 1 MiB calls). A program that starts on a cold file gets the cold plan
 * from its first call. The window falls back to kMemoBytes when the program moves: an lseek() that moves the file offset, a pread
 * at another offset than where the previous one of the descriptor ended. Passing through is always
 * correct, so racing threads and a descriptor reused where no preload sees it (a raw system call)
 * cost at most a window at libc's speed. Cleared at close(), dup2(), dup3(), close_range(),
 * fclose(), freopen() and pclose() of the descriptor, and when the engine serves a request on it. */
#define MEMO_MAX_FD 4096
static const uint64_t kMemoBytes = 16u << 20;
static const uint64_t kMemoMaxBytes = 256u << 20;
struct memo {
  size_t size;     /* 0: nothing remembered */
  uint64_t left;   /* bytes that may still pass without asking */
  uint64_t window; /* what the last decline granted (0: start at kMemoBytes) */
  int64_t next;    /* where the last pread passed back ended (-1: not known) */
};
static struct memo g_memo[MEMO_MAX_FD][2];
/* A descriptor that is not a regular file (a pipe, /dev/null, a socket) passes every size back for
 * kMemoOtherBytes before its fstat is looked at again: `dd of=/dev/null bs=1M` would otherwise pay
 * an fstat on every write (one fstat per 64 MiB is lost in the noise). A regular file put on the
 * descriptor where no preload sees it passes back at most kMemoOtherBytes, after which the slow
 * path's fstat finds it regular and forgets the entry (memo_regular). */
#define MEMO_ANY SIZE_MAX
static const uint64_t kMemoOtherBytes = 64u << 20;
/* The program moved on descriptor m's file: what is left of the window is cut to kMemoBytes, and
 * the next window starts there again. */
static inline void memo_moved(struct memo* m) {
  if (__atomic_load_n(&m->left, __ATOMIC_RELAXED) > kMemoBytes) __atomic_store_n(&m->left, kMemoBytes, __ATOMIC_RELAXED);
  __atomic_store_n(&m->window, 0, __ATOMIC_RELAXED);
}
/* Whether a request of n bytes (at off, or at the file offset when off < 0) passes back as the last
 * one of its size did (and counts it). */
static inline int memo_pass(int fd, size_t n, off_t off, int w) {
  if ((unsigned)fd >= MEMO_MAX_FD) return 0;
  struct memo* m = &g_memo[fd][w];
  const size_t size = __atomic_load_n(&m->size, __ATOMIC_RELAXED);
  if (size != n && size != MEMO_ANY) return 0;
  const int tracked = off >= 0 && size != MEMO_ANY;
  if (tracked && __atomic_load_n(&m->next, __ATOMIC_RELAXED) != off) memo_moved(m);
  const uint64_t left = __atomic_load_n(&m->left, __ATOMIC_RELAXED);
  /* Not passed: where it ends is not stored, so that the slow path, which asks this again before
   * the planner, does not take the same pread for a move (and the window for one to start over). */
  if (left < n) return 0;
  __atomic_store_n(&m->left, left - n, __ATOMIC_RELAXED);
  if (tracked) __atomic_store_n(&m->next, off + (off_t)n, __ATOMIC_RELAXED);
  return 1;
}
/* The `declined` of a call the memo passed back (1: the planner was asked and declined). */
#define DECLINED_BY_MEMO 2
/* The planner passed a request of n bytes at off (< 0: the file offset) back: a new window, twice
 * the last one where the same size was passed back before and the program did not move since. */
static void memo_set(int fd, size_t n, off_t off, int w) {
  if ((unsigned)fd >= MEMO_MAX_FD) return;
  struct memo* m = &g_memo[fd][w];
  uint64_t window = kMemoOtherBytes;
  if (n != MEMO_ANY) {
    const uint64_t last = __atomic_load_n(&m->size, __ATOMIC_RELAXED) == n ? __atomic_load_n(&m->window, __ATOMIC_RELAXED) : 0;
    window = last < kMemoBytes ? kMemoBytes : last >= kMemoMaxBytes / 2 ? kMemoMaxBytes : 2 * last;
  }
  __atomic_store_n(&m->window, window, __ATOMIC_RELAXED);
  __atomic_store_n(&m->left, window, __ATOMIC_RELAXED);
  __atomic_store_n(&m->next, off >= 0 ? off + (off_t)n : -1, __ATOMIC_RELAXED);
  __atomic_store_n(&m->size, n, __ATOMIC_RELAXED);
}
/* Whether the memo has passed a window of requests of n bytes on fd to libc since the planner was
 * last asked about them. */
static int memo_passed_window(int fd, size_t n, int w) {
  return (unsigned)fd < MEMO_MAX_FD && __atomic_load_n(&g_memo[fd][w].size, __ATOMIC_RELAXED) == n;
}
/* The engine serves requests on fd in direction w: nothing of the memo holds there. */
static void memo_clear(int fd, int w) {
  if ((unsigned)fd < MEMO_MAX_FD) memset(&g_memo[fd][w], 0, sizeof g_memo[fd][w]);
}
static void memo_forget(int fd) {
  if ((unsigned)fd < MEMO_MAX_FD) memset(g_memo[fd], 0, sizeof g_memo[fd]);
}
/* The memo of a descriptor found to be a regular file: an "any size" entry (left by a pipe or a
 * device that had this number before) no longer holds. */
static void memo_regular(int fd) {
  if ((unsigned)fd >= MEMO_MAX_FD) return;
  for (int w = 0; w < 2; ++w)
    if (__atomic_load_n(&g_memo[fd][w].size, __ATOMIC_RELAXED) == MEMO_ANY) memset(&g_memo[fd][w], 0, sizeof g_memo[fd][w]);
}
static int g_mechanism_set = 0;    /* ACCIO_MECHANISM was given */
static int g_quiet = 0;
static char g_stats_dir[PATH_MAX]; /* empty: no statistics */
/* The process whose memory this is: set at start-up and in every fork child (in_child). A child of
 * vfork (Python's subprocess, which calls dup2, close and close_range there through the PLT) or of
 * posix_spawn shares the parent's memory until it execs, with a descriptor table of its own: it
 * must not touch the parent's records of descriptors, handles or statistics (in_borrowed_memory). */
static pid_t g_self;
static int g_stats_written;        /* this process wrote its statistics (under g_mu) */

/* A message on stderr, unless ACCIO_QUIET is set (a transparent tool is silent otherwise). */
static void tell_user(const char* fmt, ...) {
  if (g_quiet) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1;
  ssize_t unused = REAL(write)(2, msg, len);
  (void)unused;
}

/* ---------------------------------------------------------------------------------------------
 * The engine: libaccio.so next to this library, opened on the first request that needs it. */
static struct {
  int (*settings_set)(accio_settings*, const char*, const char*);
  accio_settings* (*settings_new)(void);
  int (*open_fd)(accio_file**, int, const accio_settings*);
  int (*close)(accio_file*);
  int64_t (*pread)(accio_file*, void*, size_t, int64_t);
  int64_t (*pwrite)(accio_file*, const void*, size_t, int64_t);
  int64_t (*min_accelerated)(accio_file*, int);
  int (*file_plans)(accio_file*, accio_plan_stat*, int);
  const char* (*mechanism_for_at)(accio_file*, const void*, size_t, int64_t, int);
  int (*mem_kind)(const void*, int*);
  const char* (*last_error)(void);
  int64_t (*prefetch_window)(int, const accio_settings*);
  int (*file_fd)(accio_file*);
} eng;
static int g_engine = 0; /* 0 not tried, 1 loaded, -1 unavailable (or exiting) */
static int g_engine_loaded; /* for the statistics: the engine was loaded at some point */
static accio_settings* g_settings;        /* ACCIO_* from the environment */
static accio_settings* g_settings_direct; /* the same with mechanism=direct (O_DIRECT descriptors) */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* engine loading, handles, statistics */

static void capture_all_plans(void);
static void in_child(void);
static int in_borrowed_memory(void) { return (pid_t)syscall(SYS_getpid) != g_self; }

static int engine_load_locked(void) {
  if (g_engine) return g_engine > 0;
  g_engine = -1;
  char path[PATH_MAX];
  Dl_info info;
  accio_run_engine_path(dladdr(&g_gate, &info) && info.dli_fname ? info.dli_fname : NULL, path, sizeof path);
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!h) {
    tell_user("accio preload: cannot load the engine (%s): every request passes through\n", dlerror());
    return 0;
  }
#define SYM(field, name) \
  if (!(*(void**)&eng.field = dlsym(h, name))) goto missing;
  SYM(settings_set, "accio_settings_set");
  SYM(settings_new, "accio_settings_new");
  SYM(open_fd, "accio_open_fd");
  SYM(close, "accio_close");
  SYM(pread, "accio_pread");
  SYM(pwrite, "accio_pwrite");
  SYM(min_accelerated, "accio_min_accelerated");
  SYM(file_plans, "accio_file_plans");
  SYM(mechanism_for_at, "accio_mechanism_for_at");
  SYM(mem_kind, "accio_mem_kind");
  SYM(last_error, "accio_last_error");
  SYM(prefetch_window, "accio_prefetch_window");
  SYM(file_fd, "accio_file_fd");
#undef SYM
  g_settings = eng.settings_new();
  g_settings_direct = eng.settings_new();
  if (!g_settings || !g_settings_direct) {
    tell_user("accio preload: %s: every request passes through (correct the variable or unset it)\n",
              eng.last_error());
    return 0;
  }
  if (!g_mechanism_set) eng.settings_set(g_settings_direct, "mechanism", "direct");
  /* Registered after libaccio's own static destructors, so it runs before them. */
  if (g_stats_dir[0]) atexit(capture_all_plans);
  g_engine = g_engine_loaded = 1;
  return 1;
missing:
  tell_user("accio preload: %s is not a matching libaccio (%s): every request passes through\n", path, dlerror());
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Statistics per file (only with ACCIO_PRELOAD_STATS_DIR), in the spirit of Darshan's POSIX module. */
#define NBUCKETS 10
static const uint64_t kBucketMax[NBUCKETS - 1] = {100, 1000, 10000, 100000, 1u << 20, 4u << 20, 10u << 20,
                                                  100u << 20, 1u << 30};
/* Rows are kept for the first g_max_files files (device, inode) a process touches: MAX_FILES, or
 * fewer with ACCIO_PRELOAD_STATS_FILES. A Python importing torch reads about 1100. Until 2026-11-27
 * the limit was 1024, and a file past it (the tensor torch.load read after the imports) had no row:
 * only the process's dropped_calls in --stats-json counted it, and neither the table nor
 * run_programs.py read that. Beyond the limit calls and bytes are counted (dropped_calls,
 * dropped_bytes), and `accio run --stats` says so. A row takes about 0.8 KiB (65536: about 52 MiB,
 * only with statistics on). The table grows by doubling and is found through an open-addressing
 * index on (device, inode): record() runs for every call of a process under --stats, and a linear
 * search over thousands of files would cost more than the calls it counts. */
#define MAX_FILES ACCIO_RUN_MAX_STATS_FILES
static uint32_t g_max_files = MAX_FILES;
#define MAX_PLANS 8
struct plan_rec {
  char plan[128], why[384];
  uint64_t calls, bytes;
};
struct side {
  uint64_t calls, bytes, ns, accel_calls, accel_bytes, fallbacks, declined, remembered, hist[NBUCKETS];
};
struct file_rec {
  dev_t dev;
  ino_t ino;
  char path[512];
  struct side rw[2]; /* [read, write] */
  int nplans;
  struct plan_rec* plans; /* MAX_PLANS of them, allocated for a file the engine served */
};
static struct file_rec* g_files;
static uint32_t g_nfiles, g_files_cap;
static uint32_t* g_file_index; /* g_index_slots (>= 2 * g_files_cap): 1 + the record's number, 0 empty */
static uint32_t g_index_slots;
static uint64_t g_dropped, g_dropped_bytes; /* calls (and their bytes) on files beyond g_max_files */

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint32_t file_slot(dev_t dev, ino_t ino, uint32_t mask) {
  uint64_t h = ((uint64_t)ino ^ ((uint64_t)dev << 32 | (uint64_t)dev >> 32)) * 0x9E3779B97F4A7C15ull;
  return (uint32_t)(h >> 32) & mask;
}

static struct file_rec* find_file_locked(dev_t dev, ino_t ino) {
  if (!g_index_slots) return NULL;
  const uint32_t mask = g_index_slots - 1;
  for (uint32_t i = file_slot(dev, ino, mask);; i = (i + 1) & mask) {
    const uint32_t k = g_file_index[i];
    if (!k) return NULL;
    if (g_files[k - 1].dev == dev && g_files[k - 1].ino == ino) return &g_files[k - 1];
  }
}

/* Room for one more record (the table and its index doubled when full); 0 when g_max_files are kept
 * or memory ran out. */
static int files_room_locked(void) {
  if (g_nfiles < g_files_cap) return 1;
  if (g_nfiles >= g_max_files) return 0;
  uint32_t cap = g_files_cap ? 2 * g_files_cap : 64;
  if (cap > g_max_files) cap = g_max_files;
  struct file_rec* files = realloc(g_files, cap * sizeof *files);
  if (!files) return 0;
  g_files = files;
  memset(files + g_files_cap, 0, (cap - g_files_cap) * sizeof *files); /* plans: NULL */
  uint32_t slots = 128; /* a power of two, at least twice the rows */
  while (slots < 2 * cap) slots *= 2;
  uint32_t* index = calloc(slots, sizeof *index);
  if (!index) return 0; /* the table grew, the old index still finds what it holds: retried next time */
  for (uint32_t k = 0; k < g_nfiles; ++k) {
    uint32_t i = file_slot(files[k].dev, files[k].ino, slots - 1);
    while (index[i]) i = (i + 1) & (slots - 1);
    index[i] = k + 1;
  }
  free(g_file_index);
  g_file_index = index;
  g_index_slots = slots;
  g_files_cap = cap;
  return 1;
}

/* The record of the file behind fd, created (with its path) on first sight; NULL when full. */
static struct file_rec* file_rec_locked(int fd, const struct stat* st) {
  struct file_rec* found = find_file_locked(st->st_dev, st->st_ino);
  if (found) return found;
  if (!files_room_locked()) return NULL;
  struct file_rec* r = &g_files[g_nfiles++]; /* zeroed when the table grew */
  r->dev = st->st_dev;
  r->ino = st->st_ino;
  const uint32_t mask = g_index_slots - 1;
  uint32_t i = file_slot(r->dev, r->ino, mask);
  while (g_file_index[i]) i = (i + 1) & mask;
  g_file_index[i] = g_nfiles;
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(proc, r->path, sizeof r->path - 1);
  r->path[n > 0 ? n : 0] = '\0';
  return r;
}

static void record(int fd, const struct stat* st, int write, size_t asked, ssize_t done, uint64_t ns, int accel,
                   int fallback, int declined) {
  pthread_mutex_lock(&g_mu);
  struct file_rec* r = file_rec_locked(fd, st);
  if (!r) {
    ++g_dropped;
    if (done > 0) g_dropped_bytes += (uint64_t)done;
    pthread_mutex_unlock(&g_mu);
    return;
  }
  struct side* s = &r->rw[write];
  ++s->calls;
  s->ns += ns;
  int b = 0;
  while (b < NBUCKETS - 1 && asked > kBucketMax[b]) ++b;
  ++s->hist[b];
  if (done > 0) s->bytes += (uint64_t)done;
  if (accel) {
    ++s->accel_calls;
    if (done > 0) s->accel_bytes += (uint64_t)done;
  }
  s->fallbacks += (uint64_t)fallback;
  s->declined += declined != 0;
  s->remembered += declined == DECLINED_BY_MEMO;
  pthread_mutex_unlock(&g_mu);
}

/* ---------------------------------------------------------------------------------------------
 * Engine handles, one per (file, access mode, O_DIRECT), least recently used evicted. */
#define MAX_HANDLES 64
struct handle {
  dev_t dev;
  ino_t ino;
  int acc, direct;
  accio_file* f; /* NULL with failed set: the engine could not open it (pass through) */
  int failed;
  unsigned refs;
  uint64_t used;
  uint64_t min_accel[2]; /* per-handle threshold for [read, write] */
  int advice;            /* the posix_fadvise advice its engine descriptor has (advise_like) */
};
static struct handle g_handles[MAX_HANDLES];
static int g_nhandles;
static uint64_t g_tick;

/* POSIX record locks (fcntl F_SETLK and F_SETLKW, lockf) belong to the process and the file:
 * closing any descriptor of the file releases every one of them, the engine's descriptors too. The
 * files the program has locked are kept here, and their handles are not evicted: with more than
 * MAX_HANDLES files, the eviction of a locked file's handle released the program's locks, and
 * another process saw the file unlocked (shim audit, session 24). An entry goes when the program
 * closes a descriptor of the file, which releases its locks anyway (handles_forget). More locked
 * files than MAX_LOCKED: no handle is evicted at all (requests beyond MAX_HANDLES files pass
 * through). Under g_mu. */
/* A file as the kernel names it; file_at: where (dev, ino) is in ids[0..n), or n. */
struct file_id {
  dev_t dev;
  ino_t ino;
};
static int file_at(const struct file_id* ids, int n, dev_t dev, ino_t ino) {
  int i = 0;
  while (i < n && !(ids[i].dev == dev && ids[i].ino == ino)) ++i;
  return i;
}

#define MAX_LOCKED 64
static struct file_id g_locked[MAX_LOCKED];
static int g_nlocked;
static int g_locked_overflow;

static int locked_file_locked(dev_t dev, ino_t ino) {
  return g_locked_overflow || file_at(g_locked, g_nlocked, dev, ino) < g_nlocked;
}

/* The program is about to take a record lock on fd: its file is marked first, so that no other
 * thread's eviction closes a handle of it once the lock is held (a lock refused leaves the mark,
 * which costs no more than a handle kept). */
static void note_lock(int fd) {
  if (t_inside || in_borrowed_memory()) return;
  const int saved = errno;
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    pthread_mutex_lock(&g_mu);
    if (!locked_file_locked(st.st_dev, st.st_ino)) {
      if (g_nlocked < MAX_LOCKED) {
        g_locked[g_nlocked++] = (struct file_id){st.st_dev, st.st_ino};
      } else {
        g_locked_overflow = 1;
      }
    }
    pthread_mutex_unlock(&g_mu);
  }
  errno = saved;
}

static void capture_plans_locked(struct handle* h) {
  if (!g_stats_dir[0] || !h->f) return;
  accio_plan_stat ps[MAX_PLANS];
  int n = eng.file_plans(h->f, ps, MAX_PLANS);
  struct file_rec* r = find_file_locked(h->dev, h->ino);
  if (!r || (!r->plans && !(r->plans = calloc(MAX_PLANS, sizeof *r->plans)))) return;
  for (int i = 0; i < n && i < MAX_PLANS; ++i) {
    int j = 0;
    while (j < r->nplans && (strcmp(r->plans[j].plan, ps[i].plan) || strcmp(r->plans[j].why, ps[i].why))) ++j;
    if (j == r->nplans) {
      if (r->nplans == MAX_PLANS) continue;
      ++r->nplans;
      memcpy(r->plans[j].plan, ps[i].plan, sizeof ps[i].plan);
      memcpy(r->plans[j].why, ps[i].why, sizeof ps[i].why);
    }
    r->plans[j].calls += ps[i].calls;
    r->plans[j].bytes += ps[i].bytes;
  }
}

static void capture_all_plans(void) {
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_nhandles; ++i) capture_plans_locked(&g_handles[i]);
  g_engine = -1; /* exiting: libaccio's static destructors run next, so no new requests for it */
  pthread_mutex_unlock(&g_mu);
}

/* Whether files of this filesystem are made up by the kernel as they are read (/proc, /sys, their
 * kin): their size says nothing of what a read returns (0 for /proc/self/maps), a second open of one
 * can differ from the program's (the credentials of the opener, an open with side effects), and
 * there is nothing for the engine to speed up. Under a 4 KiB threshold, or with a 4 MiB buffer
 * under the defaults, `read()` of /proc/cpuinfo returned its text over and over: the offset was
 * set back to the file's size, 0, after each short read (shim audit, session 27). */
static int made_up_as_read(int fd) {
  struct statfs sf;
  if (fstatfs(fd, &sf) != 0) return 0;
  switch ((unsigned long)sf.f_type) {
    case PROC_SUPER_MAGIC: case SYSFS_MAGIC: case DEBUGFS_MAGIC: case TRACEFS_MAGIC: case SECURITYFS_MAGIC:
    case CGROUP_SUPER_MAGIC: case CGROUP2_SUPER_MAGIC: case BPF_FS_MAGIC: case PSTOREFS_MAGIC:
    case EFIVARFS_MAGIC: case SELINUX_MAGIC: case SMACK_MAGIC: case BINFMTFS_MAGIC:
    case 0x62656570: /* configfs */
    case 0x65735543: /* fusectl */
    case 0x19800202: /* mqueue */
    case 0x6e667364: /* nfsd */
    case 0x67596969: /* rpc_pipefs */
      return 1;
  }
  return 0;
}

static struct handle* handle_get(int fd, const struct stat* st, int acc, int direct) {
  pthread_mutex_lock(&g_mu);
  struct handle* h = NULL;
  if (!engine_load_locked()) goto out;
  struct handle* empty = NULL;
  for (int i = 0; i < g_nhandles; ++i) {
    struct handle* c = &g_handles[i];
    if (!c->f && !c->failed) {
      if (!empty) empty = c;
    } else if (c->dev == st->st_dev && c->ino == st->st_ino && c->acc == acc && c->direct == direct) {
      h = c;
      break;
    }
  }
  if (!h) {
    if (empty) {
      h = empty;
    } else if (g_nhandles < MAX_HANDLES) {
      h = &g_handles[g_nhandles++];
    } else {
      for (int i = 0; i < MAX_HANDLES; ++i)
        if (!g_handles[i].refs && (!h || g_handles[i].used < h->used) &&
            !locked_file_locked(g_handles[i].dev, g_handles[i].ino))
          h = &g_handles[i];
      if (!h) goto out; /* every handle is busy: pass through */
      capture_plans_locked(h);
      if (h->f) eng.close(h->f);
    }
    memset(h, 0, sizeof *h);
    h->dev = st->st_dev;
    h->ino = st->st_ino;
    h->acc = acc;
    h->direct = direct;
    if (made_up_as_read(fd) || eng.open_fd(&h->f, fd, direct ? g_settings_direct : g_settings) != 0) {
      h->f = NULL;
      h->failed = 1;
    } else {
      for (int w = 0; w < 2; ++w) {
        int64_t m = eng.min_accelerated(h->f, w);
        /* A threshold that was given rules; otherwise the profile may raise the default gate. */
        h->min_accel[w] = g_gate_set ? g_gate : (m > (int64_t)g_gate ? (uint64_t)m : g_gate);
        if (!g_gate_set && (!g_pass_learned || h->min_accel[w] < g_pass[w]))
          __atomic_store_n(&g_pass[w], (size_t)(h->min_accel[w] < SIZE_MAX ? h->min_accel[w] : SIZE_MAX), __ATOMIC_RELAXED);
      }
      g_pass_learned = 1;
    }
  }
  if (h->failed || !h->f) {
    h = NULL;
    goto out;
  }
  ++h->refs;
  h->used = ++g_tick;
out:
  pthread_mutex_unlock(&g_mu);
  return h;
}

/* The program closes a descriptor: handles on its file that are not in use are closed too, so that
 * a deleted file's space is not held by the shim (fclose, freopen and pclose come here too). */
static void handles_forget(struct file_id file) {
  pthread_mutex_lock(&g_mu);
  const int at = file_at(g_locked, g_nlocked, file.dev, file.ino);
  if (at < g_nlocked) g_locked[at] = g_locked[--g_nlocked];
  for (int i = 0; i < g_nhandles; ++i) {
    struct handle* h = &g_handles[i];
    if (h->dev == file.dev && h->ino == file.ino && !h->refs && (h->f || h->failed)) {
      capture_plans_locked(h);
      if (h->f) eng.close(h->f);
      memset(h, 0, sizeof *h); /* an empty entry (other threads may hold pointers to other entries) */
    }
  }
  pthread_mutex_unlock(&g_mu);
}

static void handle_put(struct handle* h) {
  pthread_mutex_lock(&g_mu);
  --h->refs;
  pthread_mutex_unlock(&g_mu);
}

/* ---------------------------------------------------------------------------------------------
 * The decision and the transfer. */

/* Whether every byte of [p, p+n) is mapped (msync checks the range's mappings without touching it).
 * An unmapped buffer goes to libc, which reports EFAULT (or a partial count) exactly as the kernel. */
static int mapped(const void* p, size_t n) {
  if (!n) return 1;
  const uintptr_t page = 4096, a = (uintptr_t)p & ~(page - 1);
  if ((uintptr_t)p + n < (uintptr_t)p) return 0;
  return msync((void*)a, (uintptr_t)p + n - a, MS_ASYNC) == 0;
}

/* Whether the CUDA driver (when the program loaded one) calls [p, p+n) device or managed memory, at
 * both ends (a range that runs past the allocation goes to libc, which answers as it would). */
static int gpu_memory(const void* p, size_t n) {
  int device;
  const int first = eng.mem_kind(p, &device);
  if (first != ACCIO_MEM_DEVICE && first != ACCIO_MEM_MANAGED) return 0;
  return !n || eng.mem_kind((const char*)p + n - 1, &device) == first;
}

enum { READ = 0, WRITE = 1 };
/* What serve_with_engine did with a call. */
enum { TO_LIBC = 0, SERVED = 1 };

/* One request as the program made it. `off` < 0: at the file offset (read, write, readv, writev). */
struct call {
  int fd, write;
  const struct iovec* iov;
  int cnt;
  off_t off;
  size_t total;
  int vec; /* made as readv/preadv/writev/pwritev (else read/pread/write/pwrite of iov[0]) */
};

/* Libc's own answer to the call, in the form the program made it. */
static ssize_t call_libc(const struct call* c) {
  const struct iovec* v = c->iov;
  if (!c->vec && c->off < 0)
    return c->write ? REAL(write)(c->fd, v->iov_base, v->iov_len) : REAL(read)(c->fd, v->iov_base, v->iov_len);
  if (!c->vec)
    return c->write ? REAL(pwrite)(c->fd, v->iov_base, v->iov_len, c->off) : REAL(pread)(c->fd, v->iov_base, v->iov_len, c->off);
  if (c->off < 0) return c->write ? REAL(writev)(c->fd, v, c->cnt) : REAL(readv)(c->fd, v, c->cnt);
  return c->write ? REAL(pwritev)(c->fd, v, c->cnt, c->off) : REAL(preadv)(c->fd, v, c->cnt, c->off);
}

/* Calls that went past the gate and the memo to be decided for their descriptor (the slow path's
 * questions), with statistics on or off: for tests of the memo (accio_preload_asked). */
static uint64_t g_asked;

/* The engine reads and writes through a descriptor of its own (accio_open_fd opens the file anew),
 * whose readahead is the kernel's default: the program's posix_fadvise advice on its descriptor
 * (SEQUENTIAL doubles the readahead window, RANDOM turns readahead off, NORMAL restores it) is given
 * to the engine's descriptor too before a request of the program's is served through it. Without
 * it, a cold file read in 4 MiB preads after POSIX_FADV_SEQUENTIAL (what fio does by default) ran at
 * 0.72x of plain on the 2-CPU VM, and at 1.14x with it; on the H200's 16 CPUs fio's case was 0.92x.
 * One handle serves every descriptor of a file: the advice follows the descriptor being served. */
static void advise_like(struct handle* h, int fd) {
  const int a = (unsigned)fd < SEEN_MAX_FD ? g_fd_advice[fd] : POSIX_FADV_NORMAL;
  if (__atomic_exchange_n(&h->advice, a, __ATOMIC_RELAXED) == a) return;
  const int efd = eng.file_fd(h->f);
  if (efd >= 0) REAL(posix_fadvise)(efd, 0, 0, a);
}

/* Whether the soft RLIMIT_FSIZE limits a file's size (into *limit). */
static int fsize_limit(uint64_t* limit) {
  struct rlimit l;
  if (getrlimit(RLIMIT_FSIZE, &l) != 0 || l.rlim_cur == RLIM_INFINITY) return 0;
  *limit = l.rlim_cur;
  return 1;
}

/* Reservations of each descriptor's file offset in flight (read, write, readv, writev served by the
 * engine): a short read tells from them whether another call's range overlapped its own (see the
 * end of serve_with_engine). */
static unsigned g_reserving[MEMO_MAX_FD];
/* The count of fd's bucket: descriptors MEMO_MAX_FD apart share one, which can only make a read
 * look overlapped (the clamp of before), never the reverse (a descriptor at 4096 or above had no
 * count, and its threads reading to the end left the offset past it again: review, session 27). */
static unsigned* reserving(int fd) { return &g_reserving[(unsigned)fd % MEMO_MAX_FD]; }
static void reserved_end(int fd) {
  /* never below 0: a child forked from a signal handler amid a reservation starts from 0 (in_child) */
  unsigned* n = reserving(fd);
  unsigned v = __atomic_load_n(n, __ATOMIC_ACQUIRE);
  while (v && !__atomic_compare_exchange_n(n, &v, v - 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
  }
}

/* Runs the call through the engine if it qualifies; *out gets the result (bytes, or -1 with errno).
 * Returns TO_LIBC when the caller should hand the call to libc unchanged. */
static int serve_with_engine(const struct call* c, const struct stat* st, ssize_t* out, int* accel, int* fallback,
                             int* declined) {
  __atomic_add_fetch(&g_asked, 1, __ATOMIC_RELAXED);
  const int fl = REAL(fcntl)(c->fd, F_GETFL);
  if (fl < 0 || (fl & (O_APPEND | O_PATH | O_SYNC | O_DSYNC))) return TO_LIBC;
  const int acc = fl & O_ACCMODE;
  if (c->write ? acc == O_RDONLY : acc == O_WRONLY) return TO_LIBC; /* libc reports EBADF */
  const int direct = (fl & O_DIRECT) != 0;
  /* O_DIRECT keeps the kernel's alignment rules: a misaligned request gets its EINVAL from libc. */
  for (int i = 0; i < c->cnt && direct; ++i)
    if (((uintptr_t)c->iov[i].iov_base | c->iov[i].iov_len) & 4095) return TO_LIBC;
  if (direct && (c->off > 0 && (c->off & 4095))) return TO_LIBC;
  if (!direct && c->total < g_floor[c->write]) { /* nothing but posix below the floor: no engine */
    if ((unsigned)c->fd < SEEN_MAX_FD) g_fd_seen[c->fd] = 1;
    return TO_LIBC;
  }
  struct handle* h = handle_get(c->fd, st, acc, direct);
  if ((unsigned)c->fd < SEEN_MAX_FD) g_fd_seen[c->fd] = 1; /* its crossing point is in g_pass now */
  if (!h) return TO_LIBC;
  if (c->total < h->min_accel[c->write]) {
    handle_put(h);
    memo_set(c->fd, c->total, c->off, c->write);
    *declined = 1;
    return TO_LIBC;
  }
  /* Per request, unless the threshold was given (then every request at or above it is the
   * engine's): what the planner would run here (size, alignment, the pages' residency in the page
   * cache). Where that is posix, libc does the same work without the engine's bookkeeping, and the
   * memo passes the next requests of this size back without asking. */
  off_t at = c->off; /* where the request starts (the file offset's lseek only where it is needed) */
  /* A write that reaches past RLIMIT_FSIZE is libc's: the kernel writes up to the limit and returns
   * the count; the engine's pieces past it each raised SIGXFSZ, which kills by default (shim audit,
   * session 24). */
  uint64_t limit;
  if (c->write && fsize_limit(&limit) && ((at < 0 && (at = k_lseek(c->fd, 0, SEEK_CUR)) < 0) ||
                                          (uint64_t)at + c->total > limit)) {
    handle_put(h);
    return TO_LIBC;
  }
  if (!g_gate_set) {
    if (at < 0 && (at = k_lseek(c->fd, 0, SEEK_CUR)) < 0) {
      handle_put(h);
      return TO_LIBC;
    }
    /* After a window the memo passed on its own, the planner's last residency verdict is from far
     * back in the file: it probes this range anew. */
    const int op = c->write | (memo_passed_window(c->fd, c->total, c->write) ? ACCIO_OP_FRESH_CACHE : 0);
    const char* mech = eng.mechanism_for_at(h->f, c->iov[0].iov_base, c->total, at, op);
    if (!mech || !strcmp(mech, "posix")) {
      handle_put(h);
      if (mech) memo_set(c->fd, c->total, c->off, c->write);
      *declined = 1;
      return TO_LIBC;
    }
  }
  /* Only a request the engine will serve is checked for unmapped pages (after the decision: a
   * declined one goes to libc anyway). GPU memory need not lie in a mapping of the process (the
   * driver's address reservations may not cover it): what the driver calls device or managed
   * memory is the engine's to serve. */
  for (int i = 0; i < c->cnt; ++i)
    if (!mapped(c->iov[i].iov_base, c->iov[i].iov_len) && !gpu_memory(c->iov[i].iov_base, c->iov[i].iov_len)) {
      handle_put(h);
      return TO_LIBC;
    }
  if (!direct) advise_like(h, c->fd);
  off_t start = c->off;
  unsigned others = 0; /* reservations of this descriptor's offset in flight when this one was made */
  if (start < 0) { /* reserve [start, start+total) of the shared file offset atomically */
    others = __atomic_fetch_add(reserving(c->fd), 1, __ATOMIC_ACQ_REL);
    const off_t end = k_lseek(c->fd, (off_t)c->total, SEEK_CUR);
    if (end < 0) {
      reserved_end(c->fd);
      handle_put(h);
      return TO_LIBC;
    }
    start = end - (off_t)c->total;
    if (direct && (start & 4095)) { /* the offset was misaligned: libc decides */
      k_lseek(c->fd, start, SEEK_SET);
      reserved_end(c->fd);
      handle_put(h);
      return TO_LIBC;
    }
  }
  size_t done = 0;
  int failed = 0;
  for (int i = 0; i < c->cnt && !failed; ++i) {
    const struct iovec* v = &c->iov[i];
    if (!v->iov_len) continue;
    int64_t r = c->write ? eng.pwrite(h->f, v->iov_base, v->iov_len, start + (int64_t)done)
                         : eng.pread(h->f, v->iov_base, v->iov_len, start + (int64_t)done);
    if (r < 0) failed = 1;
    else done += (size_t)r;
    if (r >= 0 && (size_t)r < v->iov_len) break; /* end of file */
  }
  handle_put(h);
  *accel = 1;
  if (failed) {
    /* Redo the whole call with libc from where it started: the kernel then reports exactly what it
     * would have (errno, or the bytes it managed). Rewriting bytes the engine already wrote is
     * harmless; a file the engine extended beyond the kernel's result is cut back. */
    *fallback = 1;
    if (c->off < 0) k_lseek(c->fd, start, SEEK_SET);
    ssize_t r = call_libc(c);
    const int e = errno;
    if (c->off < 0) reserved_end(c->fd);
    if (c->write) {
      /* Cut back only what this call's own range can explain: a file that now ends beyond
       * [start, start + total) was extended by another writer meanwhile, whose bytes stay. */
      const off_t want = start + (r > 0 ? r : 0);
      struct stat now;
      if (fstat(c->fd, &now) == 0 && now.st_size > st->st_size && now.st_size > want &&
          now.st_size <= start + (off_t)c->total)
        if (ftruncate(c->fd, want > st->st_size ? want : st->st_size) != 0) { /* best effort */ }
    }
    errno = e;
    *out = r;
    return SERVED;
  }
  if (c->off < 0 && done < c->total) {
    /* The kernel leaves the offset where a short transfer ended, start + done: at the end of the
     * file, or where the program had put it beyond the end (a read there returns 0 and moves
     * nothing). Only where another reservation of this offset overlapped this one (threads or
     * processes sharing the descriptor, reading it to its end) can a range begin past the end
     * although the kernel, whose f_pos lock runs such reads one after the other, would have started
     * it at the end: a read that found nothing there sets the offset to the file's size (shim audit,
     * session 24). Applied to every short read, that clamp moved the offset of a program that had
     * seeked past the end back to the end (its next write left no hole, and landed elsewhere), and
     * set the offset of /proc files, whose size is 0, back to 0 after each read (session 27). */
    off_t to = start + (off_t)done;
    const int overlapped = others || k_lseek(c->fd, 0, SEEK_CUR) != start + (off_t)c->total ||
                           __atomic_load_n(reserving(c->fd), __ATOMIC_ACQUIRE) > 1;
    struct stat now;
    if (!c->write && !done && overlapped && fstat(c->fd, &now) == 0 && now.st_size < to) to = now.st_size;
    k_lseek(c->fd, to, SEEK_SET);
  }
  if (c->off < 0) reserved_end(c->fd);
  *out = (ssize_t)done;
  return SERVED;
}

/* ---------------------------------------------------------------------------------------------
 * Prefetch for sequential readers of small requests (cat, sha256sum, read and fread loops):
 * the kernel reads such a stream ahead a little at a time, at a queue depth of about one; a device
 * that does more at depth 16 stays mostly idle. Each descriptor's bytes read below the gate are
 * counted (two plain stores on the fast path); every kPfCheck bytes the stream is looked at: if
 * the file offset moved forward by about that much (a sequential reader), its window of
 * g_pf_window bytes ahead is not yet asked for, and the window's last page is not in the page
 * cache (cachestat(2), which has no side effect; hot files cost nothing more), the window is asked
 * for with posix_fadvise(WILLNEED), in pieces the kernel reads whole: one WILLNEED reads at most
 * max(the device's readahead, its largest request) (force_page_cache_ra), so a single call for
 * the whole window read 8 MiB of 32 on the 2-vCPU VM's disk, and the kernel's own readahead, which
 * found those pages without its marks, started over from its smallest size each time: that, and
 * not the prefetch as such, made cold readers slower (0.81-0.88x of plain,
 * results/run/run_programs_cold_prefetch32m.json, before the pieces). ACCIO_PRELOAD_PREFETCH sets
 * the window (0: off), or "profile": each device's window is its tuning profile's (`accio tune`
 * writes one only where the device measured >= 1.5x more at queue depth 16 than at 1 and than a
 * buffered reader gets by itself), asked of
 * the engine at the first look at a cold stream on the device (the launcher sets "profile" when a
 * profile has a window). */
#define PF_MAX_FD 4096
static const uint64_t kPfCheck = 4u << 20;
static size_t g_pf_window = 0; /* fixed window; with g_pf_profile, non-zero to count (kPfFirst) */
static int g_pf_profile;       /* ACCIO_PRELOAD_PREFETCH=profile: each device's window from the engine */
/* A device's window before the engine was asked: the probe looks this far ahead (the tuner's window). */
static const size_t kPfFirst = 32u << 20;
struct stream {
  uint64_t since; /* bytes read since the last look */
  off_t last_pos; /* the file offset at the last look */
  off_t ahead;    /* asked for up to here */
};
static struct stream g_streams[PF_MAX_FD];
static uint64_t g_prefetches; /* windows asked for ("prefetch_windows" in the statistics) */

/* The devices seen, under g_mu: each one's WILLNEED piece, and (profile mode) its window once the
 * engine was asked (a window of 0 turns the device off for good). Devices beyond the table: see
 * pf_device. */
#define PF_MAX_DEV 16
struct pf_dev {
  dev_t dev;
  int asked;     /* the window is known: fixed mode, or the engine answered */
  size_t window; /* before the engine answered: kPfFirst */
  size_t piece;  /* bytes one WILLNEED reads whole */
};
static struct pf_dev g_pf_devs[PF_MAX_DEV];
static int g_pf_ndevs;

/* A number from the device's block queue in sysfs (a partition's is its disk's), 0 if none. */
static uint64_t pf_queue_kb(dev_t dev, const char* name) {
  char path[96];
  for (int up = 0; up < 2; ++up) {
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u/%squeue/%s", major(dev), minor(dev), up ? "../" : "", name);
    const int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char b[32];
    const ssize_t n = k_read(fd, b, sizeof b - 1);
    k_close(fd);
    if (n <= 0) return 0;
    b[n] = 0;
    return strtoull(b, NULL, 10);
  }
  return 0;
}

/* The most one WILLNEED reads whole on the device: max(readahead, largest request), as the kernel
 * caps it; 128 KiB (the kernel's default for both) where sysfs does not say (NFS, FUSE, overlay). */
static size_t pf_piece(dev_t dev) {
  const uint64_t ra = pf_queue_kb(dev, "read_ahead_kb"), io = pf_queue_kb(dev, "max_sectors_kb");
  const uint64_t kb = ra > io ? ra : io;
  return kb > 128 ? (size_t)kb << 10 : 128u << 10;
}

/* The device's slot in g_pf_devs, g_pf_ndevs if it has none (g_mu held). */
static int pf_slot_locked(dev_t dev) {
  int i = 0;
  while (i < g_pf_ndevs && g_pf_devs[i].dev != dev) ++i;
  return i;
}

/* The device's entry, added if new (its piece read from sysfs outside the lock). A prefetch is
 * advice and never waits: where g_mu is taken (another thread, or this one interrupted by a signal
 * handler that reads), the look gets no window. Past the table's end, fixed mode keeps its window
 * in pieces of the kernel's default size; profile mode has none. */
static struct pf_dev pf_device(dev_t dev) {
  struct pf_dev d = {dev, 1, 0, 0};
  if (pthread_mutex_trylock(&g_mu) != 0) return d;
  int i = pf_slot_locked(dev);
  if (i < g_pf_ndevs) d = g_pf_devs[i];
  pthread_mutex_unlock(&g_mu);
  if (i < g_pf_ndevs) return d;
  if (i == PF_MAX_DEV) return (struct pf_dev){dev, 1, g_pf_profile ? 0 : g_pf_window, 128u << 10};
  struct pf_dev n = {dev, !g_pf_profile, g_pf_profile ? kPfFirst : g_pf_window, pf_piece(dev)};
  if (pthread_mutex_trylock(&g_mu) != 0) return d;
  i = pf_slot_locked(dev); /* another thread may have added it meanwhile */
  if (i == g_pf_ndevs && i < PF_MAX_DEV) g_pf_devs[g_pf_ndevs++] = n;
  d = i < g_pf_ndevs ? g_pf_devs[i] : n;
  pthread_mutex_unlock(&g_mu);
  return d;
}

/* Asks the engine (loading it) for fd's window and keeps it for the device; 0 on any failure. Like
 * every look it never waits for g_mu: where another thread holds it, nothing is asked now and the
 * next look asks again. */
static size_t pf_ask(int fd, dev_t dev) {
  if (pthread_mutex_trylock(&g_mu) != 0) return 0;
  const int was = t_inside;
  t_inside = 1; /* the engine's own calls (loading it, reading the profile) pass through */
  const int loaded = engine_load_locked();
  pthread_mutex_unlock(&g_mu);
  const int64_t w = loaded ? eng.prefetch_window(fd, g_settings) : 0;
  t_inside = was;
  const size_t window = w > 0 ? (size_t)w : 0;
  if (loaded && pthread_mutex_trylock(&g_mu) == 0) {
    const int i = pf_slot_locked(dev);
    if (i < g_pf_ndevs) {
      g_pf_devs[i].window = window;
      g_pf_devs[i].asked = 1;
    }
    pthread_mutex_unlock(&g_mu);
  }
  return window;
}

/* Whether the page at off is in the page cache: cachestat(2) where the kernel has it (6.5), else a
 * one-byte RWF_NOWAIT read (which starts a one-page read where the page is missing). */
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
static int pf_cached(int fd, off_t off) {
  static int no_cachestat;
  if (!__atomic_load_n(&no_cachestat, __ATOMIC_RELAXED)) {
    struct {
      uint64_t off, len;
    } range = {(uint64_t)off & ~(uint64_t)4095, 1};
    uint64_t cs[5]; /* nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted */
    if (syscall(__NR_cachestat, fd, &range, cs, 0) == 0) return cs[0] != 0;
    if (errno == ENOSYS || errno == EPERM) /* none here, or refused (a seccomp filter older than it) */
      __atomic_store_n(&no_cachestat, 1, __ATOMIC_RELAXED);
    else if (errno != EOPNOTSUPP && errno != EINVAL) /* EOPNOTSUPP: this file (hugetlbfs): the other probe */
      return 1; /* cannot tell (EBADF...): ask for nothing */
  }
  char probe;
  struct iovec v = {&probe, 1};
  return !(REAL(preadv2)(fd, &v, 1, off, RWF_NOWAIT) < 0 && errno == EAGAIN);
}

static __attribute__((noinline, cold)) void pf_look(int fd, struct stream* s) {
  const int saved = errno;
  __atomic_store_n(&s->since, 0, __ATOMIC_RELAXED);
  const off_t pos = k_lseek(fd, 0, SEEK_CUR);
  const off_t last = s->last_pos;
  s->last_pos = pos;
  if (pos < 0 || pos <= last || pos - last > (off_t)(2 * kPfCheck)) { /* not a forward stream */
    s->ahead = 0; /* nor a window to trust: the descriptor may now be another file (fclose, dup2) */
    goto out;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || pos >= st.st_size) goto out;
  const struct pf_dev d = pf_device(st.st_dev);
  size_t window = d.window;
  if (!window || !d.piece) goto out;
  if (s->ahead < pos || s->ahead > pos + (off_t)window) s->ahead = pos;
  if (s->ahead - pos >= (off_t)(window / 2)) goto out; /* enough is on its way */
  off_t end = pos + (off_t)window < st.st_size ? pos + (off_t)window : st.st_size;
  if (end <= s->ahead) goto out;
  if (!pf_cached(fd, end - 1)) {
    if (!d.asked) { /* the first cold stream on this device: does its profile say depth pays? */
      if (!(window = pf_ask(fd, st.st_dev))) goto out;
      end = pos + (off_t)window < st.st_size ? pos + (off_t)window : st.st_size;
    }
    for (off_t at = s->ahead; at < end; at += (off_t)d.piece)
      posix_fadvise(fd, at, end - at < (off_t)d.piece ? end - at : (off_t)d.piece, POSIX_FADV_WILLNEED);
    __atomic_add_fetch(&g_prefetches, 1, __ATOMIC_RELAXED);
  }
  s->ahead = end;
out:
  errno = saved;
}

/* The fast path's share: count what a read below the gate returned. */
static inline void pf_count(int fd, ssize_t got) {
  if (got <= 0 || (unsigned)fd >= PF_MAX_FD || !g_pf_window) return;
  struct stream* s = &g_streams[fd];
  const uint64_t v = __atomic_load_n(&s->since, __ATOMIC_RELAXED) + (uint64_t)got;
  __atomic_store_n(&s->since, v, __ATOMIC_RELAXED); /* racing threads may lose a count: a heuristic */
  if (__builtin_expect(v >= kPfCheck, 0)) pf_look(fd, s);
}

static void pf_forget(int fd) {
  if ((unsigned)fd < PF_MAX_FD) memset(&g_streams[fd], 0, sizeof g_streams[fd]);
}

/* Calls the engine served, and of those the ones libc had to redo: for tests and diagnostics. */
static uint64_t g_taken, g_redone;
EXPORT void accio_preload_counters(uint64_t* taken, uint64_t* redone) {
  if (taken) *taken = __atomic_load_n(&g_taken, __ATOMIC_RELAXED);
  if (redone) *redone = __atomic_load_n(&g_redone, __ATOMIC_RELAXED);
}
EXPORT uint64_t accio_preload_asked(void) { return __atomic_load_n(&g_asked, __ATOMIC_RELAXED); }

/* Every interposed call ends here once its size is known. */
static ssize_t dispatch(const struct call* c) {
  if (t_inside) return call_libc(c);
  const int stats = g_stats_dir[0] != 0;
  if (!stats && (below_gate(c->fd, c->total, c->write) || memo_pass(c->fd, c->total, c->off, c->write))) {
    const ssize_t got = call_libc(c);
    if (!c->write && c->off < 0) pf_count(c->fd, got); /* readv below the gate */
    return got;
  }
  t_inside = 1;
  const int saved = errno;
  struct stat st;
  ssize_t r;
  const int not_open = fstat(c->fd, &st) != 0;
  if (not_open || !S_ISREG(st.st_mode)) {
    if ((unsigned)c->fd < SEEN_MAX_FD) g_fd_seen[c->fd] = 1; /* a pipe or a device: nothing to learn */
    if (!not_open) memo_set(c->fd, MEMO_ANY, -1, c->write);
    errno = saved;
    t_inside = 0;
    return call_libc(c);
  }
  memo_regular(c->fd);
  errno = saved;
  const uint64_t t0 = stats ? now_ns() : 0;
  int accel = 0, fallback = 0, declined = 0;
  if (below_gate(c->fd, c->total, c->write) ||
      (memo_pass(c->fd, c->total, c->off, c->write) && (declined = DECLINED_BY_MEMO)) ||
      serve_with_engine(c, &st, &r, &accel, &fallback, &declined) == TO_LIBC) {
    errno = saved;
    r = call_libc(c);
    if (!c->write && c->off < 0) pf_count(c->fd, r);
  } else {
    memo_clear(c->fd, c->write);
    __atomic_add_fetch(&g_taken, 1, __ATOMIC_RELAXED);
    if (fallback) __atomic_add_fetch(&g_redone, 1, __ATOMIC_RELAXED);
    /* A call that succeeds leaves errno as it was, as libc's do: the engine's own failures (a
     * probe's EBADF, an open's ENOENT, a copy's EFAULT before the redo) showed through a successful
     * read (shim audit, session 24). */
    if (r >= 0) errno = saved;
  }
  if (stats) {
    const int e = errno;
    record(c->fd, &st, c->write, c->total, r, now_ns() - t0, accel, fallback, declined);
    errno = e;
  }
  t_inside = 0;
  return r;
}

/* The kernel moves at most MAX_RW_COUNT bytes per call (INT_MAX rounded down to a page). */
#define MAX_RW_COUNT ((size_t)INT_MAX & ~(size_t)4095)

/* Where user space ends: the kernel refuses (EFAULT) a range that reaches past it. 47 bits is the
 * smallest of the x86-64 and arm64 layouts; a buffer above it is libc's, which is always right. */
#define USER_TOP ((uintptr_t)1 << 47)

/* read, pread, write, pwrite (the fortify variants call these): one buffer. The kernel checks the
 * whole range before it cuts the count to MAX_RW_COUNT: a range that wraps or reaches past user
 * space (read(fd, buf, SIZE_MAX)) gets EFAULT, so it is libc's; cut here first, such a read ran
 * over the heap past the buffer (shim audit, session 24). Any other count is cut, as the kernel
 * cuts it (a short transfer). */
static ssize_t dispatch_buffer(int fd, void* buf, size_t n, off_t off, int write) {
  const uintptr_t p = (uintptr_t)buf;
  const int refused = p + n < p || p + n > USER_TOP;
  if (n > MAX_RW_COUNT && !refused) n = MAX_RW_COUNT;
  const struct iovec v = {buf, n};
  const struct call c = {fd, write, &v, 1, off, n, 0};
  return refused ? call_libc(&c) : dispatch(&c);
}

/* Whether an iovec array at iov may be read here without a fault: not in the first 64 KiB (below
 * vm.mmap_min_addr, 4 KiB or 64 KiB, nothing is mapped) nor beyond user space. The kernel copies
 * the array with copy_from_user (EFAULT); summing its lengths here made readv(fd, (struct
 * iovec*)16, 2) a SIGSEGV (shim audit, session 24). An array elsewhere that is unmapped or unreadable still faults
 * here: checking it (msync, 0.45 us; process_vm_readv, 2 us) would cost every readv more than the
 * shim's whole decision. */
static int iov_plausible(const struct iovec* iov, int cnt) {
  const uintptr_t p = (uintptr_t)iov, n = (uintptr_t)cnt * sizeof *iov;
  return p >= 65536 && p + n > p && p + n <= USER_TOP;
}

/* readv, preadv, writev, pwritev and their v2 forms: an iovec array. */
static ssize_t dispatch_vector(int fd, const struct iovec* iov, int cnt, off_t off, int write) {
  size_t total = 0;
  if (cnt > 0 && cnt <= IOV_MAX && iov && iov_plausible(iov, cnt)) {
    for (int i = 0; i < cnt; ++i) {
      if (iov[i].iov_len > SSIZE_MAX - total) { /* libc reports EINVAL */
        total = 0;
        break;
      }
      total += iov[i].iov_len;
    }
  }
  const struct call c = {fd, write, iov, cnt, off, total, 1};
  /* Nothing to move, or an invalid or oversized vector: libc answers (EINVAL, or a short count). */
  return !total || total > MAX_RW_COUNT ? call_libc(&c) : dispatch(&c);
}

/* ---------------------------------------------------------------------------------------------
 * The interposed symbols. Fast path: one compare against the threshold. */
#define FAST (!g_stats_dir[0])

EXPORT ssize_t read(int fd, void* buf, size_t n) {
  if (below_gate(fd, n, READ) && FAST) {
    const ssize_t r = REAL(read)(fd, buf, n);
    pf_count(fd, r);
    return r;
  }
  return dispatch_buffer(fd, buf, n, -1, READ);
}
EXPORT ssize_t pread(int fd, void* buf, size_t n, off_t off) {
  if ((below_gate(fd, n, READ) && FAST) || off < 0) return REAL(pread)(fd, buf, n, off);
  return dispatch_buffer(fd, buf, n, off, READ);
}
EXPORT ssize_t pread64(int fd, void* buf, size_t n, off_t off) { return pread(fd, buf, n, off); }
EXPORT ssize_t write(int fd, const void* buf, size_t n) {
  if (below_gate(fd, n, WRITE) && FAST) return REAL(write)(fd, buf, n);
  return dispatch_buffer(fd, (void*)buf, n, -1, WRITE);
}
EXPORT ssize_t pwrite(int fd, const void* buf, size_t n, off_t off) {
  if ((below_gate(fd, n, WRITE) && FAST) || off < 0) return REAL(pwrite)(fd, buf, n, off);
  return dispatch_buffer(fd, (void*)buf, n, off, WRITE);
}
EXPORT ssize_t pwrite64(int fd, const void* buf, size_t n, off_t off) { return pwrite(fd, buf, n, off); }
EXPORT ssize_t readv(int fd, const struct iovec* iov, int cnt) { return dispatch_vector(fd, iov, cnt, -1, READ); }
EXPORT ssize_t writev(int fd, const struct iovec* iov, int cnt) { return dispatch_vector(fd, iov, cnt, -1, WRITE); }
EXPORT ssize_t preadv(int fd, const struct iovec* iov, int cnt, off_t off) {
  if (off < 0) return REAL(preadv)(fd, iov, cnt, off);
  return dispatch_vector(fd, iov, cnt, off, READ);
}
EXPORT ssize_t preadv64(int fd, const struct iovec* iov, int cnt, off_t off) { return preadv(fd, iov, cnt, off); }
EXPORT ssize_t pwritev(int fd, const struct iovec* iov, int cnt, off_t off) {
  if (off < 0) return REAL(pwritev)(fd, iov, cnt, off);
  return dispatch_vector(fd, iov, cnt, off, WRITE);
}
EXPORT ssize_t pwritev64(int fd, const struct iovec* iov, int cnt, off_t off) { return pwritev(fd, iov, cnt, off); }
/* preadv2/pwritev2 with flags (RWF_NOWAIT, RWF_HIPRI, RWF_DSYNC, RWF_APPEND, ...) keep the kernel's
 * meaning: they pass through. Offset -1 means the file offset, as for readv/writev. */
EXPORT ssize_t preadv2(int fd, const struct iovec* iov, int cnt, off_t off, int flags) {
  if (flags || off < -1) return REAL(preadv2)(fd, iov, cnt, off, flags);
  return dispatch_vector(fd, iov, cnt, off, READ);
}
EXPORT ssize_t preadv64v2(int fd, const struct iovec* iov, int cnt, off_t off, int flags) {
  return preadv2(fd, iov, cnt, off, flags);
}
EXPORT ssize_t pwritev2(int fd, const struct iovec* iov, int cnt, off_t off, int flags) {
  if (flags || off < -1) return REAL(pwritev2)(fd, iov, cnt, off, flags);
  return dispatch_vector(fd, iov, cnt, off, WRITE);
}
EXPORT ssize_t pwritev64v2(int fd, const struct iovec* iov, int cnt, off_t off, int flags) {
  return pwritev2(fd, iov, cnt, off, flags);
}

/* Whether the shim keeps anything of fd in its tables (forget_fd has something to clear). */
static int fd_has_state(int fd) {
  if ((unsigned)fd < SEEN_MAX_FD && (g_fd_seen[fd] | g_fd_advice[fd] | g_fd_group[fd])) return 1;
  if ((unsigned)fd < MEMO_MAX_FD)
    for (int w = 0; w < 2; ++w) {
      const struct memo* m = &g_memo[fd][w];
      if (m->size | m->left | m->window | (uint64_t)m->next) return 1;
    }
  if ((unsigned)fd < PF_MAX_FD) {
    const struct stream* t = &g_streams[fd];
    if (t->since | (uint64_t)t->last_pos | (uint64_t)t->ahead) return 1;
  }
  return 0;
}

/* What the shim knows of a descriptor about to be closed, or replaced by dup2/dup3 (which close
 * the target without a close() call): its stream, memo and gate state, and the engine's handle of
 * its file. Nothing in a vfork child (in_borrowed_memory): its closes are of its own table's
 * descriptors, and these records are its parent's (Python's subprocess closed every descriptor of
 * the child with close_range, and the shim closed the parent's engine handles: their descriptors
 * stayed open in the parent, two per subprocess.run). The process is asked only where there is
 * something to clear, so that a close of a descriptor the shim never saw costs no system call. */
/* The files whose engine handles go once the descriptors being closed are gone: taken before the
 * program's close (the descriptor still says which file it is), released after it. Not before: the
 * handle's close releases the program's record locks on the file, which the program's own close
 * (or fclose's flush before it) must still hold until then; a close, dup2 or dup3 that fails
 * releases nothing; and closing an O_PATH descriptor releases no lock, so it takes no handle with
 * it (review, session 24). */
struct closing {
  int n;
  struct file_id file[MAX_HANDLES];
};
static void closing_add(struct closing* c, int fd) {
  if (__builtin_expect(!__atomic_load_n(&g_nhandles, __ATOMIC_RELAXED), 1) || t_inside || c->n == MAX_HANDLES) return;
  struct stat st;
  const int saved = errno;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && !(REAL(fcntl)(fd, F_GETFL) & O_PATH)) {
    if (file_at(c->file, c->n, st.st_dev, st.st_ino) == c->n) c->file[c->n++] = (struct file_id){st.st_dev, st.st_ino};
  }
  errno = saved;
}
/* After the program's close: the handles of the files taken (done: the close succeeded). */
static void closing_release(const struct closing* c, int done) {
  if (!done || !c->n) return;
  const int saved = errno;
  t_inside = 1;
  for (int i = 0; i < c->n; ++i) handles_forget(c->file[i]);
  t_inside = 0;
  errno = saved;
}

static void forget_fd_owned(int fd, struct closing* c);
static void forget_fd(int fd, struct closing* c) {
  if (!fd_has_state(fd) && (!__atomic_load_n(&g_nhandles, __ATOMIC_RELAXED) || t_inside)) return;
  if (in_borrowed_memory()) return;
  forget_fd_owned(fd, c);
}
static void forget_fd_owned(int fd, struct closing* c) {
  pf_forget(fd);
  memo_forget(fd);
  if ((unsigned)fd < SEEN_MAX_FD) {
    g_fd_seen[fd] = g_fd_advice[fd] = 0;
    g_fd_group[fd] = 0;
  }
  closing_add(c, fd);
}

EXPORT int close(int fd) {
  struct closing c;
  c.n = 0;
  forget_fd(fd, &c);
  const int r = REAL(close)(fd);
  closing_release(&c, r == 0 || errno == EINTR); /* after EINTR the descriptor is closed (Linux) */
  return r;
}
/* r, the new descriptor (or -1), shares oldfd's open file description: its advice and its group
 * (one number for racing duplicates of a descriptor that had none). Not in a vfork child. */
static int duplicated(int oldfd, int r) {
  if (r < 0 || r == oldfd || (unsigned)oldfd >= SEEN_MAX_FD || (unsigned)r >= SEEN_MAX_FD || in_borrowed_memory())
    return r;
  unsigned g = __atomic_load_n(&g_fd_group[oldfd], __ATOMIC_RELAXED);
  if (!g) {
    const unsigned mine = __atomic_add_fetch(&g_groups, 1, __ATOMIC_RELAXED);
    g = __atomic_compare_exchange_n(&g_fd_group[oldfd], &g, mine, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED) ? mine : g;
  }
  __atomic_store_n(&g_fd_group[r], g, __ATOMIC_RELAXED);
  g_fd_advice[r] = g_fd_advice[oldfd];
  const unsigned top = (unsigned)(oldfd > r ? oldfd : r) + 1;
  unsigned seen = __atomic_load_n(&g_group_top, __ATOMIC_RELAXED);
  while (seen < top && !__atomic_compare_exchange_n(&g_group_top, &seen, top, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return r;
}
EXPORT int dup(int oldfd) { return duplicated(oldfd, REAL(dup)(oldfd)); }
/* dup2 and dup3 close newfd first, without a close() call: the shim forgets it as close() would.
 * Where the call fails (oldfd not open, EBUSY, dup3's EINVAL), newfd is left as it was: its advice
 * and group come back (an engine handle of its file, closed, opens again at the next request). */
struct fd_marks {
  unsigned char advice;
  unsigned group;
};
static struct fd_marks marks_of(int fd) {
  struct fd_marks m = {0, 0};
  if ((unsigned)fd < SEEN_MAX_FD) m = (struct fd_marks){g_fd_advice[fd], __atomic_load_n(&g_fd_group[fd], __ATOMIC_RELAXED)};
  return m;
}
static int replaced(int oldfd, int newfd, int r, struct fd_marks m) {
  if (r >= 0) return duplicated(oldfd, r);
  if ((unsigned)newfd < SEEN_MAX_FD && (m.advice | m.group) && !in_borrowed_memory()) {
    g_fd_advice[newfd] = m.advice;
    __atomic_store_n(&g_fd_group[newfd], m.group, __ATOMIC_RELAXED);
  }
  return r;
}
EXPORT int dup2(int oldfd, int newfd) {
  if (oldfd == newfd) return REAL(dup2)(oldfd, newfd);
  const struct fd_marks m = marks_of(newfd);
  struct closing c;
  c.n = 0;
  forget_fd(newfd, &c);
  const int r = REAL(dup2)(oldfd, newfd);
  closing_release(&c, r >= 0);
  return replaced(oldfd, newfd, r, m);
}
EXPORT int dup3(int oldfd, int newfd, int flags) {
  if (oldfd == newfd) return REAL(dup3)(oldfd, newfd, flags);  /* EINVAL: nothing closed */
  const struct fd_marks m = marks_of(newfd);
  struct closing c;
  c.n = 0;
  forget_fd(newfd, &c);
  const int r = REAL(dup3)(oldfd, newfd, flags);
  closing_release(&c, r >= 0);
  return replaced(oldfd, newfd, r, m);
}
/* fcntl's third argument is an int or a pointer, by command; it is passed on as a pointer, as
 * glibc's own wrapper reads it. F_DUPFD and F_DUPFD_CLOEXEC make a descriptor as dup does. */
static int fcntl_done(int fd, int cmd, int r) { return cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC ? duplicated(fd, r) : r; }
static void before_fcntl(int fd, int cmd, void* arg) {
  if ((cmd == F_SETLK || cmd == F_SETLKW) && arg && ((const struct flock*)arg)->l_type != F_UNLCK) note_lock(fd);
}
EXPORT int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  before_fcntl(fd, cmd, arg);
  return fcntl_done(fd, cmd, REAL(fcntl)(fd, cmd, arg));
}
EXPORT int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  before_fcntl(fd, cmd, arg);
  return fcntl_done(fd, cmd, REAL(fcntl64)(fd, cmd, arg));
}
/* glibc's lockf calls fcntl inside libc, where the shim does not see it. */
EXPORT int lockf(int fd, int cmd, off_t len) {
  if (cmd == F_LOCK || cmd == F_TLOCK) note_lock(fd);
  return REAL(lockf)(fd, cmd, len);
}
EXPORT int lockf64(int fd, int cmd, off_t len) {
  if (cmd == F_LOCK || cmd == F_TLOCK) note_lock(fd);
  return REAL(lockf64)(fd, cmd, len);
}
/* Whether descriptors a and b of this process share an open file description: kcmp(KCMP_FILE); 1
 * (trust the group) where the kernel has no kcmp or refuses it (seccomp, no CONFIG_KCMP), 0 where b
 * is closed. */
static int same_description(int a, int b) {
#ifdef SYS_kcmp
  const int saved = errno;
  const pid_t self = (pid_t)syscall(SYS_getpid);
  const long r = syscall(SYS_kcmp, self, self, 0 /* KCMP_FILE */, a, b); /* 0 equal; 1, 2, 3 not */
  const int e = errno;
  errno = saved;
  return r == -1 ? e != EBADF : r == 0; /* b closed: not the same; kcmp unavailable: trust the group */
#else
  (void)a, (void)b;
  return 1;
#endif
}

/* The advice that changes an open file description's readahead is remembered (advise_like), for
 * every descriptor of that description the shim saw made; the others act on the file's pages,
 * which the engine's descriptor shares. A group can hold a number that now belongs to another
 * description (closed where the shim does not see: a raw system call, io_uring, closedir): the
 * advice goes only to the members that still share fd's description (kcmp), and where one does
 * not, those that do move with fd to a new group, away from the stale one. */
EXPORT int posix_fadvise(int fd, off_t off, off_t len, int advice) {
  const int r = REAL(posix_fadvise)(fd, off, len, advice);
  if (r || (unsigned)fd >= SEEN_MAX_FD ||
      (advice != POSIX_FADV_NORMAL && advice != POSIX_FADV_RANDOM && advice != POSIX_FADV_SEQUENTIAL))
    return r;
  g_fd_advice[fd] = (unsigned char)advice;
  const unsigned g = __atomic_load_n(&g_fd_group[fd], __ATOMIC_RELAXED);
  if (!g) return r;
  const unsigned top = __atomic_load_n(&g_group_top, __ATOMIC_RELAXED);
  int stale = 0;
  for (unsigned i = 0; i < top && i < SEEN_MAX_FD; ++i) {
    if ((int)i == fd || __atomic_load_n(&g_fd_group[i], __ATOMIC_RELAXED) != g) continue;
    if (same_description(fd, (int)i)) g_fd_advice[i] = (unsigned char)advice;
    else stale = 1;
  }
  if (!stale) return r;
  const unsigned fresh = __atomic_add_fetch(&g_groups, 1, __ATOMIC_RELAXED);
  for (unsigned i = 0; i < top && i < SEEN_MAX_FD; ++i)
    if (__atomic_load_n(&g_fd_group[i], __ATOMIC_RELAXED) == g && ((int)i == fd || same_description(fd, (int)i)))
      __atomic_store_n(&g_fd_group[i], fresh, __ATOMIC_RELAXED);
  return r;
}
EXPORT int posix_fadvise64(int fd, off_t off, off_t len, int advice) { return posix_fadvise(fd, off, len, advice); }
/* A program that moves its file offset reads or writes somewhere else next: the memo's window of
 * the descriptor falls back to kMemoBytes (see the memo). Asking where the offset is
 * (lseek(fd, 0, SEEK_CUR), as Python's open() and dd do) does not move it. */
EXPORT off_t lseek(int fd, off_t off, int whence) {
  if ((whence != SEEK_CUR || off != 0) && (unsigned)fd < MEMO_MAX_FD) {
    memo_moved(&g_memo[fd][READ]);
    memo_moved(&g_memo[fd][WRITE]);
  }
  return REAL(lseek)(fd, off, whence);
}
EXPORT off_t lseek64(int fd, off_t off, int whence) { return lseek(fd, off, whence); }

/* What the shim knows of the descriptors first to last, about to be closed together (close_range,
 * closefrom); nothing in a vfork child (forget_fd). Descriptors from MEMO_MAX_FD up have no table
 * entries to forget; an engine handle of a file closed there is kept, as after a raw close system
 * call. */
/* Descriptors from MEMO_MAX_FD up keep no state of their own, but their files may have engine
 * handles: the open ones in [first, last] are found in /proc/self/fd (getdents64 into the stack: no
 * allocation) and forgotten as close() forgets them. Without it a deleted file whose descriptor was
 * 4096 or above kept its space after close_range or closefrom (shim audit, session 24). */
struct dirent64_ {
  uint64_t ino;
  int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[];
};
static void forget_high(unsigned first, unsigned last, struct closing* c) {
  if (last < MEMO_MAX_FD || !__atomic_load_n(&g_nhandles, __ATOMIC_RELAXED)) return;
  if (first < MEMO_MAX_FD) first = MEMO_MAX_FD;
  const int saved = errno;
  /* thread-self: this thread's table, which is the process's unless the thread unshared it */
  int dir = (int)syscall(SYS_openat, AT_FDCWD, "/proc/thread-self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) dir = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    errno = saved;
    return;
  }
  char b[4096] __attribute__((aligned(8)));
  for (long n; (n = syscall(SYS_getdents64, dir, b, sizeof b)) > 0;)
    for (long at = 0; at < n;) {
      const struct dirent64_* e = (const struct dirent64_*)(b + at);
      at += e->reclen;
      char* end;
      const unsigned long fd = strtoul(e->name, &end, 10);
      if (end != e->name && !*end && fd >= first && fd <= last && (int)fd != dir) forget_fd_owned((int)fd, c);
    }
  syscall(SYS_close, dir);
  errno = saved;
}

static void forget_range(unsigned first, unsigned last, struct closing* c) {
  if (in_borrowed_memory()) return;
  for (unsigned fd = first; fd <= last && fd < MEMO_MAX_FD; ++fd) forget_fd_owned((int)fd, c);
  forget_high(first, last, c);
}

#ifdef SYS_close_range
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
/* close_range is a thin wrapper of its system call in libc: called directly. With
 * CLOSE_RANGE_CLOEXEC nothing is closed. */
EXPORT int close_range(unsigned first, unsigned last, int flags) {
  struct closing c;
  c.n = 0;
  if (!(flags & CLOSE_RANGE_CLOEXEC)) forget_range(first, last, &c);
  const int r = (int)syscall(SYS_close_range, first, last, flags);
  closing_release(&c, r == 0);
  return r;
}
#endif
/* glibc's closefrom (2.34) closes through its own close_range, which no preload sees. */
EXPORT void closefrom(int lowfd) {
  struct closing c;
  c.n = 0;
  forget_range(lowfd < 0 ? 0 : (unsigned)lowfd, ~0U, &c);
  REAL(closefrom)(lowfd);
  closing_release(&c, 1);
}

/* _FORTIFY_SOURCE variants: the buffer-size check first, as glibc does. */
extern void __chk_fail(void) __attribute__((noreturn));
EXPORT ssize_t __read_chk(int fd, void* buf, size_t n, size_t buflen) {
  if (n > buflen) __chk_fail();
  return read(fd, buf, n);
}
EXPORT ssize_t __pread_chk(int fd, void* buf, size_t n, off_t off, size_t buflen) {
  if (n > buflen) __chk_fail();
  return pread(fd, buf, n, off);
}
EXPORT ssize_t __pread64_chk(int fd, void* buf, size_t n, off_t off, size_t buflen) {
  if (n > buflen) __chk_fail();
  return pread(fd, buf, n, off);
}

/* stdio reads through libc's own read, which no preload sees. fread and fread_unlocked (numpy's
 * fromfile, sha256sum, a model loader's fread of a whole tensor) are interposed: a small one is
 * counted for the prefetch and otherwise untouched; a large one is served by read() below (glibc). */
#if defined(__GLIBC__)
/* glibc's FILE is public (bits/types/struct_FILE.h, for its getc and putc macros); gnulib's
 * freadahead and freadseek use it the same way. These flag values are libio's since glibc 2.1; the
 * EOF, error and user-lock ones are in that header. _IO_doallocbuf, exported since 2.2.5 but not
 * declared in any installed header, is looked up at run time (REAL(doallocbuf)), so that a glibc
 * that stops exporting it costs a fresh stream's first large fread, never the link. */
enum { IO_NO_READS = 0x0004, IO_IN_BACKUP = 0x0100, IO_CURRENTLY_PUTTING = 0x0800 };
enum { IO_FLAGS2_MMAP = 1, IO_FLAGS2_NOTCANCEL = 2 };

/* The stream's descriptor without fileno's EBADF for a stream that has none (fmemopen). */
static inline int stream_fd(FILE* f) { return f->_fileno; }

/* A large fread: glibc reads it with reads of its own into the caller's buffer (numpy.fromfile
 * asks for a whole array at once), so the engine never saw it. Where the reads glibc would make
 * straight into the caller's buffer are at or above the gate, the shim makes them instead, as
 * libio's _IO_file_xsgetn does: the stream gets its buffer if it has none yet, the buffered bytes
 * are copied first, the buffer is emptied, then whole multiples of the buffer's size are read with
 * read() on the stream's descriptor (whose offset is where the buffer ended) until less than a
 * buffer is left, end of file or an error (which set the stream's EOF or error flag), the cached
 * file offset following; the tail, under a buffer, is libc's fread (its underflow fills the buffer
 * as it would have). So the descriptor's offset, the buffer and the flags end where glibc's own
 * would, and ftell, fseek, ungetc and the next fread carry on from there. The reads go to read()
 * here, so the planner decides for them as for any other (and passes them to libc where the engine
 * would not win). Streams in any other state go to libc: wide, being written, in an ungetc backup,
 * at EOF or error, without a descriptor (fmemopen, fopencookie), fopen's "m" mode (the buffer maps
 * the file) and "c" mode (reads that a thread cancellation does not interrupt), and a request
 * under the buffer's size (glibc reads it through the buffer).
 * Returns 0 where libc's fread should run, else 1 with the count in *got. The caller holds the
 * stream's lock where it is fread. */
/* What of n bytes glibc reads straight into the caller's buffer: whole buffers of bs bytes (all of n
 * for a buffer under 128 bytes). */
static inline size_t whole_buffers(size_t n, size_t bs) { return bs >= 128 ? n - n % bs : n; }

static int fread_large(void* buf, size_t size, size_t n, FILE* f, size_t* got) {
  size_t total;
  if (__builtin_mul_overflow(size, n, &total) || f->_fileno < 0 || f->_mode > 0 ||
      (f->_flags & (IO_NO_READS | IO_IN_BACKUP | IO_CURRENTLY_PUTTING | _IO_EOF_SEEN | _IO_ERR_SEEN)) ||
      (f->_flags2 & (IO_FLAGS2_MMAP | IO_FLAGS2_NOTCANCEL)) || f->_IO_write_ptr > f->_IO_write_base)
    return 0;
  const size_t held = f->_IO_read_end > f->_IO_read_ptr ? (size_t)(f->_IO_read_end - f->_IO_read_ptr) : 0;
  if (held >= total) return 0;
  if (!f->_IO_buf_base) {
    if (f->_IO_save_base) return 0; /* an ungetc's save area: libc's */
    REAL(doallocbuf)(f);
    if (!f->_IO_buf_base) return 0;
  }
  const size_t bs = (size_t)(f->_IO_buf_end - f->_IO_buf_base);
  const size_t want = total - held;
  if (want < bs || below_gate(f->_fileno, whole_buffers(want, bs), READ)) return 0;
  if (held) memcpy(buf, f->_IO_read_ptr, held);
  f->_IO_read_base = f->_IO_read_ptr = f->_IO_read_end = f->_IO_buf_base;
  f->_IO_write_base = f->_IO_write_ptr = f->_IO_write_end = f->_IO_buf_base;
  size_t done = held;
  while (total - done >= bs) {
    const ssize_t r = read(f->_fileno, (char*)buf + done, whole_buffers(total - done, bs));
    if (r <= 0) {
      f->_flags |= r == 0 ? _IO_EOF_SEEN : _IO_ERR_SEEN;
      *got = done / size;
      return 1;
    }
    done += (size_t)r;
    if (f->_offset != (__off64_t)-1) f->_offset += r;
  }
  if (done < total) done += REAL(fread_unlocked_)((char*)buf + done, 1, total - done, f);
  *got = done / size;
  return 1;
}

/* A thread cancelled inside fread_large (in read(), a cancellation point) leaves the stream
 * unlocked, as glibc's own fread does. */
static void unlock_stream(void* f) { funlockfile((FILE*)f); }
static int fread_large_locked(void* buf, size_t size, size_t n, FILE* f, size_t* got) {
  if (f->_flags & _IO_USER_LOCK) return fread_large(buf, size, n, f, got); /* the caller locks (as glibc) */
  int served;
  flockfile(f);
  pthread_cleanup_push(unlock_stream, f);
  served = fread_large(buf, size, n, f, got);
  pthread_cleanup_pop(1);
  return served;
}
#else
static inline int stream_fd(FILE* f) { /* another libc's FILE */
  const int saved = errno, fd = fileno_unlocked(f);
  errno = saved;
  return fd;
}
static int fread_large(void* buf, size_t size, size_t n, FILE* f, size_t* got) {
  (void)buf, (void)size, (void)n, (void)f, (void)got;
  return 0;
}
#define fread_large_locked fread_large
#endif

/* Worth a look: a request of at least about the gate's size, not from inside the shim or the engine
 * (fread_large checks the size exactly). */
static inline int fread_may_serve(size_t size, size_t n) { return size && n >= g_gate / size && !t_inside; }

EXPORT size_t fread(void* buf, size_t size, size_t n, FILE* f) {
  size_t got;
  if (fread_may_serve(size, n) && fread_large_locked(buf, size, n, f, &got)) return got;
  got = REAL(fread)(buf, size, n, f);
  if (got && g_pf_window) pf_count(stream_fd(f), (ssize_t)(got * size));
  return got;
}
#undef fread_unlocked /* glibc's inline macro form under optimization */
EXPORT size_t fread_unlocked(void* buf, size_t size, size_t n, FILE* f) {
  size_t got;
  if (fread_may_serve(size, n) && fread_large(buf, size, n, f, &got)) return got;
  got = REAL(fread_unlocked_)(buf, size, n, f);
  if (got && g_pf_window) pf_count(stream_fd(f), (ssize_t)(got * size));
  return got;
}

/* _FORTIFY_SOURCE variants: the buffer-size check first, as glibc does. */
static inline void fread_check(size_t buflen, size_t size, size_t n) {
  size_t total;
  if (__builtin_mul_overflow(size, n, &total) || total > buflen) __chk_fail();
}
EXPORT size_t __fread_chk(void* buf, size_t buflen, size_t size, size_t n, FILE* f) {
  fread_check(buflen, size, n);
  return fread(buf, size, n, f);
}
EXPORT size_t __fread_unlocked_chk(void* buf, size_t buflen, size_t size, size_t n, FILE* f) {
  fread_check(buflen, size, n);
  return fread_unlocked(buf, size, n, f);
}

/* fclose, freopen and pclose close the stream's descriptor inside libc: what the shim knows of it
 * goes first, as at close(), so that the engine's handles do not hold a deleted file's space until
 * evicted. */
static void forget_stream(FILE* f, struct closing* c) {
  if (!f) return;
  const int fd = stream_fd(f);
  if (fd >= 0) forget_fd(fd, c);
}
EXPORT int fclose(FILE* f) {
  struct closing c;
  c.n = 0;
  forget_stream(f, &c);
  const int r = REAL(fclose)(f);
  closing_release(&c, 1); /* the descriptor is closed whatever fclose returns */
  return r;
}
EXPORT FILE* freopen(const char* path, const char* mode, FILE* f) {
  struct closing c;
  c.n = 0;
  forget_stream(f, &c);
  FILE* r = REAL(freopen)(path, mode, f);
  closing_release(&c, 1);
  return r;
}
EXPORT FILE* freopen64(const char* path, const char* mode, FILE* f) { return freopen(path, mode, f); }
EXPORT int pclose(FILE* f) {
  struct closing c;
  c.n = 0;
  forget_stream(f, &c);
  const int r = REAL(pclose)(f);
  closing_release(&c, 1);
  return r;
}
/* fcloseall is not interposed: glibc's flushes the streams and leaves their descriptors open
 * (tests/cpp/preload_semantics.c checks that it still does). */

/* ---------------------------------------------------------------------------------------------
 * Start-up, fork and exit. */

/* The child of a fork starts with no handles and no counters: the parent's handles may be in use by
 * threads the child does not have (and a child may close every descriptor before going on), and
 * the parent reports its own counters. The engine rebuilds its own pool in the child. */
static void in_child(void) {
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  g_mu = fresh;
  g_nhandles = 0; /* the parent's handles are left open but unused */
  memset(g_handles, 0, sizeof g_handles);
  g_nlocked = g_locked_overflow = 0; /* a child inherits no record lock */
  /* A fresh table: the parent's is left to it (a fork amid its growth may have left this copy half
   * updated, and its pages are never touched here, so they cost the child nothing). */
  g_files = NULL;
  g_file_index = NULL;
  g_nfiles = g_files_cap = g_index_slots = 0;
  g_dropped = g_dropped_bytes = 0;
  g_prefetches = 0;
  g_pf_ndevs = 0; /* a fork amid an insertion may have left a half-written entry: read sysfs again */
  g_engine_loaded = g_engine > 0;
  g_stats_written = 0;
  memset(g_reserving, 0, sizeof g_reserving); /* the parent's threads in flight are not the child's */
  g_self = (pid_t)syscall(SYS_getpid);
}

/* The length of the well-formed UTF-8 sequence at s (as Python's strict decoder accepts it: no
 * overlong forms, no surrogates, nothing above U+10FFFF), 0 if there is none. */
static int utf8_len(const unsigned char* s) {
  const unsigned c = s[0];
  int n;
  unsigned lo = 0x80, hi = 0xbf; /* the range of the second byte */
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
  else if (c >= 0xf0 && c <= 0xf4) n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
  else return 0;
  if (s[1] < lo || s[1] > hi) return 0;
  for (int i = 2; i < n; ++i)
    if (s[i] < 0x80 || s[i] > 0xbf) return 0;
  return n;
}

/* The statistics file is written with write(2) through a static buffer (under g_mu), not with
 * stdio: a process may end with _exit from a signal handler or in the child of a threaded parent's
 * fork, where a lock of malloc or of stdio may be held by a thread that will never release it. */
struct out {
  int fd, err;
  size_t n;
  char b[8192];
};

static void out_flush(struct out* o) {
  for (size_t d = 0; d < o->n && !o->err;) {
    const ssize_t w = syscall(SYS_write, o->fd, o->b + d, o->n - d);
    if (w > 0) d += (size_t)w;
    else if (w < 0 && errno == EINTR) continue;
    else o->err = 1;
  }
  o->n = 0;
}

static void out_bytes(struct out* o, const void* p, size_t n) {
  const char* c = p;
  while (n) {
    if (o->n == sizeof o->b) out_flush(o);
    const size_t k = n < sizeof o->b - o->n ? n : sizeof o->b - o->n;
    memcpy(o->b + o->n, c, k);
    o->n += k, c += k, n -= k;
  }
}

static void out_str(struct out* o, const char* s) { out_bytes(o, s, strlen(s)); }

/* Numbers and short words only (glibc's vsnprintf of %d, %u, %llu, %zu, %x, %c and %s allocates
 * nothing and takes no lock). */
static __attribute__((format(printf, 2, 3))) void out_printf(struct out* o, const char* fmt, ...) {
  char t[256];
  va_list ap;
  va_start(ap, fmt);
  const int k = vsnprintf(t, sizeof t, fmt, ap);
  va_end(ap);
  if (k < 0 || (size_t)k >= sizeof t) o->err = 1; /* cut: the file is not published */
  else out_bytes(o, t, (size_t)k);
}

/* A JSON string. Bytes that are not UTF-8 (a file name may hold any) are written as Python's
 * surrogateescape gives them back: byte B as \udcBB, so os.fsencode(name) is the name's bytes. */
static void json_str(struct out* o, const char* str) {
  const unsigned char* s = (const unsigned char*)str;
  out_bytes(o, "\"", 1);
  while (*s) {
    const int n = utf8_len(s);
    if (!n) out_printf(o, "\\udc%02x", *s++);
    else if (*s == '"' || *s == '\\') out_printf(o, "\\%c", *s++);
    else if (*s < 0x20) out_printf(o, "\\u%04x", *s++);
    else out_bytes(o, s, (size_t)n), s += n;
  }
  out_bytes(o, "\"", 1);
}

static void write_side(struct out* o, const char* name, const struct side* s) {
  out_printf(o, "\"%s\": {\"calls\": %llu, \"bytes\": %llu, \"ns\": %llu, \"accelerated_calls\": %llu, ", name,
             (unsigned long long)s->calls, (unsigned long long)s->bytes, (unsigned long long)s->ns,
             (unsigned long long)s->accel_calls);
  out_printf(o, "\"accelerated_bytes\": %llu, \"fallbacks\": %llu, \"declined_calls\": %llu, \"remembered_calls\": %llu, "
             "\"size_histogram\": [",
             (unsigned long long)s->accel_bytes, (unsigned long long)s->fallbacks, (unsigned long long)s->declined,
             (unsigned long long)s->remembered);
  for (int b = 0; b < NBUCKETS; ++b) out_printf(o, "%s%llu", b ? ", " : "", (unsigned long long)s->hist[b]);
  out_str(o, "]}");
}

/* Writes <dir>/<pid>.json: the process, its command line and one entry per file. Once per process
 * (the fork's child starts again). g_mu is held. */
static void write_stats_locked(void) {
  if (g_stats_written) return;
  g_stats_written = 1;
  /* Static, not on the stack: a crash handler calling _exit runs on an alternate stack of 8 or
   * 16 KiB, which these 21 KiB overflowed. g_mu is held (and a vfork child never gets here). */
  static char path[PATH_MAX + 32], tmp[PATH_MAX + 40], cmd[4096];
  static struct out o;
  snprintf(path, sizeof path, "%s/%d.json", g_stats_dir, (int)syscall(SYS_getpid));
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  o.fd = (int)syscall(SYS_openat, AT_FDCWD, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  o.err = 0;
  o.n = 0;
  if (o.fd < 0) return;
  cmd[0] = '\0';
  int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? k_read(fd, cmd, sizeof cmd - 1) : 0;
  if (fd >= 0) syscall(SYS_close, fd);
  n = n > 0 ? n : 0;
  for (ssize_t i = 0; i + 1 < n; ++i)
    if (!cmd[i]) cmd[i] = ' ';
  cmd[n] = '\0';
  out_printf(&o, "{\"pid\": %d, \"ppid\": %d, \"command\": ", (int)syscall(SYS_getpid), (int)syscall(SYS_getppid));
  json_str(&o, cmd);
  out_printf(&o, ", \"threshold\": %zu, \"floor\": [", g_gate);
  for (int d = 0; d < 2; ++d) /* null: posix at every size on buffered descriptors */
    g_floor[d] == SIZE_MAX ? out_str(&o, d ? ", null" : "null") : out_printf(&o, d ? ", %zu" : "%zu", g_floor[d]);
  out_printf(&o, "], \"engine_loaded\": %s, \"max_files\": %u, \"dropped_calls\": %llu, \"dropped_bytes\": %llu, ",
             g_engine_loaded ? "true" : "false", g_max_files, (unsigned long long)g_dropped,
             (unsigned long long)g_dropped_bytes);
  out_printf(&o, "\"prefetch_windows\": %llu, \"size_buckets\": [",
             (unsigned long long)__atomic_load_n(&g_prefetches, __ATOMIC_RELAXED));
  for (int b = 0; b < NBUCKETS - 1; ++b) out_printf(&o, "%s%llu", b ? ", " : "", (unsigned long long)kBucketMax[b]);
  out_str(&o, "], \"files\": [");
  for (uint32_t i = 0; i < g_nfiles; ++i) {
    const struct file_rec* r = &g_files[i];
    out_str(&o, i ? ",\n  {\"path\": " : "\n  {\"path\": ");
    json_str(&o, r->path);
    out_str(&o, ", ");
    write_side(&o, "read", &r->rw[READ]);
    out_str(&o, ", ");
    write_side(&o, "write", &r->rw[WRITE]);
    out_str(&o, ", \"plans\": [");
    for (int p = 0; p < r->nplans; ++p) {
      out_str(&o, p ? ", {\"plan\": " : "{\"plan\": ");
      json_str(&o, r->plans[p].plan);
      out_str(&o, ", \"why\": ");
      json_str(&o, r->plans[p].why);
      out_printf(&o, ", \"calls\": %llu, \"bytes\": %llu}", (unsigned long long)r->plans[p].calls,
                 (unsigned long long)r->plans[p].bytes);
    }
    out_str(&o, "]}");
  }
  out_str(&o, "]}\n");
  out_flush(&o);
  if (syscall(SYS_close, o.fd) == 0 && !o.err) rename(tmp, path);
  else unlink(tmp);
}

/* At exit (atexit, registered at start-up: it runs after capture_all_plans). */
static void flush_stats(void) {
  if (!g_stats_dir[0]) return;
  t_inside = 1;
  pthread_mutex_lock(&g_mu);
  write_stats_locked();
  pthread_mutex_unlock(&g_mu);
}

/* A process that ends with _exit or _Exit runs no atexit handler: fio's job processes (forked,
 * ended with _exit), Python's os._exit (multiprocessing's forked workers). Their statistics are
 * written here, and only those: no engine call and no malloc (_exit may be called from a signal
 * handler that interrupted either), so the plans of files still open are not listed (a file's
 * plans are taken when it is closed). Not in a vfork child, which shares its parent's memory (and
 * so its statistics and its g_mu): its pid is not the one this memory belongs to. Nor in a process
 * that counted nothing (a daemon's middle fork, a child whose exec failed). g_mu is waited for up
 * to 100 ms, then given up: the handler may have interrupted a thread holding it. */
static void stats_at_exit(void) {
  if (!g_stats_dir[0] || in_borrowed_memory()) return;
  t_inside = 1;
  for (int i = 0; pthread_mutex_trylock(&g_mu); ++i) {
    if (i == 100) return;
    const struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  if (g_nfiles || g_dropped) write_stats_locked();
  pthread_mutex_unlock(&g_mu);
}

static void (*g_real_exit[2])(int); /* _exit and _Exit, resolved at start-up (not from a signal handler) */

static __attribute__((noreturn)) void exit_through(int which, int status) {
  stats_at_exit();
  if (g_real_exit[which]) g_real_exit[which](status);
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

EXPORT void _exit(int status) { exit_through(0, status); }
EXPORT void _Exit(int status) { exit_through(1, status); }

/* ACCIO_PRELOAD_FLOOR="<read>,<write>" (bytes): raises each direction's floor and gate from the
 * threshold to it. Anything malformed is ignored (the engine then decides as without it). */
static void set_floor(const char* v) {
  uint64_t f[2];
  for (int d = 0; d < 2; ++d) {
    if (!(v = accio_run_parse_u64(v, &f[d])) || *v++ != (d ? '\0' : ',')) return;
  }
  for (int d = 0; d < 2; ++d)
    if (f[d] > g_gate) g_floor[d] = g_pass[d] = f[d] < SIZE_MAX ? (size_t)f[d] : SIZE_MAX;
}

__attribute__((constructor)) static void shim_init(void) {
  g_self = (pid_t)syscall(SYS_getpid);
  pthread_atfork(NULL, NULL, in_child);
  g_quiet = accio_quiet();
  *(void**)&g_real_exit[0] = dlsym(RTLD_NEXT, "_exit");
  *(void**)&g_real_exit[1] = dlsym(RTLD_NEXT, "_Exit");
  const char* t = getenv("ACCIO_PRELOAD_THRESHOLD");
  if (t && *t) {
    int ok;
    size_t v = accio_run_parse_size(t, &ok); /* the launcher's parser */
    if (ok) {
      g_gate = g_pass[READ] = g_pass[WRITE] = g_floor[READ] = g_floor[WRITE] = v ? v : 1;
      g_gate_set = 1;
    } else {
      tell_user("accio preload: ACCIO_PRELOAD_THRESHOLD='%s' is not a size: using %zu\n", t, g_gate);
    }
  }
  const char* pf = getenv("ACCIO_PRELOAD_PREFETCH");
  if (pf && !strcmp(pf, "profile")) {
    g_pf_profile = 1;
    g_pf_window = kPfFirst; /* counts bytes; each device's window is its profile's */
  } else if (pf && *pf) {
    int ok;
    size_t v = accio_run_parse_size(pf, &ok);
    if (ok) g_pf_window = v;
    else tell_user("accio preload: ACCIO_PRELOAD_PREFETCH='%s' is not a size nor 'profile': using %zu\n", pf,
                   g_pf_window);
  }
  const char* m = getenv("ACCIO_MECHANISM");
  g_mechanism_set = m && *m;
  const char* fl = getenv("ACCIO_PRELOAD_FLOOR");
  if (fl && *fl && !g_gate_set && (!g_mechanism_set || !strcmp(m, "auto"))) set_floor(fl);
  const char* d = getenv("ACCIO_PRELOAD_STATS_DIR");
  const char* nf = getenv("ACCIO_PRELOAD_STATS_FILES");
  if (d && *d && nf && *nf) {
    const unsigned v = accio_run_parse_stats_files(nf);
    if (v) g_max_files = v;
    else tell_user("accio preload: ACCIO_PRELOAD_STATS_FILES='%s' is not a count from 1 to %u: using %u\n", nf,
                   MAX_FILES, g_max_files);
  }
  if (d && *d && strlen(d) < sizeof g_stats_dir) {
    snprintf(g_stats_dir, sizeof g_stats_dir, "%s", d);
    atexit(flush_stats);
  }
}
