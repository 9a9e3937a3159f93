/* accio: move file data between storage and memory as fast as the machine allows.
 *
 * The stable C API. Every function that can fail returns a negative errno value (or NULL) and
 * records the details for the calling thread: accio_last_error() says which operation, path and
 * offset failed and why. A short read is a byte count, not an error. Link with -laccio
 * (`accio config --cflags --libs`, pkg-config accio, or CMake find_package(accio)). */
#ifndef ACCIO_ACCIO_H
#define ACCIO_ACCIO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ACCIO_VERSION_MAJOR 0
#define ACCIO_VERSION_MINOR 1
#define ACCIO_VERSION_PATCH 0
/* Deprecated: the length of accio_stats' fixed per-mechanism arrays, which hold ids below it only.
 * accio_file_mechanism_stats and accio_global_mechanism_stats answer for every id. */
#define ACCIO_MAX_MECHANISMS 16
/* The smallest request the preload shim (`accio run`) takes unless ACCIO_PRELOAD_THRESHOLD says
 * otherwise (a tuning profile may raise it per file). */
#define ACCIO_PRELOAD_THRESHOLD_DEFAULT (1u << 20)
/* With task_size 0 a request is split evenly over the threads, into tasks of at least this many
 * bytes: a request of at most this size runs as one task. */
#define ACCIO_MIN_EVEN_TASK (128u << 10)

#if defined(__GNUC__) || defined(__clang__)
#define ACCIO_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define ACCIO_DEPRECATED(msg)
#endif

typedef struct accio_file accio_file;
typedef struct accio_settings accio_settings;
typedef struct accio_future accio_future;

/* One request of a batch: for reads `buf` is written, for writes it is read. */
typedef struct accio_request {
  void* buf;
  size_t size;
  int64_t offset;
} accio_request;

enum accio_op { ACCIO_OP_READ = 0, ACCIO_OP_WRITE = 1 };
/* Or'ed into accio_mechanism_for_at's op: look at the page cache anew for this request. Without it the
 * residency verdict of the handle's last probe serves up to 4 MiB of the requests asked about, which
 * suits a caller that asks about each request it makes; one that asks only now and then (the preload
 * shim, after passing a window of calls to libc on its own) would get a verdict from far away. */
#define ACCIO_OP_FRESH_CACHE 0x100

/* One plan that served a handle's requests (accio_file_plans). */
typedef struct accio_plan_stat {
  char plan[128]; /* "parallel(even)", "uring(task=1MiB, qd=16)" */
  char why[384];  /* "ext4 on /dev/vda1: read, one request in flight, 1MiB..4MiB bytes, range cached" */
  uint64_t calls, bytes;
} accio_plan_stat;

/* The tuning profile that `auto` uses for files on one filesystem (accio_profile_key). */
typedef struct accio_profile_key {
  char filesystem[64]; /* "ext4" */
  char device[256];    /* "/dev/vda1" (the mount source) */
  char kernel[128];    /* uname -r */
  char version[32];    /* accio version */
  char file[1024];     /* where the profile is (or would be): profile directory + key */
} accio_profile_key;

/* A handle's or the process's counters (accio_file_stats, accio_global_stats). Per mechanism:
 * accio_file_mechanism_stats and accio_global_mechanism_stats, for any number of mechanisms. */
typedef struct accio_stats {
  uint64_t reads, writes, fsyncs, errors;
  uint64_t bytes_read, bytes_written;
  uint64_t read_ns, write_ns, fsync_ns;          /* wall time spent inside requests */
  /* Deprecated, kept so that the struct's layout and older callers stay as they were: the calls and
   * bytes of mechanism ids below ACCIO_MAX_MECHANISMS only (0 for the others). */
  uint64_t mechanism_calls[ACCIO_MAX_MECHANISMS];
  uint64_t mechanism_bytes[ACCIO_MAX_MECHANISMS];
  int32_t last_mechanism;                          /* id of the mechanism that ran last, -1 none */
} accio_stats;

/* ---- library ---- */
const char* accio_version(void);

/* ---- errors (per thread) ----
 * The texts below stay valid until the calling thread's next failing accio call, which replaces
 * them: copy one to keep it. (printf("%d %s", accio_x(...), accio_last_error()) may evaluate the
 * second argument first and print the previous error, or one freed since.) */
