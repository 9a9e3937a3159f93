// accio planner: live page-cache residency of a file range, a signal for `auto` and for benchmarks
// that must prove a read is cold. cachestat(2) where the kernel has it (6.5+), else mmap+mincore.
#pragma once
#include <cstdint>
#include <string>

namespace accio::planner {

struct Residency {
  uint64_t cached = 0;  // bytes of the range in the page cache
  uint64_t dirty = 0;   // of which dirty (cachestat only)
  uint64_t total = 0;   // bytes of the range inside the file
  const char* method = "none";  // "cachestat" | "mincore"
};

// Returns false (and sets errno) if neither method works on this fd.
bool residency(int fd, uint64_t off, uint64_t len, Residency* out);
// Whether all of [off, off+len) (inside the file) is in the page cache; false when it cannot be seen.
bool resident(int fd, uint64_t off, uint64_t len);

// How the planner learns whether a range is cached: the `cache_probe` setting. automatic is
// cachestat where the kernel has it, else nowait (three 1-byte RWF_NOWAIT reads: first, middle and
// last byte); mincore maps the range; off never probes (ranges count as hot).
enum class Probe { automatic, cachestat, nowait, mincore, off };
Probe parse_probe(const std::string& s);  // throws std::invalid_argument

// Whether more than half of [off, off+len) is in the page cache (a cold stream's request whose head
// the kernel read ahead is cold; so is one whose ends the program read and whose body is cold), by
// `method`: cachestat counts ranges up to 128 KiB whole, and samples 32 KiB at the head and the
// tail of longer ones and 32 KiB in the middle, more than half of which must be cached too; nowait
// needs the middle byte and one end. A range the probe cannot see (an error, or off) counts as
// cached: the hot plan is the safer guess.
bool mostly_cached(int fd, uint64_t off, uint64_t len, Probe method);

}  // namespace accio::planner
