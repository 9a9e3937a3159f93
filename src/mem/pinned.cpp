// accio memory: pinned host memory for callers (see pinned.hpp). Every live allocation is kept in a
// table (address -> mapping and how it was pinned), so that free unmaps, unregisters or unlocks
// exactly what was made, and refuses any other pointer.
#include "mem/pinned.hpp"

#include <pthread.h>
#include <sys/mman.h>

#include <atomic>
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
// The live allocations, under their lock. A forked child inherits the mappings (its pinned buffers
// are freed there too, by the child's own objects), so it keeps the table; but another thread of the
// parent may hold the lock at the fork, and that thread does not exist in the child: every later
// accio_host_alloc and accio_host_free there waited for ever. So the lock is taken around fork (it
// is held for a map update at most), the child copies the whole table into a lock of its own, and
// the parent's, which the forking thread holds there, is leaked, as the warning log does (log.cpp).
struct Table {
  std::mutex mu;
  std::map<void*, Allocation> live;  // guarded by mu
};
std::atomic<Table*> g_table{nullptr};  // never destroyed: frees may come from exit handlers

Table& table() {
  Table* p = g_table.load(std::memory_order_acquire);
  if (p) return *p;
  Table* fresh = new Table;
  if (g_table.compare_exchange_strong(p, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;  // another thread won the race
  return *p;
}
// Made here if it is not yet, so that no other thread makes (and fills) it while the process forks.
// glibc takes its malloc locks after the prepare handlers run, so a thread in malloc under this
// lock cannot block it.
void lock_before_fork() { table().mu.lock(); }
void unlock_in_parent() { g_table.load(std::memory_order_acquire)->mu.unlock(); }
void copy_in_child() {
  Table* parents = g_table.load(std::memory_order_acquire);
  Table* mine = new Table;
  mine->live = parents->live;
  g_table.store(mine, std::memory_order_release);  // the parent's stays locked, leaked
}
[[maybe_unused]] const int g_atfork = pthread_atfork(lock_before_fork, unlock_in_parent, copy_in_child);
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
    Table& t = table();
    std::lock_guard lk(t.mu);
    t.live.emplace(b.ptr, Allocation{b, pin});
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
    Table& t = table();
    std::lock_guard lk(t.mu);
    auto it = t.live.find(p);
    if (it == t.live.end()) return false;
    a = it->second;
    t.live.erase(it);
  }
  if (a.pin == Pin::cuda) cuda::unregister_host(a.buf.ptr);
  unmap_host_buffer(a.buf);  // munmap drops an mlock with the pages
  return true;
}

}  // namespace accio::mem