const char* accio_last_error(void);      /* "pread '/p' at offset 4096: ... (errno 5)" or "" */
int accio_last_errno(void);
const char* accio_last_error_op(void);
const char* accio_last_error_path(void);
int64_t accio_last_error_offset(void);   /* -1 when no offset applies */
/* Records an error for the calling thread as accio's own calls do, for a binding in another language
 * that refuses a call before it reaches accio (the Fortran module refuses a buffer that is not
 * contiguous): accio_last_error() then reads "op 'path': detail (errno E)" (path may be NULL or "",
 * detail NULL or "" for strerror's). Returns -errnum; -EINVAL, recording nothing, for errnum <= 0 or
 * a NULL op. */
int accio_set_last_error(int errnum, const char* op, const char* path, const char* detail);

/* ---- settings: every knob by name; defaults overridden by ACCIO_<NAME> ---- */
accio_settings* accio_settings_new(void);   /* defaults + environment; NULL on a bad ACCIO_* value */
accio_settings* accio_settings_copy(const accio_settings* s);
void accio_settings_free(accio_settings* s);
int accio_settings_set(accio_settings* s, const char* name, const char* value);  /* 0 or -EINVAL */
/* Writes the value (NUL-terminated) into out; returns its length or a negative errno. s NULL: the
 * value accio_settings_new() would give the row (defaults + environment), or -EINVAL with that row's
 * own error (its ACCIO_* value is bad) whatever the other rows' variables hold. */
int accio_settings_get(const accio_settings* s, const char* name, char* out, size_t len);
int accio_setting_count(void);
const char* accio_setting_name(int i);   /* "threads" */
const char* accio_setting_env(int i);    /* "ACCIO_THREADS" */
const char* accio_setting_doc(int i);
/* A new row of the settings table (a library adding a knob; a library's constructor may call it, from
 * any thread). Afterwards the row is part of every listing above, accio_settings_new() reads its
 * ACCIO_* variable, and accio_settings_set/get/copy know it (the value is validated by kind, stored
 * as text, and read back with accio_settings_get). */
typedef struct accio_setting_spec {
  const char* name;          /* "offload_timeout_ms": lower-case letters, digits, _ */
  const char* env;           /* "ACCIO_OFFLOAD_TIMEOUT_MS": upper-case letters, digits, _ (any name is
                                read; `accio info` and `accio run` check the ACCIO_* ones only) */
  const char* doc;
  const char* kind;          /* "count" | "size" | "bool" | "choice" | "text" */
  const char* default_value; /* parsed like a value */
  int64_t min, max;          /* bounds for count and size */
  const char* choices;       /* "shm|socket" for kind "choice" */
} accio_setting_spec;
/* 0; -EEXIST when the name is taken by a different spec (the same spec again is 0); -EINVAL bad spec */
int accio_setting_register(const accio_setting_spec* spec);
/* The whole row i (kind, default, bounds, choices: "" when none); its strings live for the process.
 * 0, or -EINVAL for no such row. */
int accio_setting_spec_of(int i, accio_setting_spec* out);
/* "4096", "4096B", "4k", "16 MiB", "1g" -> bytes (binary units: "KB" is 1024); -EINVAL (with a last error)
 * if not a size. Blanks only around the number and the unit ("1 0m" is not a size). */
int64_t accio_parse_size(const char* text);

/* ---- files ---- */
/* mode: "r", "r+" (or "rw"), "w", "w+", "a", "a+", "x", "x+", each also with a "b" as fopen takes it
 * ("rb", "r+b", "rb+", "wb": accio is always binary). "x" and "x+" create a new file as "w" and "w+"
 * do, and fail with -EEXIST where the path exists (O_EXCL: a symlink is not followed). settings may be NULL (defaults + environment). */
int accio_open(accio_file** out, const char* path, const char* mode, const accio_settings* settings);
/* A new handle on the file that descriptor fd refers to, with fd's access mode and its O_SYNC or
 * O_DSYNC. The file is reopened through /proc/self/fd: fd is neither used nor closed, and its file
 * offset is untouched. fd's O_APPEND is not kept, as in mode "a": a write at an offset lands there,
 * and accio_append appends. */
