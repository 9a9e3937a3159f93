// accio memory: the CUDA back end, loaded at run time. libcuda is opened with dlopen (never linked),
// so one build runs with and without a GPU. Declares the few driver types and functions accio uses
// (checked against the toolkit's cuda.h by tests/cpp/test_cuda_abi.cpp where the toolkit is present),
// classifies buffers by driver pointer attributes, and owns contexts, device allocations and the
// registration of host staging memory.
#pragma once
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace accio::mem::cuda {

// ---- the driver ABI (values from cuda.h; see the ABI test) ----
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
inline constexpr CUresult kSuccess = 0;
inline constexpr CUresult kErrorInvalidValue = 1;
inline constexpr CUresult kErrorOutOfMemory = 2;
inline constexpr CUresult kErrorNotInitialized = 3;
inline constexpr CUresult kErrorNotReady = 600;
inline constexpr CUresult kErrorHostMemoryAlreadyRegistered = 712;
enum PointerAttribute : int {
  kPtrContext = 1, kPtrMemoryType = 2, kPtrBufferId = 7, kPtrIsManaged = 8, kPtrDeviceOrdinal = 9,
  kPtrRangeStart = 11, kPtrRangeSize = 12,
};
enum MemoryType : unsigned { kMemHost = 1, kMemDevice = 2, kMemArray = 3, kMemUnified = 4 };
enum DeviceAttribute : int {
  kAttrMultiprocessors = 16, kAttrPciBusId = 33, kAttrPciDeviceId = 34, kAttrAsyncEngines = 40,
  kAttrUnifiedAddressing = 41, kAttrPciDomainId = 50, kAttrCcMajor = 75, kAttrCcMinor = 76,
  kAttrReadOnlyHostRegister = 113,  // cuMemHostRegister takes READ_ONLY (pagecache needs it)
};
inline constexpr unsigned kHostRegisterPortable = 0x01;
inline constexpr unsigned kHostRegisterReadOnly = 0x08;  // the device only reads the range (file pages)
inline constexpr unsigned kMemAttachGlobal = 0x1;
inline constexpr unsigned kStreamNonBlocking = 0x1;
// CU_STREAM_DEFAULT: the stream's work runs after what was queued before it on the context's legacy
// default stream. The copy streams of staged and pagecache are created so (as KvikIO's are): a
// kernel a caller queued there without synchronizing (a C caller, a Numba array) finishes writing
// or reading the buffer before accio copies. Non-blocking streams would race it.
inline constexpr unsigned kStreamBlocking = 0x0;
inline constexpr unsigned kEventDisableTiming = 0x2;

// The driver entry points accio calls, resolved once by dlsym (the _v2 names cuda.h maps to).
struct Driver {
  void* lib = nullptr;
  std::string path;  // what was opened
  int version = 0;   // cuDriverGetVersion: 12080 = 12.8
  int devices = 0;
  CUresult (*Init)(unsigned);
  CUresult (*DriverGetVersion)(int*);
  CUresult (*GetErrorName)(CUresult, const char**);
  CUresult (*GetErrorString)(CUresult, const char**);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetName)(char*, int, CUdevice);
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*DeviceTotalMem)(size_t*, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*DevicePrimaryCtxGetState)(CUdevice, unsigned*, int*);  // optional (nullptr: not asked)
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext*);
  CUresult (*CtxGetCurrent)(CUcontext*);
  CUresult (*CtxGetDevice)(CUdevice*);  // optional (nullptr: the current context itself is used)
  CUresult (*CtxGetId)(CUcontext, unsigned long long*);  // optional (CUDA 12.0+; nullptr: not asked)
  CUresult (*PointerGetAttributes)(unsigned, int*, void**, CUdeviceptr);
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemAllocManaged)(CUdeviceptr*, size_t, unsigned);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemGetInfo)(size_t*, size_t*);
  CUresult (*MemHostRegister)(void*, size_t, unsigned);
  CUresult (*MemHostUnregister)(void*);
  CUresult (*Memcpy)(CUdeviceptr, CUdeviceptr, size_t);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*StreamCreate)(CUstream*, unsigned);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*EventCreate)(CUevent*, unsigned);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventSynchronize)(CUevent);
};

