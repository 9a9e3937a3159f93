// accio memory: pinned host memory for callers (see pinned.hpp). Every live allocation is kept in a
// table (address -> mapping and how it was pinned), so that free unmaps, unregisters or unlocks
// exactly what was made, and refuses any other pointer.
#include "mem/pinned.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <map>
#include <cstring>
#include <mutex>
#include <string>

#include "base/error.hpp"
#include "base/log.hpp"
#include "mem/cuda.hpp"
#include "mem/staging.hpp"

namespace accio::mem {
namespace {
struct Allocation {
  HostBuffer buf;
  Pin pin;
};
std::mutex g_mu;
std::map<void*, Allocation>& live() {  // guarded by g_mu
  static auto* m = new std::map<void*, Allocation>();  // never destroyed: frees may come from exit handlers
  return *m;
}
}  // namespace

void* host_alloc(size_t size, Pin* how) {
  if (size == 0) throw base::Error(EINVAL, "allocate pinned memory", "", base::kNoOffset, "size is 0");
  // Huge pages from 2 MiB up; a smaller request gets 4 KiB pages (not a locked 2 MiB page).
  HostBuffer b = map_host_buffer(size, size >= (size_t{2} << 20), false);
  Pin pin = Pin::pageable;
  // With the driver, registration pins the pages itself and lets DMA use them; else mlock.
  if (cuda::load() && cuda::register_host(b.ptr, b.mapped, "accio_host_alloc's memory is mlock'ed instead, and "
                                                             "the driver stages device copies from it")) {
    pin = Pin::cuda;
  } else if (mlock(b.ptr, b.mapped) == 0) {
    pin = Pin::mlock;
  } else {
    const int e = errno;
    base::warn_once("pinned-memlock", std::string("cannot lock pinned host memory (") + std::strerror(e) +
                                          "): it stays pageable; raise RLIMIT_MEMLOCK (ulimit -l, or memlock in "
                                          "/etc/security/limits.conf) above what you allocate");
  }
  try {
    std::lock_guard lk(g_mu);
    live().emplace(b.ptr, Allocation{b, pin});
  } catch (...) {
    if (pin == Pin::cuda) cuda::unregister_host(b.ptr);
    unmap_host_buffer(b);
    throw;
  }
  if (how) *how = pin;
  return b.ptr;
}

bool host_free(void* p) {
  Allocation a;
  {
    std::lock_guard lk(g_mu);
    auto it = live().find(p);
    if (it == live().end()) return false;
    a = it->second;
    live().erase(it);
  }
  if (a.pin == Pin::cuda) cuda::unregister_host(a.buf.ptr);
  unmap_host_buffer(a.buf);  // munmap drops an mlock with the pages
  return true;
}

}  // namespace accio::mem
