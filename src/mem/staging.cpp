// accio memory: host staging buffers and their pool.
#include "mem/staging.hpp"

#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <list>
#include <tuple>

#include "base/error.hpp"
#include "base/fork.hpp"
#include "base/log.hpp"
#include "base/settings.hpp"
#include "base/sys.hpp"

namespace accio::mem {
using namespace accio::base;

const char* backing_name(Backing b) {
  switch (b) {
    case Backing::hugetlb: return "hugetlb";
    case Backing::thp: return "thp";
    default: return "4k";
  }
}

// /proc/meminfo's value for key ("HugePages_Total"), or -1. Plain C parsing (see base::sys::read_file).
static long meminfo_value(const std::string& text, const char* key) {
  const size_t n = std::strlen(key);
  for (size_t at = 0; at < text.size();) {
    const size_t eol = std::min(text.find('\n', at), text.size());
    if (eol - at > n && text.compare(at, n, key) == 0 && text[at + n] == ':') {
      char* end = nullptr;
      const long v = std::strtol(text.c_str() + at + n + 1, &end, 10);
      return end != text.c_str() + at + n + 1 ? v : -1;
    }
    at = eol + 1;
  }
  return -1;
}

HugePageInfo huge_page_info() {
  HugePageInfo h;
  std::string text;
  if (sys::read_file("/proc/meminfo", text)) {
    if (long v = meminfo_value(text, "HugePages_Total"); v >= 0) h.total = v;
    if (long v = meminfo_value(text, "HugePages_Free"); v >= 0) h.free = v;
    if (long v = meminfo_value(text, "Hugepagesize"); v >= 0) h.size_kib = v;
  }
  h.thp_mode = "unknown";
  if (sys::read_file("/sys/kernel/mm/transparent_hugepage/enabled", text)) {
    auto a = text.find('['), b = text.find(']');
    if (a != std::string::npos && b != std::string::npos && b > a) h.thp_mode = text.substr(a + 1, b - a - 1);
  }
  return h;
}

namespace {
constexpr size_t kHuge = size_t{2} << 20;
size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

void* anon_map(size_t len, int extra) {
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | extra, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}
}  // namespace

HostBuffer map_host_buffer(size_t size, bool huge_pages, bool lock) {
  // Rounded up to a huge page, a size near SIZE_MAX wrapped to 0, and an empty mapping "succeeded"
  // (accio_host_alloc(SIZE_MAX) returned a pointer to nothing).
  if (size > static_cast<size_t>(PTRDIFF_MAX) - 2 * (size_t{1} << 30))
    throw Error(ENOMEM, "map staging buffer", "", kNoOffset, std::to_string(size) + " bytes is more than an address space holds");
  HostBuffer b;
  b.size = size;
  if (huge_pages) {
    const HugePageInfo h = huge_page_info();
    const size_t hpage = h.size_kib > 0 ? static_cast<size_t>(h.size_kib) * 1024 : kHuge;
    const size_t huge_len = round_up(size, hpage);
    b.mapped = round_up(size, kHuge);
    if (h.free > 0 && static_cast<size_t>(h.free) * hpage >= huge_len &&
        (b.ptr = anon_map(huge_len, MAP_HUGETLB))) {
      b.mapped = huge_len;
      b.backing = Backing::hugetlb;
    } else if ((b.ptr = anon_map(b.mapped + kHuge, 0))) {
      // Align to 2 MiB inside an over-sized mapping so THP can back every page, then trim.
      auto base = reinterpret_cast<uintptr_t>(b.ptr);
      uintptr_t aligned = round_up(base, kHuge);
      if (aligned > base) munmap(b.ptr, aligned - base);
      size_t tail = (base + b.mapped + kHuge) - (aligned + b.mapped);
      if (tail) munmap(reinterpret_cast<void*>(aligned + b.mapped), tail);
      b.ptr = reinterpret_cast<void*>(aligned);
      if (madvise(b.ptr, b.mapped, MADV_HUGEPAGE) == 0 && h.thp_mode != "never") {
        b.backing = Backing::thp;
      } else {
        warn_once("no-huge-pages",
                  "no huge pages for staging buffers: reserve some (sysctl vm.nr_hugepages=N) or set "
                  "/sys/kernel/mm/transparent_hugepage/enabled to madvise; using 4 KiB pages");
      }
    }
  } else {
    b.mapped = round_up(size, 4096);
    b.ptr = anon_map(b.mapped, 0);
  }
  if (!b.ptr) throw Error(ENOMEM, "map staging buffer", "", kNoOffset, "mmap of " + format_size(size) + " failed");
  if (lock) {
    if (mlock(b.ptr, b.mapped) == 0) {
      b.locked = true;
    } else {
      int e = errno;
      rlimit rl{};
      getrlimit(RLIMIT_MEMLOCK, &rl);
      std::string lim = rl.rlim_cur == RLIM_INFINITY ? "unlimited" : std::to_string(rl.rlim_cur / 1024) + " KiB";
      warn_once("memlock", std::string("cannot lock staging buffers in memory (") + std::strerror(e) +
                               "): RLIMIT_MEMLOCK is " + lim + "; raise it (ulimit -l, or memlock in "
                               "/etc/security/limits.conf) to at least the staging pool size; "
                               "continuing with unlocked buffers");
    }
  }
  std::memset(b.ptr, 0, b.mapped);  // fault every page in now, not on the first transfer
  return b;
}

void unmap_host_buffer(HostBuffer& b) {
  if (b.ptr) munmap(b.ptr, b.mapped);
  b = HostBuffer{};
}

StagingPool::StagingPool(size_t buffer_size, unsigned count, bool huge_pages) : size_(buffer_size) {
  bufs_.reserve(count);
  try {
    for (unsigned i = 0; i < count; ++i) bufs_.push_back(map_host_buffer(buffer_size, huge_pages, true));
  } catch (...) {
    for (auto& b : bufs_) unmap_host_buffer(b);
    throw;
  }
  for (unsigned i = count; i-- > 0;) free_.push_back(i);
}

StagingPool::~StagingPool() {
  attached_.clear();  // first: rings registered on the buffers go before the buffers do
  for (auto& b : bufs_) unmap_host_buffer(b);
}

void StagingPool::attach(std::unique_ptr<Attachment> a) {
  std::lock_guard lk(mu_);
  attached_.push_back(std::move(a));
}

std::vector<iovec> StagingPool::iovecs() const {
  std::vector<iovec> v;
  for (auto& b : bufs_) v.push_back({b.ptr, b.size});
  return v;
}

unsigned StagingPool::acquire() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return !free_.empty(); });
  unsigned i = free_.back();
  free_.pop_back();
  ++leases_;
  return i;
}

