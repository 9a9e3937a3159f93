// accio memory: the CUDA driver loaded at run time (see cuda.hpp).
#include "mem/cuda.hpp"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <thread>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "base/error.hpp"
#include "base/fork.hpp"
#include "base/log.hpp"
#include "base/sys.hpp"
#include "mem/staging.hpp"

namespace accio::mem::cuda {
using base::Error;

std::string library_from_env(const char* env, const char* fallback) {
  const char* e = std::getenv(env);
  return e && *e ? e : fallback;
}

void* open_library(const std::string& path, const char* consequence, std::string* why) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    *why = "cannot load " + path + " (" + (e ? e : "not found") + "): " + consequence;
  }
  return lib;
}

std::string library_name() { return library_from_env("ACCIO_LIBCUDA", "libcuda.so.1"); }

namespace {

struct Loaded {
  Driver d;
  const Driver* ok = nullptr;
  std::string why;
  unsigned fork = 0;  // base::fork_count() when the driver was initialized
  bool forked = false;  // cuInit refused in a forked child: its parent had initialized CUDA
};

// CUDA does not survive fork(): in a child of a process that initialized it, every driver call fails
// (CUDA_ERROR_NOT_INITIALIZED, cuInit's too). Such a child runs as a machine without a driver does,
// silently (a DataLoader worker reading files on the host); GPU memory is out of its reach.
constexpr const char* kForked =
    "CUDA was initialized in the parent process before fork(), and a forked child cannot use it (start "
    "workers that use GPUs with the 'spawn' method)";

Loaded& state() {
  static Loaded s;
  static std::once_flag once;
  std::call_once(once, [] {
    Driver& d = s.d;
    d.path = library_name();
    d.lib = open_library(d.path, "no NVIDIA driver on this machine", &s.why);
    if (!d.lib) return;
    std::string miss;
    void* l = d.lib;
    resolve_symbol(l, "cuInit", d.Init, &miss);
    resolve_symbol(l, "cuDriverGetVersion", d.DriverGetVersion, &miss);
    resolve_symbol(l, "cuGetErrorName", d.GetErrorName, &miss);
    resolve_symbol(l, "cuGetErrorString", d.GetErrorString, &miss);
    resolve_symbol(l, "cuDeviceGetCount", d.DeviceGetCount, &miss);
    resolve_symbol(l, "cuDeviceGet", d.DeviceGet, &miss);
    resolve_symbol(l, "cuDeviceGetName", d.DeviceGetName, &miss);
    resolve_symbol(l, "cuDeviceGetAttribute", d.DeviceGetAttribute, &miss);
    resolve_symbol(l, "cuDeviceTotalMem_v2", d.DeviceTotalMem, &miss);
    resolve_symbol(l, "cuDevicePrimaryCtxRetain", d.DevicePrimaryCtxRetain, &miss);
    resolve_symbol(l, "cuDevicePrimaryCtxGetState", d.DevicePrimaryCtxGetState, nullptr);
    resolve_symbol(l, "cuCtxPushCurrent_v2", d.CtxPushCurrent, &miss);
    resolve_symbol(l, "cuCtxPopCurrent_v2", d.CtxPopCurrent, &miss);
    resolve_symbol(l, "cuCtxGetCurrent", d.CtxGetCurrent, &miss);
    resolve_symbol(l, "cuCtxGetDevice", d.CtxGetDevice, nullptr);
    resolve_symbol(l, "cuCtxGetId", d.CtxGetId, nullptr);
    resolve_symbol(l, "cuPointerGetAttributes", d.PointerGetAttributes, &miss);
    resolve_symbol(l, "cuMemAlloc_v2", d.MemAlloc, &miss);
    resolve_symbol(l, "cuMemAllocManaged", d.MemAllocManaged, &miss);
    resolve_symbol(l, "cuMemFree_v2", d.MemFree, &miss);
    resolve_symbol(l, "cuMemGetInfo_v2", d.MemGetInfo, &miss);
    resolve_symbol(l, "cuMemHostRegister_v2", d.MemHostRegister, &miss);
    resolve_symbol(l, "cuMemHostUnregister", d.MemHostUnregister, &miss);
    resolve_symbol(l, "cuMemcpy", d.Memcpy, &miss);
    resolve_symbol(l, "cuMemcpyHtoD_v2", d.MemcpyHtoD, &miss);
    resolve_symbol(l, "cuMemcpyDtoH_v2", d.MemcpyDtoH, &miss);
    resolve_symbol(l, "cuMemcpyHtoDAsync_v2", d.MemcpyHtoDAsync, &miss);
    resolve_symbol(l, "cuMemcpyDtoHAsync_v2", d.MemcpyDtoHAsync, &miss);
    resolve_symbol(l, "cuStreamCreate", d.StreamCreate, &miss);
    resolve_symbol(l, "cuStreamDestroy_v2", d.StreamDestroy, &miss);
    resolve_symbol(l, "cuStreamSynchronize", d.StreamSynchronize, &miss);
    resolve_symbol(l, "cuEventCreate", d.EventCreate, &miss);
    resolve_symbol(l, "cuEventDestroy_v2", d.EventDestroy, &miss);
    resolve_symbol(l, "cuEventRecord", d.EventRecord, &miss);
    resolve_symbol(l, "cuEventSynchronize", d.EventSynchronize, &miss);
    if (!miss.empty()) {
      s.why = d.path + " lacks " + miss + " (driver too old?)";
      return;
    }
    if (CUresult rc = d.Init(0); rc != kSuccess) {
      // In a child forked after its parent initialized CUDA (a framework did, before accio asked),
      // cuInit itself answers CUDA_ERROR_NOT_INITIALIZED.
      if (rc == kErrorNotInitialized && base::fork_count() > 0) {
        s.why = kForked;
        s.forked = true;
        return;
      }
      s.why = error_text(d, rc, "cuInit") + ": the driver is installed but no GPU can be used";
      return;
    }
    d.DriverGetVersion(&d.version);
    if (d.DeviceGetCount(&d.devices) != kSuccess || d.devices <= 0) {
      s.why = "the NVIDIA driver reports no GPU";
      return;
    }
    s.fork = base::fork_count();
    s.ok = &s.d;
  });
  return s;
}

int objects_added() {
  unsigned long long adds = 0;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        *static_cast<unsigned long long*>(out) = info->dlpi_adds;
        return 1;
      },
      &adds);
  return static_cast<int>(adds);
}

