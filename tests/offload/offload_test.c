/* The VEO API from C, as VEO programs use it: every test runs against a real worker process.
 *
 *   offload_test KERNELS.so KERNELS2.so STATIC_WORKER [--transport shm|socket] [--spin US|forever] [test...]
 *
 * Written anew for what AVEO's test suite covers: argument types and counts, stack arguments,
 * procs/contexts/threads, exceptions and crashes, OpenMP kernels, memory of all sizes, unload and
 * reload, and the accio additions (host death, timeouts, idle CPU, socket transport, the options as
 * rows of libaccio's settings table, errors through libaccio's log channel). */
#define _GNU_SOURCE
#include <accio/accio.h>
#include <accio/ve_offload.h>
#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *g_lib, *g_lib2, *g_static, *g_lib3;
static accio_offload_options g_opts;
static int g_failures;

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "  FAILED %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #cond,          \
              accio_offload_last_error());                                                       \
      g_failures++;                                                                              \
      return;                                                                                    \
    }                                                                                            \
  } while (0)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static struct veo_proc_handle* new_proc(void) { return accio_offload_proc_create(&g_opts); }

static uint64_t sym(struct veo_proc_handle* p, uint64_t lib, const char* name) {
  uint64_t a = veo_get_sym(p, lib, name);
  if (!a) fprintf(stderr, "  no symbol %s: %s\n", name, accio_offload_last_error());
  return a;
}

/* 1 if the process is gone (or a zombie nobody reaped yet). */
static int gone(int pid) {
  char path[64], st = 0;
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (!f) return 1;
  int r = fscanf(f, "%*d %*s %c", &st);
  fclose(f);
  return r == 1 && (st == 'Z' || st == 'X');
}

static int wait_gone(int pid, double seconds) {
  double t0 = now_s();
  while (now_s() - t0 < seconds) {
    if (gone(pid)) return 1;
    usleep(5000);
  }
  return 0;
}

/* ---------------------------------------------------------------------------------------- */

static void test_version(void) {
  CHECK(veo_api_version() == VEO_API_VERSION);
  CHECK(strstr(veo_version_string(), "accio") != NULL);
}

static void test_proc_lifecycle(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  int pid = accio_offload_worker_pid(p);
  CHECK(pid > 0 && !gone(pid));
  CHECK(veo_proc_identifier(p) >= 0);
  uint64_t echo = veo_get_sym(p, 0, "accio_offload_echo"); /* in the worker program itself */
  CHECK(echo);
  struct veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, 42);
  uint64_t r = 0;
  CHECK(veo_call_sync(p, echo, a, &r) == 0 && r == 42);
  veo_args_free(a);
  CHECK(veo_proc_destroy(p) == 0);
  CHECK(wait_gone(pid, 2.0));
}

static void test_bad_worker_and_node(void) {
  accio_offload_options o = g_opts;
  o.worker = "/nonexistent/accio-offload-worker";
  CHECK(accio_offload_proc_create(&o) == NULL);
  CHECK(strstr(accio_offload_last_error(), "/nonexistent/accio-offload-worker") != NULL);
  o = g_opts;
  /* a venode without a NUMA node is a logical number: the worker runs unbound */
  o.venode = 9999;
  struct veo_proc_handle* q = accio_offload_proc_create(&o);
  CHECK(q);
  void* hm = NULL;
  CHECK(veo_alloc_hmem(q, &hm, 64) == 0 && veo_get_venum_from_hmem(hm) == 9999);
  CHECK(veo_free_hmem(hm) == 0);
  veo_proc_destroy(q);
  o.venode = -2;
  CHECK(accio_offload_proc_create(&o) == NULL);
  CHECK(strstr(accio_offload_last_error(), "venode -2") != NULL);
  if (access("/sys/devices/system/node/node0", F_OK) == 0) {
    o.venode = 0;
    struct veo_proc_handle* p = accio_offload_proc_create(&o);
    CHECK(p);
    veo_proc_destroy(p);
  }
}

static void test_libraries(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  CHECK(veo_load_library(p, "/nonexistent/libk.so") == 0);
  CHECK(strstr(accio_offload_last_error(), "libk.so") != NULL);
  uint64_t lib = veo_load_library(p, g_lib);
  CHECK(lib);
  CHECK(veo_get_sym(p, lib, "no_such_kernel") == 0);
  CHECK(strstr(accio_offload_last_error(), "no_such_kernel") != NULL);
  uint64_t add = sym(p, lib, "k_add");
  CHECK(add && veo_get_sym(p, lib, "k_add") == add); /* cached */

  uint64_t lib2 = veo_load_library(p, g_lib2);
  CHECK(lib2 && lib2 != lib);
  uint64_t mul = sym(p, lib2, "k_add");
  CHECK(mul && mul != add);
  struct veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, 6);
  veo_args_set_u64(a, 1, 7);
  uint64_t r = 0;
  CHECK(veo_call_sync(p, add, a, &r) == 0 && r == 13);
  CHECK(veo_call_sync(p, mul, a, &r) == 0 && r == 42);
  /* unload and reload: the library's static state starts over */
  uint64_t cnt = sym(p, lib, "k_count");
  CHECK(veo_call_sync(p, cnt, NULL, &r) == 0 && r == 1);
  CHECK(veo_call_sync(p, cnt, NULL, &r) == 0 && r == 2);
  CHECK(veo_unload_library(p, lib) == 0);
  lib = veo_load_library(p, g_lib);
  CHECK(lib);
  cnt = sym(p, lib, "k_count");
  CHECK(veo_call_sync(p, cnt, NULL, &r) == 0 && r == 1);
  CHECK(veo_unload_library(p, 0) == -1);
  /* by name through a context */
  struct veo_thr_ctxt* c = veo_context_open(p);
  CHECK(c);
  uint64_t id = veo_call_async_by_name(c, lib2, "k_add", a);
  CHECK(id != VEO_REQUEST_ID_INVALID);
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == 42);
  CHECK(veo_call_async_by_name(c, lib2, "nope", a) == VEO_REQUEST_ID_INVALID);
  veo_args_free(a);
  veo_proc_destroy(p);

  /* Libraries are loaded RTLD_GLOBAL, as AVEO loads them: one that uses a function of a library
   * loaded before it, without being linked to it, loads; handle 0 finds every loaded library's
   * functions. Alone, it cannot load (the helper is nowhere). */
  p = new_proc();
  CHECK(p);
  CHECK(veo_load_library(p, g_lib3) == 0 && strstr(accio_offload_last_error(), "k_shared_helper") != NULL);
  CHECK(veo_load_library(p, g_lib) != 0);
  uint64_t lib3 = veo_load_library(p, g_lib3);
  CHECK(lib3 != 0);
  a = veo_args_alloc();
  veo_args_set_u64(a, 0, 0);
  CHECK(veo_call_sync(p, sym(p, lib3, "k_calls_helper"), a, &r) == 0 && r == 42);
  veo_args_free(a);
  CHECK(veo_get_sym(p, 0, "k_shared_helper") != 0 && veo_get_sym(p, 0, "k_calls_helper") != 0);
  /* an unload forgets handle 0's cached symbols too, and asks again: what handle 0 gives is callable
   * (glibc keeps a library found through RTLD_DEFAULT loaded, as a dependency of the lookup) */
  CHECK(veo_unload_library(p, lib3) == 0);
  lib3 = veo_load_library(p, g_lib3);
  uint64_t calls = veo_get_sym(p, 0, "k_calls_helper");
  CHECK(calls == veo_get_sym(p, lib3, "k_calls_helper"));
  a = veo_args_alloc();
  veo_args_set_u64(a, 0, 1);
  CHECK(calls != 0 && veo_call_sync(p, calls, a, &r) == 0 && r == 43);
  veo_args_free(a);
  veo_proc_destroy(p);
}

static void test_static_worker(void) {
  accio_offload_options o = g_opts;
  o.worker = g_static;
  struct veo_proc_handle* p = accio_offload_proc_create(&o);
  CHECK(p);
  uint64_t k = veo_get_sym(p, 0, "static_kernel");
  CHECK(k);
  struct veo_args* a = veo_args_alloc();
  veo_args_set_i32(a, 0, -5);
  uint64_t r = 0;
  CHECK(veo_call_sync(p, k, a, &r) == 0 && (int64_t)r == -50);
  /* the kernel-side helpers resolve in a static worker too */
  uint64_t prev = veo_get_sym(p, 0, "static_prev"), strip = veo_get_sym(p, 0, "static_hmem_addr");
  CHECK(prev && strip);
  CHECK(veo_call_sync(p, k, a, &r) == 0);
  veo_args_clear(a);
  veo_args_set_i32(a, 0, 0);
  CHECK(veo_call_sync(p, prev, a, &r) == 0 && (int64_t)r == -50);
  void* hm = NULL;
  CHECK(veo_alloc_hmem(p, &hm, 64) == 0);
  veo_args_clear(a);
  veo_args_set_hmem(a, 0, hm);
  CHECK(veo_call_sync(p, strip, a, &r) == 0 && r == (uint64_t)veo_get_hmem_addr(hm) && r != (uint64_t)hm);
  CHECK(veo_free_hmem(hm) == 0);
  veo_args_free(a);
  veo_proc_destroy(p);
}

static void test_contexts(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  CHECK(veo_num_contexts(p) == 0);
  CHECK(veo_get_context(p, 0) == NULL);
  struct veo_thr_ctxt* c0 = veo_context_open(p);
  struct veo_thr_ctxt* c1 = veo_context_open(p);
  CHECK(c0 && c1 && c0 != c1);
  CHECK(veo_num_contexts(p) == 2);
  CHECK(veo_get_context(p, 0) == c0 && veo_get_context(p, 1) == c1);
  CHECK(veo_get_context_state(c1) == VEO_STATE_RUNNING);
  CHECK(veo_context_close(c0) == 0); /* the main context stays until the proc goes */
  CHECK(veo_num_contexts(p) == 2);
  CHECK(veo_context_close(c1) == 0);
  CHECK(veo_num_contexts(p) == 1);
  struct veo_thr_ctxt_attr* at = veo_alloc_thr_ctxt_attr();
  size_t ss = 0;
  CHECK(veo_set_thr_ctxt_stacksize(at, 64u << 20) == 0 && veo_get_thr_ctxt_stacksize(at, &ss) == 0 && ss == 64u << 20);
  struct veo_thr_ctxt* big = veo_context_open_with_attr(p, at);
  veo_free_thr_ctxt_attr(at);
  CHECK(big);
  uint64_t lib = veo_load_library(p, g_lib);
  uint64_t add = sym(p, lib, "k_add");
  struct veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, 1);
  veo_args_set_u64(a, 1, 2);
  uint64_t r = 0, id = veo_call_async(big, add, a);
  CHECK(veo_call_wait_result(big, id, &r) == VEO_COMMAND_OK && r == 3);
  /* many contexts */
  struct veo_thr_ctxt* cs[16];
  for (int i = 0; i < 16; ++i) CHECK((cs[i] = veo_context_open(p)) != NULL);
  uint64_t ids[16];
  for (int i = 0; i < 16; ++i) {
    veo_args_set_u64(a, 0, (uint64_t)i);
    ids[i] = veo_call_async(cs[i], add, a);
  }
  for (int i = 0; i < 16; ++i) CHECK(veo_call_wait_result(cs[i], ids[i], &r) == VEO_COMMAND_OK && r == (uint64_t)i + 2);
  for (int i = 0; i < 16; ++i) CHECK(veo_context_close(cs[i]) == 0);
  veo_args_free(a);
  veo_proc_destroy(p);
}

/* The worker keeps the last call's prepared signature: calls that change the argument types, their
 * number or the result type in between (same count, other types: k_ddiv then k_fmul; same types,
 * other result: k_ddiv then k_dmul_u64) must each get their own, and repeated ones the right values. */
static void check_signature_changes(struct veo_proc_handle* p, uint64_t lib, struct veo_thr_ctxt* c) {
  struct veo_args* add = veo_args_alloc();
  struct veo_args* ddiv = veo_args_alloc();
  struct veo_args* fmul = veo_args_alloc();
  veo_args_set_double(ddiv, 0, 1.0);
  veo_args_set_double(ddiv, 1, 8.0);
  accio_offload_args_set_ret(ddiv, ACCIO_OFFLOAD_RET_DOUBLE);
  veo_args_set_float(fmul, 0, 1.5f);
  veo_args_set_float(fmul, 1, -3.0f);
  accio_offload_args_set_ret(fmul, ACCIO_OFFLOAD_RET_FLOAT);
  uint64_t f_add = sym(p, lib, "k_add"), f_ddiv = sym(p, lib, "k_ddiv"), f_fmul = sym(p, lib, "k_fmul");
  uint64_t f_dmul = sym(p, lib, "k_dmul_u64");
  for (int i = 0; i < 3; ++i) {
    uint64_t r = 0;
    double d = 0;
    float f = 0;
    for (uint64_t k = 0; k < 2; ++k) { /* the same signature twice: other values */
      veo_args_set_u64(add, 0, k + (uint64_t)i);
      veo_args_set_u64(add, 1, 100);
      CHECK(veo_call_wait_result(c, veo_call_async(c, f_add, add), &r) == VEO_COMMAND_OK && r == 100 + k + (uint64_t)i);
    }
    CHECK(veo_call_wait_result(c, veo_call_async(c, f_ddiv, ddiv), &r) == VEO_COMMAND_OK);
    memcpy(&d, &r, sizeof d);
    CHECK(d == 0.125);
    accio_offload_args_set_ret(ddiv, ACCIO_OFFLOAD_RET_U64); /* right after: the same argument types, a u64 result */
    CHECK(veo_call_wait_result(c, veo_call_async(c, f_dmul, ddiv), &r) == VEO_COMMAND_OK && r == 8);
    accio_offload_args_set_ret(ddiv, ACCIO_OFFLOAD_RET_DOUBLE);
    CHECK(veo_call_wait_result(c, veo_call_async(c, f_fmul, fmul), &r) == VEO_COMMAND_OK);
    memcpy(&f, &r, sizeof f);
    CHECK(f == -4.5f);
    CHECK(veo_call_wait_result(c, veo_call_async(c, sym(p, lib, "k_nop"), NULL), &r) == VEO_COMMAND_OK && r == 0);
  }
  veo_args_free(add);
  veo_args_free(ddiv);
  veo_args_free(fmul);
}

