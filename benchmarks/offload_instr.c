/* The work of one offload round trip, for benchmarks/offload_instr.py: runs one of the latency
 * metrics of accio-offload-bench N times after a fixed setup, so that the instruction counts of
 * two runs with different N differ by exactly the work of their extra round trips.
 *
 *   offload_instr METRIC N     METRIC: test1 test2 test3 test4 read_1b write_1b
 *
 * Under callgrind (--collect-atstart=no) only the timed part of the metric counts, as in the
 * bench: test 3 collects the results it left behind after the count stops.
 * Uses only VEO calls every offload build has had, so it links against a previous build's
 * libaccio_offload too (offload_instr.py compiles it once per build). */
#include <accio/ve_offload.h>
#include <valgrind/callgrind.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char* what) {
  fprintf(stderr, "offload_instr: %s failed: %s\n", what, accio_offload_last_error());
  exit(1);
}

int main(int argc, char** argv) {
  const char* metrics[] = {"test1", "test2", "test3", "test4", "read_1b", "write_1b"};
  int m = -1;
  for (int i = 0; argc == 3 && i < 6; ++i)
    if (!strcmp(argv[1], metrics[i])) m = i;
  char* end = NULL;
  long n = argc == 3 ? strtol(argv[2], &end, 10) : 0;
  if (m < 0 || !end || *end || n < 1 || n > 10000000) {
    fprintf(stderr, "usage: offload_instr test1|test2|test3|test4|read_1b|write_1b N (1..10000000)\n");
    return 2;
  }
  struct veo_proc_handle* p = veo_proc_create(-1);
  if (!p) die("veo_proc_create");
  struct veo_thr_ctxt* c = veo_context_open(p);
  if (!c) die("veo_context_open");
  uint64_t fn = veo_get_sym(p, 0, "accio_offload_echo");
  if (!fn) die("veo_get_sym");
  struct veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, 1);
  uint64_t* ids = malloc(sizeof *ids * (size_t)n);
  char host[64] = {1};
  uint64_t dev = 0, r;
  if (!ids || veo_alloc_mem(p, &dev, 4096) != 0 || veo_write_mem(p, dev, host, sizeof host) != 0)
    die("setup");
  for (int i = 0; i < 100; ++i)  /* warm up: the same calls before the measured ones, every N */
    if (veo_call_wait_result(c, veo_call_async(c, fn, a), &r) != VEO_COMMAND_OK || veo_call_sync(p, fn, a, &r) != 0 ||
        veo_read_mem(p, host, dev, 1) != 0 || veo_write_mem(p, dev, host, 1) != 0)
      die("warm-up");
  CALLGRIND_TOGGLE_COLLECT;
  for (long i = 0; i < n; ++i) {
    switch (m) {
      case 0:  /* test 1: n submissions, then n waits (below) */
      case 2:  /* test 3: n submissions, then a wait for the last */
        ids[i] = veo_call_async(c, fn, a);
        break;
      case 1:
        if (veo_call_wait_result(c, veo_call_async(c, fn, a), &r) != VEO_COMMAND_OK) die("test 2");
        break;
      case 3:
        if (veo_call_sync(p, fn, a, &r) != 0) die("test 4");
        break;
      case 4:
        if (veo_read_mem(p, host, dev, 1) != 0) die("read_1b");
        break;
      case 5:
        if (veo_write_mem(p, dev, host, 1) != 0) die("write_1b");
        break;
    }
  }
  if (m == 0)
    for (long i = 0; i < n; ++i)
      if (veo_call_wait_result(c, ids[i], &r) != VEO_COMMAND_OK) die("test 1");
  if (m == 2 && veo_call_wait_result(c, ids[n - 1], &r) != VEO_COMMAND_OK) die("test 3");
  CALLGRIND_TOGGLE_COLLECT;
  if (m == 2)
    for (long i = 0; i + 1 < n; ++i) veo_call_wait_result(c, ids[i], &r);  /* as the bench: untimed */
  veo_free_mem(p, dev);
  veo_args_free(a);
  free(ids);
  veo_proc_destroy(p);
  return 0;
}