std::atomic<const Driver*> g_found{nullptr};  // libcuda is in the process and initialized
std::atomic<bool> g_tried{false};              // load() has run: state() is settled (forked_child asks it)
}  // namespace

const Driver* load(std::string* why) {
  Loaded& s = state();
  g_tried.store(true, std::memory_order_release);
  if (s.ok && base::fork_count() != s.fork) {
    if (why) *why = kForked;
    return nullptr;
  }
  if (!s.ok && why) *why = s.why;
  if (s.ok) g_found.store(s.ok, std::memory_order_release);
  return s.ok;
}

bool forked_child() {
  if (!g_tried.load(std::memory_order_acquire)) return false;  // never loads the driver itself
  const Loaded& s = state();
  return (s.ok && base::fork_count() != s.fork) || s.forked;
}

const Driver* loaded(bool recheck) {
  if (const Driver* d = g_found.load(std::memory_order_acquire)) return forked_child() ? nullptr : d;
  // dl_iterate_phdr takes the loader's lock: 25 ns alone, 50-260 ns with two threads contending
  // (results/classify_cost.json). Each thread looks on its first call and then every kRecheckEvery-th.
  thread_local unsigned calls = 0;
  if (!recheck && calls++ % kRecheckEvery != 0) return nullptr;
  // Look again only when the process loaded a new object since the last look. The count is
  // stored only once the look has an answer: a thread that stored it before load() had finished
  // made another thread, seeing the same count, take a GPU buffer for host memory meanwhile (a CPU
  // copy into it, realign's, would then fault where the kernel answers EFAULT).
  static std::atomic<int> checked_at{-1};
  const int adds = objects_added();
  if (checked_at.load(std::memory_order_acquire) == adds) return nullptr;
  void* h = dlopen(library_name().c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!h) {
    checked_at.store(adds, std::memory_order_release);
    return nullptr;
  }
  dlclose(h);
  const Driver* d = load();  // concurrent callers wait in its call_once
  checked_at.store(adds, std::memory_order_release);
  return d;
}

