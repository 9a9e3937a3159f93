/* A fake NVIDIA driver (libcuda) and cuFile (libcufile) for testing accio's CUDA back end on
 * machines without a GPU: ACCIO_LIBCUDA and ACCIO_LIBCUFILE point at this library.
 *
 * "Device" memory is a memfd mapped twice: PROT_NONE at the address handed out (so any host access
 * by mistake, a pread into it included, faults or fails with EFAULT, as for real device memory) and
 * read-write at a shadow address only this library uses. Managed memory is plain host memory.
 * Streams are threads that run their copies in order, optionally slowed (FAKE_CUDA_COPY_US per
 * copy), so overlap and ordering are real. Copies need a current context, as on a GPU.
 *
 * The legacy default stream (handles 0, 1 = CU_STREAM_LEGACY and 2 = per-thread, taken as one) is a
 * stream of its own, as on a GPU: cuMemsetD8Async there (slowed by FAKE_CUDA_MEMSET_US, a stand-in
 * for a kernel still running) is queued, and what waits for it is what the real driver orders after
 * it: synchronous copies and memsets, cuStreamSynchronize of a default stream, and every operation
 * of a stream created without CU_STREAM_NON_BLOCKING (it waits for the legacy work queued before
 * it). Operations of a non-blocking stream do not wait: a copy there can run before a kernel queued
 * earlier on the legacy stream has written the buffer, as on a GPU. (Not modelled: legacy work
 * waiting for the blocking streams' earlier work; one legacy stream for every device.)
 *
 * Contexts: one primary context per device, and contexts a program makes itself (cuCtxCreate_v2,
 * as PyCUDA does; cuCtxDestroy_v2). Memory belongs to the context current at its allocation (the
 * CONTEXT pointer attribute says which), a stream to the one current at its creation, and an
 * asynchronous copy on a stream of another context than the current one fails with
 * CUDA_ERROR_INVALID_CONTEXT (201), on a stream of a destroyed one with CUDA_ERROR_CONTEXT_IS_DESTROYED
 * (709), as NVIDIA/cccl#9615 and cuda-api-wrappers#537 report of the real driver.
 *
 * Knobs: FAKE_CUDA_DEVICES (default 1; 0 = cuInit fails with CUDA_ERROR_NO_DEVICE),
 * FAKE_CUDA_DEVICE_MEM (bytes per device, default 1 GiB), FAKE_CUDA_COPY_US, FAKE_CUDA_PAGEABLE_DMA_US=N (a
 * synchronous copy from pageable memory to the device lands N µs after it returns: see cuMemcpy),
 * FAKE_CUDA_FAIL_REGISTER=1 (cuMemHostRegister fails with CUDA_ERROR_OUT_OF_MEMORY; another value: with
 * that error code, e.g. 801 CUDA_ERROR_NOT_SUPPORTED), FAKE_CUDA_MEMLOCK=BYTES (a simulated
 * RLIMIT_MEMLOCK: a registration that would pin more than BYTES in all fails with
 * CUDA_ERROR_OUT_OF_MEMORY, as for a user process; root ignores the real limit, so only the fake can
 * refuse), FAKE_CUDA_FAIL_COPY_AFTER=N (the N+1-th
 * asynchronous copy fails), FAKE_CUDA_UNAVAILABLE=D (device D refuses a context: error 46, as in
 * exclusive-process mode; fake_cuda_primary_retains(D) counts the retained ones,
 * FAKE_CUDA_FAIL_LEGACY_SYNC=1 makes a synchronization of a default stream fail (999),
 * fake_cuda_primary_retain_attempts(D) the refused ones too), FAKE_CUFILE_NVFS=1 (cuFile reports the nvidia-fs driver: direct path),
 * FAKE_CUFILE_REGISTER_ERR=E (cuFileHandleRegister refuses every descriptor with cuFile error E),
 * FAKE_CUFILE_REGISTER_ERR_DIRECT=E (only O_DIRECT ones), FAKE_CUFILE_NO_COMPAT=1 (the driver
 * properties say compatibility mode is off), FAKE_CUFILE_BATCH_SETUP_FAIL=1 (cuFileBatchIOSetUp fails), FAKE_CUFILE_BATCH_FAIL_AT=K (the K-th
 * request of each batch submission fails with -EIO, moving nothing), FAKE_CUFILE_VERSION=V (what
 * cuFileGetVersion says, 1150 by default; under 1070 a batch call aborts), FAKE_CUFILE_EIO_AT=OFF (every
 * cuFile read or write, batched or not, that starts at file offset OFF fails with -EIO),
 * FAKE_CUFILE_FFLAGS=F (the driver properties' feature flags, CUfileFeatureFlags_t bits), FAKE_CUFILE_COMPAT_POOL=N (compatibility
 * mode's bounce buffers, 64 by default: a batch submission that needs more aborts, see below),
 * FAKE_CUFILE_COMPAT_DEVICE=1 (O_DIRECT handles in compatibility mode too, as for a device cuFile cannot
 * serve directly). Batch status comes back at
 * most 16 events per cuFileBatchIOGetStatus, as if its timeout had passed.
 *
 * cuMemHostRegister pins: a registration with CU_MEMHOSTREGISTER_READ_ONLY (file pages mapped
 * read-only) takes a private snapshot of the range's bytes, read with process_vm_readv so that a page
 * beyond end of file fails the registration (as pinning it fails) instead of raising SIGBUS, and
 * copies from the range read that snapshot, as DMA from a pinned page whose file was truncated or
 * rewritten afterwards would. Writable registrations (staging buffers, which the CPU refills
 * between copies) stay live. Read-only memory registered without READ_ONLY is refused
 * (CUDA_ERROR_NOT_PERMITTED), a copy into a READ_ONLY registration fails, and unregistering a range
 * that copies still read is counted (unregister_busy) and waits for them.
 * fake_cuda_counters() tells tests what happened; fake_cuda_stream_syncs() which streams were
 * synchronized, in order. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum { OK = 0, E_INVALID_VALUE = 1, E_OOM = 2, E_NOT_INIT = 3, E_NO_DEVICE = 100, E_INVALID_DEVICE = 101,
       E_INVALID_CONTEXT = 201, E_ALREADY_REGISTERED = 712, E_NOT_REGISTERED = 713, E_ILLEGAL_ADDRESS = 700,
       E_NOT_PERMITTED = 800 };
#define REGISTER_READ_ONLY 0x08u

typedef struct fake_counters_t {
  uint64_t async_copies, async_unpinned, sync_copies, events_recorded, event_waits;
  uint64_t max_queued;  /* most copies queued on one stream and not yet run */
  uint64_t registered, live_allocs, streams;
  uint64_t cufile_reads, cufile_writes, cufile_buf_registers, cufile_batch_ios, cufile_handles;
  /* cuMemHostRegister calls that succeeded (of which READ_ONLY) and failed, cuMemHostUnregister
   * calls that succeeded, bytes registered now, unregistrations while copies still read the range;
   * then the failed calls that asked for READ_ONLY (file pages: pagecache's pins, not staging rings). */
  uint64_t register_calls, register_readonly, register_refused, unregister_calls, registered_bytes, unregister_busy;
  uint64_t register_readonly_refused;
  uint64_t pointer_queries;  /* cuPointerGetAttributes calls (realign asks once per request, not twice) */
} fake_counters_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static fake_counters_t g_cnt;
static int g_init, g_devices = 1;
static long g_copy_us;
static long g_fail_copy_after = -1;