static void test_arg_types(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib);
  struct veo_thr_ctxt* c = veo_context_open(p);
  struct veo_args* a = veo_args_alloc();
  CHECK(veo_args_set_i64(a, 0, -1234567890123LL) == 0);
  CHECK(veo_args_set_u64(a, 1, 9876543210ULL) == 0);
  CHECK(veo_args_set_i32(a, 2, -100000) == 0);
  CHECK(veo_args_set_u32(a, 3, 4000000000u) == 0);
  CHECK(veo_args_set_i16(a, 4, -300) == 0);
  CHECK(veo_args_set_u16(a, 5, 60000) == 0);
  CHECK(veo_args_set_i8(a, 6, -100) == 0);
  CHECK(veo_args_set_u8(a, 7, 200) == 0);
  CHECK(veo_args_set_double(a, 8, 3.25) == 0);
  CHECK(veo_args_set_float(a, 9, 1.5f) == 0);
  double s = -1234567890123.0 + 9876543210.0 - 100000 + 4000000000.0 - 300 + 60000 - 100 + 200 + 3250.0 + 150.0;
  uint64_t r = 0, id = veo_call_async(c, sym(p, lib, "k_types"), a);
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK);
  CHECK((int64_t)r == (int64_t)s);
  /* 32 arguments (more than fit in a slot) */
  veo_args_clear(a);
  uint64_t expect = 0;
  for (int i = 0; i < 32; ++i) {
    veo_args_set_u64(a, i, (uint64_t)(i * 1000 + 7));
    expect += (uint64_t)(i + 1) * (uint64_t)(i * 1000 + 7);
  }
  id = veo_call_async(c, sym(p, lib, "k_many32"), a);
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == expect);
  /* doubles beyond the registers, mixed with narrow integers */
  veo_args_clear(a);
  double d[14] = {1.5, 2, 3.25, -4, 0.5f, 6, 7.5, 8.5, 9.5, 10.5, 11.5, 12.5, 13.5, -14};
  veo_args_set_double(a, 0, d[0]);
  veo_args_set_i32(a, 1, 2);
  veo_args_set_double(a, 2, d[2]);
  veo_args_set_i8(a, 3, -4);
  veo_args_set_float(a, 4, 0.5f);
  veo_args_set_u64(a, 5, 6);
  for (int i = 6; i < 13; ++i) veo_args_set_double(a, i, d[i]);
  veo_args_set_i16(a, 13, -14);
  double sum = 0;
  for (int i = 0; i < 14; ++i) sum += d[i];
  id = veo_call_async(c, sym(p, lib, "k_mixed"), a);
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == (uint64_t)(sum * 10.0));
  /* 256 arguments are allowed, 257 are not; a gap is an error, not garbage */
  veo_args_clear(a);
  CHECK(veo_args_set_u64(a, 255, 1) == 0);
  CHECK(veo_args_set_u64(a, 256, 1) == -1);
  CHECK(veo_args_set_u64(a, -1, 1) == -1);
  CHECK(veo_call_async(c, sym(p, lib, "k_add"), a) == VEO_REQUEST_ID_INVALID);
  CHECK(strstr(accio_offload_last_error(), "not set") != NULL);
  for (int i = 0; i < 256; ++i) veo_args_set_u64(a, i, 1);
  id = veo_call_async(c, sym(p, lib, "k_add"), a); /* extra arguments are ignored by the callee */
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == 2);
  /* float and double results (accio extension) */
  veo_args_clear(a);
  veo_args_set_double(a, 0, 1.0);
  veo_args_set_double(a, 1, 8.0);
  CHECK(accio_offload_args_set_ret(a, ACCIO_OFFLOAD_RET_DOUBLE) == 0);
  id = veo_call_async(c, sym(p, lib, "k_ddiv"), a);
  double dres = 0;
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK);
  memcpy(&dres, &r, sizeof dres);
  CHECK(dres == 0.125);
  veo_args_clear(a);
  veo_args_set_float(a, 0, 1.5f);
  veo_args_set_float(a, 1, -3.0f);
  CHECK(accio_offload_args_set_ret(a, ACCIO_OFFLOAD_RET_FLOAT) == 0);
  id = veo_call_async(c, sym(p, lib, "k_fmul"), a);
  float fres = 0;
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK);
  memcpy(&fres, &r, sizeof fres);
  CHECK(fres == -4.5f);
  CHECK(accio_offload_args_set_ret(a, 9) == -1);
  accio_offload_args_set_ret(a, ACCIO_OFFLOAD_RET_U64);
  /* no arguments at all, and NULL args */
  id = veo_call_async(c, sym(p, lib, "k_nop"), NULL);
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == 0);
  CHECK(veo_call_async(c, 0, a) == VEO_REQUEST_ID_INVALID);
  check_signature_changes(p, lib, c);
  veo_args_free(a);
  veo_proc_destroy(p);
}

static void test_stack_args(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib);
  struct veo_thr_ctxt* c = veo_context_open(p);
  struct veo_args* a = veo_args_alloc();
  size_t sizes[] = {1, 7, 100, 4096, 65537, 1u << 20};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; ++k) {
    size_t n = sizes[k];
    unsigned char* in = malloc(n);
    unsigned char* out = malloc(n);
    uint64_t expect = 0;
    for (size_t i = 0; i < n; ++i) expect += (in[i] = (unsigned char)(i * 13 + k));
    uint64_t r = 0;
    veo_args_clear(a);
    veo_args_set_stack(a, VEO_INTENT_IN, 0, (char*)in, n);
    veo_args_set_u64(a, 1, n);
    uint64_t id = veo_call_async(c, sym(p, lib, "k_sum_in"), a);
    CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == expect);
    memset(out, 0xee, n);
    veo_args_clear(a);
    veo_args_set_stack(a, VEO_INTENT_OUT, 0, (char*)out, n);
    veo_args_set_u64(a, 1, n);
    veo_args_set_u64(a, 2, 5);
    id = veo_call_async(c, sym(p, lib, "k_fill_out"), a);
    CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == n);
    for (size_t i = 0; i < n; ++i) CHECK(out[i] == (unsigned char)(5 + i));
    memcpy(out, in, n);
    veo_args_clear(a);
    veo_args_set_stack(a, VEO_INTENT_INOUT, 0, (char*)out, n);
    veo_args_set_u64(a, 1, n);
    id = veo_call_sync(p, sym(p, lib, "k_inc_inout"), a, &r) == 0 ? 1 : 0;
    CHECK(id == 1 && r == n);
    for (size_t i = 0; i < n; ++i) CHECK(out[i] == (unsigned char)(in[i] + 1));
    free(in);
    free(out);
  }
  /* two stack buffers in one call */
  char src[300], dst[300];
  for (int i = 0; i < 300; ++i) src[i] = (char)(i * 3);
  memset(dst, 0, sizeof dst);
  veo_args_clear(a);
  veo_args_set_stack(a, VEO_INTENT_IN, 0, src, sizeof src);
  veo_args_set_stack(a, VEO_INTENT_OUT, 1, dst, sizeof dst);
  veo_args_set_u64(a, 2, sizeof src);
  uint64_t r = 0, id = veo_call_async(c, sym(p, lib, "k_copy"), a);
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && memcmp(src, dst, sizeof src) == 0);
  CHECK(veo_args_set_stack(a, (enum veo_args_intent)7, 0, src, 1) == -1);
  /* larger than the arena: staged in a worker allocation of the call's own (test_big_stack) */
  veo_args_free(a);
  veo_proc_destroy(p);
}

/* Stack arguments larger than the arena (16 MiB by default) up to AVEO's limit of 63 MiB in all
 * (its 64 MiB VE stack), in every direction; beyond it, a clear refusal that names the limit. */
static void big_stack_round(struct veo_proc_handle* p, struct veo_thr_ctxt* c, uint64_t lib, size_t n) {
  unsigned char* buf = malloc(n);
  unsigned char* in = malloc(n);
  CHECK(buf && in);
  uint64_t expect = 0, r = 0;
  for (size_t i = 0; i < n; ++i) expect += (in[i] = (unsigned char)(i * 7 + i / 4099));
  struct veo_args* a = veo_args_alloc();
  /* IN, asynchronous; the buffer is copied at submission: changing it afterwards changes nothing */
  memcpy(buf, in, n);
  veo_args_set_stack(a, VEO_INTENT_IN, 0, (char*)buf, n);
  veo_args_set_u64(a, 1, n);
  uint64_t id = veo_call_async(c, sym(p, lib, "k_sum_in"), a);
  memset(buf, 0, n);
  CHECK(id != VEO_REQUEST_ID_INVALID);
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == expect);
  /* the kernel-side previous result is the call's, not one of its staging pieces' */
  veo_args_clear(a);
  veo_args_set_i32(a, 0, 0);
  id = veo_call_async(c, sym(p, lib, "k_prev"), a);
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == expect);
  /* OUT */
  memset(buf, 0xee, n);
  veo_args_clear(a);
  veo_args_set_stack(a, VEO_INTENT_OUT, 0, (char*)buf, n);
  veo_args_set_u64(a, 1, n);
  veo_args_set_u64(a, 2, 9);
  id = veo_call_async(c, sym(p, lib, "k_fill_out"), a);
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == n);
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += buf[i] != (unsigned char)(9 + i);
  CHECK(bad == 0);
  /* INOUT, synchronous (the main context) */
  memcpy(buf, in, n);
  veo_args_clear(a);
  veo_args_set_stack(a, VEO_INTENT_INOUT, 0, (char*)buf, n);
  veo_args_set_u64(a, 1, n);
  CHECK(veo_call_sync(p, sym(p, lib, "k_inc_inout"), a, &r) == 0 && r == n);
  for (size_t i = 0; i < n; ++i) bad += buf[i] != (unsigned char)(in[i] + 1);
  CHECK(bad == 0);
  veo_args_free(a);
  free(in);
  free(buf);
}

static void test_big_stack(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib);
  struct veo_thr_ctxt* c = veo_context_open(p);
  struct veo_thr_ctxt* c2 = veo_context_open(p);
  CHECK(lib && c && c2);
  const size_t arena = g_opts.arena_bytes;
  /* just under the arena after a call that left the arena's position in its middle: the queue
   * starts its arena over when empty (it waited forever for room before) */
  size_t sizes[] = {arena * 5 / 8, arena - 4096, arena + 1, (size_t)17 << 20, ((size_t)62 << 20) + 12345};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; ++k) {
    int before = g_failures;
    big_stack_round(p, c2, lib, sizes[k]);
    if (g_failures != before) {
      fprintf(stderr, "  (stack argument of %zu bytes)\n", sizes[k]);
      break;
    }
  }
  /* two stack arguments, IN and OUT, 20 MiB each */
  size_t n = (size_t)20 << 20;
  char* src = malloc(n);
  char* dst = calloc(1, n);
  for (size_t i = 0; i < n; ++i) src[i] = (char)(i * 3 + (i >> 12));
  struct veo_args* a = veo_args_alloc();
  veo_args_set_stack(a, VEO_INTENT_IN, 0, src, n);
  veo_args_set_stack(a, VEO_INTENT_OUT, 1, dst, n);
  veo_args_set_u64(a, 2, n);
  uint64_t r = 0, id = veo_call_async(c2, sym(p, lib, "k_copy"), a);
  CHECK(veo_call_wait_result(c2, id, &r) == VEO_COMMAND_OK && r == n && memcmp(src, dst, n) == 0);
  /* beyond 63 MiB in all (one argument, or two together): refused, naming the limit; the
   * context works on */
  free(src);
  free(dst);
  n = ((size_t)63 << 20) + 1;
  src = malloc(n);
  veo_args_clear(a);
  veo_args_set_stack(a, VEO_INTENT_IN, 0, src, n);
  veo_args_set_u64(a, 1, n);
  CHECK(veo_call_async(c2, sym(p, lib, "k_sum_in"), a) == VEO_REQUEST_ID_INVALID);
  CHECK(strstr(accio_offload_last_error(), "63 MiB") != NULL);
  CHECK(strstr(accio_offload_last_error(), "66060288") != NULL);
  veo_args_clear(a);
  veo_args_set_stack(a, VEO_INTENT_IN, 0, src, (size_t)32 << 20);
  veo_args_set_stack(a, VEO_INTENT_OUT, 1, src, (size_t)32 << 20);
  veo_args_set_u64(a, 2, 1);
  CHECK(veo_call_sync(p, sym(p, lib, "k_copy"), a, &r) == -1 && strstr(accio_offload_last_error(), "63 MiB") != NULL);
  free(src);
  veo_args_clear(a);
  veo_args_set_u64(a, 0, 2);
  veo_args_set_u64(a, 1, 3);
  id = veo_call_async(c2, sym(p, lib, "k_add"), a);
  CHECK(veo_call_wait_result(c2, id, &r) == VEO_COMMAND_OK && r == 5);
  veo_args_free(a);
  veo_proc_destroy(p);
}

