/* accio offload: the VEO offload API (NEC's ve_offload.h, API version 16 as in AVEO 3.0.2) on any
 * Linux host. The "accelerator side" is a worker process; kernels are ordinary shared libraries built
 * for the host. Calls travel through a shared-memory RPC that both sides poll, then sleep on a
 * futex (see docs/offload.md). Programs written for VEO/AVEO compile unchanged against this header
 * and link with -laccio_offload (libaccio_offload.so, which uses libaccio.so; `accio config --libs
 * --offload`, pkg-config accio-offload, CMake accio::offload).
 *
 * Return conventions are VEO's: handles are NULL on failure, library handles and symbol addresses
 * 0, request ids VEO_REQUEST_ID_INVALID, int results negative; accio_offload_last_error() says why.
 * The accio_offload_* functions at the end are extensions. */
#ifndef ACCIO_VE_OFFLOAD_H
#define ACCIO_VE_OFFLOAD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h> /* pid_t; with unistd.h as AVEO's header includes them, for programs that rely on it */
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VEO_API_VERSION 16
#define VEO_SYMNAME_LEN_MAX (255)
#define VEO_MAX_NUM_ARGS (256)
#define VEO_REQUEST_ID_INVALID (~0UL)
#define VEO_MAX_HMEM_PROCS 16 /* procs an hmem address can name (identifiers 0..15) */

enum veo_context_state {
  VEO_STATE_UNKNOWN = 0,
  VEO_STATE_RUNNING,
  VEO_STATE_SYSCALL, /* never reported: kept for source compatibility */
  VEO_STATE_BLOCKED, /* never reported */
  VEO_STATE_EXIT
};

enum veo_command_state {
  VEO_COMMAND_OK = 0,
  VEO_COMMAND_EXCEPTION, /* a fatal signal in the kernel; the result is the signal number */
  VEO_COMMAND_ERROR,
  VEO_COMMAND_UNFINISHED
};

enum veo_queue_state { VEO_QUEUE_READY = 0, VEO_QUEUE_CLOSED };

enum veo_args_intent { VEO_INTENT_IN = 0, VEO_INTENT_INOUT, VEO_INTENT_OUT };

struct veo_args;
struct veo_proc_handle;
struct veo_thr_ctxt;
struct veo_thr_ctxt_attr;

/* ---- procs: one worker process each; several per host process ---- */
/* venode: -1 runs the worker anywhere; N >= 0 is a logical number that binds the worker to the
 * CPUs of NUMA node N where that node exists (elsewhere it runs anywhere). VE_OMP_NUM_THREADS, when
 * set, becomes the worker's OMP_NUM_THREADS (the kernels' OpenMP threads). */
struct veo_proc_handle *veo_proc_create(int venode);
/* veobin: a worker program, e.g. one with kernels linked in (see docs/offload.md). */
struct veo_proc_handle *veo_proc_create_static(int venode, char *veobin);
/* Afterwards the handle is refused by every function (errno ESRCH); a second destroy returns 0. */
int veo_proc_destroy(struct veo_proc_handle *proc);
/* The proc's identifier: the lowest free index among the live procs (hmem tags hold 0..15). */
int veo_proc_identifier(struct veo_proc_handle *proc);

/* ---- libraries and symbols ---- */
uint64_t veo_load_library(struct veo_proc_handle *proc, const char *libname);
int veo_unload_library(struct veo_proc_handle *proc, const uint64_t libhandle);
/* libhandle 0 searches the worker program and every library it loaded. Cached per proc. */
uint64_t veo_get_sym(struct veo_proc_handle *proc, uint64_t libhandle, const char *symname);

/* ---- worker ("VE") memory ----
 * The synchronous calls (these, veo_call_sync, the library and symbol functions, veo_hmemcpy)
 * run on the proc's main context (veo_get_context(proc, 0), the first veo_context_open), after
 * the requests queued there before them; they do not wait for the other contexts.
 * veo_context_open and veo_proc_destroy wait for the main context's queued requests too. */
int veo_alloc_mem(struct veo_proc_handle *proc, uint64_t *addr, const size_t size);
int veo_free_mem(struct veo_proc_handle *proc, uint64_t addr);
int veo_read_mem(struct veo_proc_handle *proc, void *dst, uint64_t src, size_t size);
int veo_write_mem(struct veo_proc_handle *proc, uint64_t dst, const void *src, size_t size);

/* ---- contexts: in-order request queues, each served by its own worker thread ---- */
int veo_num_contexts(struct veo_proc_handle *proc);
struct veo_thr_ctxt *veo_get_context(struct veo_proc_handle *proc, int idx);
struct veo_thr_ctxt *veo_context_open(struct veo_proc_handle *proc);
int veo_context_close(struct veo_thr_ctxt *ctx);
int veo_get_context_state(struct veo_thr_ctxt *ctx);
void veo_context_sync(struct veo_thr_ctxt *ctx);