typedef struct Alloc {
  char *dev, *shadow;
  size_t size, mapped;
  int device, managed;
  struct CUctx_st* ctx;  /* the context current at its allocation */
  unsigned long long id;
  struct Alloc* next;
} Alloc;
typedef struct Reg {
  char* p;
  size_t n;
  unsigned flags;
  char* snap;    /* READ_ONLY: the bytes at registration, which copies from the range read */
  struct CUctx_st* ctx;  /* the context current at registration (a reset of it drops the registration) */
  long inflight; /* copies queued that read snap */
  struct Reg* next;
} Reg;
static Alloc* g_allocs;
static Reg* g_regs;
static pthread_cond_t g_reg_cv = PTHREAD_COND_INITIALIZER;  /* a registration's inflight went to 0 */
static size_t g_used[16];
static unsigned long long g_next_id = 1;

struct CUctx_st {
  int device;
  int own;    /* made by cuCtxCreate_v2, not a primary context */
  int dead;   /* cuCtxDestroy_v2'ed (kept, so that a stale handle can be told) */
  int reset;  /* a primary context cuDevicePrimaryCtxReset destroyed, not made again yet */
  unsigned long long id;  /* cuCtxGetId: which instance (a primary context made again gets a new one) */
  struct CUctx_st* next;  /* the program's own contexts, all kept (g_own_ctxs) */
};
static unsigned long long g_next_ctx_id = 1000;
static struct CUctx_st* g_own_ctxs;
static struct CUctx_st g_ctx[16];
static __thread struct CUctx_st* t_stack[16];
static __thread int t_depth;

static long env_long(const char* k, long dflt) {
  const char* v = getenv(k);
  return v && *v ? strtol(v, NULL, 10) : dflt;
}

/* The allocation holding [p, p+n), or NULL. Caller holds g_mu. */
static Alloc* find_alloc(const char* p, size_t n) {
  for (Alloc* a = g_allocs; a; a = a->next)
    if (p >= a->dev && p < a->dev + a->size) return (n <= (size_t)(a->dev + a->size - p)) ? a : NULL;
  return NULL;
}
static Reg* find_reg(const char* p, size_t n) {
  for (Reg* r = g_regs; r; r = r->next)
    if (p >= r->p && p + n <= r->p + r->n) return r;
  return NULL;
}
static int is_registered(const char* p, size_t n) { return find_reg(p, n) != NULL; }
/* Whether every page of [p, p+n) is mapped writable (from /proc/self/maps). */
static int writable(const char* p, size_t n) {
  FILE* f = fopen("/proc/self/maps", "re");
  if (!f) return 1;
  uintptr_t at = (uintptr_t)p, end = at + n;
  char line[512];
  while (at < end && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    char perms[8];
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || hi <= at) continue;
    if (lo > at || perms[1] != 'w') break;
    at = hi;
  }
  fclose(f);
  return at >= end;
}
/* Host-usable address for p (device memory through its shadow); NULL if p is device memory but
 * [p, p+n) leaves the allocation. */
static char* resolve(const void* p, size_t n) {
  pthread_mutex_lock(&g_mu);
  char* out = (char*)p;
  for (Alloc* a = g_allocs; a; a = a->next)
    if ((const char*)p >= a->dev && (const char*)p < a->dev + a->size) {
      out = n <= (size_t)(a->dev + a->size - (const char*)p) ? a->shadow + ((const char*)p - a->dev) : NULL;
      break;
    }
  pthread_mutex_unlock(&g_mu);
  return out;
}

/* CUDA does not survive fork(): in a child of a process that initialized it, the driver answers
 * CUDA_ERROR_NOT_INITIALIZED (3) to everything, cuInit included. The fake does the same for the calls
 * accio makes (FORKED). */
static pid_t g_init_pid;
static int forked(void) { return g_init_pid && getpid() != g_init_pid; }
static uint64_t g_forked_calls; /* calls made in a forked child (fake_cuda_forked_calls) */
EXPORT uint64_t fake_cuda_forked_calls(void) { return __atomic_load_n(&g_forked_calls, __ATOMIC_RELAXED); }
#define FORKED_RETURN(value)                                        \
  do {                                                              \
    if (forked()) {                                                 \
      __atomic_add_fetch(&g_forked_calls, 1, __ATOMIC_RELAXED);     \
      return value;                                                 \
    }                                                               \
  } while (0)
#define FORKED() FORKED_RETURN(E_NOT_INIT)
/* cuFile's: CU_FILE_DRIVER_NOT_INITIALIZED (5001), its negation for the data path */
#define FORKED_CF() FORKED_RETURN(((CUfileError_t){5001, 0}))
EXPORT CUresult cuInit(unsigned flags) {
  (void)flags;
  FORKED();
  g_init_pid = getpid();
  g_devices = (int)env_long("FAKE_CUDA_DEVICES", 1);
  if (g_devices > 16) g_devices = 16;
  g_copy_us = env_long("FAKE_CUDA_COPY_US", 0);
  g_fail_copy_after = env_long("FAKE_CUDA_FAIL_COPY_AFTER", -1);
  for (int i = 0; i < 16; ++i)  /* ids once: a later cuInit must not give a context made again its old one */
    g_ctx[i].device = i, g_ctx[i].id = g_ctx[i].id ? g_ctx[i].id : (unsigned long long)i + 1;
  if (g_devices <= 0) return E_NO_DEVICE;
  g_init = 1;
  return OK;
}
EXPORT CUresult cuDriverGetVersion(int* v) { FORKED(); *v = 12080; return OK; }
EXPORT CUresult cuGetErrorName(CUresult rc, const char** s) {
  FORKED();
  switch (rc) {
    case OK: *s = "CUDA_SUCCESS"; break;
    case E_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case E_OOM: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case E_NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; break;
    case E_INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case E_ILLEGAL_ADDRESS: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
    case E_NOT_INIT: *s = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case 709: *s = "CUDA_ERROR_CONTEXT_IS_DESTROYED"; break;
    case 801: *s = "CUDA_ERROR_NOT_SUPPORTED"; break;
    default: *s = "CUDA_ERROR_UNKNOWN"; return E_INVALID_VALUE;
  }
  return OK;
}
EXPORT CUresult cuGetErrorString(CUresult rc, const char** s) {
  FORKED();
  *s = rc == E_OOM ? "out of memory" : rc == E_INVALID_CONTEXT ? "invalid device context" : "fake driver error";
  return OK;
}
EXPORT CUresult cuDeviceGetCount(int* n) { FORKED(); if (!g_init) return E_NOT_INIT; *n = g_devices; return OK; }
EXPORT CUresult cuDeviceGet(int* d, int i) {
  FORKED();
  if (!g_init) return E_NOT_INIT;
  if (i < 0 || i >= g_devices) return E_INVALID_DEVICE;
  *d = i;
  return OK;
}
EXPORT CUresult cuDeviceGetName(char* s, int len, int d) { FORKED(); snprintf(s, (size_t)len, "accio fake GPU %d", d); return OK; }
EXPORT CUresult cuDeviceGetAttribute(int* v, int attr, int d) {
  FORKED();
  switch (attr) {
    case 16: *v = 4; break;           /* multiprocessors */
    case 33: *v = 0x17 + d; break;    /* PCI bus */
    case 34: *v = 0; break;           /* PCI device */
    case 40: *v = 2; break;           /* copy engines */
    case 41: *v = 1; break;           /* unified addressing */
    case 50: *v = 0; break;           /* PCI domain */
    case 75: *v = 9; break;
    case 76: *v = 0; break;
    case 113: *v = !getenv("FAKE_CUDA_NO_READONLY_REGISTER"); break; /* READ_ONLY host registration */
    default: *v = 0;
  }
  return OK;
}
EXPORT CUresult cuDeviceTotalMem_v2(size_t* b, int d) { FORKED(); (void)d; *b = (size_t)env_long("FAKE_CUDA_DEVICE_MEM", 1L << 30); return OK; }
/* Primary contexts retained per device. FAKE_CUDA_UNAVAILABLE=D: device D refuses one with
 * CUDA_ERROR_DEVICE_UNAVAILABLE (46), as a GPU in exclusive-process mode that another process owns. */