/* Submission never waits (AVEO's request queue is unbounded): more requests than the ring's slots
 * and more data than the arena wait on the host and run in order. A kernel waits for a flag that
 * the host sets, through another context, only after submitting more than ACCIO_OFFLOAD_SLOTS
 * requests behind it: it completes (a runtime that blocked the submission would stall until the
 * kernel gives up, and the kernel's result would be 0). */
static void test_overflow(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib);
  struct veo_thr_ctxt* main_ctx = veo_context_open(p);
  struct veo_thr_ctxt* c = veo_context_open(p);
  CHECK(lib && main_ctx && c);
  uint64_t wait_flag = sym(p, lib, "k_wait_flag"), count = sym(p, lib, "k_count"), load = sym(p, lib, "k_load64");
  uint64_t fill = sym(p, lib, "k_fill_out"), sum_in = sym(p, lib, "k_sum_in");
  uint64_t mem = 0, zero = 0, r = 0;
  CHECK(veo_alloc_mem(p, &mem, 64) == 0 && veo_write_mem(p, mem, &zero, 8) == 0 && veo_write_mem(p, mem + 8, &zero, 8) == 0 &&
        veo_write_mem(p, mem + 16, &zero, 8) == 0);
  const uint64_t flag = mem, cell = mem + 8, marker = mem + 16;
  struct veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, flag);
  uint64_t spin = veo_call_async(c, wait_flag, a);
  CHECK(spin != VEO_REQUEST_ID_INVALID);
  /* 3 requests per round, 700 rounds: a call that counts, a write of a cell, a call that reads it */
  enum { kRounds = 700 };
  uint64_t* ids = malloc(sizeof(uint64_t) * 3 * kRounds);
  for (int i = 0; i < kRounds; ++i) {
    uint64_t v = 1000 + (uint64_t)i; /* the source is copied at submission: v changes next round */
    ids[3 * i] = veo_call_async(c, count, NULL);
    ids[3 * i + 1] = veo_async_write_mem(c, cell, &v, 8);
    veo_args_clear(a);
    veo_args_set_u64(a, 0, cell);
    ids[3 * i + 2] = veo_call_async(c, load, a);
    CHECK(ids[3 * i] != VEO_REQUEST_ID_INVALID && ids[3 * i + 1] != VEO_REQUEST_ID_INVALID &&
          ids[3 * i + 2] != VEO_REQUEST_ID_INVALID);
    CHECK(i == 0 || ids[3 * i] == ids[3 * i - 1] + 1); /* ids stay consecutive */
  }
  /* behind them: an OUT stack argument, and an IN one whose buffer changes right after submission
   * (copied at submission, as AVEO does) */
  unsigned char out[300], in[300];
  uint64_t expect = 0;
  for (int i = 0; i < 300; ++i) expect += (in[i] = (unsigned char)(i * 5));
  memset(out, 0, sizeof out);
  veo_args_clear(a);
  veo_args_set_stack(a, VEO_INTENT_OUT, 0, (char*)out, sizeof out);
  veo_args_set_u64(a, 1, sizeof out);
  veo_args_set_u64(a, 2, 3);
  uint64_t fill_id = veo_call_async(c, fill, a);
  veo_args_clear(a);
  veo_args_set_stack(a, VEO_INTENT_IN, 0, (char*)in, sizeof in);
  veo_args_set_u64(a, 1, sizeof in);
  uint64_t sum_id = veo_call_async(c, sum_in, a);
  memset(in, 0, sizeof in);
  veo_args_free(a); /* the queued calls keep their own copies */
  a = veo_args_alloc();
  static const uint64_t seven = 7;
  uint64_t mark_id = veo_async_write_mem(c, marker, &seven, 8); /* the last request on c */
  CHECK(fill_id != VEO_REQUEST_ID_INVALID && sum_id != VEO_REQUEST_ID_INVALID && mark_id != VEO_REQUEST_ID_INVALID);
  /* everything was submitted while the kernel still waits for its flag */
  CHECK(veo_call_peek_result(c, spin, &r) == VEO_COMMAND_UNFINISHED);
  static const uint64_t one = 1;
  uint64_t set = veo_async_write_mem(main_ctx, flag, &one, 8);
  CHECK(veo_call_wait_result(main_ctx, set, &r) == VEO_COMMAND_OK);
  /* Nobody waits on c: its queue's own thread moves what waits on the host into the ring. */
  uint64_t m = 0;
  double t0 = now_s();
  while (m != 7 && now_s() - t0 < 30) {
    CHECK(veo_read_mem(p, &m, marker, 8) == 0);
    if (m != 7) usleep(2000);
  }
  CHECK(m == 7);
  CHECK(veo_call_wait_result(c, spin, &r) == VEO_COMMAND_OK && r == 1);
  /* in order: the counts run 1, 2, 3...; each read sees the write just before it */
  for (int i = 0; i < kRounds; ++i) {
    CHECK(veo_call_wait_result(c, ids[3 * i], &r) == VEO_COMMAND_OK && r == (uint64_t)i + 1);
    CHECK(veo_call_wait_result(c, ids[3 * i + 1], &r) == VEO_COMMAND_OK);
    CHECK(veo_call_wait_result(c, ids[3 * i + 2], &r) == VEO_COMMAND_OK && r == 1000 + (uint64_t)i);
  }
  CHECK(veo_call_wait_result(c, fill_id, &r) == VEO_COMMAND_OK && r == sizeof out);
  for (int i = 0; i < 300; ++i) CHECK(out[i] == (unsigned char)(3 + i));
  CHECK(veo_call_wait_result(c, sum_id, &r) == VEO_COMMAND_OK && r == expect);
  CHECK(veo_call_wait_result(c, mark_id, &r) == VEO_COMMAND_OK);
  free(ids);

  /* A 256 MiB asynchronous write behind a kernel that waits: the call returns while the kernel
   * still waits (it cannot finish before the flag is set below), then the data arrives whole. */
  CHECK(veo_write_mem(p, flag, &zero, 8) == 0);
  const size_t n = (size_t)256 << 20;
  unsigned char* big = malloc(n);
  uint64_t dev = 0, big_sum = 0;
  CHECK(big && veo_alloc_mem(p, &dev, n) == 0);
  for (size_t i = 0; i < n; ++i) big_sum += (big[i] = (unsigned char)(i * 11 + (i >> 20)));
  veo_args_clear(a);
  veo_args_set_u64(a, 0, flag);
  spin = veo_call_async(c, wait_flag, a);
  uint64_t w = veo_async_write_mem(c, dev, big, n);
  CHECK(spin != VEO_REQUEST_ID_INVALID && w != VEO_REQUEST_ID_INVALID);
  CHECK(veo_call_peek_result(c, spin, &r) == VEO_COMMAND_UNFINISHED);
  CHECK(veo_call_peek_result(c, w, &r) == VEO_COMMAND_UNFINISHED);
  memset(big, 0xff, n); /* the source was copied at submission */
  CHECK(veo_write_mem(p, flag, &one, 8) == 0);
  CHECK(veo_call_wait_result(c, spin, &r) == VEO_COMMAND_OK && r == 1);
  CHECK(veo_call_wait_result(c, w, &r) == VEO_COMMAND_OK);
  veo_args_clear(a);
  veo_args_set_u64(a, 0, dev);
  veo_args_set_u64(a, 1, n);
  CHECK(veo_call_sync(p, sym(p, lib, "k_mem_sum"), a, &r) == 0 && r == big_sum);
  /* and read back the same way, behind a waiting kernel */
  memset(big, 0, n);
  CHECK(veo_write_mem(p, flag, &zero, 8) == 0);
  veo_args_clear(a);
  veo_args_set_u64(a, 0, flag);
  spin = veo_call_async(c, wait_flag, a);
  uint64_t rd = veo_async_read_mem(c, big, dev, n);
  CHECK(veo_call_peek_result(c, spin, &r) == VEO_COMMAND_UNFINISHED);
  CHECK(veo_write_mem(p, flag, &one, 8) == 0);
  veo_context_sync(c); /* waits for what waits on the host too */
  CHECK(veo_call_peek_result(c, rd, &r) == VEO_COMMAND_OK && veo_call_peek_result(c, spin, &r) == VEO_COMMAND_OK);
  uint64_t got = 0;
  for (size_t i = 0; i < n; ++i) got += big[i];
  CHECK(got == big_sum);
  veo_free_mem(p, dev);
  free(big);
  veo_args_free(a);
  veo_free_mem(p, mem);
  veo_proc_destroy(p);
}

/* A proc handle after veo_proc_destroy: AVEO keeps its ProcHandle (a second destroy returns 0);
 * here the handle is a tombstone every entry point refuses (ESRCH), not a use after free (run
 * under ASan: make cpp-test-asan). */
static void test_destroyed_handle(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  int pid = accio_offload_worker_pid(p);
  CHECK(veo_context_open(p) != NULL);
  CHECK(veo_proc_destroy(p) == 0);
  CHECK(wait_gone(pid, 2.0));
  CHECK(veo_proc_destroy(p) == 0); /* twice: as AVEO */
  uint64_t addr = 1, r = 0;
  char buf[8] = {0};
  errno = 0;
  CHECK(veo_alloc_mem(p, &addr, 64) == -2 && addr == 0 && errno == ESRCH);
  CHECK(strstr(accio_offload_last_error(), "destroyed") != NULL);
  CHECK(veo_free_mem(p, 0x1000) == -1);
  CHECK(veo_num_contexts(p) == -1 && errno == ESRCH);
  CHECK(veo_get_context(p, 0) == NULL);
  CHECK(veo_load_library(p, g_lib) == 0);
  CHECK(veo_unload_library(p, 1) == -1);
  CHECK(veo_get_sym(p, 0, "accio_offload_echo") == 0);
  CHECK(veo_context_open(p) == NULL);
  struct veo_thr_ctxt_attr* at = veo_alloc_thr_ctxt_attr();
  CHECK(veo_context_open_with_attr(p, at) == NULL);
  veo_free_thr_ctxt_attr(at);
  CHECK(veo_read_mem(p, buf, 0x1000, 8) == -1 && veo_write_mem(p, 0x1000, buf, 8) == -1);
  CHECK(veo_call_sync(p, 0x1000, NULL, &r) == -1);
  void* hm = (void*)1;
  CHECK(veo_alloc_hmem(p, &hm, 8) == -1 && hm == NULL);
  CHECK(veo_proc_identifier(p) == -1 && accio_offload_worker_pid(p) == -1);
  /* new procs work, and do not make the old handle valid */
  struct veo_proc_handle* q = new_proc();
  CHECK(q && veo_num_contexts(q) == 0);
  CHECK(veo_num_contexts(p) == -1);
  veo_proc_destroy(q);
}

static void test_memory(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib);
  struct veo_thr_ctxt* c = veo_context_open(p);
  size_t sizes[] = {0, 1, 7, 4095, 4096, 65536 + 3, (1u << 20) + 5, (48u << 20) + 11};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; ++k) {
    size_t n = sizes[k];
    uint64_t dev = 0;
    CHECK(veo_alloc_mem(p, &dev, n) == 0 && dev != 0);
    char* src = malloc(n + 3);
    char* back = malloc(n + 3);
    for (size_t i = 0; i < n; ++i) src[i + 3] = (char)(i * 7 + k);
    /* unaligned host buffers */
    CHECK(veo_write_mem(p, dev, src + 3, n) == 0);
    memset(back, 0, n + 3);
    CHECK(veo_read_mem(p, back + 1, dev, n) == 0);
    CHECK(memcmp(back + 1, src + 3, n) == 0);
    /* async, through a context, at an unaligned worker offset */
    if (n > 8) {
      uint64_t id = veo_async_write_mem(c, dev + 1, src + 3, n - 1);
      CHECK(id != VEO_REQUEST_ID_INVALID);
      memset(back, 0, n + 3);
      uint64_t id2 = veo_async_read_mem(c, back, dev + 1, n - 1);
      uint64_t r = 1;
      CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK);
      CHECK(veo_call_wait_result(c, id2, &r) == VEO_COMMAND_OK);
      CHECK(memcmp(back, src + 3, n - 1) == 0);
    }
    /* a kernel writes worker memory; the host reads it */
    struct veo_args* a = veo_args_alloc();
    veo_args_set_u64(a, 0, dev);
    veo_args_set_u64(a, 1, n);
    veo_args_set_u64(a, 2, k);
    uint64_t r = 0;
    CHECK(veo_call_sync(p, sym(p, lib, "k_mem_fill"), a, &r) == 0 && r == n);
    CHECK(veo_read_mem(p, back, dev, n) == 0);
    for (size_t i = 0; i < n; ++i) CHECK((unsigned char)back[i] == (unsigned char)(k * 31 + i * 7));
    veo_args_free(a);
    CHECK(veo_free_mem(p, dev) == 0);
    free(src);
    free(back);
  }
  CHECK(veo_free_mem(p, 0x1234) == -1); /* never allocated: an error, not a crash */
  CHECK(veo_free_mem(p, 0) == 0);       /* as AVEO's free(NULL): cleanup code frees handles never set */
  {                                     /* names beyond VEO_SYMNAME_LEN_MAX: refused before sending, as AVEO */
    char longname[VEO_SYMNAME_LEN_MAX + 2];
    memset(longname, 'k', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    errno = 0;
    CHECK(veo_get_sym(p, 0, longname) == 0 && errno == ENAMETOOLONG);
    errno = 0;
    CHECK(veo_load_library(p, longname) == 0 && errno == ENAMETOOLONG);
    CHECK(strstr(accio_offload_last_error(), "VEO_SYMNAME_LEN_MAX") != NULL);
    errno = 0;
    CHECK(veo_num_contexts(NULL) == -1 && errno == EINVAL);
  }
  uint64_t dev = 0;
  CHECK(veo_alloc_mem(p, &dev, 1ull << 50) != 0); /* too large */
  char b[16];
  for (int i = 0; i < 3; ++i) { /* unmapped worker address: EFAULT, every time... */
    CHECK(veo_read_mem(p, b, 8, sizeof b) != 0);
    CHECK(veo_write_mem(p, 8, b, sizeof b) != 0);
  }
  CHECK(veo_alloc_mem(p, &dev, 64) == 0); /* ...and the worker lives on, its transfers intact */
  memcpy(b, "after the faults", sizeof b);
  char back[16] = {0};
  CHECK(veo_write_mem(p, dev, b, sizeof b) == 0 && veo_read_mem(p, back, dev, sizeof back) == 0);
  CHECK(memcmp(back, b, sizeof b) == 0);
  CHECK(veo_free_mem(p, dev) == 0);
  veo_proc_destroy(p);
}