struct veo_thr_ctxt *veo_context_open_with_attr(struct veo_proc_handle *proc, struct veo_thr_ctxt_attr *attr);
struct veo_thr_ctxt_attr *veo_alloc_thr_ctxt_attr(void);
int veo_free_thr_ctxt_attr(struct veo_thr_ctxt_attr *attr);
int veo_set_thr_ctxt_stacksize(struct veo_thr_ctxt_attr *attr, size_t stacksize);
int veo_get_thr_ctxt_stacksize(struct veo_thr_ctxt_attr *attr, size_t *stacksize);

/* ---- arguments ---- */
struct veo_args *veo_args_alloc(void);
int veo_args_set_i64(struct veo_args *args, int argnum, int64_t val);
int veo_args_set_u64(struct veo_args *args, int argnum, uint64_t val);
int veo_args_set_i32(struct veo_args *args, int argnum, int32_t val);
int veo_args_set_u32(struct veo_args *args, int argnum, uint32_t val);
int veo_args_set_i16(struct veo_args *args, int argnum, int16_t val);
int veo_args_set_u16(struct veo_args *args, int argnum, uint16_t val);
int veo_args_set_i8(struct veo_args *args, int argnum, int8_t val);
int veo_args_set_u8(struct veo_args *args, int argnum, uint8_t val);
int veo_args_set_double(struct veo_args *args, int argnum, double val);
int veo_args_set_float(struct veo_args *args, int argnum, float val);
/* A buffer copied to the worker and passed as a pointer to that copy. IN: copied at submission;
 * OUT and INOUT: copied back into buff when the result is picked up. */
/* Up to 63 MiB of stack arguments per call in all (AVEO's limit), or the offload arena's size if larger. */
int veo_args_set_stack(struct veo_args *args, enum veo_args_intent intent, int argnum, char *buff, size_t len);
void veo_args_clear(struct veo_args *args);
void veo_args_free(struct veo_args *args);

/* ---- calls ---- */
/* On the proc's main context; 0 on success, -1 on failure (an exception included). */
int veo_call_sync(struct veo_proc_handle *proc, uint64_t addr, struct veo_args *args, uint64_t *result);
uint64_t veo_call_async(struct veo_thr_ctxt *ctx, uint64_t addr, struct veo_args *args);
uint64_t veo_call_async_by_name(struct veo_thr_ctxt *ctx, uint64_t libhandle, const char *symname,
                                struct veo_args *args);
/* A host function run in the context's order: after every earlier request, before any later one.
 * As in AVEO (API 16), it runs on a thread of the context's own as soon as the requests before it
 * have completed, whether or not a host thread waits on the context. */
uint64_t veo_call_async_vh(struct veo_thr_ctxt *ctx, uint64_t (*func)(void *), void *arg);
int veo_call_peek_result(struct veo_thr_ctxt *ctx, uint64_t reqid, uint64_t *retp);
int veo_call_wait_result(struct veo_thr_ctxt *ctx, uint64_t reqid, uint64_t *retp);

/* Transfers through the context's queue; they wait for room at most 50 us, while the worker makes
 * progress (what does not fit the queue then waits on the host). The source of a write is copied when submitted; the destination of a read is filled
 * as the request completes, so it stays valid until then. */
uint64_t veo_async_read_mem(struct veo_thr_ctxt *ctx, void *dst, uint64_t src, size_t size);
uint64_t veo_async_write_mem(struct veo_thr_ctxt *ctx, uint64_t dst, const void *src, size_t size);
/* Worker memory through a context: the result of an alloc request is the address, of a free 0. */
uint64_t veo_alloc_mem_async(struct veo_thr_ctxt *ctx, const size_t size);
uint64_t veo_free_mem_async(struct veo_thr_ctxt *ctx, uint64_t addr);
/* Between begin and end only the calling thread submits to ctx (others wait): its requests are
 * consecutive. Blocks of one thread nest. */
void veo_req_block_begin(struct veo_thr_ctxt *ctx);
void veo_req_block_end(struct veo_thr_ctxt *ctx);

/* ---- hooks (AVEO's low-level API): func is one of veo_alloc_mem (hook gets payload, proc,
 * uint64_t *addr, size), veo_free_mem (payload, proc, addr), veo_alloc_hmem (payload, proc, void
 * *hmem, size), veo_free_hmem (payload, proc, hmem), veo_alloc_mem_async (payload, ctx, addr, size)
 * and veo_free_mem_async (payload, ctx, addr); the async ones run when the result is picked up. */
void veo_register_hook(void *func, void (*hook)(void *, ...), void *payload);
void *veo_get_hook(void *func);
void veo_unregister_hook(void *func);

/* ---- hmem: a worker address with bit 63 set and the proc identifier in bits 62:59 (AVEO's
 * layout), or a host address (untagged). Usable with veo_hmemcpy and as a call argument; a kernel
 * strips the tag with veo_get_hmem_addr. ---- */