static uint64_t g_retains[16], g_retain_attempts[16];
EXPORT CUresult cuDevicePrimaryCtxRetain(struct CUctx_st** c, int d) {
  FORKED();
  if (d < 0 || d >= g_devices) return E_INVALID_DEVICE;
  __atomic_add_fetch(&g_retain_attempts[d], 1, __ATOMIC_RELAXED);
  if (env_long("FAKE_CUDA_UNAVAILABLE", -1) == d) return 46;
  __atomic_add_fetch(&g_retains[d], 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&g_mu);
  if (g_ctx[d].reset) {  /* made again after a reset: the same handle, a new instance */
    g_ctx[d].reset = 0;
    g_ctx[d].id = __atomic_add_fetch(&g_next_ctx_id, 1, __ATOMIC_RELAXED);
  }
  pthread_mutex_unlock(&g_mu);
  *c = &g_ctx[d];
  return OK;
}
EXPORT CUresult cuDevicePrimaryCtxGetState(int d, unsigned* flags, int* active) {
  FORKED();
  if (d < 0 || d >= g_devices) return E_INVALID_DEVICE;
  *flags = 0;
  *active = __atomic_load_n(&g_retains[d], __ATOMIC_RELAXED) > 0 && !g_ctx[d].reset;
  return OK;
}
/* cudaDeviceReset, numba.cuda.close(), CuPy's runtime.deviceReset: the primary context's allocations
 * and host registrations are destroyed with its streams and events (their later use aborts, see
 * alive), the retains stay counted, and the context is inactive until it is retained again, which
 * makes it anew under the same handle with a new cuCtxGetId. */
static void drain_legacy(void);
EXPORT CUresult cuDevicePrimaryCtxReset_v2(int d) {
  FORKED();
  if (d < 0 || d >= g_devices) return E_INVALID_DEVICE;
  drain_legacy();
  struct CUctx_st* c = &g_ctx[d];
  pthread_mutex_lock(&g_mu);
  c->reset = 1;
  for (Reg** pr = &g_regs; *pr;) {
    Reg* r = *pr;
    if (r->ctx != c) {
      pr = &r->next;
      continue;
    }
    while (r->inflight) pthread_cond_wait(&g_reg_cv, &g_mu);  /* a copy on a stream still reads it */
    for (pr = &g_regs; *pr != r; pr = &(*pr)->next) {}
    *pr = r->next;
    g_cnt.registered--;
    g_cnt.registered_bytes -= r->n;
    free(r->snap);
    free(r);
  }
  for (Alloc** pa = &g_allocs; *pa;) {
    Alloc* a = *pa;
    if (a->ctx != c) {
      pa = &a->next;
      continue;
    }
    *pa = a->next;
    g_used[a->device] -= a->mapped;
    g_cnt.live_allocs--;
    munmap(a->dev, a->mapped);
    if (a->shadow != a->dev) munmap(a->shadow, a->mapped);
    free(a);
  }
  pthread_mutex_unlock(&g_mu);
  return OK;
}
EXPORT CUresult cuDevicePrimaryCtxReset(int d) { return cuDevicePrimaryCtxReset_v2(d); }
EXPORT CUresult cuCtxGetId(struct CUctx_st* c, unsigned long long* id) {
  FORKED();
  if (!c) return E_INVALID_CONTEXT;
  if (c->reset || c->dead) return 709;  /* CUDA_ERROR_CONTEXT_IS_DESTROYED */
  *id = c->id;
  return OK;
}
EXPORT uint64_t fake_cuda_primary_retains(int d) { return d >= 0 && d < 16 ? g_retains[d] : 0; }
EXPORT uint64_t fake_cuda_primary_retain_attempts(int d) { return d >= 0 && d < 16 ? g_retain_attempts[d] : 0; }
EXPORT CUresult cuCtxPushCurrent_v2(struct CUctx_st* c) {
  FORKED();
  if (t_depth == 16) return E_INVALID_VALUE;
  t_stack[t_depth++] = c;
  return OK;
}
EXPORT CUresult cuCtxPopCurrent_v2(struct CUctx_st** c) {
  FORKED();
  if (!t_depth) return E_INVALID_CONTEXT;
  struct CUctx_st* top = t_stack[--t_depth];
  if (c) *c = top;
  return OK;
}
EXPORT CUresult cuCtxGetCurrent(struct CUctx_st** c) { FORKED(); *c = t_depth ? t_stack[t_depth - 1] : NULL; return OK; }
EXPORT CUresult cuCtxGetDevice(int* d) {
  FORKED();
  if (!t_depth) return E_INVALID_CONTEXT;
  *d = t_stack[t_depth - 1]->device;
  return OK;
}
/* A current context that can do work: not a primary context reset and not made again. */
static int have_ctx(void) { return t_depth > 0 && !t_stack[t_depth - 1]->reset; }
EXPORT CUresult cuCtxCreate_v2(struct CUctx_st** c, unsigned flags, int d) {
  FORKED();
  (void)flags;
  FORKED();
  if (d < 0 || d >= g_devices) return E_INVALID_DEVICE;
  if (t_depth == 16) return E_INVALID_VALUE;
  struct CUctx_st* x = calloc(1, sizeof *x);
  x->device = d;
  x->own = 1;
  x->id = __atomic_add_fetch(&g_next_ctx_id, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&g_mu);
  x->next = g_own_ctxs;
  g_own_ctxs = x;
  pthread_mutex_unlock(&g_mu);
  t_stack[t_depth++] = x;  /* made current, as cuCtxCreate does */
  *c = x;
  return OK;
}
EXPORT CUresult cuCtxDestroy_v2(struct CUctx_st* c) {
  FORKED();
  if (!c || !c->own) return E_INVALID_VALUE;
  c->dead = 1;  /* kept: stale handles must stay comparable */
  for (int i = 0; i < t_depth; ++i)
    if (t_stack[i] == c) {
      for (int j = i; j + 1 < t_depth; ++j) t_stack[j] = t_stack[j + 1];
      --t_depth;
      break;
    }
  return OK;
}

EXPORT CUresult cuPointerGetAttributes(unsigned n, int* attrs, void** data, CUdeviceptr ptr) {
  FORKED();
  if (!g_init) return E_NOT_INIT;
  pthread_mutex_lock(&g_mu);
  g_cnt.pointer_queries++;
  const char* p = (const char*)(uintptr_t)ptr;
  Alloc* a = find_alloc(p, 1);
  int reg = !a && is_registered(p, 1);
  for (unsigned i = 0; i < n; ++i) {
    switch (attrs[i]) {
      case 1: *(struct CUctx_st**)data[i] = a ? a->ctx : NULL; break;
      case 2: *(unsigned*)data[i] = a ? 2u : reg ? 1u : 0u; break;
      case 7: *(unsigned long long*)data[i] = a ? a->id : 0; break;
      case 8: *(unsigned char*)data[i] = (unsigned char)(a && a->managed); break;  /* a bool, as the driver writes */
      case 9: *(int*)data[i] = a ? a->device : -2; break;
      case 11: *(void**)data[i] = a ? a->dev : NULL; break;
      /* FAKE_CUDA_VMM_RESERVE=BYTES: a device allocation reports a range of BYTES, as memory mapped
       * into a VMM reservation (cuMemCreate/cuMemMap: PyTorch's expandable segments) reports the
       * whole reservation, mapped or not. */
      case 12: *(size_t*)data[i] = a ? (a->managed ? a->size : (size_t)env_long("FAKE_CUDA_VMM_RESERVE", (long)a->size)) : 0; break;
      default: break;
    }
  }
  pthread_mutex_unlock(&g_mu);
  return OK;
}