static const int kN = 10000;

static void test_call_patterns(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib);
  uint64_t add = sym(p, lib, "k_add");
  struct veo_thr_ctxt* c = veo_context_open(p);
  struct veo_args* a = veo_args_alloc();
  uint64_t* ids = malloc(sizeof(uint64_t) * (size_t)kN);
  uint64_t r = 0;
  /* test 1: submit N, then wait for N */
  for (int i = 0; i < kN; ++i) {
    veo_args_set_u64(a, 0, (uint64_t)i);
    veo_args_set_u64(a, 1, 1);
    ids[i] = veo_call_async(c, add, a);
    CHECK(ids[i] != VEO_REQUEST_ID_INVALID);
  }
  for (int i = 0; i < kN; ++i) CHECK(veo_call_wait_result(c, ids[i], &r) == VEO_COMMAND_OK && r == (uint64_t)i + 1);
  /* test 1 in reverse order of waiting */
  for (int i = 0; i < 1000; ++i) {
    veo_args_set_u64(a, 0, (uint64_t)i);
    ids[i] = veo_call_async(c, add, a);
  }
  for (int i = 999; i >= 0; --i) CHECK(veo_call_wait_result(c, ids[i], &r) == VEO_COMMAND_OK && r == (uint64_t)i + 1);
  /* test 2: one at a time */
  for (int i = 0; i < kN; ++i) {
    veo_args_set_u64(a, 0, (uint64_t)i);
    uint64_t id = veo_call_async(c, add, a);
    CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == (uint64_t)i + 1);
  }
  /* test 3: wait for the last only; the others stay collectable */
  for (int i = 0; i < kN; ++i) ids[i] = veo_call_async(c, add, a);
  CHECK(veo_call_wait_result(c, ids[kN - 1], &r) == VEO_COMMAND_OK);
  CHECK(veo_call_peek_result(c, ids[0], &r) == VEO_COMMAND_OK);
  CHECK(veo_call_wait_result(c, ids[0], &r) == VEO_COMMAND_ERROR); /* already picked */
  CHECK(veo_call_wait_result(c, 1ull << 40, &r) == VEO_COMMAND_ERROR); /* never issued */
  /* test 4: synchronous */
  for (int i = 0; i < kN / 4; ++i) {
    veo_args_set_u64(a, 0, (uint64_t)i);
    CHECK(veo_call_sync(p, add, a, &r) == 0 && r == (uint64_t)i + 1);
  }
  /* peek: unfinished, then finished; sync waits for everything */
  uint64_t slow = sym(p, lib, "k_sleep_ms");
  veo_args_clear(a);
  veo_args_set_u64(a, 0, 100);
  uint64_t id = veo_call_async(c, slow, a);
  CHECK(veo_call_peek_result(c, id, &r) == VEO_COMMAND_UNFINISHED);
  veo_context_sync(c);
  CHECK(veo_call_peek_result(c, id, &r) == VEO_COMMAND_OK && r == 100);
  free(ids);
  veo_args_free(a);
  veo_proc_destroy(p);
}

/* veo_call_async_vh: runs in order between the worker's requests, on the context's own runner
 * thread (the orders are atomics: the test reads them from the main thread). */
static _Atomic int g_order[8], g_norder;
static uint64_t vh_mark(void* arg) {
  g_order[atomic_fetch_add(&g_norder, 1)] = (int)(intptr_t)arg;
  return 1000 + (uint64_t)(intptr_t)arg;
}

/* AVEO API 16: a host function runs as soon as the requests before it have completed, with no
 * host thread waiting on its context, and what was queued behind it runs too. */
static _Atomic int g_vh_ran;
static pthread_t g_vh_thread;
static uint64_t vh_flag(void* arg) {
  (void)arg;
  g_vh_thread = pthread_self();
  atomic_store(&g_vh_ran, 1);
  return 7;
}

static _Atomic int g_vh_close_rc, g_vh_destroy_rc;
static uint64_t vh_close_own(void* ctx) {
  atomic_store(&g_vh_close_rc, veo_context_close((struct veo_thr_ctxt*)ctx));
  return 0;
}
static uint64_t vh_destroy_own(void* proc) {
  atomic_store(&g_vh_destroy_rc, veo_proc_destroy((struct veo_proc_handle*)proc));
  return 0;
}

static void test_vh_runs_without_a_waiter(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib);
  struct veo_thr_ctxt* c = veo_context_open(p);
  struct veo_thr_ctxt* c2 = veo_context_open(p);
  uint64_t slow = sym(p, lib, "k_sleep_ms");
  struct veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, 30);
  uint64_t mem = 0, v = 0;
  CHECK(veo_alloc_mem(p, &mem, sizeof v) == 0 && veo_write_mem(p, mem, &v, sizeof v) == 0);
  atomic_store(&g_vh_ran, 0);
  uint64_t i1 = veo_call_async(c2, slow, a);
  uint64_t vh = veo_call_async_vh(c2, vh_flag, NULL);
  const uint64_t one = 1;
  uint64_t w = veo_async_write_mem(c2, mem, &one, sizeof one); /* behind the host function */
  CHECK(i1 != VEO_REQUEST_ID_INVALID && vh != VEO_REQUEST_ID_INVALID && w != VEO_REQUEST_ID_INVALID);
  /* Nobody waits on c2: the main thread only reads the worker's memory, on the main context. */
  double t0 = now_s();
  while ((!atomic_load(&g_vh_ran) || v != 1) && now_s() - t0 < 5) {
    usleep(5000);
    CHECK(veo_read_mem(p, &v, mem, sizeof v) == 0);
  }
  CHECK(atomic_load(&g_vh_ran) && v == 1);
  CHECK(!pthread_equal(g_vh_thread, pthread_self())); /* never in another thread's wait or peek */
  uint64_t r = 0;
  CHECK(veo_call_wait_result(c2, vh, &r) == VEO_COMMAND_OK && r == 7);
  CHECK(veo_call_wait_result(c2, w, &r) == VEO_COMMAND_OK);
  CHECK(veo_call_wait_result(c2, i1, &r) == VEO_COMMAND_OK && r == 30);
  /* a host function cannot close its own context or destroy its proc (it would wait for itself) */
  CHECK(veo_call_async_vh(c2, vh_close_own, c2) != VEO_REQUEST_ID_INVALID);
  CHECK(veo_call_async_vh(c2, vh_destroy_own, p) != VEO_REQUEST_ID_INVALID);
  veo_context_sync(c2);
  CHECK(atomic_load(&g_vh_close_rc) == -1 && atomic_load(&g_vh_destroy_rc) == -1);
  /* a closed context's runner ends; a host function queued last still runs before the close */
  atomic_store(&g_vh_ran, 0);
  CHECK(veo_call_async_vh(c2, vh_flag, NULL) != VEO_REQUEST_ID_INVALID);
  CHECK(veo_context_close(c2) == 0 && atomic_load(&g_vh_ran));
  (void)c;
  veo_args_free(a);
  veo_free_mem(p, mem);
  veo_proc_destroy(p);
}

static void test_vh_calls(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib);
  struct veo_thr_ctxt* c = veo_context_open(p);
  uint64_t slow = sym(p, lib, "k_sleep_ms"), cnt = sym(p, lib, "k_count");
  struct veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, 50);
  g_norder = 0;
  uint64_t i1 = veo_call_async(c, slow, a);
  uint64_t v1 = veo_call_async_vh(c, vh_mark, (void*)(intptr_t)1);
  uint64_t i2 = veo_call_async(c, cnt, NULL);
  uint64_t v2 = veo_call_async_vh(c, vh_mark, (void*)(intptr_t)2);
  CHECK(i1 != VEO_REQUEST_ID_INVALID && v1 != VEO_REQUEST_ID_INVALID && v2 != VEO_REQUEST_ID_INVALID);
  uint64_t r = 0;
  CHECK(veo_call_wait_result(c, i2, &r) == VEO_COMMAND_OK && r == 1); /* v1 ran before it */
  CHECK(g_norder >= 1 && g_order[0] == 1);
  CHECK(veo_call_wait_result(c, v1, &r) == VEO_COMMAND_OK && r == 1001);
  CHECK(veo_call_wait_result(c, v2, &r) == VEO_COMMAND_OK && r == 1002);
  CHECK(g_norder == 2 && g_order[1] == 2);
  CHECK(veo_call_wait_result(c, i1, &r) == VEO_COMMAND_OK && r == 50);
  veo_args_free(a);
  veo_proc_destroy(p);
}

struct thread_arg {
  struct veo_proc_handle* p;
  struct veo_thr_ctxt* c; /* NULL: open an own context */
  uint64_t add;
  int n, base, ok;
};

static void* thread_main(void* v) {
  struct thread_arg* t = v;
  struct veo_thr_ctxt* c = t->c ? t->c : veo_context_open(t->p);
  struct veo_args* a = veo_args_alloc();
  t->ok = c != NULL;
  for (int i = 0; i < t->n && t->ok; ++i) {
    veo_args_set_u64(a, 0, (uint64_t)(t->base + i));
    veo_args_set_u64(a, 1, 3);
    uint64_t r = 0, id = veo_call_async(c, t->add, a);
    if (veo_call_wait_result(c, id, &r) != VEO_COMMAND_OK || r != (uint64_t)(t->base + i) + 3) t->ok = 0;
    if (i % 97 == 0) {
      uint64_t dev = 0;
      char x[100], y[100];
      memset(x, t->base & 0xff, sizeof x);
      if (veo_alloc_mem(t->p, &dev, sizeof x) || veo_write_mem(t->p, dev, x, sizeof x) ||
          veo_read_mem(t->p, y, dev, sizeof y) || memcmp(x, y, sizeof x) || veo_free_mem(t->p, dev))
        t->ok = 0;
    }
  }
  veo_args_free(a);
  return NULL;
}

static void test_threads(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib);
  uint64_t add = sym(p, lib, "k_add");
  struct veo_thr_ctxt* shared = veo_context_open(p);
  pthread_t th[8];
  struct thread_arg ta[8];
  for (int i = 0; i < 8; ++i) {
    ta[i] = (struct thread_arg){p, i < 4 ? NULL : shared, add, 2000, i * 100000, 0};
    pthread_create(&th[i], NULL, thread_main, &ta[i]);
  }
  for (int i = 0; i < 8; ++i) {
    pthread_join(th[i], NULL);
    CHECK(ta[i].ok);
  }
  CHECK(veo_num_contexts(p) == 5);
  veo_proc_destroy(p);
}

static void test_many_procs(void) {
  struct veo_proc_handle* ps[4];
  uint64_t pids[4];
  for (int i = 0; i < 4; ++i) {
    ps[i] = new_proc();
    CHECK(ps[i]);
    uint64_t lib = veo_load_library(ps[i], g_lib);
    CHECK(veo_call_sync(ps[i], sym(ps[i], lib, "k_pid"), NULL, &pids[i]) == 0);
    CHECK(pids[i] == (uint64_t)accio_offload_worker_pid(ps[i]));
    for (int j = 0; j < i; ++j) CHECK(pids[i] != pids[j]);
  }
  for (int i = 0; i < 4; ++i) CHECK(veo_proc_destroy(ps[i]) == 0);
  for (int i = 0; i < 4; ++i) CHECK(wait_gone((int)pids[i], 2.0));
}

