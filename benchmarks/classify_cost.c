/* What GPU-buffer classification costs small host requests (issue 4): 4 KiB cached preads through
 * the engine (mechanism posix) against plain pread(2), and the exact look (accio_mem_kind: the
 * loader-lock look the engine took on every request before it was throttled), from 1 to T threads.
 * Prints one JSON object; benchmarks/classify_cost.py runs it against one or more builds of libaccio.
 *
 *   cc -O2 -Iinclude benchmarks/classify_cost.c -Lbuild/DIR -laccio -lpthread -o classify_cost
 *   ./classify_cost FILE THREADS REQUESTS */
#define _GNU_SOURCE
#include <accio/accio.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { kSize = 4096 };
static long g_requests;
static int g_fd;
static accio_file* g_file;
static char g_probe[kSize];

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static void* plain(void* a) {
  char b[kSize];
  (void)a;
  for (long i = 0; i < g_requests; ++i)
    if (pread(g_fd, b, kSize, 0) != kSize) abort();
  return NULL;
}
static void* engine(void* a) {
  char b[kSize];
  (void)a;
  for (long i = 0; i < g_requests; ++i)
    if (accio_pread(g_file, b, kSize, 0) != kSize) abort();
  return NULL;
}
static void* look(void* a) {
  (void)a;
  for (long i = 0; i < g_requests; ++i) accio_mem_kind(g_probe, NULL);
  return NULL;
}
/* Nanoseconds per call per thread with `threads` threads running fn at once. */
static double timed(int threads, void* (*fn)(void*)) {
  pthread_t t[64];
  const double t0 = now();
  for (int i = 0; i < threads; ++i) pthread_create(&t[i], NULL, fn, NULL);
  for (int i = 0; i < threads; ++i) pthread_join(t[i], NULL);
  return (now() - t0) / (double)g_requests * 1e9;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s FILE THREADS REQUESTS\n", argv[0]);
    return 2;
  }
  const int threads = atoi(argv[2]);
  g_requests = atol(argv[3]);
  if (threads < 1 || threads > 64 || g_requests < 1) return 2;
  g_fd = open(argv[1], O_RDONLY);
  accio_settings* s = accio_settings_new();
  accio_settings_set(s, "mechanism", "posix");
  accio_settings_set(s, "profile", "off");
  if (g_fd < 0 || accio_open(&g_file, argv[1], "r", s) != 0) {
    fprintf(stderr, "cannot open %s: %s\n", argv[1], accio_last_error());
    return 1;
  }
  printf("{\"threads\": %d, \"plain_ns\": %.1f, \"engine_ns\": %.1f, \"exact_look_ns\": %.1f}\n", threads,
         timed(threads, plain), timed(threads, engine), timed(threads, look));
  accio_close(g_file);
  accio_settings_free(s);
  close(g_fd);
  return 0;
}