static CUresult alloc_impl(CUdeviceptr* out, size_t n, int managed) {
  if (!have_ctx()) return E_INVALID_CONTEXT;
  if (!n) return E_INVALID_VALUE;
  int dev = t_stack[t_depth - 1]->device;
  size_t mapped = (n + 4095) & ~(size_t)4095;
  pthread_mutex_lock(&g_mu);
  if (g_used[dev] + mapped > (size_t)env_long("FAKE_CUDA_DEVICE_MEM", 1L << 30)) {
    pthread_mutex_unlock(&g_mu);
    return E_OOM;
  }
  g_used[dev] += mapped;
  pthread_mutex_unlock(&g_mu);
  Alloc* a = calloc(1, sizeof *a);
  a->size = n;
  a->mapped = mapped;
  a->device = dev;
  a->managed = managed;
  a->ctx = t_stack[t_depth - 1];
  if (managed) {
    a->dev = a->shadow = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  } else {
    int fd = memfd_create("fake-device-memory", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)mapped) != 0) return E_OOM;
    a->shadow = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    a->dev = mmap(NULL, mapped, PROT_NONE, MAP_SHARED, fd, 0);
    close(fd);
  }
  if (a->dev == MAP_FAILED || a->shadow == MAP_FAILED) return E_OOM;
  pthread_mutex_lock(&g_mu);
  a->id = g_next_id++;
  a->next = g_allocs;
  g_allocs = a;
  g_cnt.live_allocs++;
  pthread_mutex_unlock(&g_mu);
  *out = (CUdeviceptr)(uintptr_t)a->dev;
  return OK;
}
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) { FORKED(); return alloc_impl(p, n, 0); }
EXPORT CUresult cuMemAllocManaged(CUdeviceptr* p, size_t n, unsigned flags) { (void)flags; FORKED(); return alloc_impl(p, n, 1); }
EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
  FORKED();
  pthread_mutex_lock(&g_mu);
  for (Alloc** pa = &g_allocs; *pa; pa = &(*pa)->next) {
    Alloc* a = *pa;
    if (a->dev == (char*)(uintptr_t)p) {
      *pa = a->next;
      g_used[a->device] -= a->mapped;
      g_cnt.live_allocs--;
      pthread_mutex_unlock(&g_mu);
      munmap(a->dev, a->mapped);
      if (a->shadow != a->dev) munmap(a->shadow, a->mapped);
      free(a);
      return OK;
    }
  }
  pthread_mutex_unlock(&g_mu);
  return E_INVALID_VALUE;
}
EXPORT CUresult cuMemGetInfo_v2(size_t* free_b, size_t* total) {
  FORKED();
  *total = (size_t)env_long("FAKE_CUDA_DEVICE_MEM", 1L << 30);
  *free_b = *total - g_used[0];
  return OK;
}
/* Copies n bytes at p into out as the kernel would (a fault is an error, never SIGBUS):
 * process_vm_readv, or where a sandbox refuses it, a write into a memfd read back. */
static int pin_copy(char* out, const void* p, size_t n) {
  struct iovec local = {out, n}, remote = {(void*)p, n};
  ssize_t r = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
  if (r >= 0 || (errno != EPERM && errno != ENOSYS)) return r == (ssize_t)n;
  int fd = memfd_create("fake-pin", MFD_CLOEXEC);
  if (fd < 0) return 0;
  int ok = write(fd, p, n) == (ssize_t)n && pread(fd, out, n, 0) == (ssize_t)n;
  close(fd);
  return ok;
}
EXPORT CUresult cuMemHostRegister_v2(void* p, size_t n, unsigned flags) {
  FORKED();
  if (!have_ctx()) return E_INVALID_CONTEXT;
  CUresult rc = OK;
  char* snap = NULL;
  const long fail = env_long("FAKE_CUDA_FAIL_REGISTER", 0);
  if (fail) rc = fail == 1 ? E_OOM : (CUresult)fail;
  else if (!(flags & REGISTER_READ_ONLY) && !writable(p, n)) rc = E_NOT_PERMITTED;
  else if (flags & REGISTER_READ_ONLY) {
    /* Pin: take the bytes now. A page that cannot be read (beyond end of file) fails the pin. */
    snap = malloc(n ? n : 1);
    if (!snap || !pin_copy(snap, p, n)) rc = E_INVALID_VALUE;
  }
  pthread_mutex_lock(&g_mu);
  const long memlock = env_long("FAKE_CUDA_MEMLOCK", -1);
  if (rc == OK && is_registered(p, 1)) rc = E_ALREADY_REGISTERED;
  else if (rc == OK && memlock >= 0 && g_cnt.registered_bytes + n > (uint64_t)memlock) rc = E_OOM;
  if (rc != OK) {
    g_cnt.register_refused++;
    if (flags & REGISTER_READ_ONLY) g_cnt.register_readonly_refused++;
    pthread_mutex_unlock(&g_mu);
    free(snap);
    return rc;
  }
  Reg* r = calloc(1, sizeof *r);
  r->p = p;
  r->n = n;
  r->flags = flags;
  r->ctx = t_stack[t_depth - 1];
  r->snap = snap;
  r->next = g_regs;
  g_regs = r;
  g_cnt.registered++;
  g_cnt.register_calls++;
  g_cnt.registered_bytes += n;
  if (flags & REGISTER_READ_ONLY) g_cnt.register_readonly++;
  pthread_mutex_unlock(&g_mu);
  return OK;
}
EXPORT CUresult cuMemHostUnregister(void* p) {
  FORKED();
  pthread_mutex_lock(&g_mu);
  for (Reg** pr = &g_regs; *pr; pr = &(*pr)->next)
    if ((*pr)->p == p) {
      Reg* r = *pr;
      if (r->inflight) g_cnt.unregister_busy++;  /* the caller did not wait for its copies */
      while (r->inflight) pthread_cond_wait(&g_reg_cv, &g_mu);
      for (pr = &g_regs; *pr != r; pr = &(*pr)->next) {}
      *pr = r->next;
      g_cnt.registered--;
      g_cnt.unregister_calls++;
      g_cnt.registered_bytes -= r->n;
      pthread_mutex_unlock(&g_mu);
      free(r->snap);
      free(r);
      return OK;
    }
  pthread_mutex_unlock(&g_mu);
  return E_NOT_REGISTERED;
}

static CUresult copy_now(void* dst, const void* src, size_t n) {
  char* d = resolve(dst, n);
  const char* s = resolve(src, n);
  if (!d || !s) return E_ILLEGAL_ADDRESS;
  pthread_mutex_lock(&g_mu);  /* held for the copy: an unregistration cannot free the snapshot */
  Reg* r = find_reg(dst, n);
  if (r && (r->flags & REGISTER_READ_ONLY)) {
    pthread_mutex_unlock(&g_mu);
    return E_INVALID_VALUE;
  }
  r = find_reg(src, n);
  if (r && r->snap) s = r->snap + ((const char*)src - r->p);
  memmove(d, s, n);
  pthread_mutex_unlock(&g_mu);
  return OK;
}
static void drain_legacy(void);
static CUresult pageable_dma(void* dst, const void* src, size_t n, long us);
EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  FORKED();
  if (!have_ctx()) return E_INVALID_CONTEXT;
  __atomic_add_fetch(&g_cnt.sync_copies, 1, __ATOMIC_RELAXED);
  drain_legacy();  /* a synchronous copy is legacy-stream work: after what was queued there */
  /* FAKE_CUDA_PAGEABLE_DMA_US=N: a copy to the device from pageable host memory returns once the
   * bytes are staged, its DMA landing N µs later on the legacy stream, as the real driver may ("API
   * synchronization behavior": "the DMA to final destination may not have completed"). A copy to the
   * host, or from registered memory, completes before it returns. */
  void *d = (void*)(uintptr_t)dst, *s = (void*)(uintptr_t)src;
  const long us = env_long("FAKE_CUDA_PAGEABLE_DMA_US", 0);
  if (us && n && resolve(d, 1) && resolve(d, 1) != d && resolve(s, 1) == s) {
    pthread_mutex_lock(&g_mu);
    const int pinned = find_reg(s, n) != NULL;
    pthread_mutex_unlock(&g_mu);
    if (!pinned) return pageable_dma(d, s, n, us);
  }
  return copy_now(d, s, n);
}
EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) { FORKED(); return cuMemcpy(dst, (CUdeviceptr)(uintptr_t)src, n); }
EXPORT CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) { FORKED(); return cuMemcpy((CUdeviceptr)(uintptr_t)dst, src, n); }