static void test_openmp(void) {
  setenv("OMP_NUM_THREADS", "3", 1); /* the worker inherits the environment at creation */
  struct veo_proc_handle* p = new_proc();
  unsetenv("OMP_NUM_THREADS");
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib);
  struct veo_thr_ctxt* c = veo_context_open(p);
  struct veo_args* a = veo_args_alloc();
  uint64_t r = 0, id = veo_call_async(c, sym(p, lib, "k_omp_threads"), NULL);
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == 3);
  veo_args_set_u64(a, 0, 1000000);
  id = veo_call_async(c, sym(p, lib, "k_omp_sum"), a);
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == 500000500000ull);
  /* unload and reload after OpenMP ran: its pool threads outlive the kernel, libgomp must stay */
  CHECK(veo_unload_library(p, lib) == 0);
  lib = veo_load_library(p, g_lib);
  CHECK(lib);
  id = veo_call_async(c, sym(p, lib, "k_omp_threads"), NULL);
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == 3);
  /* a fault in an OpenMP thread that is not the context's own */
  id = veo_call_async(c, sym(p, lib, "k_omp_segv"), NULL);
  int st = veo_call_wait_result(c, id, &r);
  CHECK(st == VEO_COMMAND_EXCEPTION && r == SIGSEGV);
  veo_args_free(a);
  veo_proc_destroy(p);
}

/* A fault in a kernel: that request is an exception with the signal, the rest fail, fast. */
static void crash_case(const char* kernel, int arg, int expect_state, int expect_sig, const char* expect_msg) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  int pid = accio_offload_worker_pid(p);
  uint64_t lib = veo_load_library(p, g_lib);
  uint64_t k = sym(p, lib, kernel), add = sym(p, lib, "k_add");
  struct veo_thr_ctxt* c = veo_context_open(p);
  struct veo_thr_ctxt* c2 = veo_context_open(p);
  struct veo_args* a = veo_args_alloc();
  veo_args_set_i32(a, 0, arg);
  uint64_t slow_args_id;
  struct veo_args* s = veo_args_alloc();
  veo_args_set_u64(s, 0, 5000);
  slow_args_id = veo_call_async(c2, sym(p, lib, "k_sleep_ms"), s); /* pending on another context */
  uint64_t id = veo_call_async(c, k, a);
  veo_args_set_u64(a, 0, 1);
  veo_args_set_u64(a, 1, 1);
  uint64_t after = veo_call_async(c, add, a);
  uint64_t r = 0;
  double t0 = now_s();
  int st = veo_call_wait_result(c, id, &r);
  CHECK(st == expect_state);
  if (expect_sig) CHECK(r == (uint64_t)expect_sig);
  if (expect_msg) CHECK(strstr(accio_offload_last_error(), expect_msg) != NULL);
  CHECK(veo_call_wait_result(c, after, &r) == VEO_COMMAND_ERROR);
  CHECK(veo_call_wait_result(c2, slow_args_id, &r) == VEO_COMMAND_ERROR);
  CHECK(now_s() - t0 < 1.0);
  CHECK(veo_get_context_state(c) == VEO_STATE_EXIT);
  CHECK(veo_call_async(c, add, a) == VEO_REQUEST_ID_INVALID);
  CHECK(veo_call_sync(p, add, a, &r) == -1);
  CHECK(veo_context_open(p) == NULL);
  CHECK(wait_gone(pid, 1.0));
  CHECK(veo_proc_destroy(p) == 0);
  veo_args_free(a);
  veo_args_free(s);
}

static void test_exceptions(void) {
  crash_case("k_segv", 0, VEO_COMMAND_EXCEPTION, SIGSEGV, "Segmentation fault");
  crash_case("k_abort", 0, VEO_COMMAND_EXCEPTION, SIGABRT, "Abort");
  crash_case("k_raise", SIGFPE, VEO_COMMAND_EXCEPTION, SIGFPE, NULL);
  crash_case("k_raise", SIGTERM, VEO_COMMAND_ERROR, 0, "signal 15");
  crash_case("k_exit", 3, VEO_COMMAND_ERROR, 0, "exited with status 3");
}

static void test_killed_worker(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib);
  struct veo_thr_ctxt* c = veo_context_open(p);
  uint64_t mem = 0;
  CHECK(veo_alloc_mem(p, &mem, 64) == 0);
  struct veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, 10000);
  uint64_t id = veo_call_async(c, sym(p, lib, "k_sleep_ms"), a);
  uint64_t id2 = veo_call_async(c, sym(p, lib, "k_sleep_ms"), a);
  usleep(20000);
  double t0 = now_s();
  kill(accio_offload_worker_pid(p), SIGKILL);
  uint64_t r;
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_ERROR);
  CHECK(strstr(accio_offload_last_error(), "signal 9") != NULL);
  CHECK(veo_call_wait_result(c, id2, &r) == VEO_COMMAND_ERROR);
  CHECK(now_s() - t0 < 1.0);
  uint64_t dev;
  CHECK(veo_alloc_mem(p, &dev, 10) != 0);
  /* a free that the dead worker cannot carry out keeps the allocation on record: the second try
     fails for the same reason, not as a double free */
  CHECK(veo_free_mem(p, mem) == -1);
  CHECK(strstr(accio_offload_last_error(), "was not allocated") == NULL);
  CHECK(veo_free_mem(p, mem) == -1);
  CHECK(strstr(accio_offload_last_error(), "was not allocated") == NULL);
  veo_args_free(a);
  CHECK(veo_proc_destroy(p) == 0);
}

/* veo_context_sync counted the pieces waiting on the host as positions the ring would reach; one
 * that another thread dropped (a veo_read_mem that timed out behind a long kernel) never did, and
 * the sync waited for ever. */
struct sync_arg {
  struct veo_thr_ctxt* c;
  atomic_int done;
};
static void* sync_thread(void* p) {
  struct sync_arg* s = p;
  /* The proc's timeout bounds each sync: synced once one returns without running out (a sync that
   * waited for a dropped piece would run out for ever). */
  do errno = 0, veo_context_sync(s->c);
  while (errno == ETIMEDOUT);
  atomic_store(&s->done, 1);
  return NULL;
}
struct read_arg {
  struct veo_proc_handle* p;
  uint64_t addr;
  int rc;
};
static void* read_thread(void* p) {
  struct read_arg* r = p;
  uint64_t v = 0;
  r->rc = veo_read_mem(r->p, &v, r->addr, 8);
  return NULL;
}
static void test_sync_after_a_dropped_piece(void) {
  accio_offload_options o = g_opts;
  o.timeout_ms = 300;
  struct veo_proc_handle* p = accio_offload_proc_create(&o);
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib), mem = 0;
  struct veo_thr_ctxt* main_ctx = veo_context_open(p); /* the first: the channel veo_read_mem uses */
  CHECK(lib && main_ctx && veo_alloc_mem(p, &mem, 64) == 0);
  uint64_t count = sym(p, lib, "k_count"), sleep_ms = sym(p, lib, "k_sleep_ms"), last = 0; /* before the sleeper */
  struct veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, 1500);
  uint64_t sleeper = veo_call_async(main_ctx, sleep_ms, a);
  for (int i = 0; i < 300; ++i) last = veo_call_async(main_ctx, count, NULL); /* past the 256 slots */
  CHECK(sleeper != VEO_REQUEST_ID_INVALID && last != VEO_REQUEST_ID_INVALID);
  struct read_arg ra = {p, mem, 0};
  pthread_t rt, st;
  CHECK(pthread_create(&rt, NULL, read_thread, &ra) == 0); /* its piece waits on the host, then times out */
  usleep(100000);
  struct sync_arg sa = {main_ctx, 0};
  CHECK(pthread_create(&st, NULL, sync_thread, &sa) == 0); /* counts the read's piece */
  pthread_join(rt, NULL);
  CHECK(ra.rc == -1); /* timed out: its piece is dropped */
  double t0 = now_s();
  while (!atomic_load(&sa.done) && now_s() - t0 < 20) usleep(10000);
  CHECK(atomic_load(&sa.done)); /* the kernel ends at 1.5 s; the sync then returns */
  pthread_join(st, NULL);
  uint64_t r = 0;
  CHECK(veo_call_wait_result(main_ctx, sleeper, &r) == VEO_COMMAND_OK && r == 1500);
  CHECK(veo_call_wait_result(main_ctx, last, &r) == VEO_COMMAND_OK);
  veo_args_free(a);
  veo_proc_destroy(p);
}

static void test_timeout(void) {
  accio_offload_options o = g_opts;
  o.timeout_ms = 200;
  struct veo_proc_handle* p = accio_offload_proc_create(&o);
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib);
  struct veo_thr_ctxt* c = veo_context_open(p);
  struct veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, 700);
  uint64_t id = veo_call_async(c, sym(p, lib, "k_sleep_ms"), a);
  double t0 = now_s();
  uint64_t r = 0;
  errno = 0;
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_ERROR);
  CHECK(errno == ETIMEDOUT); /* not failed: still queued (the Python wrapper keeps its buffers) */
  double dt = now_s() - t0;
  CHECK(dt >= 0.19 && dt < 0.6);
  CHECK(strstr(accio_offload_last_error(), "ACCIO_OFFLOAD_TIMEOUT_MS") != NULL);
  usleep(600000);
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == 700); /* still collectable */
  veo_args_free(a);
  veo_proc_destroy(p);
}

/* A synchronous call whose wait times out has returned: the request still runs in the worker, but
 * its OUT data must not land in the caller's buffer afterwards (it may be the caller's stack by
 * then). Until the twenty-seventh session the next collection copied it there. */
static void test_sync_call_timeout(void) {
  accio_offload_options o = g_opts;
  o.timeout_ms = 100;
  struct veo_proc_handle* p = accio_offload_proc_create(&o);
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib), fill = sym(p, lib, "k_sleep_fill"), r = 0;
  CHECK(fill);
  unsigned char buf[64];
  memset(buf, 0x11, sizeof buf);
  struct veo_args* a = veo_args_alloc();
  veo_args_set_stack(a, VEO_INTENT_OUT, 0, (char*)buf, sizeof buf);
  veo_args_set_u64(a, 1, sizeof buf);
  veo_args_set_u64(a, 2, 0x33);
  veo_args_set_u64(a, 3, 400);
  CHECK(veo_call_sync(p, fill, a, &r) == -1);
  CHECK(strstr(accio_offload_last_error(), "ACCIO_OFFLOAD_TIMEOUT_MS") != NULL);
  memset(buf, 0x22, sizeof buf); /* the caller's memory again */
  usleep(600000);                /* the kernel has filled its copy meanwhile */
  veo_args_clear(a);
  veo_args_set_u64(a, 0, 5);
  CHECK(veo_call_sync(p, sym(p, 0, "accio_offload_echo"), a, &r) == 0 && r == 5); /* collects the old one */
  for (size_t i = 0; i < sizeof buf; ++i) CHECK(buf[i] == 0x22);
  veo_args_free(a);
  veo_proc_destroy(p);
}

/* ACCIO_OFFLOAD_TIMEOUT_MS bounds veo_context_sync, veo_context_close and veo_proc_destroy too:
 * until the twenty-seventh session they waited for a kernel that never returns for ever. */
static void test_timeout_bounds_sync_and_destroy(void) {
  accio_offload_options o = g_opts;
  o.timeout_ms = 100;
  struct veo_proc_handle* p = accio_offload_proc_create(&o);
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib), sleep_ms = sym(p, lib, "k_sleep_ms");
  struct veo_thr_ctxt* main_ctx = veo_context_open(p);
  struct veo_thr_ctxt* c = veo_context_open(p);
  struct veo_thr_ctxt* c2 = veo_context_open(p);
  CHECK(main_ctx && sleep_ms && c && c2);
  struct veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, 4000);
  CHECK(veo_call_async(c, sleep_ms, a) != VEO_REQUEST_ID_INVALID);
  double t0 = now_s();
  errno = 0;
  veo_context_sync(c);
  CHECK(now_s() - t0 < 2.0 && errno == ETIMEDOUT);
  CHECK(strstr(accio_offload_last_error(), "ACCIO_OFFLOAD_TIMEOUT_MS") != NULL);
  t0 = now_s();
  CHECK(veo_context_close(c) == 0 && now_s() - t0 < 2.0);
  CHECK(veo_call_async(c2, sleep_ms, a) != VEO_REQUEST_ID_INVALID);
  /* veo_context_open waits for the main context's queue: past the timeout it fails, saying so (it
   * returned a context while its error said the wait had failed) */
  CHECK(veo_call_async(main_ctx, sleep_ms, a) != VEO_REQUEST_ID_INVALID);
  t0 = now_s();
  CHECK(veo_context_open(p) == NULL && now_s() - t0 < 2.0);
  CHECK(strstr(accio_offload_last_error(), "ACCIO_OFFLOAD_TIMEOUT_MS") != NULL);
  int pid = accio_offload_worker_pid(p);
  t0 = now_s();
  CHECK(veo_proc_destroy(p) == 0 && now_s() - t0 < 3.0);
  CHECK(wait_gone(pid, 1.0));
  veo_args_free(a);
}

static int count_lines(const char* path) {
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  int n = 0, ch;
  while ((ch = fgetc(f)) != EOF) n += ch == '\n';
  fclose(f);
  return n;
}

/* Contexts opened and closed for a proc's whole life: the worker frees a closed context's queue.
 * Until the twenty-seventh session it kept each one's entry and mapping, and the 1023rd
 * veo_context_open of a proc failed (EMFILE). */