int StagingPool::try_acquire() {
  std::lock_guard lk(mu_);
  if (free_.empty()) return -1;
  unsigned i = free_.back();
  free_.pop_back();
  ++leases_;
  return static_cast<int>(i);
}

uint64_t StagingPool::leases() const {
  std::lock_guard lk(mu_);
  return leases_;
}

void StagingPool::release(unsigned i) {
  {
    std::lock_guard lk(mu_);
    free_.push_back(i);
  }
  cv_.notify_one();
}

namespace {
// The pools shared() made, most recently asked for first. A pool the list alone holds is idle. A
// forked child gets its own list (the parent's pools may have buffers leased by threads the child
// does not have): the parent's are leaked there.
struct Pools {
  std::mutex mu;
  std::list<std::pair<std::tuple<size_t, unsigned, bool>, std::shared_ptr<StagingPool>>> lru;
};
base::PerProcess<Pools> g_pools;
}  // namespace

std::shared_ptr<StagingPool> StagingPool::shared(size_t buffer_size, unsigned count, bool huge_pages) {
  Pools& ps = g_pools.get();
  std::vector<std::shared_ptr<StagingPool>> freed;  // dropped after the lock: unmapping takes time
  std::shared_ptr<StagingPool> p;
  {
    std::lock_guard lk(ps.mu);
    const auto key = std::make_tuple(buffer_size, count, huge_pages);
    auto it = std::find_if(ps.lru.begin(), ps.lru.end(), [&](const auto& e) { return e.first == key; });
    if (it != ps.lru.end()) {
      ps.lru.splice(ps.lru.begin(), ps.lru, it);
    } else {
      ps.lru.emplace_front(key, std::make_shared<StagingPool>(buffer_size, count, huge_pages));
    }
    p = ps.lru.front().second;
    // Only the list holds an idle pool, and only shared() hands out new holds (under mu), so one
    // seen idle here stays so: past the kIdlePools most recent, it goes.
    unsigned idle = 0;
    for (auto e = ps.lru.begin(); e != ps.lru.end();) {
      if (e->second.use_count() == 1 && ++idle > kIdlePools) {
        freed.push_back(std::move(e->second));
        e = ps.lru.erase(e);
      } else {
        ++e;
      }
    }
  }
  return p;
}

size_t StagingPool::shared_pools() {
  Pools& ps = g_pools.get();
  std::lock_guard lk(ps.mu);
  return ps.lru.size();
}

}  // namespace accio::mem