int accio_open_fd(accio_file** out, int fd, const accio_settings* settings);
int accio_close(accio_file* f);  /* waits for requests in flight, frees f; 0 or -errno */
/* The buffered descriptor accio reads and writes f through (owned by f: do not close it; valid until
 * accio_close), for fstat, fcntl locks, ftruncate; -EBADF after f was closed by its engine. */
int accio_file_fd(accio_file* f);
int64_t accio_pread(accio_file* f, void* buf, size_t size, int64_t offset);        /* bytes or -errno */
int64_t accio_pwrite(accio_file* f, const void* buf, size_t size, int64_t offset); /* size or -errno */
int64_t accio_append(accio_file* f, const void* buf, size_t size);  /* offset written at, or -errno */
int accio_fsync(accio_file* f);
int64_t accio_size(accio_file* f);
/* Name of the mechanism a request of `size` bytes at offset 0 from an aligned buffer would run on f
 * (after auto and fallbacks). NULL on error. accio_explain gives the whole plan and why. */
const char* accio_mechanism_for(accio_file* f, size_t size, int op);
/* The mechanism a request of `size` bytes at `offset` from `buf` would run now: the decision a
 * request makes (auto: profile, size, alignment, concurrency, page-cache residency); buf NULL counts
 * as aligned. It counts as that request for the handle's stream and residency state (the preload
 * shim decides so for a request it may then pass to libc); accio_explain asks without moving them.
 * op: ACCIO_OP_READ or ACCIO_OP_WRITE, with ACCIO_OP_FRESH_CACHE or'ed in for a residency probe of
 * this request's range whatever the last one was. NULL on error (EINVAL for a negative offset, a
 * size or offset + size that accio_pread refuses, or any other op). */
const char* accio_mechanism_for_at(accio_file* f, const void* buf, size_t size, int64_t offset, int op);
/* Deprecated names of the two above (they return a mechanism, not a plan); still exported. */
ACCIO_DEPRECATED("use accio_mechanism_for") const char* accio_plan(accio_file* f, size_t size, int op);
ACCIO_DEPRECATED("use accio_mechanism_for_at")
const char* accio_plan_at(accio_file* f, const void* buf, size_t size, int64_t offset, int op);
/* The smallest request (one in flight) for which f runs a plan other than posix: under auto the
 * profile's crossing point, 0 for a fixed mechanism, INT64_MAX when posix serves every size;
 * -EINVAL for a NULL f or an op other than ACCIO_OP_READ or ACCIO_OP_WRITE (ACCIO_OP_FRESH_CACHE
 * or'ed in is taken, as by accio_mechanism_for_at). */
int64_t accio_min_accelerated(accio_file* f, int op);
/* The same decision as text: the plan in `plan` and the reason in `why` (either may be NULL), as a
 * question: what the next request runs stays as it was. 0 or -errno. Each text is cut to its
 * buffer, NUL-terminated: one that fills it (len - 1 characters) may have been cut, so call again
 * with more room (the C++ and Fortran wrappers do). The same holds for the texts of
 * accio_mechanism_available, accio_probe, accio_cuda_available, accio_gds_info and accio_gds_mode,
 * which return a status, not a length. */
int accio_explain(accio_file* f, const void* buf, size_t size, int64_t offset, int op, char* plan, size_t plan_len,
                  char* why, size_t why_len);
/* The plans that served f's requests so far: fills up to max entries; returns how many there are. */
int accio_file_plans(accio_file* f, accio_plan_stat* out, int max);
/* The profile key of the filesystem holding path (a file or directory). 0 or -errno. */
int accio_profile_key_of(const char* path, accio_profile_key* out);
/* The prefetch window for the file open at fd: the bytes the preload shim asks the kernel for ahead
 * of a sequential reader of a cold file ("prefetch": {"window": N} of a profile; docs/tuning.md),
 * from the profile `auto` uses for fd (the settings' profile, NULL: ACCIO_* from the environment:
 * off -> 0, a file -> that profile's, auto -> the profile of fd's filesystem, 0 without one).
 * Returns the window, or -errno (an unreadable or malformed profile named by the settings). */
