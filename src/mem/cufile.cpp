// accio memory: cuFile loaded at run time (see cufile.hpp).
#include "mem/cufile.hpp"

#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <iterator>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "mem/cuda.hpp"

namespace accio::mem::cufile {

std::string library_name() { return cuda::library_from_env("ACCIO_LIBCUFILE", "libcufile.so.0"); }

namespace {
// Two steps: the library (loaded and its symbols resolved once; listing the mechanisms needs no
// more), then the driver (cuFileDriverOpen and its properties, once, in a CUDA context: the first
// GPU request's, since Gds::resolve asks under the buffer's context). A failure to find a context is
// not kept: the next call, from a thread with one current, opens it.
struct State {
  Api api;
  bool library = false;  // loaded, symbols resolved
  std::string why;       // why not (the library or, once `opened`, the driver)
  std::mutex mu;
  std::atomic<bool> opened{false};  // the driver step ran to an outcome (ok or why)
  const Api* ok = nullptr;
};

State& state() {
  static State s;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string cuda_why;
    if (!cuda::load(&cuda_why)) {
      s.why = "cuFile needs the CUDA driver: " + cuda_why;
      return;
    }
    Api& a = s.api;
    a.path = library_name();
    a.lib = cuda::open_library(a.path, "GPUDirect Storage (cuFile) is not installed", &s.why);
    if (!a.lib) return;
    std::string miss;
    cuda::resolve_symbol(a.lib, "cuFileDriverOpen", a.DriverOpen, &miss);
    cuda::resolve_symbol(a.lib, "cuFileDriverGetProperties", a.DriverGetProperties, &miss);
    cuda::resolve_symbol(a.lib, "cuFileHandleRegister", a.HandleRegister, &miss);
    cuda::resolve_symbol(a.lib, "cuFileHandleDeregister", a.HandleDeregister, &miss);
    cuda::resolve_symbol(a.lib, "cuFileBufRegister", a.BufRegister, &miss);
    cuda::resolve_symbol(a.lib, "cuFileBufDeregister", a.BufDeregister, &miss);
    cuda::resolve_symbol(a.lib, "cuFileRead", a.Read, &miss);
    cuda::resolve_symbol(a.lib, "cuFileWrite", a.Write, &miss);
    if (!miss.empty()) {
      s.why = a.path + " lacks " + miss;
      return;
    }
    cuda::resolve_symbol(a.lib, "cuFileGetVersion", a.GetVersion, nullptr);
    cuda::resolve_symbol(a.lib, "cuFileBatchIOSetUp", a.BatchSetUp, nullptr);
    cuda::resolve_symbol(a.lib, "cuFileBatchIOSubmit", a.BatchSubmit, nullptr);
    cuda::resolve_symbol(a.lib, "cuFileBatchIOGetStatus", a.BatchGetStatus, nullptr);
    cuda::resolve_symbol(a.lib, "cuFileBatchIODestroy", a.BatchDestroy, nullptr);
    cuda::resolve_symbol(a.lib, "cuFileBatchIOCancel", a.BatchCancel, nullptr);
    s.library = true;
  });
  return s;
}
}  // namespace

const Api* library(std::string* why) {
  if (cuda::forked_child()) {  // CUDA does not survive fork(): nor does cuFile
    cuda::load(why);            // nullptr, saying so
    return nullptr;
  }
  State& s = state();
  if (!s.library && why) *why = s.why;
  return s.library ? &s.api : nullptr;
}

const Api* load(std::string* why) {
  if (cuda::forked_child()) return library(why);
  State& s = state();
  if (!s.library) {
    if (why) *why = s.why;
    return nullptr;
  }
  if (!s.opened.load(std::memory_order_acquire)) {
    std::lock_guard lk(s.mu);
    if (!s.opened.load(std::memory_order_relaxed)) {
      Api& a = s.api;
      std::optional<cuda::ContextGuard> g;
      try {
        g.emplace(cuda::ContextGuard::HostWork{});  // cuFile works in the calling thread's context
      } catch (const std::exception& e) {  // not kept: a later call may have a context
        if (why) *why = std::string("no CUDA context to open cuFile in: ") + e.what();
        return nullptr;
      }
      if (Error e = a.DriverOpen(); e.err != 0) {
        s.why = "cuFileDriverOpen: " + error_text(e);
      } else {
        if (a.DriverGetProperties(&a.props).err == 0) {
          a.props_ok = true;
          a.nvfs = a.props.nvfs.major_version || a.props.nvfs.minor_version;  // KvikIO's test, too
          if (int v = 0; a.GetVersion && a.GetVersion(&v).err == 0) a.version = v;
          if (a.version >= 1070 && a.BatchSetUp && a.BatchSubmit && a.BatchGetStatus && a.BatchDestroy)
            a.max_batch = a.props.max_batch_io_size ? a.props.max_batch_io_size : 128;
        }
        s.ok = &a;
      }
      s.opened.store(true, std::memory_order_release);
    }
  }
  if (!s.ok && why) *why = s.why;
  return s.ok;
}

