// accio base: default system-call table. The calls go to the kernel directly (syscall(2)), not
// through libc's pread/pwrite symbols: under accio's LD_PRELOAD shim those symbols are the shim's
// own wrappers, and the engine's tasks must never re-enter them.
#include "base/sys.hpp"

#include <sys/syscall.h>
#include <unistd.h>

namespace accio::base::sys {
namespace {
ssize_t raw_pread(int fd, void* buf, size_t n, off_t off) { return syscall(SYS_pread64, fd, buf, n, off); }
ssize_t raw_pwrite(int fd, const void* buf, size_t n, off_t off) { return syscall(SYS_pwrite64, fd, buf, n, off); }
const Ops kReal{&raw_pread, &raw_pwrite};
Ops g_ops = kReal;
}  // namespace
Ops& ops() { return g_ops; }
const Ops& real_ops() { return kReal; }
}  // namespace accio::base::sys