std::string error_text(const Driver& d, CUresult rc, const char* call) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.GetErrorName) d.GetErrorName(rc, &name);
  if (d.GetErrorString) d.GetErrorString(rc, &text);
  std::string s = std::string(call) + ": " + (name ? name : "CUDA error " + std::to_string(rc));
  if (text) s += std::string(" (") + text + ")";
  return s;
}

void check(const Driver& d, CUresult rc, const char* call, const std::string& path, int64_t offset) {
  if (rc == kSuccess) return;
  throw Error(rc == kErrorOutOfMemory ? ENOMEM : EIO, call, path, offset, error_text(d, rc, call));
}

const char* kind_name(MemKind k) {
  switch (k) {
    case MemKind::pinned: return "pinned";
    case MemKind::device: return "device";
    case MemKind::managed: return "managed";
    default: return "host";
  }
}

std::string Target::name() const {
  if (kind == MemKind::host) return "host";
  if (kind == MemKind::pinned) return "host (pinned)";
  return "cuda:" + std::to_string(device) + (kind == MemKind::managed ? " (managed)" : "") +
         (own_context ? " (a context of the program's own)" : "");
}

namespace {
// The primary context of each GPU once accio retained it (primary_context), for own_context's
// steady state: one load and one compare per request, whatever GPU it is for.
constexpr int kMaxDevices = 64;
std::atomic<CUcontext> g_primary[kMaxDevices];

// Whether ctx is not GPU device's primary context (the one the runtime API and the frameworks use).
// An inactive primary context cannot be ctx, so none is made to compare; an active one is retained
// (accio keeps it for its streams anyway). A context that cannot be told apart (the driver cannot
// say whether the primary one is active, or gave no ordinal) counts as primary, as before this check.
bool own_context(CUcontext ctx, int device) {
  if (!ctx || device < 0) return false;  // VMM memory has no context of its own
  if (device < kMaxDevices)
    if (CUcontext p = g_primary[device].load(std::memory_order_acquire)) return ctx != p;
  thread_local CUcontext last = nullptr;  // an own context, asked again by the same thread
  thread_local bool last_own = false;
  if (ctx == last) return last_own;
  bool own = false;
  const Driver* d = load();
  if (d && d->DevicePrimaryCtxGetState) {
    try {
      own = !primary_active(device) || primary_context(device) != ctx;
    } catch (const Error&) {  // no primary context to be had (exclusive-process mode): as before
    }
  }
  last = ctx;
  last_own = own;
  return own;
}
}  // namespace

int current_device() {
  const Driver* d = load();
  CUcontext cur = nullptr;
  CUdevice dev = -1;
  if (!d || d->CtxGetCurrent(&cur) != kSuccess || !cur || !d->CtxGetDevice || d->CtxGetDevice(&dev) != kSuccess)
    return -1;
  return static_cast<int>(dev);
}

bool primary_active(int device) {
  const Driver* d = load();
  if (!d || !d->DevicePrimaryCtxGetState) return true;
  CUdevice dev;
  unsigned flags = 0;
  int active = 1;
  if (d->DeviceGet(&dev, device) != kSuccess || d->DevicePrimaryCtxGetState(dev, &flags, &active) != kSuccess)
    return true;
  return active != 0;
}

Target classify(const void* p, bool recheck) {
  const Driver* d = p ? loaded(recheck) : nullptr;
  if (!d) return {};
  int attrs[] = {kPtrMemoryType, kPtrIsManaged, kPtrDeviceOrdinal, kPtrContext};
  unsigned type = 0, managed = 0;
  int ordinal = -1;
  CUcontext ctx = nullptr;
  void* data[] = {&type, &managed, &ordinal, &ctx};
  Target t;
  t.asked = true;
  if (d->PointerGetAttributes(4, attrs, data, reinterpret_cast<CUdeviceptr>(p)) != kSuccess) return t;
  if (managed) t.kind = MemKind::managed;
  else if (type == kMemDevice) t.kind = MemKind::device;
  else if (type == kMemHost) t.kind = MemKind::pinned;
  else return t;  // memory the driver does not know: host
  t.device = ordinal;
  t.ctx = ctx;
  if (t.on_device() && t.device < 0) t.device = 0;
  if (t.on_device()) t.own_context = own_context(ctx, ordinal);
  return t;
}