/* ---- streams and events ---- */
typedef struct CUevent_st {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  unsigned long long recorded, done;
  struct CUctx_st* ctx;  /* the context current at its creation, and its instance then */
  unsigned long long ctx_id;
} Event;
/* A stream or event of a primary context that was reset since it was made is gone with it: the real
 * driver may crash inside cuStreamSynchronize or cuEventRecord there (lupinemachines/lupine#845, a
 * staging ring kept across cudaDeviceReset); the fake aborts, naming it, so that a test fails. */
static void alive(const struct CUctx_st* c, unsigned long long id, const char* what) {
  if (c && !c->own && (c->reset || c->id != id)) {
    fprintf(stderr, "fake CUDA: %s used after its primary context (GPU %d) was reset\n", what, c->device);
    abort();
  }
}
typedef struct Op {
  char *dst;
  const char* src;  /* NULL: a memset of dst to `fill` */
  int fill;
  long delay_us;    /* a memset's run time, or a staged pageable copy's (FAKE_CUDA_PAGEABLE_DMA_US) */
  int owns_src;     /* src is the fake's staging copy, freed once copied */
  uint64_t legacy_wait;  /* run after the legacy stream completed this many operations */
  size_t n;
  Reg* reg;  /* a READ_ONLY registration the copy reads (its snapshot) */
  Event* ev;
  unsigned long long seq;
  struct Op* next;
} Op;
typedef struct CUstream_st {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  Op *head, *tail;
  uint64_t queued, submitted, completed;
  int stop, blocking;  /* blocking: created without CU_STREAM_NON_BLOCKING (orders after legacy work) */
  struct CUctx_st* ctx;  /* the context current at its creation, and its instance then */
  unsigned long long ctx_id;
} Stream;

static Stream* g_legacy;  /* the legacy default stream, started by its first operation */
static void wait_legacy(uint64_t upto) {
  Stream* l = __atomic_load_n(&g_legacy, __ATOMIC_ACQUIRE);
  if (!l) return;
  pthread_mutex_lock(&l->mu);
  while (l->completed < upto) pthread_cond_wait(&l->cv, &l->mu);
  pthread_mutex_unlock(&l->mu);
}
static uint64_t legacy_submitted(void) {
  Stream* l = __atomic_load_n(&g_legacy, __ATOMIC_ACQUIRE);
  if (!l) return 0;
  pthread_mutex_lock(&l->mu);
  uint64_t n = l->submitted;
  pthread_mutex_unlock(&l->mu);
  return n;
}

static void* stream_main(void* arg) {
  Stream* s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
    if (!s->head) break;
    Op* op = s->head;
    pthread_mutex_unlock(&s->mu);
    if (op->legacy_wait) wait_legacy(op->legacy_wait);
    if (op->ev) {
      pthread_mutex_lock(&op->ev->mu);
      if (op->seq > op->ev->done) op->ev->done = op->seq;
      pthread_cond_broadcast(&op->ev->cv);
      pthread_mutex_unlock(&op->ev->mu);
    } else if (!op->src) {
      if (op->delay_us) usleep((useconds_t)op->delay_us);
      memset(op->dst, op->fill, op->n);
    } else {
      if (g_copy_us || op->delay_us) usleep((useconds_t)(g_copy_us + op->delay_us));
      memmove(op->dst, op->src, op->n);
      if (op->owns_src) free((void*)op->src);
      if (op->reg) {
        pthread_mutex_lock(&g_mu);
        if (--op->reg->inflight == 0) pthread_cond_broadcast(&g_reg_cv);
        pthread_mutex_unlock(&g_mu);
      }
    }
    pthread_mutex_lock(&s->mu);
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    if (!op->ev) s->queued--;
    s->completed++;
    pthread_cond_broadcast(&s->cv);
    free(op);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}