/* proc NULL: host memory (malloc). */
int veo_alloc_hmem(struct veo_proc_handle *proc, void **addr, const size_t size);
int veo_free_hmem(void *addr);
/* Host to worker, worker to host, host to host, or within one worker. */
int veo_hmemcpy(void *dst, const void *src, size_t size);
int veo_args_set_hmem(struct veo_args *args, int argnum, void *val);
int veo_is_ve_addr(const void *addr);   /* 1 if tagged */
void *veo_get_hmem_addr(void *addr);    /* without the tag */
int veo_get_max_proc_identifier(void); /* VEO_MAX_HMEM_PROCS */
int veo_get_proc_identifier_from_hmem(const void *addr); /* -1 if untagged */
void *veo_set_proc_identifier(void *addr, int proc_ident); /* tags addr; NULL if proc_ident > 15 */
struct veo_proc_handle *veo_get_proc_handle_from_hmem(const void *addr); /* NULL: untagged or no such proc */
pid_t veo_get_pid_from_hmem(const void *addr);   /* the worker's pid, or -1 */
int veo_get_venum_from_hmem(const void *addr);   /* the proc's venode (0 for -1, as AVEO), or -1 */
/* Calls alloc(hmem, size) and free(hmem) at every allocation and release of worker memory (the
 * hooks of veo_alloc_mem, veo_free_mem and their async forms); unregister removes those hooks. */
void veo_register_hmem_hook_functions(void (*alloc_fn)(void *, size_t), void (*free_fn)(uint64_t));
void veo_unregister_hmem_hook_functions(void);

/* ---- kernel side: callable by kernels (dlopened or linked into a static worker) ----
 * The result of the request this context executed offs + 1 requests before the running one
 * (offs 0: the previous one; host functions of veo_call_async_vh do not count). 0, or -1
 * outside a context's thread or beyond the last 64 results. veo_is_ve_addr and veo_get_hmem_addr
 * above work there too. */
int veo_prev_req_result(int offs, uint64_t *result);

const char *veo_version_string(void);
int veo_api_version(void);

/* ---- accio extensions ---- */
enum accio_offload_transport {
  ACCIO_OFFLOAD_SHM = 0,    /* memfd shared memory, polled then futex (the default) */
  ACCIO_OFFLOAD_SOCKET = 1  /* every request and response through a socketpair (the baseline) */
};
#define ACCIO_OFFLOAD_SPIN_FOREVER (-1)

typedef struct accio_offload_options {
  int venode;          /* -1: anywhere; N: the CPUs of NUMA node N */
  const char *worker;  /* worker program; NULL: the offload_worker setting, VEORUN_BIN, or the installed one */
  int transport;       /* enum accio_offload_transport */
  int64_t spin_us;     /* poll this long before sleeping (both sides); ACCIO_OFFLOAD_SPIN_FOREVER */
  int64_t timeout_ms;  /* how long a wait may take before it fails; 0: no limit */
  size_t arena_bytes;  /* payload area per queue: stack arguments and transfer pieces */
  uint32_t slots;      /* requests in flight per queue */
} accio_offload_options;

/* Fills *opts from libaccio's settings table (accio_settings_new: defaults, then the environment), whose
 * offload rows this library registers when it is loaded: offload_transport (ACCIO_OFFLOAD_TRANSPORT,
 * shm|socket), offload_spin_us (ACCIO_OFFLOAD_SPIN_US, microseconds or "forever"), offload_timeout_ms
 * (ACCIO_OFFLOAD_TIMEOUT_MS), offload_arena (ACCIO_OFFLOAD_ARENA, bytes, k/m/g units), offload_slots
 * (ACCIO_OFFLOAD_SLOTS); offload_worker (ACCIO_OFFLOAD_WORKER) is read when the proc starts. Returns
 * 0, or -EINVAL for a bad value (accio_offload_last_error names it). */
int accio_offload_options_init(accio_offload_options *opts);
struct veo_proc_handle *accio_offload_proc_create(const accio_offload_options *opts);
int accio_offload_worker_pid(struct veo_proc_handle *proc);
/* The last error of the calling thread ("" if none), e.g. "veo_load_library: libk.so: cannot open
 * shared object file" or "request 7 on context 1: the worker (pid 123) died of signal 9 (Killed)". */
const char *accio_offload_last_error(void);
/* The kernel's return type (VEO assumes a 64-bit integer, which on x86-64 loses float and double
 * results: they come back in another register). With DOUBLE or FLOAT the result holds the value's
 * bits (memcpy it into a double/float). Kept by veo_args_clear. Returns 0 or -1. */
enum accio_offload_ret { ACCIO_OFFLOAD_RET_U64 = 0, ACCIO_OFFLOAD_RET_DOUBLE = 1, ACCIO_OFFLOAD_RET_FLOAT = 2 };
int accio_offload_args_set_ret(struct veo_args *args, int ret);
/* The worker program's entry point (a worker is `main` calling it) and a trivial kernel that
 * returns its argument (a health check; offload-bench calls it). */
int accio_offload_worker_main(int argc, char **argv);
uint64_t accio_offload_echo(uint64_t x);

#ifdef __cplusplus
}
#endif
#endif