int64_t accio_prefetch_window(int fd, const accio_settings* settings);
int accio_file_stats(accio_file* f, accio_stats* out);
/* Calls and bytes of mechanism `id` (0 <= id < accio_mechanism_count(), accio_mechanism_name(id)) on
 * f; either pointer may be NULL. 0, or -EINVAL for an unknown id. */
int accio_file_mechanism_stats(accio_file* f, int id, uint64_t* calls, uint64_t* bytes);
int accio_file_setting(accio_file* f, const char* name, char* out, size_t len);

/* ---- asynchronous requests ---- */
int accio_pread_async(accio_file* f, void* buf, size_t size, int64_t offset, accio_future** out);
int accio_pwrite_async(accio_file* f, const void* buf, size_t size, int64_t offset, accio_future** out);
/* Submits n requests at once; futures[i] receives one future per request (all or none). */
int accio_submit(accio_file* f, int op, const accio_request* reqs, size_t n, accio_future** futures);
/* bytes or -errno (with the error recorded for the calling thread); may be called again, from any thread */
int64_t accio_future_wait(accio_future* fut);
int accio_future_ready(accio_future* fut, int64_t timeout_ns);  /* 1 done, 0 not yet */
/* Waits for the request if still running, and for its completion callback to return (not when
 * called from inside that callback), then frees fut. */
void accio_future_free(accio_future* fut);
/* A completion callback: result is what accio_future_wait returns (bytes or -errno); arg is the
 * registrant's. */
typedef void (*accio_future_fn)(accio_future* fut, int64_t result, void* arg);
/* Registers fn, called exactly once when the request completes: on the engine worker thread that
 * completed it, or at once on the calling thread when it has completed already. On a worker, fn must
 * return promptly (other requests wait for that thread): hand the result off, do not wait for another
 * request or thread. Inside fn, accio_future_wait(fut) returns at once and records the request's
 * error (operation, path, offset) for accio_last_error(), and fn may call accio_future_free(fut);
 * after freeing, fut is gone. A future takes one callback: 0, -EBUSY when it has one already, -EINVAL
 * for a NULL fut or fn. */
int accio_future_on_complete(accio_future* fut, accio_future_fn fn, void* arg);

/* ---- statistics and machine facts ---- */
int accio_global_stats(accio_stats* out);
/* The same as accio_file_mechanism_stats for the whole process (reset by accio_global_stats_reset). */
int accio_global_mechanism_stats(int id, uint64_t* calls, uint64_t* bytes);
void accio_global_stats_reset(void);
int accio_mechanism_count(void);
const char* accio_mechanism_name(int id);
/* 1 when the mechanism serves buffers in GPU memory (naive, staged, gds, pagecache), 0 host, -EINVAL unknown id. */
int accio_mechanism_device(int id);
/* 1 available, 0 not (why says what is missing). */
int accio_mechanism_available(int id, char* why, size_t len);
/* The k-th setting mechanism `id` reads ("threads", "queue_depth"; what its plans may set), NULL
 * past the last one or for an unknown id. */
const char* accio_mechanism_knob(int id, int k);
/* A plan, as a profile document writes it ({"mechanism": "uring", "queue_depth": 16, "direct": true};
 * docs/tuning.md), as the planner shows it: its label ("uring+direct(even, qd=16)") in `label`, and
 * in *needs_alignment (when not NULL) 1 when the plan's requests need O_DIRECT alignment, else 0.
 * Returns the label's full length (call again with a larger buffer when it is >= len), or -EINVAL
 * for a bad plan. */
int64_t accio_plan_describe(const char* plan_json, char* label, size_t len, int* needs_alignment);
/* A profile document (text; NULL: the built-in model) as the planner reads it, written into out as a
 * profile document with every plan's "label" and "needs_alignment" added and the decisions over the
 * planner's cells. Returns the full length (call again with a larger buffer when it is >= len), or
 * -EINVAL with the parser's error naming `source`. With text NULL, `source` names a file or
 * directory whose device's built-in model to give (the model reads cold ranges in one stream on a
 * rotational device), or is NULL: the model for a device that is not rotational; a path that
 * cannot be looked at returns its -errno. */