static void test_context_cycles(void) {
  accio_offload_options o = g_opts;
  o.slots = 2;
  o.arena_bytes = 64 << 10;
  struct veo_proc_handle* p = accio_offload_proc_create(&o);
  CHECK(p);
  CHECK(veo_context_open(p)); /* the main context: the others are queues of their own */
  char maps[64];
  snprintf(maps, sizeof maps, "/proc/%d/maps", accio_offload_worker_pid(p));
  uint64_t echo = sym(p, 0, "accio_offload_echo"), r = 0;
  struct veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, 3);
  int before = -1;
  for (int i = 0; i < 1100; ++i) {
    struct veo_thr_ctxt* c = veo_context_open(p);
    CHECK(c);
    if (i % 100 == 0) CHECK(veo_call_wait_result(c, veo_call_async(c, echo, a), &r) == VEO_COMMAND_OK && r == 3);
    CHECK(veo_context_close(c) == 0);
    if (i == 10) before = count_lines(maps);
  }
  /* The closed queues' mappings are gone (a few lines of slack for the worker's own allocations). */
  int after = count_lines(maps);
  CHECK(before > 0 && after > 0 && after < before + 16);
  CHECK(veo_num_contexts(p) == 1);
  veo_args_free(a);
  veo_proc_destroy(p);
}

/* The worker exits when its host process dies, however it dies. */
static void test_host_death(void) {
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t child = fork();
  if (child == 0) {
    struct veo_proc_handle* p = new_proc();
    int pid = p ? accio_offload_worker_pid(p) : -1;
    if (write(fds[1], &pid, sizeof pid) < 0) _exit(2);
    if (p) {
      struct veo_thr_ctxt* c = veo_context_open(p);
      struct veo_args* a = veo_args_alloc();
      veo_args_set_u64(a, 0, 100000);
      veo_call_async(c, veo_get_sym(p, veo_load_library(p, g_lib), "k_sleep_ms"), a);
    }
    usleep(50000);
    kill(getpid(), SIGKILL);
  }
  int pid = -1;
  CHECK(read(fds[0], &pid, sizeof pid) == sizeof pid && pid > 0);
  waitpid(child, NULL, 0);
  CHECK(wait_gone(pid, 1.0));
  close(fds[0]);
  close(fds[1]);
}

/* fork() in the host: the child must not keep the parent's worker, the parent keeps working. */
static void test_fork(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  uint64_t echo = veo_get_sym(p, 0, "accio_offload_echo");
  /* a context with a host-function runner before the fork: the child has no such thread */
  struct veo_thr_ctxt* c = veo_context_open(p);
  uint64_t vr = 0, vid = veo_call_async_vh(c, vh_flag, NULL);
  CHECK(vid != VEO_REQUEST_ID_INVALID && veo_call_wait_result(c, vid, &vr) == VEO_COMMAND_OK && vr == 7);
  /* The runner is left to park before the fork: the child allocates (the args, the refusal's
   * message), and GCC 12's ASan allocator has no fork handler (its libasan intercepts vfork only;
   * glibc's malloc has one). An ASan CI run hung in this test once, most likely in such a child;
   * it did not recur in 55 runs here. */
  veo_context_sync(c);
  usleep(20000);
  pid_t child = fork();
  if (child == 0) {
    uint64_t r;
    struct veo_args* a = veo_args_alloc();
    veo_args_set_u64(a, 0, 1);
    _exit(veo_call_sync(p, echo, a, &r) == -1 ? 0 : 1); /* the parent's proc is not ours */
  }
  int st = 0;
  waitpid(child, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  struct veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, 9);
  uint64_t r = 0;
  CHECK(veo_call_sync(p, echo, a, &r) == 0 && r == 9);
  vid = veo_call_async_vh(c, vh_flag, NULL); /* the parent's runner still runs them */
  CHECK(vid != VEO_REQUEST_ID_INVALID && veo_call_wait_result(c, vid, &vr) == VEO_COMMAND_OK && vr == 7);
  veo_args_free(a);
  veo_proc_destroy(p);
}

/* With spin-then-sleep waiting an idle proc costs (almost) no CPU. */
static double cpu_seconds(int pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  unsigned long ut = 0, st = 0;
  int r = fscanf(f, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
  fclose(f);
  return r == 2 ? (double)(ut + st) / (double)sysconf(_SC_CLK_TCK) : -1;
}

static void test_idle_cpu(void) {
  if (g_opts.spin_us < 0) return; /* pure spinning burns a core by design */
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  struct veo_thr_ctxt* c = veo_context_open(p);
  uint64_t echo = veo_get_sym(p, 0, "accio_offload_echo");
  struct veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, 1);
  for (int i = 0; i < 1000; ++i) {
    uint64_t r, id = veo_call_async(c, echo, a);
    veo_call_wait_result(c, id, &r);
  }
  usleep(100000);
  int pid = accio_offload_worker_pid(p);
  double c0 = cpu_seconds(pid), t0 = now_s();
  usleep(1000000);
  double used = (cpu_seconds(pid) - c0) / (now_s() - t0);
  fprintf(stderr, "  idle worker CPU: %.2f%%\n", used * 100);
  CHECK(used < 0.05);
  veo_args_free(a);
  veo_proc_destroy(p);
}

/* The options are rows of libaccio's settings table (registered when libaccio_offload is loaded),
 * read from ACCIO_OFFLOAD_*; a bad value is refused with its name; errors go to the log callback. */
static int g_logged;
static char g_log_key[64], g_log_msg[512];
static void on_log(int level, const char* key, const char* msg, void* user) {
  (void)user;
  if (level == ACCIO_LOG_ERROR) g_logged++;
  snprintf(g_log_key, sizeof g_log_key, "%s", key);
  snprintf(g_log_msg, sizeof g_log_msg, "%s", msg);
}

static void test_settings_and_log(void) {
  int found = 0;
  for (int i = 0; i < accio_setting_count(); ++i)
    if (!strcmp(accio_setting_name(i), "offload_timeout_ms"))
      found = !strcmp(accio_setting_env(i), "ACCIO_OFFLOAD_TIMEOUT_MS");
  CHECK(found);
  accio_settings* s = accio_settings_new();
  char v[64];
  CHECK(s && accio_settings_get(s, "offload_slots", v, sizeof v) > 0);
  accio_settings_free(s);

  accio_offload_options o;
  setenv("ACCIO_OFFLOAD_SLOTS", "64", 1);
  setenv("ACCIO_OFFLOAD_SPIN_US", "forever", 1);
  setenv("ACCIO_OFFLOAD_ARENA", "1m", 1);
  int rc = accio_offload_options_init(&o);
  CHECK(rc == 0 && o.slots == 64 && o.spin_us == ACCIO_OFFLOAD_SPIN_FOREVER && o.arena_bytes == (1u << 20));
  setenv("ACCIO_OFFLOAD_SLOTS", "1", 1);
  rc = accio_offload_options_init(&o);
  unsetenv("ACCIO_OFFLOAD_SLOTS");
  unsetenv("ACCIO_OFFLOAD_SPIN_US");
  unsetenv("ACCIO_OFFLOAD_ARENA");
  CHECK(rc == -EINVAL && strstr(accio_offload_last_error(), "ACCIO_OFFLOAD_SLOTS='1'"));

  /* Options a caller fills in itself are held to the settings' bounds: a spin below FOREVER (-1)
   * and a negative timeout were taken as given (session 25). */
  struct { int64_t spin, timeout; const char* why; } bad[] = {
      {-5, 0, "invalid option spin_us -5"}, {0, -3, "invalid option timeout_ms -3"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    CHECK(accio_offload_options_init(&o) == 0);
    o.spin_us = bad[i].spin;
    o.timeout_ms = bad[i].timeout;
    CHECK(accio_offload_proc_create(&o) == NULL && strstr(accio_offload_last_error(), bad[i].why));
  }

  accio_set_log_callback(on_log, NULL);
  g_logged = 0;
  uint64_t h = veo_load_library(NULL, "x");
  accio_set_log_callback(NULL, NULL);
  CHECK(h == 0 && g_logged == 1 && !strcmp(g_log_key, "offload"));
  CHECK(strstr(g_log_msg, "veo_load_library") && strstr(accio_offload_last_error(), "veo_load_library"));
  CHECK(accio_log(12345, "k", "m") == -EINVAL && accio_log(ACCIO_LOG_ERROR, "k", NULL) == -EINVAL);
}

/* ---------------------------------------------------------------------------------------- */
/* API version 16: kernel output, the AVEO additions, ordering, hooks, hmem, VE_OMP_NUM_THREADS */

/* Runs `body` in a child whose stdout (and stderr) is `fd`; returns its exit status. */
static int in_child(int fd, void (*body)(void)) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    body();
    _exit(0);
  }
  int st = -1;
  waitpid(pid, &st, 0);
  return st;
}

static void print_in_worker(int destroy, int crash) {
  struct veo_proc_handle* p = new_proc();
  if (!p) _exit(3);
  uint64_t lib = veo_load_library(p, g_lib);
  char out[] = "kernel-out|", err[] = "kernel-err|";
  struct veo_args* a = veo_args_alloc();
  veo_args_set_stack(a, VEO_INTENT_IN, 0, out, sizeof out);
  veo_args_set_stack(a, VEO_INTENT_IN, 1, err, sizeof err);
  uint64_t r;
  if (veo_call_sync(p, veo_get_sym(p, lib, crash ? "k_print_segv" : "k_print"), a, &r) != 0) {
    if (!crash) _exit(4);
    (void)!write(1, "host-report|", 12); /* the crash report comes after the kernel's output */
  } else if (crash) {
    _exit(5);
  }
  if (destroy) veo_proc_destroy(p); /* else the host exits and the worker reads EOF */
}
static void child_destroy(void) { print_in_worker(1, 0); }
static void child_exit(void) { print_in_worker(0, 0); }
static void child_crash(void) { print_in_worker(1, 1); }

/* Reads fd until EOF (every writer gone: the worker too) or 10 s. */
static size_t read_all(int fd, char* buf, size_t cap) {
  size_t n = 0;
  double t0 = now_s();
  while (n + 1 < cap && now_s() - t0 < 10) {
    ssize_t r = read(fd, buf + n, cap - 1 - n);
    if (r <= 0) break;
    n += (size_t)r;
  }
  buf[n] = 0;
  return n;
}

static void test_kernel_output(void) {
  char buf[4096];
  /* a pipe: veo_proc_destroy, then the host exiting without it */
  void (*bodies[])(void) = {child_destroy, child_exit};
  for (int i = 0; i < 2; ++i) {
    int pfd[2];
    CHECK(pipe(pfd) == 0);
    int st = in_child(pfd[1], bodies[i]);
    close(pfd[1]);
    read_all(pfd[0], buf, sizeof buf);
    close(pfd[0]);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(strstr(buf, "kernel-out|") && strstr(buf, "kernel-err|"));
  }
  /* a file */
  char path[] = "/tmp/accio-offload-out-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  unlink(path);
  int st = in_child(fd, child_destroy);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  close(fd);
  CHECK(n > 0);
  buf[n] = 0;
  CHECK(strstr(buf, "kernel-out|") && strstr(buf, "kernel-err|"));
  /* a crash: the output is written before the host hears of it */
  int pfd[2];
  CHECK(pipe(pfd) == 0);
  st = in_child(pfd[1], child_crash);
  close(pfd[1]);
  read_all(pfd[0], buf, sizeof buf);
  close(pfd[0]);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  const char* out = strstr(buf, "kernel-out|");
  const char* rep = strstr(buf, "host-report|");
  CHECK(out && rep && out < rep);
}

static uint64_t vh_ret(void* arg) { return (uint64_t)(uintptr_t)arg; }