static void push(Stream* s, Op* op) {
  alive(s->ctx, s->ctx_id, "a stream");
  if (s->blocking && s != g_legacy) op->legacy_wait = legacy_submitted();
  pthread_mutex_lock(&s->mu);
  if (s->tail) s->tail->next = op;
  else s->head = op;
  s->tail = op;
  s->submitted++;
  if (!op->ev) {
    s->queued++;
    pthread_mutex_lock(&g_mu);
    if (s->queued > g_cnt.max_queued) g_cnt.max_queued = s->queued;
    pthread_mutex_unlock(&g_mu);
  }
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}
static Stream* new_stream(int blocking) {
  Stream* s = calloc(1, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->blocking = blocking;
  pthread_create(&s->thread, NULL, stream_main, s);
  return s;
}
EXPORT CUresult cuStreamCreate(Stream** out, unsigned flags) {
  FORKED();
  if (!have_ctx()) return E_INVALID_CONTEXT;
  *out = new_stream(!(flags & 0x1u));  /* CU_STREAM_NON_BLOCKING */
  (*out)->ctx = t_stack[t_depth - 1];
  (*out)->ctx_id = (*out)->ctx->id;
  __atomic_add_fetch(&g_cnt.streams, 1, __ATOMIC_RELAXED);
  return OK;
}
/* The stream an operation given this handle runs on: the legacy stream for the default handles. */
static Stream* stream_of(Stream* s) {
  if ((uintptr_t)s > 2) return s;
  pthread_mutex_lock(&g_mu);
  if (!g_legacy) __atomic_store_n(&g_legacy, new_stream(0), __ATOMIC_RELEASE);
  pthread_mutex_unlock(&g_mu);
  return g_legacy;
}
static void drain_legacy(void) { wait_legacy(legacy_submitted()); }
static CUresult pageable_dma(void* dst, const void* src, size_t n, long us) {
  Op* op = calloc(1, sizeof *op);
  char* staged = malloc(n);
  op->dst = resolve(dst, n);
  if (!op->dst || !staged) {
    free(staged);
    free(op);
    return E_ILLEGAL_ADDRESS;
  }
  memcpy(staged, src, n);  /* the driver's staging memory: the caller may reuse its buffer at once */
  op->src = staged, op->owns_src = 1, op->n = n, op->delay_us = us;
  push(stream_of((Stream*)1), op);
  return OK;
}
/* Every cuStreamSynchronize, in order (the first 64): the handle, and how many device transfers
 * (copies and cuFile reads and writes) had been made by then, so that a test sees a producer's stream
 * synchronized before the transfer that needed it. Handles below 4096 are not the fake's streams: 0
 * and 1 (legacy) and 2 (per-thread) are the current context's default streams, which need a current
 * context and have nothing queued; others are a producer's streams the test made up, taken as idle. */
static uint64_t g_sync_handle[64], g_sync_transfers[64];
static unsigned g_syncs;
EXPORT unsigned fake_cuda_stream_syncs(uint64_t* handles, uint64_t* transfers_before, unsigned max) {
  pthread_mutex_lock(&g_mu);
  unsigned n = g_syncs < 64 ? g_syncs : 64;
  for (unsigned i = 0; i < n && i < max; ++i) {
    handles[i] = g_sync_handle[i];
    transfers_before[i] = g_sync_transfers[i];
  }
  pthread_mutex_unlock(&g_mu);
  return n;
}
EXPORT CUresult cuStreamSynchronize(Stream* s) {
  FORKED();
  pthread_mutex_lock(&g_mu);
  if (g_syncs < 64) {
    g_sync_handle[g_syncs] = (uint64_t)(uintptr_t)s;
    g_sync_transfers[g_syncs] = g_cnt.async_copies + g_cnt.sync_copies + g_cnt.cufile_reads + g_cnt.cufile_writes;
  }
  g_syncs++;
  pthread_mutex_unlock(&g_mu);
  if ((uintptr_t)s <= 2) {
    if (!have_ctx()) return E_INVALID_CONTEXT;
    if (env_long("FAKE_CUDA_FAIL_LEGACY_SYNC", 0)) return 999;  /* CUDA_ERROR_UNKNOWN */
    drain_legacy();
    return OK;
  }
  if ((uintptr_t)s < 4096) return OK;
  alive(s->ctx, s->ctx_id, "a stream");
  pthread_mutex_lock(&s->mu);
  while (s->completed < s->submitted) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
  return OK;
}
EXPORT CUresult cuStreamDestroy_v2(Stream* s) {
  FORKED();
  cuStreamSynchronize(s);
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  free(s);
  __atomic_sub_fetch(&g_cnt.streams, 1, __ATOMIC_RELAXED);
  return OK;
}
static CUresult copy_async(void* dst, const void* src, size_t n, Stream* s, const void* host) {
  if (!have_ctx()) return E_INVALID_CONTEXT;
  if ((uintptr_t)s >= 4096 && s->ctx) {
    if (s->ctx->dead) return 709;                                /* CUDA_ERROR_CONTEXT_IS_DESTROYED */
    if (s->ctx != t_stack[t_depth - 1]) return E_INVALID_CONTEXT;  /* a stream of another context */
  }
  uint64_t k = __atomic_fetch_add(&g_cnt.async_copies, 1, __ATOMIC_RELAXED);
  g_fail_copy_after = env_long("FAKE_CUDA_FAIL_COPY_AFTER", -1);  /* read each time: tests change it */
  g_copy_us = env_long("FAKE_CUDA_COPY_US", 0);
  if (g_fail_copy_after >= 0 && (long)k >= g_fail_copy_after) return E_ILLEGAL_ADDRESS;
  Op* op = calloc(1, sizeof *op);
  op->dst = resolve(dst, n);
  op->src = resolve(src, n);
  op->n = n;
  if (!op->dst || !op->src) {
    free(op);
    return E_ILLEGAL_ADDRESS;
  }
  pthread_mutex_lock(&g_mu);
  Reg* r = find_reg(host, n);
  if (!r) g_cnt.async_unpinned++;
  if (r && (r->flags & REGISTER_READ_ONLY)) {
    if (host == dst) {  /* the device may not write a read-only registration */
      pthread_mutex_unlock(&g_mu);
      free(op);
      return E_INVALID_VALUE;
    }
    op->src = r->snap + ((const char*)src - r->p);
    op->reg = r;
    r->inflight++;
  }
  pthread_mutex_unlock(&g_mu);
  push(stream_of(s), op);
  return OK;
}
EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, Stream* s) {
  FORKED();
  return copy_async((void*)(uintptr_t)dst, src, n, s, src);
}
EXPORT CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, Stream* s) {
  FORKED();
  return copy_async(dst, (void*)(uintptr_t)src, n, s, dst);
}
/* A memset queued on a stream (on the legacy one for 0, 1 and 2), taking FAKE_CUDA_MEMSET_US: what a
 * test queues where a real program would launch a kernel that writes the buffer. */
EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char byte, size_t n, Stream* s) {
  FORKED();
  if (!have_ctx()) return E_INVALID_CONTEXT;
  Op* op = calloc(1, sizeof *op);
  if (!(op->dst = resolve((void*)(uintptr_t)dst, n))) {
    free(op);
    return E_ILLEGAL_ADDRESS;
  }
  op->fill = byte;
  op->n = n;
  op->delay_us = env_long("FAKE_CUDA_MEMSET_US", 0);
  push(stream_of(s), op);
  return OK;
}
EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char byte, size_t n) {
  FORKED();
  CUresult rc = cuMemsetD8Async(dst, byte, n, (Stream*)(uintptr_t)1);
  if (rc == OK) drain_legacy();
  return rc;
}
EXPORT CUresult cuEventCreate(Event** out, unsigned flags) {
  FORKED();
  (void)flags;
  Event* e = calloc(1, sizeof *e);
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  if (t_depth) e->ctx = t_stack[t_depth - 1], e->ctx_id = e->ctx->id;
  *out = e;
  return OK;
}
EXPORT CUresult cuEventDestroy_v2(Event* e) {
  FORKED();
  alive(e->ctx, e->ctx_id, "an event");  /* destroying one of a reset context may crash too */
  free(e);
  return OK;
}
EXPORT CUresult cuEventRecord(Event* e, Stream* s) {
  FORKED();
  alive(e->ctx, e->ctx_id, "an event");
  Op* op = calloc(1, sizeof *op);
  pthread_mutex_lock(&e->mu);
  op->seq = ++e->recorded;
  pthread_mutex_unlock(&e->mu);
  op->ev = e;
  __atomic_add_fetch(&g_cnt.events_recorded, 1, __ATOMIC_RELAXED);
  push(stream_of(s), op);
  return OK;
}
EXPORT CUresult cuEventSynchronize(Event* e) {
  FORKED();
  alive(e->ctx, e->ctx_id, "an event");
  __atomic_add_fetch(&g_cnt.event_waits, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&e->mu);
  while (e->done < e->recorded) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
  return OK;
}

EXPORT void fake_cuda_counters(fake_counters_t* out) {
  pthread_mutex_lock(&g_mu);
  *out = g_cnt;
  pthread_mutex_unlock(&g_mu);
}
EXPORT void fake_cuda_reset_counters(void) {
  pthread_mutex_lock(&g_mu);
  uint64_t reg = g_cnt.registered, live = g_cnt.live_allocs, streams = g_cnt.streams, bytes = g_cnt.registered_bytes;
  memset(&g_cnt, 0, sizeof g_cnt);
  g_cnt.registered = reg;
  g_cnt.registered_bytes = bytes;
  g_cnt.live_allocs = live;
  g_cnt.streams = streams;
  g_syncs = 0;
  pthread_mutex_unlock(&g_mu);
}

/* ---- cuFile ---- */
typedef struct { int err; int cu_err; } CUfileError_t;
typedef struct { int type; union { int fd; void* handle; } handle; const void* fs_ops; } CUfileDescr_t;
typedef struct {
  unsigned major_version, minor_version;
  size_t poll_thresh_size, max_direct_io_size;
  unsigned dstatusflags, dcontrolflags;
} CUfileNvfs;
typedef struct {
  CUfileNvfs nvfs;
  unsigned fflags, max_device_cache_size, per_buffer_cache_size, max_device_pinned_mem_size, max_batch_io_size,
      max_batch_io_timeout_msecs;
} CUfileDrvProps_t;
typedef struct {
  int mode;
  union { struct { void* devPtr_base; off_t file_offset; off_t devPtr_offset; size_t size; } batch; } u;
  void* fh;
  int opcode;
  void* cookie;
} CUfileIOParams_t;
typedef struct { void* cookie; int status; size_t ret; } CUfileIOEvents_t;
/* compat: cuFile serves the file in compatibility mode (POSIX I/O through its bounce buffers): no
 * nvidia-fs, or a buffered descriptor registered. */