int64_t accio_profile_describe(const char* text, const char* source, char* out, size_t len);
/* Feature probes: "io_uring", "cachestat", "mincore", "o_direct" (needs path: a file or directory),
 * "slow_misaligned_copy" (this CPU's kernel copy is slow for buffers misaligned against the page
 * cache, so realign=auto reads them through an aligned buffer; measured once per process).
 * Returns 1 yes, 0 no, negative errno on a bad request; detail describes the result. */
int accio_probe(const char* feature, const char* path, char* detail, size_t len);
/* Page-cache residency of [offset, offset+len) of an open file: bytes cached (and dirty). */
int accio_residency(accio_file* f, int64_t offset, int64_t len, int64_t* cached, int64_t* dirty, int64_t* total);
/* Warnings issued so far, '\n'-separated; returns the full length. */
size_t accio_warnings(char* out, size_t len);
/* Every message accio issues (a fallback to a slower path, a resource shortage) goes to one place:
 * by default "accio: warning: ..." on stderr (nothing with ACCIO_QUIET=1), or to fn once it is set.
 * fn gets the level (ACCIO_LOG_INFO 20, ACCIO_LOG_WARNING 30: Python logging's numbers), a stable
 * key naming the cause ("gds-register", "staging-memlock", ...) and the message, once per cause and
 * process, on whichever thread issued it (a transfer's worker thread too, possibly holding one of
 * accio's internal locks); the strings live until fn returns. fn must return promptly: not call back
 * into accio, not wait for another thread (queue the message instead, as the Python package does).
 * NULL restores stderr. */
enum accio_log_level { ACCIO_LOG_INFO = 20, ACCIO_LOG_WARNING = 30 };
typedef void (*accio_log_fn)(int level, const char* key, const char* message, void* user);
void accio_set_log_callback(accio_log_fn fn, void* user);

/* ---- GPUs: the CUDA back end, loaded at run time (the same library runs without a GPU) ----
 * Every transfer function above takes device, managed or pinned pointers as well as host memory:
 * the driver's pointer attributes say where a buffer lives, and buffers in GPU memory run a device
 * mechanism (naive, staged, gds; auto picks staged). */
enum accio_mem_kind { ACCIO_MEM_HOST = 0, ACCIO_MEM_PINNED = 1, ACCIO_MEM_DEVICE = 2, ACCIO_MEM_MANAGED = 3 };

typedef struct accio_gpu_info {
  int ordinal;
  char name[256];
  char pci_bus_id[32]; /* "0000:17:00.0" */
  uint64_t memory;     /* bytes */
  int cc_major, cc_minor, multiprocessors, copy_engines;
  int numa_node;       /* -1 unknown */
  char link[64];       /* "32.0 GT/s PCIe x16", or "" */
  char cpus[256];      /* the CPUs local to the GPU, "0-15,32-47", or "" */
} accio_gpu_info;

/* 1 when libcuda loads and reports a GPU; 0 otherwise, with why in `why`. */
int accio_cuda_available(char* why, size_t len);
int accio_gpu_count(void); /* 0 without a driver or GPU */
/* The GPU of the calling thread's current CUDA context: the one a CUDA runtime (cudaSetDevice), CuPy
 * or a framework made current, what "cuda" without an index means to them. -1 where the thread has no
 * current context, or without a driver (a runtime's cudaGetDevice then says 0). Makes no context. */
int accio_cuda_current_device(void);
int accio_gpu_info_get(int ordinal, accio_gpu_info* out);
/* Where p lives (enum accio_mem_kind); *device gets the GPU ordinal or -1. Host when libcuda is not
 * loaded in the process: accio never loads it to classify a pointer. */
int accio_mem_kind(const void* p, int* device);
/* GPU memory owned by the caller (cuMemAlloc / cuMemAllocManaged on the device's primary context). */
/* 0 or -errno (-ENODEV without a driver or with no such GPU, -ENOMEM); *out is NULL on failure. */
int accio_device_alloc(int device, size_t size, int managed, void** out);
/* 0 (NULL: 0); -EINVAL where the driver does not know p as the start of a device allocation (a
 * host pointer, one freed already unless its address was given out again; every pointer without a
 * driver), -EIO when the driver fails otherwise. */
