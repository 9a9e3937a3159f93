/* What the preload shim's decision costs a call it passes through (issue 20: <= 50 ns). A read(2) is
 * a system call of 100 ns or more whose own spread hides a few nanoseconds, so the real function
 * behind the shim is replaced by a stub that returns at once: this program is run with
 * LD_PRELOAD="libaccio_preload.so STUB" (it re-executes itself so), the shim's dlsym(RTLD_NEXT,
 * "read") then finds the stub, and a call through the shim costs the decision plus the stub, a call
 * to the stub itself only the stub. Both are timed in interleaved rounds (at least 7 each); the
 * median ns/call of each and of their difference is printed as JSON, with libc's own read(2) of
 * 64 bytes from /dev/zero for scale.
 *
 * Two kinds of call: by default 64-byte reads of /dev/zero (below the shim's gate: one compare);
 * with FILE [SIZE], reads of SIZE bytes (default 1 MiB) of that regular file, which reach the
 * shim's per-descriptor decision wherever the planner's crossing point for the file is at or below
 * SIZE (a tuning profile whose cold reads run another plan from 64 KiB: ACCIO_PROFILE=PATH) and are
 * passed back to libc where the planner runs posix (a hot file). The stub does not move the file
 * offset, so every call is at offset 0 of a hot range. A size the planner serves (the built-in
 * model's 4 MiB on 2 CPUs) goes to the engine, which reads for real: that is not a passed call, and
 * its time is not a decision's. The first call through the shim (loading the
 * engine, opening the file, the first decision) is timed alone: "first_call_us".
 *
 * Built with the tests (build/DIR/preload_decision and preload_decision_stub.so):
 *   build/main/preload_decision build/main/libaccio_preload.so build/main/preload_decision_stub.so [ROUNDS] [CALLS] [FILE [SIZE]]
 *   ACCIO_PROFILE=results/tune/profile_ext4_vda.json build/main/preload_decision ... 15 200000 /tmp/hot.bin 1048576
 * The same source with -DACCIO_DECISION_STUB is the stub. Not a test: it asserts nothing about time. */
#define _GNU_SOURCE
#include <sys/types.h>

#ifdef ACCIO_DECISION_STUB
/* The stub: libc's read as the shim sees it, minus the system call. */
__attribute__((visibility("default"))) ssize_t read(int fd, void* buf, size_t n) {
  (void)fd;
  (void)buf;
  __asm__ volatile("" ::: "memory");
  return (ssize_t)n;
}
#else
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef ssize_t (*read_fn)(int, void*, size_t);

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static double per_call(read_fn f, int fd, char* buf, size_t n, long calls) {
  const double t0 = now_ns();
  for (long i = 0; i < calls; ++i)
    if (f(fd, buf, n) < 0) return -1;
  return (now_ns() - t0) / (double)calls;
}

/* Text inside a JSON string: a character JSON would need escaped (a quote, a backslash, a control
 * character) is written as '_'. */
static void put_text(const char* s) {
  for (; *s; ++s) putchar(*s == '"' || *s == '\\' || (unsigned char)*s < 0x20 ? '_' : *s);
}

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}
static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s SHIM STUB [ROUNDS] [CALLS] [FILE [SIZE]]\n", argv[0]);
    return 2;
  }
  const int rounds = argc > 3 ? atoi(argv[3]) : 15;
  const long calls = argc > 4 ? atol(argv[4]) : 2000000;
  const char* file = argc > 5 ? argv[5] : NULL;
  const long size = argc > 6 ? atol(argv[6]) : file ? 1L << 20 : 64;
  if (rounds < 7 || calls < 1 || size < 1) {
    fprintf(stderr, "%s: at least 7 rounds, 1 call and 1 byte\n", argv[0]);
    return 2;
  }
  const char* want = getenv("LD_PRELOAD");
  char preload[8192];
  snprintf(preload, sizeof preload, "%s %s", argv[1], argv[2]);
  if (!want || strcmp(want, preload) != 0) { /* run again with the shim, then the stub, preloaded */
    setenv("LD_PRELOAD", preload, 1);
    unsetenv("ACCIO_PRELOAD_STATS_DIR"); /* the fast path is the one without statistics */
    execv("/proc/self/exe", argv);
    perror("execv /proc/self/exe");
    return 1;
  }
  read_fn shim = (read_fn)read; /* the first definition: the shim's */
  void* stub_lib = dlopen(argv[2], RTLD_NOW | RTLD_NOLOAD);
  void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
  read_fn stub, libc_read;
  *(void**)&stub = stub_lib ? dlsym(stub_lib, "read") : NULL;
  *(void**)&libc_read = libc ? dlsym(libc, "read") : NULL;
  if (!stub || !libc_read || stub == shim) {
    fprintf(stderr, "preload_decision: the shim and the stub are not both preloaded (%s)\n", dlerror());
    return 1;
  }
  const int zero = open("/dev/zero", O_RDONLY);
  const int fd = file ? open(file, O_RDONLY) : zero;
  char* buf = malloc((size_t)size > 64 ? (size_t)size : 64);
  if (zero < 0 || fd < 0 || !buf) {
    perror(fd < 0 && file ? file : "/dev/zero");
    return 1;
  }
  double s_shim[1000], s_stub[1000], s_diff[1000], k_libc[1000];
  const int n = rounds < 1000 ? rounds : 1000;
  const double first_us = per_call(shim, fd, buf, (size_t)size, 1) / 1e3; /* engine load, open, decision */
  per_call(shim, fd, buf, (size_t)size, calls / 10 + 1); /* warm: resolution of the real read, caches */
  for (int r = 0; r < n; ++r) { /* interleaved; the order within a round alternates */
    if (r % 2) {
      s_stub[r] = per_call(stub, fd, buf, (size_t)size, calls);
      s_shim[r] = per_call(shim, fd, buf, (size_t)size, calls);
    } else {
      s_shim[r] = per_call(shim, fd, buf, (size_t)size, calls);
      s_stub[r] = per_call(stub, fd, buf, (size_t)size, calls);
    }
    s_diff[r] = s_shim[r] - s_stub[r];
  }
  /* For scale: a real read(2) of 64 bytes from /dev/zero, libc's own. */
  const long kcalls = calls / 20 + 1;
  for (int r = 0; r < n; ++r) k_libc[r] = per_call(libc_read, zero, buf, 64, kcalls);
  const char* profile = getenv("ACCIO_PROFILE");
  printf("{\"schema\": \"accio.preload-decision/1\", \"command\": \"");
  for (int i = 0; i < argc; ++i) {
    if (i) putchar(' ');
    put_text(argv[i]);
  }
  printf("\",\n \"rounds\": %d, \"calls_per_round\": %ld,\n \"request\": {\"file\": \"", n, calls);
  put_text(file ? file : "/dev/zero");
  printf("\", \"size\": %ld}, \"profile\": \"", size);
  put_text(profile ? profile : "");
  printf("\", \"first_call_us\": %.1f,\n \"ns_per_call\": {\"through_shim\": %.3f, \"stub_alone\": %.3f, "
         "\"decision\": %.3f, \"libc_read_64B_dev_zero\": %.1f}}\n",
         first_us, median(s_shim, n), median(s_stub, n), median(s_diff, n), median(k_libc, n));
  if (fd != zero) close(fd);
  close(zero);
  free(buf);
  return 0;
}
#endif
