// accio memory: cuFile loaded at run time (see cufile.hpp).
#include "mem/cufile.hpp"

#include <linux/magic.h>
#include <sys/vfs.h>

#include <mutex>

#include "mem/cuda.hpp"

namespace accio::mem::cufile {

std::string library_name() { return cuda::library_from_env("ACCIO_LIBCUFILE", "libcufile.so.0"); }

namespace {
struct State {
  Api api;
  const Api* ok = nullptr;
  std::string why;
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
    cuda::resolve_symbol(a.lib, "cuFileBatchIOSetUp", a.BatchSetUp, nullptr);
    cuda::resolve_symbol(a.lib, "cuFileBatchIOSubmit", a.BatchSubmit, nullptr);
    cuda::resolve_symbol(a.lib, "cuFileBatchIOGetStatus", a.BatchGetStatus, nullptr);
    cuda::resolve_symbol(a.lib, "cuFileBatchIODestroy", a.BatchDestroy, nullptr);
    cuda::resolve_symbol(a.lib, "cuFileBatchIOCancel", a.BatchCancel, nullptr);
    cuda::ContextGuard g(0);  // cuFile works in the calling thread's context
    if (Error e = a.DriverOpen(); e.err != 0) {
      s.why = "cuFileDriverOpen: " + error_text(e);
      return;
    }
    if (a.DriverGetProperties(&a.props).err == 0) {
      a.nvfs = a.props.nvfs.major_version || a.props.nvfs.minor_version;  // KvikIO's test, too
      if (a.BatchSetUp && a.BatchSubmit && a.BatchGetStatus && a.BatchDestroy)
        a.max_batch = a.props.max_batch_io_size ? a.props.max_batch_io_size : 128;
    }
    s.ok = &a;
  });
  return s;
}
}  // namespace

const Api* load(std::string* why) {
  State& s = state();
  if (!s.ok && why) *why = s.why;
  return s.ok;
}

std::string error_text(Error e) {
  std::string s = "cuFile error " + std::to_string(e.err);
  if (e.err == 5011 /* CU_FILE_CUDA_DRIVER_ERROR */) s += " (CUDA error " + std::to_string(e.cu_err) + ")";
  return s;
}

Mode mode_for(int fd) {
  Mode m;
  std::string why;
  const Api* a = load(&why);
  if (!a) return {false, why};
  if (!a->nvfs) return {false, "compat mode: the nvidia-fs driver is not loaded, so cuFile reads through its POSIX path"};
  struct statfs sf {};
  if (fstatfs(fd, &sf) != 0) return {false, "compat mode: cannot tell the filesystem"};
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
  if (!fs) return {false, "compat mode: GPUDirect Storage does not support this filesystem (type 0x" + [&] {
                        char b[20];
                        snprintf(b, sizeof b, "%lx", static_cast<unsigned long>(sf.f_type));
                        return std::string(b);
                      }() + ")"};
  return {true, std::string("direct path: nvidia-fs ") + std::to_string(a->props.nvfs.major_version) + "." +
                    std::to_string(a->props.nvfs.minor_version) + " loaded, " + fs +
                    " is a GDS filesystem (cuFile may still fall back per request, e.g. on a non-NVMe device)"};
}

std::string describe() {
  std::string why;
  const Api* a = load(&why);
  if (!a) return why;
  std::string s = a->path + " loaded; ";
  s += a->nvfs ? "nvidia-fs " + std::to_string(a->props.nvfs.major_version) + "." +
                     std::to_string(a->props.nvfs.minor_version) + " loaded: the direct path is possible on GDS filesystems"
               : "nvidia-fs driver not loaded: cuFile runs in compatibility mode (POSIX I/O through its bounce buffers)";
  s += a->max_batch ? "; batch API present (submit() runs up to " + std::to_string(a->max_batch) + " small requests as one batch)"
                    : "; no batch API";
  return s;
}

}  // namespace accio::mem::cufile