static void test_async_alloc_and_prev_result(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib);
  struct veo_thr_ctxt* main_ctx = veo_context_open(p);
  struct veo_thr_ctxt* c = veo_context_open(p);
  CHECK(main_ctx && c && main_ctx != c && veo_get_context(p, 0) == main_ctx);
  uint64_t add = sym(p, lib, "k_add"), prev = sym(p, lib, "k_prev"), sum = sym(p, lib, "k_mem_sum");
  /* alloc, write, use and free through the context */
  uint64_t id = veo_alloc_mem_async(c, 1000), addr = 0, r = 0;
  CHECK(id != VEO_REQUEST_ID_INVALID && veo_call_wait_result(c, id, &addr) == VEO_COMMAND_OK && addr);
  unsigned char data[1000];
  uint64_t want = 0;
  for (int i = 0; i < 1000; ++i) want += data[i] = (unsigned char)(i * 3);
  CHECK(veo_async_write_mem(c, addr, data, sizeof data) != VEO_REQUEST_ID_INVALID);
  struct veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, addr);
  veo_args_set_u64(a, 1, 1000);
  id = veo_call_async(c, sum, a);
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == want);
  /* the kernel sees the previous requests' results: an alloc's address, a call's value */
  uint64_t id_alloc = veo_alloc_mem_async(c, 64);
  veo_args_clear(a);
  veo_args_set_i32(a, 0, 0);
  uint64_t id_prev = veo_call_async(c, prev, a);
  uint64_t addr2 = 0;
  CHECK(veo_call_wait_result(c, id_alloc, &addr2) == VEO_COMMAND_OK && addr2);
  CHECK(veo_call_wait_result(c, id_prev, &r) == VEO_COMMAND_OK && r == addr2);
  veo_args_clear(a);
  veo_args_set_u64(a, 0, 40);
  veo_args_set_u64(a, 1, 2);
  veo_call_async(c, add, a);
  veo_call_async_vh(c, vh_ret, (void*)(uintptr_t)1000); /* host functions do not count */
  veo_args_clear(a);
  veo_args_set_i32(a, 0, 0);
  uint64_t p0 = veo_call_async(c, prev, a);
  veo_args_set_i32(a, 0, 3); /* k_add <- k_prev(0) <- ... : 3 back is the alloc of 64 bytes */
  uint64_t p3 = veo_call_async(c, prev, a);
  veo_args_set_i32(a, 0, 64); /* beyond what is kept */
  uint64_t p64 = veo_call_async(c, prev, a);
  veo_context_sync(c);
  CHECK(veo_call_wait_result(c, p0, &r) == VEO_COMMAND_OK && r == 42);
  CHECK(veo_call_wait_result(c, p3, &r) == VEO_COMMAND_OK && r == addr2);
  CHECK(veo_call_wait_result(c, p64, &r) == VEO_COMMAND_OK && r == ~(uint64_t)0);
  /* a transfer larger than a slot goes in pieces (kMorePieces on all but the last): it is one request
     to veo_prev_req_result, so 1 back from the kernel after it is the k_add before it */
  enum { kBig = 8 << 20 };
  uint64_t big = 0;
  unsigned char* bytes = malloc(kBig);
  CHECK(bytes && veo_alloc_mem(p, &big, kBig) == 0 && big);
  memset(bytes, 7, kBig);
  veo_args_clear(a);
  veo_args_set_u64(a, 0, 40);
  veo_args_set_u64(a, 1, 2);
  veo_call_async(c, add, a);
  uint64_t id_big = veo_async_write_mem(c, big, bytes, kBig);
  veo_args_clear(a);
  veo_args_set_i32(a, 0, 1);
  uint64_t p1 = veo_call_async(c, prev, a);
  CHECK(id_big != VEO_REQUEST_ID_INVALID && veo_call_wait_result(c, id_big, &r) == VEO_COMMAND_OK);
  CHECK(veo_call_wait_result(c, p1, &r) == VEO_COMMAND_OK && r == 42);
  CHECK(veo_free_mem(p, big) == 0);
  free(bytes);
  /* free: 0 as result; twice, or something never allocated, is refused at once */
  id = veo_free_mem_async(c, addr);
  CHECK(id != VEO_REQUEST_ID_INVALID && veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == 0);
  CHECK(veo_free_mem_async(c, addr) == VEO_REQUEST_ID_INVALID);
  CHECK(strstr(accio_offload_last_error(), "was not allocated"));
  CHECK(veo_free_mem(p, addr2) == 0); /* an async allocation is the proc's like any other */
  CHECK(veo_alloc_mem_async(NULL, 8) == VEO_REQUEST_ID_INVALID);
  CHECK(veo_free_mem_async(NULL, 8) == VEO_REQUEST_ID_INVALID);
  veo_args_free(a);
  veo_proc_destroy(p);
}

struct block_arg {
  struct veo_thr_ctxt* c;
  uint64_t fn;
  uint64_t ids[64];
  int use_block;
};
static void* block_thread(void* v) {
  struct block_arg* b = v;
  struct veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, 1);
  veo_args_set_u64(a, 1, 2);
  if (b->use_block) {
    veo_req_block_begin(b->c);
    veo_req_block_begin(b->c); /* nested */
  }
  for (int i = 0; i < 64; ++i) {
    b->ids[i] = veo_call_async(b->c, b->fn, a);
    if (i == 8) usleep(20000); /* the other thread would get in here */
  }
  if (b->use_block) {
    veo_req_block_end(b->c);
    veo_req_block_end(b->c);
  }
  veo_args_free(a);
  return NULL;
}

static void test_req_block(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib);
  struct veo_thr_ctxt* c = veo_context_open(p);
  CHECK(c);
  struct block_arg x = {c, sym(p, lib, "k_add"), {0}, 1}, y = {c, x.fn, {0}, 0};
  pthread_t tx, ty;
  pthread_create(&tx, NULL, block_thread, &x);
  usleep(5000);
  pthread_create(&ty, NULL, block_thread, &y);
  pthread_join(tx, NULL);
  pthread_join(ty, NULL);
  veo_context_sync(c);
  for (int i = 1; i < 64; ++i) CHECK(x.ids[i] == x.ids[0] + (uint64_t)i); /* consecutive */
  for (int i = 0; i < 64; ++i) {
    uint64_t r = 0;
    CHECK(veo_call_wait_result(c, x.ids[i], &r) == VEO_COMMAND_OK && r == 3);
    CHECK(veo_call_wait_result(c, y.ids[i], &r) == VEO_COMMAND_OK && r == 3);
  }
  veo_req_block_end(c); /* none held */
  CHECK(strstr(accio_offload_last_error(), "no request block of this thread"));
  veo_proc_destroy(p);
}

static void test_sync_order(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  uint64_t lib = veo_load_library(p, g_lib);
  struct veo_thr_ctxt* m = veo_context_open(p);
  struct veo_thr_ctxt* other = veo_context_open(p);
  CHECK(m && other);
  size_t n = 8u << 20; /* several pieces */
  uint64_t buf;
  CHECK(veo_alloc_mem(p, &buf, n) == 0);
  char* src = malloc(n);
  char* dst = calloc(1, n);
  memset(src, 0x5a, n);
  /* an async write on the main context, then a synchronous read on the proc: it sees the write */
  CHECK(veo_async_write_mem(m, buf, src, n) != VEO_REQUEST_ID_INVALID);
  CHECK(veo_read_mem(p, dst, buf, n) == 0 && memcmp(src, dst, n) == 0);
  /* a kernel queued on the main context runs before a later synchronous read */
  struct veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, buf);
  veo_args_set_u64(a, 1, 4096);
  veo_args_set_u64(a, 2, 9);
  uint64_t sleep_id;
  {
    struct veo_args* s = veo_args_alloc();
    veo_args_set_u64(s, 0, 100);
    sleep_id = veo_call_async(m, sym(p, lib, "k_sleep_ms"), s);
    veo_args_free(s);
  }
  uint64_t fill_id = veo_call_async(m, sym(p, lib, "k_mem_fill"), a);
  unsigned char got[4096];
  CHECK(veo_read_mem(p, got, buf, sizeof got) == 0);
  for (int i = 0; i < 4096; ++i) CHECK(got[i] == (unsigned char)(9 * 31 + i * 7));
  uint64_t r;
  CHECK(veo_call_wait_result(m, sleep_id, &r) == VEO_COMMAND_OK);
  CHECK(veo_call_wait_result(m, fill_id, &r) == VEO_COMMAND_OK && r == 4096);
  /* veo_context_open also waits for what is queued on the main context */
  {
    struct veo_args* s = veo_args_alloc();
    veo_args_set_u64(s, 0, 150);
    sleep_id = veo_call_async(m, sym(p, lib, "k_sleep_ms"), s);
    veo_args_free(s);
    struct veo_thr_ctxt* third = veo_context_open(p);
    CHECK(third && veo_call_peek_result(m, sleep_id, &r) == VEO_COMMAND_OK && r == 150);
    CHECK(veo_context_close(third) == 0);
  }
  /* ... and only that context: a long kernel on another context does not hold it up */
  struct veo_args* s = veo_args_alloc();
  veo_args_set_u64(s, 0, 2000);
  uint64_t long_id = veo_call_async(other, sym(p, lib, "k_sleep_ms"), s);
  usleep(20000);
  double t0 = now_s();
  CHECK(veo_read_mem(p, got, buf, 64) == 0 && now_s() - t0 < 1.0);
  CHECK(veo_call_wait_result(other, long_id, &r) == VEO_COMMAND_OK);
  veo_args_free(s);
  veo_args_free(a);
  free(src);
  free(dst);
  veo_proc_destroy(p);
}

static int g_hook_calls;
static void* g_hook_payload;
static void* g_hook_first;
static uint64_t g_hook_u64;
static size_t g_hook_size;
static void hook_handle_ptr_size(void* payload, ...) { /* (proc, uint64_t*, size) */
  va_list ap;
  va_start(ap, payload);
  g_hook_payload = payload;
  g_hook_first = va_arg(ap, void*);
  g_hook_u64 = *va_arg(ap, uint64_t*);
  g_hook_size = va_arg(ap, size_t);
  va_end(ap);
  g_hook_calls++;
}
static void hook_handle_u64(void* payload, ...) { /* (proc|ctx, uint64_t) */
  va_list ap;
  va_start(ap, payload);
  g_hook_payload = payload;
  g_hook_first = va_arg(ap, void*);
  g_hook_u64 = va_arg(ap, uint64_t);
  va_end(ap);
  g_hook_calls++;
}
static void hook_handle_u64_size(void* payload, ...) { /* (proc|ctx, uint64_t or void*, size) */
  va_list ap;
  va_start(ap, payload);
  g_hook_payload = payload;
  g_hook_first = va_arg(ap, void*);
  g_hook_u64 = va_arg(ap, uint64_t);
  g_hook_size = va_arg(ap, size_t);
  va_end(ap);
  g_hook_calls++;
}
static void* g_hmem_alloced;
static size_t g_hmem_size;
static uint64_t g_hmem_freed;
static void on_hmem_alloc(void* hmem, size_t size) {
  g_hmem_alloced = hmem;
  g_hmem_size = size;
}
static void on_hmem_free(uint64_t hmem) { g_hmem_freed = hmem; }

static void test_hooks(void) {
  struct veo_proc_handle* p = new_proc();
  CHECK(p);
  struct veo_thr_ctxt* c = veo_context_open(p);
  int tag = 0;
  veo_register_hook((void*)&veo_alloc_mem, hook_handle_ptr_size, &tag);
  CHECK(veo_get_hook((void*)&veo_alloc_mem) == (void*)hook_handle_ptr_size);
  uint64_t addr = 0;
  g_hook_calls = 0;
  CHECK(veo_alloc_mem(p, &addr, 123) == 0);
  CHECK(g_hook_calls == 1 && g_hook_payload == &tag && g_hook_first == (void*)p && g_hook_u64 == addr &&
        g_hook_size == 123);
  veo_unregister_hook((void*)&veo_alloc_mem);
  CHECK(veo_get_hook((void*)&veo_alloc_mem) == NULL);
  uint64_t addr2 = 0;
  CHECK(veo_alloc_mem(p, &addr2, 8) == 0 && g_hook_calls == 1); /* not called any more */
  veo_register_hook((void*)&veo_free_mem, hook_handle_u64, &tag);
  CHECK(veo_free_mem(p, addr) == 0 && g_hook_calls == 2 && g_hook_first == (void*)p && g_hook_u64 == addr);
  CHECK(veo_free_mem(p, addr) == -1 && g_hook_calls == 2); /* a refused free calls no hook */
  veo_unregister_hook((void*)&veo_free_mem);
  /* async: the hook runs when the result is picked up; the request's result is the address */
  veo_register_hook((void*)&veo_alloc_mem_async, hook_handle_u64_size, NULL);
  uint64_t id = veo_alloc_mem_async(c, 77), got = 0;
  CHECK(id != VEO_REQUEST_ID_INVALID && veo_call_wait_result(c, id, &got) == VEO_COMMAND_OK && got);
  CHECK(g_hook_calls == 3 && g_hook_payload == NULL && g_hook_first == (void*)c && g_hook_u64 == got &&
        g_hook_size == 77);
  veo_unregister_hook((void*)&veo_alloc_mem_async);
  veo_register_hook((void*)&veo_free_mem_async, hook_handle_u64, NULL);
  id = veo_free_mem_async(c, got);
  uint64_t r = 1;
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && r == 0);
  CHECK(g_hook_calls == 4 && g_hook_first == (void*)c && g_hook_u64 == got);
  veo_unregister_hook((void*)&veo_free_mem_async);
  /* hmem allocation hooks get the tagged address */
  veo_register_hook((void*)&veo_alloc_hmem, hook_handle_u64_size, &tag);
  veo_register_hook((void*)&veo_free_hmem, hook_handle_u64, &tag);
  void* hm = NULL;
  CHECK(veo_alloc_hmem(p, &hm, 99) == 0);
  CHECK(g_hook_calls == 5 && g_hook_first == (void*)p && g_hook_u64 == (uint64_t)hm && g_hook_size == 99);
  CHECK(veo_free_hmem(hm) == 0 && g_hook_calls == 6 && g_hook_u64 == (uint64_t)hm);
  CHECK(veo_free_hmem(hm) == -1 && g_hook_calls == 6); /* refused: no hook */
  veo_unregister_hook((void*)&veo_alloc_hmem);
  veo_unregister_hook((void*)&veo_free_hmem);
  /* veo_register_hmem_hook_functions: every allocation and release, as hmem addresses */
  veo_register_hmem_hook_functions(on_hmem_alloc, on_hmem_free);
  CHECK(veo_alloc_mem(p, &addr, 4096) == 0);
  CHECK(g_hmem_alloced == veo_set_proc_identifier((void*)addr, veo_proc_identifier(p)) && g_hmem_size == 4096);
  CHECK(veo_free_mem(p, addr) == 0 && g_hmem_freed == (uint64_t)g_hmem_alloced);
  id = veo_alloc_mem_async(c, 512);
  CHECK(veo_call_wait_result(c, id, &got) == VEO_COMMAND_OK && got);
  CHECK(veo_get_hmem_addr(g_hmem_alloced) == (void*)got && g_hmem_size == 512);
  id = veo_free_mem_async(c, got);
  CHECK(veo_call_wait_result(c, id, &r) == VEO_COMMAND_OK && veo_get_hmem_addr((void*)g_hmem_freed) == (void*)got);
  /* a proc whose identifier does not fit the tag (the 17th and later) has no hmem address: its
     allocations do not reach the functions, and no error is reported */
  struct veo_proc_handle* more[VEO_MAX_HMEM_PROCS];
  accio_offload_options idle = g_opts;
  idle.spin_us = 0; /* sixteen workers spinning would starve the machine */
  int n = 0;
  while (n < VEO_MAX_HMEM_PROCS &&
         veo_proc_identifier(more[n] = accio_offload_proc_create(&idle)) < VEO_MAX_HMEM_PROCS)
    ++n;
  CHECK(n < VEO_MAX_HMEM_PROCS && more[n] && veo_proc_identifier(more[n]) >= VEO_MAX_HMEM_PROCS);
  struct veo_proc_handle* untagged = more[n];
  g_hmem_alloced = NULL;
  g_hmem_freed = 0;
  veo_register_hook(NULL, hook_handle_u64, NULL); /* refused: sets a known last error */
  CHECK(veo_alloc_mem(untagged, &addr, 64) == 0 && g_hmem_alloced == NULL);
  CHECK(veo_free_mem(untagged, addr) == 0 && g_hmem_freed == 0);
  CHECK(strstr(accio_offload_last_error(), "veo_register_hook")); /* nothing reported since */
  for (int i = 0; i <= n; ++i) veo_proc_destroy(more[i]);
  veo_unregister_hmem_hook_functions();
  CHECK(veo_get_hook((void*)&veo_alloc_mem) == NULL && veo_get_hook((void*)&veo_free_mem_async) == NULL);
  g_hmem_alloced = NULL;
  CHECK(veo_alloc_mem(p, &addr, 8) == 0 && g_hmem_alloced == NULL);
  veo_register_hook(NULL, hook_handle_u64, NULL); /* refused */
  CHECK(strstr(accio_offload_last_error(), "veo_register_hook"));
  veo_proc_destroy(p);
}