typedef struct { int fd, compat; } FileHandle;
/* held[i]: entry i holds a compatibility-mode bounce buffer until its event is taken. */
typedef struct { unsigned cap, n, taken; CUfileIOEvents_t* ev; unsigned char* held; } Batch;
/* Compatibility mode's POSIX bounce-buffer pool (cufile.json posix_pool_slab_count: 64 buffers of
 * 1 MiB by default; FAKE_CUFILE_COMPAT_POOL=N): each batch entry on a compatibility-mode handle
 * takes one from its submission until GetStatus returns its event. Real cuFile then waits in
 * cuFileBatchIOSubmit for a free one, for ever when the entries holding them are the caller's own
 * (ai-dynamo/nixl#2070); the fake aborts there instead, naming the hang, so that a test fails. (Real
 * cuFile may get the buffers once another thread's batch is reaped; accio never lets its entries in
 * flight pass the pool's default size, so the fake need not tell the two apart.) */
static unsigned g_compat_pool_used;
static int g_cufile_open;
static const CUfileError_t CF_OK = {0, 0};
int fake_cufile_log(const char* what, long value); /* fake_cufile_log.cpp: C++ iostreams, as libcufile */

EXPORT CUfileError_t cuFileDriverOpen(void) {
  FORKED_CF();
  if (fake_cufile_log("cuFileDriverOpen", (long)getpid()) != 0) return (CUfileError_t){5030, 0};
  g_cufile_open = 1;
  return CF_OK;
}
EXPORT CUfileError_t cuFileDriverClose_v2(void) { FORKED_CF(); g_cufile_open = 0; return CF_OK; }
EXPORT CUfileError_t cuFileDriverClose(void) { FORKED_CF(); return cuFileDriverClose_v2(); }
EXPORT CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t* p) {
  FORKED_CF();
  memset(p, 0, sizeof *p);
  if (env_long("FAKE_CUFILE_NVFS", 0)) { p->nvfs.major_version = 2; p->nvfs.minor_version = 17; }
  if (!env_long("FAKE_CUFILE_NO_COMPAT", 0)) p->nvfs.dcontrolflags = 1u << 1; /* compat mode allowed */
  p->max_batch_io_size = 128;
  p->fflags = (unsigned)env_long("FAKE_CUFILE_FFLAGS", 0); /* CUfileFeatureFlags_t bits */
  return CF_OK;
}
static uint64_t g_direct_handles;  /* handles registered on an O_DIRECT descriptor */
EXPORT uint64_t fake_cufile_direct_handles(void) { return __atomic_load_n(&g_direct_handles, __ATOMIC_RELAXED); }
EXPORT CUfileError_t cuFileHandleRegister(void** fh, CUfileDescr_t* d) {
  FORKED_CF();
  if (!g_cufile_open) return (CUfileError_t){5001, 0};
  if (fake_cufile_log("cuFileHandleRegister fd", d->handle.fd) != 0) return (CUfileError_t){5030, 0};
  /* As real cuFile refuses a file it cannot identify (5027 in compat mode on the GPU machine). */
  long refuse = env_long("FAKE_CUFILE_REGISTER_ERR", 0);
  if (!refuse && (fcntl(d->handle.fd, F_GETFL) & O_DIRECT)) refuse = env_long("FAKE_CUFILE_REGISTER_ERR_DIRECT", 0);
  if (refuse) return (CUfileError_t){(int)refuse, 0};
  FileHandle* h = calloc(1, sizeof *h);
  if (fcntl(d->handle.fd, F_GETFL) & O_DIRECT) __atomic_add_fetch(&g_direct_handles, 1, __ATOMIC_RELAXED);
  /* FAKE_CUFILE_COMPAT_DEVICE=1: compatibility mode whatever the descriptor, as cuFile falls back for
   * a device it cannot serve directly (not NVMe, say) where accio sees the direct path as possible. */
  h->compat = !env_long("FAKE_CUFILE_NVFS", 0) || !(fcntl(d->handle.fd, F_GETFL) & O_DIRECT) ||
              env_long("FAKE_CUFILE_COMPAT_DEVICE", 0);
  /* Real cuFile takes O_DIRECT descriptors and handles alignment itself; the fake reads through a
   * buffered descriptor on the same file. */
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", d->handle.fd);
  h->fd = open(proc, (fcntl(d->handle.fd, F_GETFL) & O_ACCMODE) | O_CLOEXEC);
  if (h->fd < 0) {
    free(h);
    return (CUfileError_t){5026, 0};
  }
  *fh = h;
  __atomic_add_fetch(&g_cnt.cufile_handles, 1, __ATOMIC_RELAXED);
  return CF_OK;
}
EXPORT void cuFileHandleDeregister(void* fh) {
  FORKED_RETURN();
  close(((FileHandle*)fh)->fd);
  free(fh);
  __atomic_sub_fetch(&g_cnt.cufile_handles, 1, __ATOMIC_RELAXED);
}
/* Registered buffers: bytes pinned in all (FAKE_CUFILE_PINNED_LIMIT=BYTES refuses a registration
 * past it with CU_FILE_GPU_MEMORY_PINNING_FAILED, 5036, as cufile.json's max_device_pinned_mem_size_kb
 * does), the cuFile reads and writes running on each, and deregistrations made while one ran
 * (fake_cufile_busy_deregisters; the real consequence is undefined). A range not wholly inside one
 * allocation is refused (CU_FILE_CUDA_POINTER_RANGE_ERROR, 5014), as an unmapped range would be.
 * Deregistered entries stay listed (dead), so that an I/O still running on one stays valid. */
typedef struct BufReg { const char* p; size_t n; unsigned inflight; int dead; struct BufReg* next; } BufReg;
static BufReg* g_bufregs;
static uint64_t g_bufreg_bytes, g_busy_deregs, g_range_refused, g_deregs, g_pin_refused;
EXPORT uint64_t fake_cufile_pin_refusals(void) { return __atomic_load_n(&g_pin_refused, __ATOMIC_RELAXED); }
EXPORT uint64_t fake_cufile_deregisters(void) { return __atomic_load_n(&g_deregs, __ATOMIC_RELAXED); }
EXPORT uint64_t fake_cufile_busy_deregisters(void) { return __atomic_load_n(&g_busy_deregs, __ATOMIC_RELAXED); }
EXPORT uint64_t fake_cufile_range_refusals(void) { return __atomic_load_n(&g_range_refused, __ATOMIC_RELAXED); }
EXPORT uint64_t fake_cufile_pinned_bytes(void) { return __atomic_load_n(&g_bufreg_bytes, __ATOMIC_RELAXED); }
EXPORT CUfileError_t cuFileBufRegister(const void* p, size_t n, int flags) {
  FORKED_CF();
  (void)flags;
  if (!resolve(p, 1) || resolve(p, 1) == p) return (CUfileError_t){5013, 0};  /* not device memory */
  if (!resolve(p, n)) {
    __atomic_add_fetch(&g_range_refused, 1, __ATOMIC_RELAXED);
    return (CUfileError_t){5014, 0};
  }
  pthread_mutex_lock(&g_mu);
  long limit = env_long("FAKE_CUFILE_PINNED_LIMIT", -1);
  if (limit >= 0 && g_bufreg_bytes + n > (uint64_t)limit) {
    g_pin_refused++;
    pthread_mutex_unlock(&g_mu);
    return (CUfileError_t){5036, 0};
  }
  BufReg* r = calloc(1, sizeof *r);
  r->p = p, r->n = n, r->next = g_bufregs, g_bufregs = r;
  g_bufreg_bytes += n;
  g_cnt.cufile_buf_registers++;
  pthread_mutex_unlock(&g_mu);
  return CF_OK;
}
EXPORT CUfileError_t cuFileBufDeregister(const void* p) {
  FORKED_CF();
  pthread_mutex_lock(&g_mu);
  for (BufReg* r = g_bufregs; r; r = r->next)
    if (r->p == p && !r->dead) {
      r->dead = 1;
      g_deregs++;
      if (r->inflight) g_busy_deregs++;
      g_bufreg_bytes -= r->n;
      g_cnt.cufile_buf_registers--;
      break;
    }
  pthread_mutex_unlock(&g_mu);
  return CF_OK;
}
static BufReg* bufreg_enter(const void* base) {
  pthread_mutex_lock(&g_mu);
  BufReg* r = g_bufregs;
  while (r && (r->p != base || r->dead)) r = r->next;
  if (r) r->inflight++;
  pthread_mutex_unlock(&g_mu);
  return r;
}
static ssize_t file_io_run(FileHandle* h, const void* base, size_t n, off_t off, off_t boff, int write);
static ssize_t file_io(FileHandle* h, const void* base, size_t n, off_t off, off_t boff, int write) {
  BufReg* r = bufreg_enter(base);
  long us = env_long("FAKE_CUFILE_IO_US", 0);  /* each cuFile transfer takes this long */
  if (us) usleep((useconds_t)us);
  ssize_t got = file_io_run(h, base, n, off, boff, write);
  if (r) {
    pthread_mutex_lock(&g_mu);
    r->inflight--;
    pthread_mutex_unlock(&g_mu);
  }
  return got;
}
static ssize_t file_io_run(FileHandle* h, const void* base, size_t n, off_t off, off_t boff, int write) {
  if (off == env_long("FAKE_CUFILE_EIO_AT", -1)) return -EIO;
  char* p = resolve((const char*)base + boff, n);
  if (!p || p == (const char*)base + boff) return -EINVAL;  /* only device memory here */
  size_t done = 0;
  while (done < n) {
    ssize_t r = write ? pwrite(h->fd, p + done, n - done, off + (off_t)done) : pread(h->fd, p + done, n - done, off + (off_t)done);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (r == 0) break;
    done += (size_t)r;
  }
  return (ssize_t)done;
}
/* FAKE_CUFILE_EINTR_EVERY=K: every K-th read (and write) is interrupted, returning -EINTR itself
 * (not -1 with errno: cuFile's return convention allows both); K=1 interrupts every call, which
 * accio gives up on after 64 in a row. */
