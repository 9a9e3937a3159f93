/* Kernels for the offload tests: ordinary host functions in a shared library that the worker
 * loads with veo_load_library. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

uint64_t k_add(uint64_t a, uint64_t b) { return a + b; }
uint64_t k_nop(void) { return 0; }

/* Every argument type VEO has, in one call: returns a checksum the test computes too. */
uint64_t k_types(int64_t a, uint64_t b, int32_t c, uint32_t d, int16_t e, uint16_t f, int8_t g, uint8_t h,
                 double x, float y) {
  double s = (double)a + (double)b + c + d + e + f + g + h + x * 1000.0 + (double)y * 100.0;
  return (uint64_t)(int64_t)s;
}

/* Many arguments: sum of i * arg_i over n arguments of alternating int and double (all set). */
#define A8(p) uint64_t p##0, uint64_t p##1, uint64_t p##2, uint64_t p##3, uint64_t p##4, uint64_t p##5, uint64_t p##6, uint64_t p##7
uint64_t k_many32(A8(a), A8(b), A8(c), A8(d)) {
  uint64_t v[32] = {a0, a1, a2, a3, a4, a5, a6, a7, b0, b1, b2, b3, b4, b5, b6, b7,
                    c0, c1, c2, c3, c4, c5, c6, c7, d0, d1, d2, d3, d4, d5, d6, d7};
  uint64_t s = 0;
  for (int i = 0; i < 32; ++i) s += (uint64_t)(i + 1) * v[i];
  return s;
}
double k_dsum_unused;
uint64_t k_mixed(double a, int32_t b, double c, int8_t d, float e, uint64_t f, double g, double h, double i,
                 double j, double k, double l, double m, int16_t n) {
  /* 9 doubles + 1 float: more than the 8 SSE registers, so some go on the stack */
  double s = a + b + c + d + e + (double)f + g + h + i + j + k + l + m + n;
  return (uint64_t)(s * 10.0);
}

/* Stack arguments: IN sums bytes; OUT fills; INOUT increments every byte. */
uint64_t k_sum_in(const unsigned char* p, uint64_t n) {
  uint64_t s = 0;
  for (uint64_t i = 0; i < n; ++i) s += p[i];
  return s;
}
uint64_t k_fill_out(unsigned char* p, uint64_t n, uint64_t v) {
  for (uint64_t i = 0; i < n; ++i) p[i] = (unsigned char)(v + i);
  return n;
}
uint64_t k_inc_inout(unsigned char* p, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) p[i]++;
  return n;
}
/* Two stack buffers and a scalar: copies in to out. */
uint64_t k_copy(const char* in, char* out, uint64_t n) {
  memcpy(out, in, n);
  return n;
}

/* Worker memory: fills and sums a buffer allocated with veo_alloc_mem. */
uint64_t k_mem_fill(unsigned char* p, uint64_t n, uint64_t seed) {
  for (uint64_t i = 0; i < n; ++i) p[i] = (unsigned char)(seed * 31 + i * 7);
  return n;
}
uint64_t k_mem_sum(const unsigned char* p, uint64_t n) {
  uint64_t s = 0;
  for (uint64_t i = 0; i < n; ++i) s += p[i];
  return s;
}

/* Faults. */
uint64_t k_segv(void) {
  volatile int* p = (volatile int*)16;
  return (uint64_t)*p;
}
uint64_t k_abort(void) {
  abort();
}
uint64_t k_raise(int sig) {
  raise(sig);
  return 0;
}
uint64_t k_exit(int code) { _exit(code); }
uint64_t k_sleep_ms(uint64_t ms) {
  usleep((useconds_t)(ms * 1000));
  return ms;
}
uint64_t k_pid(void) { return (uint64_t)getpid(); }

/* OpenMP: the number of threads of a parallel region and a reduction over them. */
uint64_t k_omp_threads(void) {
  uint64_t n = 0;
#pragma omp parallel reduction(+ : n)
  n += 1;
  return n;
}
uint64_t k_omp_sum(uint64_t n) {
  uint64_t s = 0;
#pragma omp parallel for reduction(+ : s)
  for (uint64_t i = 1; i <= n; ++i) s += i;
  return s;
}
uint64_t k_omp_segv(void) {
  uint64_t n = 0;
#pragma omp parallel reduction(+ : n)
  {
#ifdef _OPENMP
    if (omp_get_thread_num() == omp_get_num_threads() - 1) n += (uint64_t)*(volatile int*)16;
#endif
    n += 1;
  }
  return n;
}

/* A counter that lives in the library: unload/reload resets it. */
static uint64_t counter;
uint64_t k_count(void) { return ++counter; }

/* Output without a newline or fflush: the worker must flush it when it exits or crashes. */
uint64_t k_print(const char* out, const char* err) {
  printf("%s", out);
  fprintf(stderr, "%s", err);
  return 0;
}
uint64_t k_print_segv(const char* out) {
  printf("%s", out);
  return (uint64_t)*(volatile int*)16;
}

/* The kernel-side helpers of AVEO, declared as a kernel written for AVEO has them (its veo_ve.h and
 * veo_hmem.h; accio/ve_offload.h declares them too): the worker's libaccio_offload defines them. */
int veo_prev_req_result(int offs, uint64_t* result);
int veo_is_ve_addr(const void* addr);
void* veo_get_hmem_addr(void* addr);

uint64_t k_prev(int offs) {
  uint64_t r = 0;
  return veo_prev_req_result(offs, &r) == 0 ? r : ~(uint64_t)0;
}
/* An hmem argument: tagged as the host passed it; sums n bytes of its memory. */
uint64_t k_hmem_sum(void* hmem, uint64_t n) {
  if (!veo_is_ve_addr(hmem)) return ~(uint64_t)0;
  const unsigned char* p = (const unsigned char*)veo_get_hmem_addr(hmem);
  uint64_t s = 0;
  for (uint64_t i = 0; i < n; ++i) s += p[i];
  return s;
}
/* The OpenMP threads a parallel region gets by default (0: built without OpenMP). */
uint64_t k_omp_max(void) {
#ifdef _OPENMP
  return (uint64_t)omp_get_max_threads();
#else
  return 0;
#endif
}

double k_ddiv(double a, double b) { return a / b; }
uint64_t k_dmul_u64(double a, double b) { return (uint64_t)(a * b); } /* k_ddiv's arguments, another result type */
float k_fmul(float a, float b) { return a * b; }

/* Used by kernels3.c, which is not linked to this library (veo_load_library's RTLD_GLOBAL). */
uint64_t k_shared_helper(uint64_t a) { return a + 40; }

/* Waits until *flag is not 0 (set by the host through another context) and returns it; gives up
 * after about 20 s and returns 0, so that a runtime whose submission blocks fails the test instead
 * of hanging it. */
uint64_t k_wait_flag(volatile uint64_t* flag) {
  for (int i = 0; i < 200000; ++i) {
    uint64_t v = __atomic_load_n(flag, __ATOMIC_ACQUIRE);
    if (v) return v;
    usleep(100);
  }
  return 0;
}
uint64_t k_load64(const uint64_t* p) { return *p; }
/* Sleeps ms milliseconds, then fills the n bytes of its OUT buffer with v. */
uint64_t k_sleep_fill(unsigned char* p, uint64_t n, uint64_t v, uint64_t ms) {
  usleep((useconds_t)(ms * 1000));
  memset(p, (int)v, n);
  return n;
}