static void test_hmem(void) {
  struct veo_proc_handle* p = new_proc();
  struct veo_proc_handle* q = new_proc();
  CHECK(p && q);
  uint64_t lib = veo_load_library(p, g_lib);
  int ident = veo_proc_identifier(p);
  CHECK(ident >= 0 && ident < VEO_MAX_HMEM_PROCS && veo_get_max_proc_identifier() == 16);
  void *h1 = NULL, *h2 = NULL, *hq = NULL, *host = NULL;
  CHECK(veo_alloc_hmem(p, &h1, 4096) == 0 && veo_alloc_hmem(p, &h2, 4096) == 0 && veo_alloc_hmem(q, &hq, 64) == 0);
  uint64_t t = (uint64_t)h1;
  CHECK((t >> 63) == 1 && (int)((t >> 59) & 15) == ident && veo_is_ve_addr(h1) == 1);
  CHECK(veo_get_proc_identifier_from_hmem(h1) == ident && veo_get_proc_identifier_from_hmem(hq) == veo_proc_identifier(q));
  CHECK((uint64_t)veo_get_hmem_addr(h1) == (t & ~(0x1full << 59)));
  CHECK(veo_set_proc_identifier(veo_get_hmem_addr(h1), ident) == h1);
  CHECK(veo_get_proc_handle_from_hmem(h1) == p && veo_get_proc_handle_from_hmem(hq) == q);
  CHECK(veo_get_pid_from_hmem(h1) == accio_offload_worker_pid(p) && veo_get_venum_from_hmem(h1) == 0);
  /* round trips: host -> worker -> worker -> host */
  unsigned char in[4096], out[4096];
  uint64_t want = 0;
  for (int i = 0; i < 4096; ++i) want += in[i] = (unsigned char)(i * 11 + 1);
  CHECK(veo_hmemcpy(h1, in, sizeof in) == 0);
  CHECK(veo_hmemcpy(h2, h1, sizeof in) == 0);
  memset(out, 0, sizeof out);
  CHECK(veo_hmemcpy(out, h2, sizeof out) == 0 && memcmp(in, out, sizeof in) == 0);
  CHECK(veo_read_mem(p, out, (uint64_t)veo_get_hmem_addr(h2), 16) == 0 && memcmp(in, out, 16) == 0);
  /* an hmem argument reaches the kernel tagged; it strips the tag */
  struct veo_args* a = veo_args_alloc();
  CHECK(veo_args_set_hmem(a, 0, h1) == 0);
  veo_args_set_u64(a, 1, 4096);
  uint64_t r = 0;
  CHECK(veo_call_sync(p, sym(p, lib, "k_hmem_sum"), a, &r) == 0 && r == want);
  /* host hmem: untagged, copied on the host */
  CHECK(veo_alloc_hmem(NULL, &host, 4096) == 0 && host && !veo_is_ve_addr(host));
  CHECK(veo_get_proc_identifier_from_hmem(host) == -1 && veo_get_pid_from_hmem(host) == -1 &&
        veo_get_venum_from_hmem(host) == -1 && veo_get_proc_handle_from_hmem(host) == NULL);
  CHECK(veo_get_hmem_addr(host) == host);
  CHECK(veo_hmemcpy(host, h1, 4096) == 0 && memcmp(host, in, 4096) == 0);
  CHECK(veo_hmemcpy(out, host, 4096) == 0 && memcmp(out, in, 4096) == 0);
  /* errors */
  CHECK(veo_hmemcpy(hq, h1, 64) == -1 && strstr(accio_offload_last_error(), "different procs"));
  CHECK(veo_set_proc_identifier(in, 16) == NULL && veo_set_proc_identifier(in, -1) == NULL);
  void* stray = NULL; /* a tag naming no live proc */
  for (int i = 0; i < VEO_MAX_HMEM_PROCS && !stray; ++i) {
    void* t = veo_set_proc_identifier((void*)0x1000, i);
    if (!veo_get_proc_handle_from_hmem(t)) stray = t;
  }
  CHECK(stray && veo_get_pid_from_hmem(stray) == -1 && veo_get_venum_from_hmem(stray) == -1);
  CHECK(veo_free_hmem(stray) == -1 && strstr(accio_offload_last_error(), "does not exist"));
  CHECK(veo_hmemcpy(stray, in, 8) == -1 && veo_hmemcpy(out, stray, 8) == -1);
  CHECK(veo_alloc_hmem(p, NULL, 8) == -1);
  /* a bad worker address is that request's error, not a crash */
  void* wild = veo_set_proc_identifier((void*)0x10, ident);
  CHECK(veo_hmemcpy(h1, wild, 8) == -1 && veo_hmemcpy(out, h1, 8) == 0);
  CHECK(veo_free_hmem(h1) == 0 && veo_free_hmem(h2) == 0 && veo_free_hmem(hq) == 0 && veo_free_hmem(host) == 0);
  CHECK(veo_free_hmem(h1) == -1); /* twice */
  veo_args_free(a);
  veo_proc_destroy(q);
  veo_proc_destroy(p);
}

/* Procs beyond identifier 15 work, but their memory cannot be named as hmem. */
static void test_hmem_proc_limit(void) {
  struct veo_proc_handle* ps[17] = {0};
  int n = 0, beyond = -1;
  for (; n < 17; ++n) {
    ps[n] = new_proc();
    if (!ps[n]) break;
    if (veo_proc_identifier(ps[n]) >= VEO_MAX_HMEM_PROCS) beyond = n;
  }
  int ok = n == 17 && beyond >= 0;
  void* hm = NULL;
  int rc = ok ? veo_alloc_hmem(ps[beyond], &hm, 8) : 0;
  const char* why = ok ? accio_offload_last_error() : "";
  int msg = strstr(why, "VEO_MAX_HMEM_PROCS") != NULL;
  uint64_t addr = 0;
  int plain = ok ? veo_alloc_mem(ps[beyond], &addr, 8) : -1;
  for (int i = 0; i < n; ++i) veo_proc_destroy(ps[i]);
  CHECK(ok);
  CHECK(rc == -1 && hm == NULL && msg);
  CHECK(plain == 0 && addr);
}

static void test_ve_omp_num_threads(void) {
  setenv("OMP_NUM_THREADS", "2", 1);
  setenv("VE_OMP_NUM_THREADS", "3", 1);
  struct veo_proc_handle* p = new_proc();
  setenv("VE_OMP_NUM_THREADS", "x3", 1);
  struct veo_proc_handle* bad = new_proc();
  const char* why = accio_offload_last_error();
  int named = strstr(why, "VE_OMP_NUM_THREADS='x3'") != NULL;
  setenv("VE_OMP_NUM_THREADS", "0", 1);
  struct veo_proc_handle* zero = new_proc();
  unsetenv("VE_OMP_NUM_THREADS");
  struct veo_proc_handle* plain = new_proc();
  unsetenv("OMP_NUM_THREADS");
  CHECK(p && plain && !bad && !zero && named);
  uint64_t lib = veo_load_library(p, g_lib), lib2 = veo_load_library(plain, g_lib), r = 0, r2 = 0;
  CHECK(veo_call_sync(p, sym(p, lib, "k_omp_max"), NULL, &r) == 0);
  CHECK(veo_call_sync(plain, sym(plain, lib2, "k_omp_max"), NULL, &r2) == 0);
  veo_proc_destroy(p);
  veo_proc_destroy(plain);
  if (r == 0) {
    fprintf(stderr, "  (kernels built without OpenMP: VE_OMP_NUM_THREADS checked for validation only)\n");
    return;
  }
  CHECK(r == 3 && r2 == 2); /* VE_OMP_NUM_THREADS wins over OMP_NUM_THREADS; without it, OMP_NUM_THREADS */
}

/* ---------------------------------------------------------------------------------------- */

struct test {
  const char* name;
  void (*fn)(void);
};
static const struct test tests[] = {
    {"version", test_version},         {"proc_lifecycle", test_proc_lifecycle},
    {"bad_worker", test_bad_worker_and_node}, {"libraries", test_libraries},
    {"static_worker", test_static_worker}, {"contexts", test_contexts},
    {"arg_types", test_arg_types},     {"stack_args", test_stack_args},
    {"memory", test_memory},           {"call_patterns", test_call_patterns},
    {"vh_calls", test_vh_calls},       {"vh_without_a_waiter", test_vh_runs_without_a_waiter},       {"threads", test_threads},
    {"many_procs", test_many_procs},   {"openmp", test_openmp},
    {"exceptions", test_exceptions},   {"killed_worker", test_killed_worker},
    {"timeout", test_timeout},         {"host_death", test_host_death},
    {"fork", test_fork},               {"idle_cpu", test_idle_cpu},
    {"settings_and_log", test_settings_and_log},
    {"kernel_output", test_kernel_output}, {"async_alloc_prev_result", test_async_alloc_and_prev_result},
    {"req_block", test_req_block},     {"sync_order", test_sync_order},
    {"hooks", test_hooks},             {"hmem", test_hmem},
    {"hmem_proc_limit", test_hmem_proc_limit}, {"ve_omp_num_threads", test_ve_omp_num_threads},
    {"big_stack", test_big_stack},     {"overflow", test_overflow}, {"sync_after_a_dropped_piece", test_sync_after_a_dropped_piece},
    {"destroyed_handle", test_destroyed_handle}, {"sync_call_timeout", test_sync_call_timeout},
    {"context_cycles", test_context_cycles}, {"timeout_bounds_sync_and_destroy", test_timeout_bounds_sync_and_destroy},
};

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s KERNELS.so KERNELS2.so STATIC_WORKER KERNELS3.so [--transport T] [--spin US] [test...]\n",
            argv[0]);
    return 2;
  }
  g_lib = argv[1];
  g_lib2 = argv[2];
  g_static = argv[3];
  g_lib3 = argv[4];
  if (accio_offload_options_init(&g_opts) != 0) return 2;
  int first = 5;
  while (first + 1 < argc && argv[first][0] == '-') {
    if (!strcmp(argv[first], "--transport"))
      g_opts.transport = !strcmp(argv[first + 1], "socket") ? ACCIO_OFFLOAD_SOCKET : ACCIO_OFFLOAD_SHM;
    else if (!strcmp(argv[first], "--spin"))
      g_opts.spin_us = !strcmp(argv[first + 1], "forever") ? ACCIO_OFFLOAD_SPIN_FOREVER : atoll(argv[first + 1]);
    first += 2;
  }
  signal(SIGPIPE, SIG_IGN);
  int ran = 0;
  for (size_t i = 0; i < sizeof tests / sizeof *tests; ++i) {
    int selected = first >= argc;
    for (int k = first; k < argc; ++k) selected |= !strcmp(argv[k], tests[i].name);
    if (!selected) continue;
    int before = g_failures;
    double t0 = now_s();
    tests[i].fn();
    fprintf(stderr, "%s %s (%.2f s)\n", g_failures == before ? "ok  " : "FAIL", tests[i].name, now_s() - t0);
    ran++;
  }
  fprintf(stderr, "%d tests, %d failures\n", ran, g_failures);
  return g_failures ? 1 : 0;
}