// ---- run-time loading, shared with cufile.cpp ----
// $env when set and not empty, else `fallback`: which library to dlopen.
std::string library_from_env(const char* env, const char* fallback);
// dlopen(path); nullptr with *why = "cannot load PATH (dlerror): <consequence>" when it fails.
void* open_library(const std::string& path, const char* consequence, std::string* why);
// out = dlsym(lib, name); the first missing name is kept in *missing (when given).
template <class F>
void resolve_symbol(void* lib, const char* name, F& out, std::string* missing) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  if (!out && missing && missing->empty()) *missing = name;
}

// The library that would be opened: $ACCIO_LIBCUDA, else libcuda.so.1.
std::string library_name();
// Opens libcuda (once per process), initializes it and counts devices. nullptr when the library is
// missing, lacks a symbol, or cuInit fails; *why then says which.
const Driver* load(std::string* why = nullptr);
// The driver only if some code in this process already loaded libcuda (a framework, the CUDA
// runtime, accio itself): a pointer can only be device memory then. Never loads it, so host-only
// programs pay nothing and do not initialize CUDA (which would break CUDA in forked children).
// Whether libcuda has arrived is a look at the loader's list under the loader's lock, so until it
// has, each thread looks on its first call and then every kRecheckEvery-th call; `recheck` looks now.
inline constexpr unsigned kRecheckEvery = 256;
const Driver* loaded(bool recheck = false);
// Whether this process was forked after its parent initialized the driver (accio, or a framework
// whose cuInit the child's then finds refused): CUDA does not survive fork(), and load() and loaded()
// then answer nullptr (load's why says so). Never loads the driver: false before load() ran.
bool forked_child();

// "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
std::string error_text(const Driver& d, CUresult rc, const char* call);
// Throws base::Error (ENOMEM for out of memory, else EIO) when rc is not success.
void check(const Driver& d, CUresult rc, const char* call, const std::string& path = {}, int64_t offset = -1);

// ---- buffers ----
enum class MemKind { host, pinned, device, managed };
const char* kind_name(MemKind k);

// Where a buffer lives, from the driver's pointer attributes.
struct Target {
  MemKind kind = MemKind::host;
  int device = -1;            // ordinal for device, managed and (if known) pinned memory
  CUcontext ctx = nullptr;    // the allocation's context (null for VMM allocations)
  // The allocation's context is one the program made itself (cuCtxCreate: PyCUDA), not its GPU's
  // primary context: accio's streams belong to the primary one, and a copy on a stream of another
  // context than the current one fails, so only naive (synchronous copies in that context) serves it.
  bool own_context = false;
  // Whether the driver was asked about this pointer (libcuda was loaded): the answer then holds for
  // the request, and who gets the target need not ask again (realign's check, once per request).
  bool asked = false;
  bool on_device() const { return kind == MemKind::device || kind == MemKind::managed; }
  std::string name() const;   // "host", "cuda:0", "cuda:0 (managed)"
};
// Host when libcuda is not loaded in the process (as far as loaded(recheck) knows) or the driver
// does not know the pointer. A GPU buffer classified as host in the window before loaded() noticed
// libcuda fails on the host path with EFAULT; the engine then classifies it again with recheck.
Target classify(const void* p, bool recheck = false);

// Makes the target's context current on this thread for the guard's life (the device's primary
// context when the allocation has none).
class ContextGuard {
 public:
  explicit ContextGuard(const Target& t);
  explicit ContextGuard(int device);
  // For work that belongs to no GPU (pinning host memory, opening cuFile): the primary context of
  // the GPU of the calling thread's current context (the primary one, which accio keeps retained,
  // rather than a context the program may destroy while the pinning lasts); without a current
  // context, of the first GPU whose primary context is already active (the one the program uses),
  // else GPU 0's. A context costs a few hundred MiB of GPU memory and, in exclusive-process mode,
  // fails on a GPU another process owns: once the program has made its GPU current, accio makes
  // none on another.
  struct HostWork {};
  explicit ContextGuard(HostWork);
  ~ContextGuard();
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

