// accio planner: page-cache residency via cachestat(2) or mincore(2).
#include "planner/residency.hpp"

#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>

#include "base/sys.hpp"

namespace accio::planner {
namespace {

// Residency of [off, end) (inside the file) by mapping it and asking mincore(2).
bool mincore_residency(int fd, uint64_t off, uint64_t end, Residency* out) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  out->total = end > off ? end - off : 0;
  out->method = "mincore";
  uint64_t cached, pages;
  if (!base::sys::mincore_pages(fd, off, out->total, &cached, &pages)) return false;
  out->cached = std::min(out->total, cached * page);
  return true;
}
}  // namespace

bool residency(int fd, uint64_t off, uint64_t len, Residency* out) {
  struct stat st;
  if (fstat(fd, &st) != 0) return false;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const uint64_t end = std::min(size, off + len);
  *out = Residency{};
  out->total = end > off ? end - off : 0;
  if (out->total == 0) {
    out->method = base::sys::cachestat_available() ? "cachestat" : "mincore";
    return true;
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (base::sys::cachestat_available()) {
    uint64_t cached, dirty;
    if (base::sys::cachestat(fd, off, out->total, &cached, &dirty)) {
      out->cached = std::min(out->total, cached * page);
      out->dirty = std::min(out->total, dirty * page);
      out->method = "cachestat";
      return true;
    }
  }
  return mincore_residency(fd, off, end, out);
}

bool resident(int fd, uint64_t off, uint64_t len) {
  Residency r;
  return residency(fd, off, len, &r) && r.cached >= r.total;
}

Probe parse_probe(const std::string& s) {
  if (s == "auto") return Probe::automatic;
  if (s == "cachestat") return Probe::cachestat;
  if (s == "nowait") return Probe::nowait;
  if (s == "mincore") return Probe::mincore;
  if (s == "off") return Probe::off;
  throw std::invalid_argument("not auto, cachestat, nowait, mincore or off");
}

bool mostly_cached(int fd, uint64_t off, uint64_t len, Probe method) {
  if (len == 0 || method == Probe::off) return true;
  if (method == Probe::automatic) method = base::sys::cachestat_available() ? Probe::cachestat : Probe::nowait;
  if (method == Probe::cachestat) {
    // A request that continues a cold stream finds its head read ahead by the kernel and its tail
    // not, and that is a cold range (counted as cached, 15 of 16 requests of a cold 1 GiB file read
    // in 64 MiB requests took the hot plan): more than half of the sampled pages must be cached.
    // One whose ends the program read itself (a header, an index at the end) and whose body is cold
    // is cold too (torch.load's tensor bytes took the hot plan): where head and tail are sampled,
    // more than half of a window in its middle must be cached as well.
    using base::sys::kSampleWindow;
    uint64_t cached = 0, pages = 0;
    if (!base::sys::sample_cached(fd, off, len, &cached, &pages)) return true;
    if (len <= base::sys::kSampleWhole) return cached * 2 > pages;  // counted whole
    uint64_t mid_cached = 0, mid_pages = 0;
    if (!base::sys::sample_cached(fd, off + (len - kSampleWindow) / 2, kSampleWindow, &mid_cached, &mid_pages))
      return true;
    return (cached + mid_cached) * 2 > pages + mid_pages && mid_cached * 2 > mid_pages;
  }
  if (method == Probe::nowait) {
    // The middle must be cached, and one end: not the ends alone (see cachestat's case).
    bool hit[3];
    int i = 0;
    for (uint64_t at : {off, off + len / 2, off + len - 1}) {
      char byte;
      iovec iov{&byte, 1};
      const ssize_t r = preadv2(fd, &iov, 1, static_cast<off_t>(at), RWF_NOWAIT);
      if (r < 0 && errno != EAGAIN) return true;  // RWF_NOWAIT unsupported here: unknown
      hit[i++] = r == 1;
    }
    return hit[1] && (hit[0] || hit[2]);
  }
  struct stat st;
  if (fstat(fd, &st) != 0) return true;
  const uint64_t end = std::min<uint64_t>(static_cast<uint64_t>(st.st_size), off + len);
  Residency res;
  if (end <= off) return false;  // nothing of the range is in the file yet
  if (!mincore_residency(fd, off, end, &res)) return true;
  return res.cached * 2 > res.total;
}

}  // namespace accio::planner