const Driver& require_device(int device, const char* op) {
  std::string why;
  const Driver* d = load(&why);
  if (!d) throw Error(ENODEV, op, "", base::kNoOffset, why.empty() ? "no CUDA driver" : why);
  if (device < 0 || device >= d->devices)
    throw Error(ENODEV, op, "", base::kNoOffset,
                "no GPU cuda:" + std::to_string(device) + " (this machine has " + std::to_string(d->devices) + ")");
  return *d;
}

CUcontext primary_context(int device) {
  const Driver* d = &require_device(device, "cuda context");
  static std::mutex mu;
  static std::map<int, CUcontext> ctxs;
  std::lock_guard lk(mu);
  CUcontext& c = ctxs[device];
  if (!c) {
    CUdevice dev;
    check(*d, d->DeviceGet(&dev, device), "cuDeviceGet");
    check(*d, d->DevicePrimaryCtxRetain(&c, dev), "cuDevicePrimaryCtxRetain");
    if (device < kMaxDevices) g_primary[device].store(c, std::memory_order_release);
  }
  return c;
}

uint64_t primary_instance(int device) {
  const Driver* d = load();
  if (!d || !d->CtxGetId) return 0;
  unsigned long long id = 0;
  try {
    if (d->CtxGetId(primary_context(device), &id) != kSuccess) return 0;
  } catch (const std::exception&) {  // no such GPU, or its context refused
    return 0;
  }
  return id;
}

void wait_legacy_stream(const std::string& path, int64_t offset) {
  const Driver& d = *load();
  check(d, d.StreamSynchronize(reinterpret_cast<CUstream>(uintptr_t{1})), "cuStreamSynchronize(CU_STREAM_LEGACY)", path,
        offset);
}

void wait_copies_landed(const std::string& path, int64_t offset) {
  const Driver& d = *load();
  CUevent e = nullptr;
  check(d, d.EventCreate(&e, kEventDisableTiming), "cuEventCreate", path, offset);
  CUresult rc = d.EventRecord(e, reinterpret_cast<CUstream>(uintptr_t{1}));  // CU_STREAM_LEGACY
  if (rc == kSuccess) rc = d.EventSynchronize(e);
  d.EventDestroy(e);
  check(d, rc, "cuEventSynchronize(CU_STREAM_LEGACY)", path, offset);
}

ContextGuard::ContextGuard(const Target& t) : d_(load()) {
  if (d_) push(t.ctx ? t.ctx : primary_context(t.device < 0 ? 0 : t.device));
}
ContextGuard::ContextGuard(int device) : d_(load()) {
  if (d_) push(primary_context(device));
}
ContextGuard::ContextGuard(HostWork) : d_(load()) {
  if (!d_) return;
  CUcontext cur = nullptr;
  if (d_->CtxGetCurrent(&cur) == kSuccess && cur) {
    CUdevice dev;
    if (d_->CtxGetDevice && d_->CtxGetDevice(&dev) == kSuccess) push(primary_context(static_cast<int>(dev)));
    return;
  }
  int device = 0;
  for (int i = 0; d_->DevicePrimaryCtxGetState && i < d_->devices; ++i) {
    CUdevice dev;
    unsigned flags = 0;
    int active = 0;
    if (d_->DeviceGet(&dev, i) == kSuccess && d_->DevicePrimaryCtxGetState(dev, &flags, &active) == kSuccess && active) {
      device = i;
      break;
    }
  }
  push(primary_context(device));
}
void ContextGuard::push(CUcontext c) {
  CUcontext cur = nullptr;
  if (d_->CtxGetCurrent(&cur) == kSuccess && cur == c) return;
  check(*d_, d_->CtxPushCurrent(c), "cuCtxPushCurrent");
  pushed_ = true;
}
ContextGuard::~ContextGuard() {
  CUcontext old;
  if (pushed_) d_->CtxPopCurrent(&old);
}

namespace {
// The first line of a sysfs file, "" when it cannot be read.
std::string read_line(const std::string& path) {
  std::string s;
  if (!base::sys::read_file(path.c_str(), s, 65536)) return "";
  return s.substr(0, s.find('\n'));
}
}  // namespace