 private:
  void push(CUcontext c);
  const Driver* d_;
  bool pushed_ = false;
};
// The driver, if GPU `device` is there; else an ENODEV Error for `op` saying why.
const Driver& require_device(int device, const char* op);
CUcontext primary_context(int device);  // retained once per device, kept
// Which instance GPU `device`'s primary context is (cuCtxGetId): a program that resets the GPU
// (cudaDeviceReset, numba.cuda.close(), CuPy's runtime.deviceReset: cuDevicePrimaryCtxReset)
// destroys the context's streams, events and host registrations, and the driver hands back the same
// handle for the context it makes again, under a new id. What accio keeps for the process
// (staging rings, pagecache's lanes and registrations) records the instance it was made in and is
// made again when this differs. 0 where the driver cannot say (before CUDA 12.0, a context reset
// and not made again: the program's next CUDA call makes it, or no such GPU).
uint64_t primary_instance(int device);
// Whether what was made in instance `made_in` belongs to an earlier one than `now` (false where either
// is unknown).
inline bool instance_gone(uint64_t made_in, uint64_t now) { return made_in && now && made_in != now; }
// The GPU of the calling thread's current context, -1 without one (or without a driver).
int current_device();
// Whether GPU device's primary context is active (some code in the process retained it: the runtime
// API, a framework, accio); true where the driver cannot say. Asking makes no context.
bool primary_active(int device);
// Waits for the work queued on the current context's legacy default stream (and so for what it waits
// for): what a transfer outside accio's own streams (cuFile's) needs to be ordered as staged's are.
// path and offset name the request in an error.
void wait_legacy_stream(const std::string& path = {}, int64_t offset = -1);
// Waits until the synchronous copies made so far into device memory in the current context have
// landed. A synchronous copy from pageable host memory returns once the bytes are in the driver's
// staging memory, and one between device buffers returns at once ("API synchronization behavior");
// both are ordered before later work on the legacy default stream, not before a non-blocking
// stream's, a peer's or another process's. An event recorded on the legacy stream after them is
// waited for: that stream's work queued since by other threads is not.
void wait_copies_landed(const std::string& path = {}, int64_t offset = -1);

// ---- device facts (accio info) ----
struct GpuInfo {
  int ordinal = 0;
  std::string name, pci_bus_id;  // "0000:17:00.0"
  size_t memory = 0;
  int cc_major = 0, cc_minor = 0, multiprocessors = 0, copy_engines = 0;
  int numa_node = -1;            // from sysfs; -1 unknown
  std::string link;              // "16.0 GT/s PCIe x16" from sysfs, or ""
  std::string cpus;              // local_cpulist from sysfs, "0-15,32-47"; "" unknown
};
std::vector<GpuInfo> gpus();  // empty without a driver
// The GPU's name as the driver reports it ("NVIDIA H100 80GB HBM3"), which keys a profile's device
// tables; "" when the driver does not know the ordinal. Asked once per ordinal, then cached.
std::string device_name(int ordinal);

// ---- device memory owned by accio (Python's device arrays, the bench, tests) ----
void* alloc(int device, size_t n, bool managed);  // throws base::Error (ENOMEM on GPU out of memory)
void free(void* p);
// Copies between any two pointers the driver knows (UVA): host<->device, device<->device.
void copy(void* dst, const void* src, size_t n);

// The pinned-copy ceiling: `threads` threads, each with its own registered staging buffer of `chunk`
// bytes, a device buffer and a stream, copy `bytes` in all (host-to-device or device-to-host) with
// asynchronous copies. Returns seconds from the common start to the last thread's end.
double measure_copy(int device, bool to_device, size_t bytes, size_t chunk, unsigned threads);

// Page-locks and registers host memory with the driver for every context (portable). Returns false
// (after one warning naming the cause) when the driver refuses; the memory stays usable, unpinned.
// consequence: what the warning says follows (default: the staging buffers' case).
bool register_host(void* p, size_t n, const char* consequence = nullptr);
void unregister_host(void* p);

}  // namespace accio::mem::cuda
