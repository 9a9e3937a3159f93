// accio memory: cuFile (GPUDirect Storage), loaded at run time like libcuda. Declares the cuFile ABI
// accio uses (layouts from cufile.h), opens the driver once, and says whether GDS can take the
// direct path (the nvidia-fs driver or PCIe P2PDMA, on a filesystem GDS supports) or whether cuFile
// would run in its compatibility mode (POSIX reads through cuFile's own bounce buffers).
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <string>

namespace accio::mem::cufile {

struct Error {
  int err;     // CUfileOpError: 0 success, 5000+ cuFile errors
  int cu_err;  // CUresult when err is CU_FILE_CUDA_DRIVER_ERROR
};
struct Descr {
  int type;  // 1 = CU_FILE_HANDLE_TYPE_OPAQUE_FD
  union {
    int fd;
    void* handle;
  } handle;
  const void* fs_ops;
};
struct DrvProps {
  struct {
    unsigned major_version, minor_version;  // the nvidia-fs driver; both 0 when it is not loaded
    size_t poll_thresh_size, max_direct_io_size;
    unsigned dstatusflags, dcontrolflags;
  } nvfs;
  unsigned fflags, max_device_cache_size, per_buffer_cache_size, max_device_pinned_mem_size, max_batch_io_size,
      max_batch_io_timeout_msecs;
};
struct IoParams {  // CUfileIOParams_t
  int mode;        // 1 = CUFILE_BATCH
  union {
    struct {
      void* devPtr_base;
      off_t file_offset, devPtr_offset;
      size_t size;
    } batch;
  } u;
  void* fh;
  int opcode;  // 0 read, 1 write
  void* cookie;
};
struct IoEvent {  // CUfileIOEvents_t
  void* cookie;
  int status;  // 0x10 complete, 0x40 failed, 0x08 canceled, 0x20 timeout
  size_t ret;
};
inline constexpr int kStatusComplete = 0x10;

struct Api {
  void* lib = nullptr;
  std::string path;
  Error (*DriverOpen)();
  Error (*DriverGetProperties)(DrvProps*);
  Error (*HandleRegister)(void**, Descr*);
  void (*HandleDeregister)(void*);
  Error (*BufRegister)(const void*, size_t, int);
  Error (*BufDeregister)(const void*);
  ssize_t (*Read)(void*, void*, size_t, off_t, off_t);
  ssize_t (*Write)(void*, const void*, size_t, off_t, off_t);
  Error (*GetVersion)(int*);  // cuFile 1.7+ (CUDA 12.2); null before
  // The batch API: its symbols are there from cuFile 1.5 (CUDA 11.5), but calling them is undefined
  // before 1.7 (KvikIO's finding): used only where cuFileGetVersion says 1.7 or later.
  Error (*BatchSetUp)(void**, unsigned);
  Error (*BatchSubmit)(void*, unsigned, IoParams*, unsigned);
  Error (*BatchGetStatus)(void*, unsigned, unsigned*, IoEvent*, void*);
  void (*BatchDestroy)(void*);
  Error (*BatchCancel)(void*);  // optional even with the batch API
  DrvProps props{};
  bool props_ok = false;        // cuFileDriverGetProperties answered
  bool nvfs = false;            // the direct path's kernel driver is loaded
  unsigned max_batch = 0;       // most requests per batch (0 = no batch API)
  int version = 0;              // cuFileGetVersion's: 1150 is 1.15; 0 unknown (before 1.7)
};

std::string library_name();  // $ACCIO_LIBCUFILE, else libcufile.so.0
// libcufile loaded and its symbols resolved (once; needs libcuda), without opening the driver:
// whether gds can be offered at all. nullptr and *why when not.
const Api* library(std::string* why = nullptr);
// library(), and the driver opened (cuFileDriverOpen, once, in the calling thread's context, else
// ContextGuard::HostWork's: call it with the GPU buffer's context current). nullptr and *why when it
// cannot; a failure to find a context is not kept.
const Api* load(std::string* why = nullptr);
std::string error_text(Error e);

// Registers a file with cuFile (cuFileHandleRegister). With `direct` (mode_for says the direct
// path is possible) the O_DIRECT descriptor first, which that path needs, then the buffered one;
// otherwise the buffered one first, on which cuFile's compatibility mode keeps the page cache.
// cuFile may refuse one and take the other: *took_direct says whether it took the O_DIRECT one.
// Returns the handle, or nullptr with *why: each attempt's error by name and the possible causes
// that can be seen from here (register_hints). With a handle, *why says what the descriptors tried
// before the one taken gave back ("" when the first was taken).
void* register_file(int direct_fd, int fd, bool direct, bool* took_direct, std::string* why);
// What on this machine makes cuFile refuse files: compat mode disallowed by cufile.json while
// nvidia-fs is absent, /run/udev unreadable (cuFile identifies a file's block device through udev),
// where cufile.json and cufile.log are. "" when nothing suspicious is seen.
std::string register_hints();

// What cuFile would do for the file behind fd, once registered: the direct path or compatibility
// mode (whether cuFile takes the file at all is the gds mechanism's to say: it holds the handle).
struct Mode {
  enum Path { compat = 0, direct = 1, refused = 2 } path = compat;
  std::string why;
};
Mode mode_for(int fd);
// Machine-wide facts for `accio info`: loaded or not, nvidia-fs version, compat mode allowed.
std::string describe();

}  // namespace accio::mem::cufile