std::string device_name(int ordinal) {
  struct Names {
    std::mutex mu;
    std::map<int, std::string> map;
  };
  static base::PerProcess<Names> cache;  // a lock held at fork is not the child's
  Names& c = cache.get();
  std::lock_guard lk(c.mu);
  auto& names = c.map;
  if (auto it = names.find(ordinal); it != names.end()) return it->second;
  const Driver* d = load();
  CUdevice dev;
  char name[256] = {};
  if (!d || ordinal < 0 || ordinal >= d->devices || d->DeviceGet(&dev, ordinal) != kSuccess ||
      d->DeviceGetName(name, sizeof name - 1, dev) != kSuccess)
    name[0] = 0;
  return names.emplace(ordinal, name).first->second;
}

std::vector<GpuInfo> gpus() {
  std::vector<GpuInfo> out;
  const Driver* d = load();
  if (!d) return out;
  for (int i = 0; i < d->devices; ++i) {
    CUdevice dev;
    if (d->DeviceGet(&dev, i) != kSuccess) continue;
    GpuInfo g;
    g.ordinal = i;
    char name[256] = {};
    d->DeviceGetName(name, sizeof name - 1, dev);
    g.name = name;
    d->DeviceTotalMem(&g.memory, dev);
    auto attr = [&](int a) {
      int v = 0;
      d->DeviceGetAttribute(&v, a, dev);
      return v;
    };
    g.cc_major = attr(kAttrCcMajor);
    g.cc_minor = attr(kAttrCcMinor);
    g.multiprocessors = attr(kAttrMultiprocessors);
    g.copy_engines = attr(kAttrAsyncEngines);
    char bus[32];
    std::snprintf(bus, sizeof bus, "%04x:%02x:%02x.0", attr(kAttrPciDomainId) & 0xffff, attr(kAttrPciBusId) & 0xff,
                  attr(kAttrPciDeviceId) & 0xff);
    g.pci_bus_id = bus;
    const std::string sys = "/sys/bus/pci/devices/" + g.pci_bus_id + "/";
    const std::string numa = read_line(sys + "numa_node");
    if (!numa.empty()) g.numa_node = std::atoi(numa.c_str());
    const std::string speed = read_line(sys + "current_link_speed"), width = read_line(sys + "current_link_width");
    if (!speed.empty()) g.link = speed + (width.empty() ? "" : " x" + width);
    g.cpus = read_line(sys + "local_cpulist");
    out.push_back(std::move(g));
  }
  return out;
}

void* alloc(int device, size_t n, bool managed) {
  std::string why;
  const Driver* d = load(&why);
  if (!d) throw Error(ENODEV, "allocate device memory", "", base::kNoOffset, why);
  ContextGuard g(device);
  CUdeviceptr p = 0;
  const size_t len = n ? n : 1;
  if (managed) check(*d, d->MemAllocManaged(&p, len, kMemAttachGlobal), "cuMemAllocManaged");
  else check(*d, d->MemAlloc(&p, len), "cuMemAlloc");
  return reinterpret_cast<void*>(p);
}

void free(void* p) {
  if (!p) return;
  std::string why;
  const Driver* d = load(&why);
  // Without a driver no pointer can be device memory: a host pointer given by mistake is said, not
  // taken as freed (the Fortran wrapper nulls the caller's pointer on success).
  if (!d) throw Error(EINVAL, "free device memory", "", base::kNoOffset, "not memory from accio_device_alloc: " + why);
  const Target t = classify(p);
  std::optional<ContextGuard> g;
  if (t.on_device()) g.emplace(t);
  else g.emplace(ContextGuard::HostWork{});
  const CUresult rc = d->MemFree(reinterpret_cast<CUdeviceptr>(p));
  if (rc == kErrorInvalidValue)
    throw Error(EINVAL, "free device memory", "", base::kNoOffset,
                "not memory from accio_device_alloc (" + error_text(*d, rc, "cuMemFree") + ")");
  check(*d, rc, "cuMemFree");
}

void copy(void* dst, const void* src, size_t n) {
  if (n == 0) return;
  const Target td = classify(dst, true), ts = classify(src, true);
  if (!td.on_device() && !ts.on_device()) {
    std::memmove(dst, src, n);
    return;
  }
  const Driver* d = load();
  ContextGuard g(td.on_device() ? td : ts);
  check(*d, d->Memcpy(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), n), "cuMemcpy");
  if (td.on_device()) wait_copies_landed();  // to the device: it may not have landed yet
}