int accio_device_free(void* p);
int accio_device_copy(void* dst, const void* src, size_t size); /* any direction (unified addressing) */
/* Page-locked host memory for callers that stage themselves: size bytes, page-aligned (from 2 MiB up,
 * 2 MiB aligned and huge-page backed where the machine allows), zeroed and faulted in. When libcuda loads it is
 * registered with the driver (cuMemHostRegister, portable: pinned for every context, so device copies
 * from it run at DMA speed); otherwise it is mlock'ed. *how (may be NULL) gets ACCIO_HOST_CUDA,
 * ACCIO_HOST_MLOCK, or ACCIO_HOST_PAGEABLE when neither could pin it (after one warning naming the
 * limit). 0 or -errno (-ENOMEM, -EINVAL for size 0). Free with accio_host_free. */
enum accio_host_pin { ACCIO_HOST_PAGEABLE = 0, ACCIO_HOST_MLOCK = 1, ACCIO_HOST_CUDA = 2 };
int accio_host_alloc(size_t size, void** out, int* how);
int accio_host_free(void* p); /* 0; -EINVAL for a pointer accio_host_alloc did not return (NULL: 0) */
/* Waits until the work queued on a CUDA stream of GPU `device` has finished (cuStreamSynchronize, with
 * the device's primary context current): what a consumer of __cuda_array_interface__ or DLPack memory
 * does before touching it. stream: 1 is the legacy default stream (CU_STREAM_LEGACY, (CUstream)0x1),
 * 2 the calling thread's per-thread default stream (CU_STREAM_PER_THREAD, (CUstream)0x2), any other
 * value a CUstream handle; 0 is refused with -EINVAL, as the CAI v3 and DLPack specifications refuse
 * it (ambiguous). 0, or -ENODEV without a driver or with no such GPU, -EIO when the driver fails. */
int accio_cuda_stream_sync(int device, uintptr_t stream);
/* Runs fn(arg) in the calling thread with a context of GPU `device` current, so that a CUDA runtime or a
 * framework called in fn takes `device` for the current GPU: for a binding that asks a producer to
 * export an array of that GPU (PyTorch refuses to export a tensor of another GPU than the current one;
 * CuPy orders its work on the current GPU's stream). That context is the calling thread's current one
 * where it is on `device` already, else the GPU's primary context, pushed before and popped after, if
 * some code in the process made it active; where none did, fn runs with the current context unchanged
 * (accio makes no context). fn must return normally (no longjmp through it). 0 once fn returned;
 * -ENODEV without a driver or with no such GPU, -EIO when the driver refuses the context, -EINVAL for
 * a NULL fn (fn is then not called); -ECANCELED when a C++ fn threw. */
int accio_cuda_with_device(int device, void (*fn)(void* arg), void* arg);
/* cuFile: 1 loaded (detail: whether the direct path is possible), 0 not (detail: why). */
int accio_gds_info(char* detail, size_t len);
/* For f (registering it with cuFile once to find out): 1 when cuFile can take the direct path, 0 when
 * it would run in compatibility mode (no direct path for this file here, or cuFile took only its
 * buffered descriptor), 2 when cuFile refuses the file, so that mechanism gds serves its
 * GPU requests with staged (after one warning); detail says why, with the possible causes accio can see. */
int accio_gds_mode(accio_file* f, char* detail, size_t len);
/* The pinned-copy ceiling: seconds for `threads` threads to copy `bytes` in all between registered
 * host buffers of `chunk` bytes and the device (to_device 1: host-to-device), asynchronously. */
int accio_cuda_copy_seconds(int device, int to_device, size_t bytes, size_t chunk, int threads, double* seconds);

/* ---- log: a message of another component (the offload runtime) into the channel above ----
 * Goes to the accio_set_log_callback function, or to stderr ("accio: error: <message>",
 * "accio: warning: <message>", "accio: <message>"; nothing with ACCIO_QUIET=1). Every call is
 * issued (not once per key) and not recorded by accio_warnings. key names the source or cause
 * ("offload"). Returns 0, or -EINVAL for an unknown level or a NULL key or message. */
enum { ACCIO_LOG_ERROR = 40 };
int accio_log(int level, const char* key, const char* message);

#ifdef __cplusplus
}
#endif
#endif /* ACCIO_ACCIO_H */