std::string error_text(Error e) {
  // CUfileOpError (cufile.h's CUFILEOP_STATUS_ENTRIES, CUDA 13): 5000 + the index, "CU_FILE_" + the name.
  static const char* const names[] = {
      nullptr, "DRIVER_NOT_INITIALIZED", "DRIVER_INVALID_PROPS", "DRIVER_UNSUPPORTED_LIMIT",
      "DRIVER_VERSION_MISMATCH", "DRIVER_VERSION_READ_ERROR", "DRIVER_CLOSING", "PLATFORM_NOT_SUPPORTED",
      "IO_NOT_SUPPORTED", "DEVICE_NOT_SUPPORTED", "NVFS_DRIVER_ERROR", "CUDA_DRIVER_ERROR", "CUDA_POINTER_INVALID",
      "CUDA_MEMORY_TYPE_INVALID", "CUDA_POINTER_RANGE_ERROR", "CUDA_CONTEXT_MISMATCH", "INVALID_MAPPING_SIZE",
      "INVALID_MAPPING_RANGE", "INVALID_FILE_TYPE", "INVALID_FILE_OPEN_FLAG", "DIO_NOT_SET", nullptr, "INVALID_VALUE",
      "MEMORY_ALREADY_REGISTERED", "MEMORY_NOT_REGISTERED", "PERMISSION_DENIED", "DRIVER_ALREADY_OPEN",
      "HANDLE_NOT_REGISTERED", "HANDLE_ALREADY_REGISTERED", "DEVICE_NOT_FOUND", "INTERNAL_ERROR", "GETNEWFD_FAILED",
      nullptr, "NVFS_SETUP_ERROR", "IO_DISABLED", "BATCH_SUBMIT_FAILED", "GPU_MEMORY_PINNING_FAILED", "BATCH_FULL",
      "ASYNC_NOT_SUPPORTED", "INTERNAL_BATCH_SETUP_ERROR", "INTERNAL_BATCH_SUBMIT_ERROR",
      "INTERNAL_BATCH_GETSTATUS_ERROR", "INTERNAL_BATCH_CANCEL_ERROR", "NOMEM_ERROR", "IO_ERROR",
      "INTERNAL_BUF_REGISTER_ERROR", "HASH_OPR_ERROR", "INVALID_CONTEXT_ERROR", "NVFS_INTERNAL_DRIVER_ERROR",
      "BATCH_NOCOMPAT_ERROR"};
  std::string s = "cuFile error " + std::to_string(e.err);
  const int k = e.err - 5000;
  if (k > 0 && k < static_cast<int>(std::size(names)) && names[k]) s += std::string(" (CU_FILE_") + names[k] + ")";
  if (e.err == 5011 /* CU_FILE_CUDA_DRIVER_ERROR */) s += " (CUDA error " + std::to_string(e.cu_err) + ")";
  return s;
}

namespace {
std::string config_path() {
  const char* env = std::getenv("CUFILE_ENV_PATH_JSON");
  return env && *env ? env : "/etc/cufile.json";
}
}  // namespace

std::string register_hints() {
  std::string h;
  auto add = [&](const std::string& s) { h += (h.empty() ? "" : "; ") + s; };
  const std::string json = config_path();
  const bool have_json = access(json.c_str(), R_OK) == 0;
  if (const Api* a = load(); a && a->props_ok && !a->nvfs && !(a->props.nvfs.dcontrolflags & (1u << 1)))
    add("the nvidia-fs driver is not loaded and cuFile's compatibility mode is off (set \"allow_compat_mode\": true in " +
        (have_json ? json : "a cufile.json named by CUFILE_ENV_PATH_JSON") + ")");
  if (access("/run/udev", R_OK | X_OK) != 0)
    add("/run/udev is not readable, and cuFile identifies a file's block device through udev (in a container, mount "
        "it: --volume /run/udev:/run/udev:ro; KvikIO reads through POSIX instead on such machines)");
  if (!have_json) add("no cufile.json at " + json + " (cuFile's built-in defaults apply)");
  if (!h.empty()) add("cuFile's own log says more (cufile.log in the working directory, or $CUFILE_LOGFILE_PATH)");
  return h;
}