bool register_host(void* p, size_t n, const char* consequence) {
  const Driver* d = load();
  if (!d) return false;
  CUresult rc;
  try {
    ContextGuard g(ContextGuard::HostWork{});  // portable: pinned for every context
    rc = d->MemHostRegister(p, n, kHostRegisterPortable);
  } catch (const Error& e) {  // no context to pin in (exclusive-process mode): pageable, as refused
    base::warn_once(std::string("cuda-register-context:") + (consequence ? consequence : "staging"),
                    std::string(e.what()) + ": host memory cannot be pinned; " +
                        (consequence ? consequence : "staging buffers stay pageable"));
    return false;
  }
  if (rc == kSuccess || rc == kErrorHostMemoryAlreadyRegistered) return true;
  // One warning per consequence: the staging rings' and accio_host_alloc's refusals are told apart.
  base::warn_once(std::string("cuda-register:") + (consequence ? consequence : "staging"),
                  error_text(*d, rc, "cuMemHostRegister") + ": " +
                                       (consequence ? consequence
                                                    : "staging buffers stay pageable, so host-to-device copies cannot "
                                                      "overlap file reads; free host memory or lower "
                                                      "buffer_size/ring_depth/threads"));
  return false;
}

double measure_copy(int device, bool to_device, size_t bytes, size_t chunk, unsigned threads) {
  std::string why;
  const Driver* d = load(&why);
  if (!d) throw Error(ENODEV, "measure copy bandwidth", "", base::kNoOffset, why);
  if (!chunk || !threads) throw Error(EINVAL, "measure copy bandwidth", "", base::kNoOffset, "chunk and threads must be positive");
  using clock = std::chrono::steady_clock;
  std::vector<clock::time_point> start(threads), end(threads);
  std::vector<std::string> errors(threads);
  std::barrier sync(static_cast<std::ptrdiff_t>(threads));
  const size_t per = bytes / threads;
  auto body = [&](unsigned t) {
    HostBuffer hb;
    void* dev = nullptr;
    CUstream st = nullptr;
    bool arrived = false;
    try {
      ContextGuard g(device);
      hb = map_host_buffer(chunk, true, false);
      const bool reg = register_host(hb.ptr, hb.mapped);
      dev = alloc(device, chunk, false);
      check(*d, d->StreamCreate(&st, kStreamNonBlocking), "cuStreamCreate");
      sync.arrive_and_wait();
      arrived = true;
      start[t] = clock::now();
      for (size_t done = 0; done < per;) {
        const size_t n = std::min(chunk, per - done);
        const auto dp = reinterpret_cast<CUdeviceptr>(dev);
        check(*d, to_device ? d->MemcpyHtoDAsync(dp, hb.ptr, n, st) : d->MemcpyDtoHAsync(hb.ptr, dp, n, st),
              to_device ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync");
        done += n;
      }
      check(*d, d->StreamSynchronize(st), "cuStreamSynchronize");
      end[t] = clock::now();
      if (reg) unregister_host(hb.ptr);
    } catch (const std::exception& e) {
      errors[t] = e.what();
      if (!arrived) sync.arrive_and_drop();
    }
    if (st) d->StreamDestroy(st);
    free(dev);
    unmap_host_buffer(hb);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.push_back(base::sys::quiet_thread(body, t));
  body(0);
  for (auto& th : pool) th.join();
  for (auto& e : errors)
    if (!e.empty()) throw Error(EIO, "measure copy bandwidth", "", base::kNoOffset, e);
  auto t0 = *std::min_element(start.begin(), start.end());
  auto t1 = *std::max_element(end.begin(), end.end());
  return std::chrono::duration<double>(t1 - t0).count();
}

void unregister_host(void* p) {
  if (const Driver* d = load()) {
    try {
      ContextGuard g(ContextGuard::HostWork{});
      d->MemHostUnregister(p);
    } catch (const Error&) {  // no context any more: the pages stay pinned until the process exits
    }
  }
}

}  // namespace accio::mem::cuda