static int interrupted(uint64_t k) {
  const long every = env_long("FAKE_CUFILE_EINTR_EVERY", 0);
  return every > 0 && k % (uint64_t)every == 1 % (uint64_t)every;
}
EXPORT ssize_t cuFileRead(void* fh, void* base, size_t n, off_t off, off_t boff) {
  FORKED_RETURN(-5001);
  const uint64_t k = __atomic_add_fetch(&g_cnt.cufile_reads, 1, __ATOMIC_RELAXED);
  if (interrupted(k)) return -EINTR;
  return file_io(fh, base, n, off, boff, 0);
}
EXPORT ssize_t cuFileWrite(void* fh, const void* base, size_t n, off_t off, off_t boff) {
  FORKED_RETURN(-5001);
  const uint64_t k = __atomic_add_fetch(&g_cnt.cufile_writes, 1, __ATOMIC_RELAXED);
  if (interrupted(k)) return -EINTR;
  return file_io(fh, base, n, off, boff, 1);
}
/* FAKE_CUFILE_VERSION (default 1150: cuFile 1.15, CUDA 13.0; 0: cuFileGetVersion fails, as the
 * function is missing before 1.7); below 1070 the batch functions abort, as calling them is undefined
 * before cuFile 1.7 although their symbols exist. */
static int cufile_version(void) { return (int)env_long("FAKE_CUFILE_VERSION", 1150); }
EXPORT CUfileError_t cuFileGetVersion(int* v) {
  FORKED_CF();
  if (!cufile_version()) return (CUfileError_t){5001, 0};  /* FAKE_CUFILE_VERSION=0: cannot say */
  *v = cufile_version();
  return CF_OK;
}
static void batch_allowed(void) {
  if (cufile_version() < 1070) {
    fprintf(stderr, "fake cuFile: batch API called on cuFile %d (undefined before 1.7)\n", cufile_version());
    abort();
  }
}
EXPORT uint64_t fake_cufile_batch_ios(void) { return __atomic_load_n(&g_cnt.cufile_batch_ios, __ATOMIC_RELAXED); }
EXPORT CUfileError_t cuFileBatchIOSetUp(void** id, unsigned nr) {
  FORKED_CF();
  batch_allowed();
  if (env_long("FAKE_CUFILE_BATCH_SETUP_FAIL", 0)) return (CUfileError_t){5039, 0}; /* INTERNAL_BATCH_SETUP_ERROR */
  Batch* b = calloc(1, sizeof *b);
  b->cap = nr;
  b->ev = calloc(nr, sizeof *b->ev);
  b->held = calloc(nr, 1);
  *id = b;
  return CF_OK;
}
EXPORT CUfileError_t cuFileBatchIOSubmit(void* id, unsigned nr, CUfileIOParams_t* io, unsigned flags) {
  FORKED_CF();
  (void)flags;
  Batch* b = id;
  if (b->n + nr > b->cap) return (CUfileError_t){5037, 0}; /* BATCH_FULL */
  unsigned compat = 0;
  for (unsigned i = 0; i < nr; ++i) compat += ((FileHandle*)io[i].fh)->compat;
  const unsigned pool = (unsigned)env_long("FAKE_CUFILE_COMPAT_POOL", 64);
  if (compat && __atomic_add_fetch(&g_compat_pool_used, compat, __ATOMIC_RELAXED) > pool) {
    fprintf(stderr, "fake cuFile: cuFileBatchIOSubmit of %u compatibility-mode entries with %u of %u bounce "
            "buffers held: real cuFile waits here for ever (ai-dynamo/nixl#2070)\n", compat,
            __atomic_load_n(&g_compat_pool_used, __ATOMIC_RELAXED) - compat, pool);
    abort();
  }
  const long fail_at = env_long("FAKE_CUFILE_BATCH_FAIL_AT", -1);
  for (unsigned i = 0; i < nr; ++i) {
    b->held[b->n] = (unsigned char)((FileHandle*)io[i].fh)->compat;
    ssize_t r = (long)i == fail_at ? -EIO : file_io(io[i].fh, io[i].u.batch.devPtr_base, io[i].u.batch.size, io[i].u.batch.file_offset,
                        io[i].u.batch.devPtr_offset, io[i].opcode == 1);
    CUfileIOEvents_t* e = &b->ev[b->n++];
    e->cookie = io[i].cookie;
    e->status = r < 0 ? 0x40 : 0x10;  /* FAILED : COMPLETE */
    e->ret = (size_t)r;  /* -errno on failure */
    __atomic_add_fetch(&g_cnt.cufile_batch_ios, 1, __ATOMIC_RELAXED);
  }
  return CF_OK;
}
EXPORT CUfileError_t cuFileBatchIOGetStatus(void* id, unsigned min_nr, unsigned* nr, CUfileIOEvents_t* ev, void* timeout) {
  FORKED_CF();
  (void)min_nr;
  (void)timeout;
  Batch* b = id;
  unsigned k = 0;
  for (; k < *nr && k < 16 && b->taken < b->n; ++k, ++b->taken) {
    ev[k] = b->ev[b->taken];
    if (b->held[b->taken]) __atomic_sub_fetch(&g_compat_pool_used, 1, __ATOMIC_RELAXED);
  }
  *nr = k;
  return CF_OK;
}
EXPORT CUfileError_t cuFileBatchIOCancel(void* id) { FORKED_CF(); (void)id; return CF_OK; }
EXPORT void cuFileBatchIODestroy(void* id) {
  FORKED_RETURN();
  Batch* b = id;
  for (unsigned i = b->taken; i < b->n; ++i)
    if (b->held[i]) __atomic_sub_fetch(&g_compat_pool_used, 1, __ATOMIC_RELAXED);
  free(b->held);
  free(b->ev);
  free(b);
}