void* register_file(int direct_fd, int fd, bool direct, bool* took_direct, std::string* why) {
  std::string why_not;
  const Api* a = load(&why_not);
  if (!a) {
    if (why) *why = why_not;
    return nullptr;
  }
  std::string tried;
  // The direct path needs the O_DIRECT descriptor. In compatibility mode cuFile does POSIX I/O on
  // the descriptor it was given: the buffered one keeps the page cache (a hot file is not read
  // from the device again) and has no alignment rules. That is also so with nvidia-fs loaded, for
  // a file on a filesystem GDS does not take (btrfs, tmpfs).
  const int order[2] = {direct ? direct_fd : fd, direct ? fd : direct_fd};
  for (const int f : order) {
    if (f < 0) continue;
    Descr d{};
    d.type = 1;  // CU_FILE_HANDLE_TYPE_OPAQUE_FD
    d.handle.fd = f;
    void* h = nullptr;
    const Error e = a->HandleRegister(&h, &d);
    if (e.err == 0 && h) {
      if (took_direct) *took_direct = f == direct_fd;
      if (why) *why = tried;
      return h;
    }
    tried += std::string(tried.empty() ? "" : ", ") + error_text(e) + " with the " + (f == direct_fd ? "O_DIRECT" : "buffered") +
             " descriptor";
  }
  if (why) {
    *why = "cuFileHandleRegister: " + tried;
    if (std::string hints = register_hints(); !hints.empty()) *why += "; possible causes seen here: " + hints;
  }
  return nullptr;
}

namespace {
constexpr unsigned kP2pdma = 1u << 4;  // CU_FILE_P2P_SUPPORTED
// The PCI P2PDMA path (cuFile 1.14, CUDA 12.8: no nvidia-fs, the kernel's own peer-to-peer DMA to
// NVMe) is unverified on hardware: accio keeps such a machine in compatibility mode, and says so.
constexpr const char* p2pdma_unrecognised =
    " (cuFile also reports PCI P2PDMA support, a direct path without nvidia-fs that accio does not tell apart from "
    "compatibility mode yet)";
}  // namespace

Mode mode_for(int fd) {
  std::string why;
  const Api* a = load(&why);
  if (!a) return {Mode::compat, why};
  if (!a->nvfs)
    return {Mode::compat, std::string("compat mode: the nvidia-fs driver is not loaded, so cuFile reads through its POSIX path") +
                              (a->props.fflags & kP2pdma ? p2pdma_unrecognised : "")};
  struct statfs sf {};
  if (fstatfs(fd, &sf) != 0) return {Mode::compat, "compat mode: cannot tell the filesystem"};
  const char* fs = nullptr;
  switch (static_cast<unsigned long>(sf.f_type)) {
    case EXT4_SUPER_MAGIC: fs = "ext4"; break;
    case XFS_SUPER_MAGIC: fs = "xfs"; break;
    case 0x0BD00BD0: fs = "lustre"; break;
    case 0x47504653: fs = "gpfs"; break;
    case 0x19830326: fs = "beegfs"; break;
    case NFS_SUPER_MAGIC: fs = "nfs"; break;
    default: break;
  }
  if (!fs) return {Mode::compat, "compat mode: GPUDirect Storage does not support this filesystem (type 0x" + [&] {
                        char b[20];
                        snprintf(b, sizeof b, "%lx", static_cast<unsigned long>(sf.f_type));
                        return std::string(b);
                      }() + ")"};
  return {Mode::direct, std::string("direct path: nvidia-fs ") + std::to_string(a->props.nvfs.major_version) + "." +
                    std::to_string(a->props.nvfs.minor_version) + " loaded, " + fs +
                    " is a GDS filesystem (cuFile may still fall back per request, e.g. on a non-NVMe device)"};
}

// cuFile's feature flags (CUfileFeatureFlags_t: bit numbers of CUfileDrvProps_t.fflags), named.
std::string features(unsigned fflags) {
  static const char* const kNames[] = {"dynamic routing", "batch I/O", "streams", "parallel I/O", "PCI P2PDMA"};
  std::string s;
  for (unsigned bit = 0; bit < 32; ++bit)
    if (fflags & (1u << bit))
      s += (s.empty() ? "" : ", ") + (bit < std::size(kNames) ? std::string(kNames[bit]) : "bit " + std::to_string(bit));
  return s.empty() ? "none" : s;
}

std::string describe() {
  std::string why;
  const Api* a = load(&why);
  if (!a) return why;
  std::string s = a->path + " loaded";
  if (a->version) s += " (cuFile " + std::to_string(a->version / 1000) + "." + std::to_string(a->version % 1000 / 10) + ")";
  s += "; ";
  s += a->nvfs ? "nvidia-fs " + std::to_string(a->props.nvfs.major_version) + "." +
                     std::to_string(a->props.nvfs.minor_version) + " loaded: the direct path is possible on GDS filesystems"
               : "nvidia-fs driver not loaded: cuFile runs in compatibility mode (POSIX I/O through its bounce buffers)";
  s += a->max_batch ? "; batch API present (submit() runs up to " + std::to_string(a->max_batch) + " small requests as one batch)"
                    : a->version >= 1070 || !a->BatchSetUp ? "; no batch API"
                                                           : "; batch API not used (cuFile before 1.7, where calling it is undefined)";
  if (a->props_ok) s += "; features: " + features(a->props.fflags);
  return s;
}

}  // namespace accio::mem::cufile
