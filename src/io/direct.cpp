// accio mechanism `direct`: O_DIRECT, bypassing the page cache. Aligned middles go straight to or
// from the user buffer when its address is aligned, everything else through reused staging buffers.
// Unaligned write heads/tails go through the buffered descriptor (no read-modify-write races, exact
// file size); the middle is split into tasks run on the pool like `parallel`.
#include <algorithm>
#include <cstring>

#include "base/log.hpp"
#include "io/mechanism.hpp"
#include "mem/staging.hpp"

namespace accio::io {
namespace {

mem::StagingPool& pool_for(const IoContext& c) {
  const auto& s = c.settings;
  return mem::StagingPool::shared(s.buffer_size, s.buffer_count, s.huge_pages);
}

// Reads [off, off+n) through one staging buffer, aligned reads on the O_DIRECT descriptor.
size_t staged_read(const IoContext& c, char* buf, size_t n, uint64_t off) {
  const size_t A = c.file.off_align;
  mem::StagingLease lease(pool_for(c));
  const size_t chunk = align_down(lease.size(), A);
  const uint64_t end = off + n, aend = align_up(end, A);
  size_t done = 0;
  while (done < n) {
    const uint64_t p = off + done, cur = align_down(p, A);
    const size_t len = static_cast<size_t>(std::min<uint64_t>(chunk, aend - cur));
    const size_t got = read_full(c.file.direct_fd, lease.data(), len, cur, c.file.path, A);
    const uint64_t copy_end = std::min<uint64_t>(cur + got, end);
    if (copy_end > p) {
      std::memcpy(buf + done, lease.data() + (p - cur), copy_end - p);
      done += static_cast<size_t>(copy_end - p);
    }
    if (got < len) break;  // end of file
  }
  return done;
}

size_t read_task(const IoContext& c, char* buf, size_t n, uint64_t off) {
  const size_t A = c.file.off_align;
  const uint64_t mid0 = align_up(off, A), mid1 = align_down(off + n, A);
  if (mid1 <= mid0 || !is_aligned(buf + (mid0 - off), c.file.mem_align)) return staged_read(c, buf, n, off);
  size_t got = 0;
  if (mid0 > off) {
    got = staged_read(c, buf, static_cast<size_t>(mid0 - off), off);
    if (got < mid0 - off) return got;
  }
  const size_t m = read_full(c.file.direct_fd, buf + got, static_cast<size_t>(mid1 - mid0), mid0, c.file.path, A);
  got += m;
  if (m < mid1 - mid0 || off + n == mid1) return got;
  return got + staged_read(c, buf + got, static_cast<size_t>(off + n - mid1), mid1);
}

// Writes an aligned range [off, off+n) on the O_DIRECT descriptor.
void write_task(const IoContext& c, const char* buf, size_t n, uint64_t off) {
  if (is_aligned(buf, c.file.mem_align)) return write_full(c.file.direct_fd, buf, n, off, c.file.path);
  mem::StagingLease lease(pool_for(c));
  const size_t chunk = align_down(lease.size(), c.file.off_align);
  for (size_t done = 0; done < n;) {
    const size_t len = std::min(chunk, n - done);
    std::memcpy(lease.data(), buf + done, len);
    write_full(c.file.direct_fd, lease.data(), len, off + done, c.file.path);
    done += len;
  }
}

class Direct final : public Mechanism {
 public:
  const char* name() const override { return "direct"; }
  int rank() const override { return 2; }
  bool always_direct() const override { return true; }

  const Mechanism& resolve(const IoContext& c) const override {
    if (c.file.direct_fd >= 0 && c.settings.buffer_size >= c.file.off_align) return *this;
    const std::string why = c.file.direct_fd < 0 ? c.file.no_direct : "buffer_size is below the O_DIRECT alignment";
    base::warn_once("direct-fallback:" + why, "O_DIRECT cannot be used for '" + c.file.path + "' (" + why +
                                                  "): mechanism direct runs as posix");
    return *find("posix");
  }

  size_t read(const IoContext& c, void* buf, size_t n, uint64_t off) const override {
    auto* p = static_cast<char*>(buf);
    const size_t task = task_bytes(c.settings, n, c.settings.threads, c.file.off_align);
    return split_run(c.runner, c.settings.threads, off, n, task,
                     [&](uint64_t o, size_t len, size_t bo) { return read_task(c, p + bo, len, o); });
  }

  void write(const IoContext& c, const void* buf, size_t n, uint64_t off) const override {
    const auto* p = static_cast<const char*>(buf);
    const size_t A = c.file.off_align;
    const uint64_t mid0 = align_up(off, A), mid1 = align_down(off + n, A);
    if (mid1 <= mid0) return write_full(c.file.fd, p, n, off, c.file.path);  // less than one block
    if (mid0 > off) write_full(c.file.fd, p, static_cast<size_t>(mid0 - off), off, c.file.path);
    if (off + n > mid1) write_full(c.file.fd, p + (mid1 - off), static_cast<size_t>(off + n - mid1), mid1, c.file.path);
    const char* mid = p + (mid0 - off);
    split_run(c.runner, c.settings.threads, mid0, static_cast<size_t>(mid1 - mid0), task_bytes(c.settings, mid1 - mid0, c.settings.threads, A),
              [&](uint64_t o, size_t len, size_t bo) {
                write_task(c, mid + bo, len, o);
                return len;
              });
  }
};

ACCIO_REGISTER_MECHANISM(Direct, "threads", "task_size", "buffer_size", "buffer_count", "huge_pages");
}  // namespace
}  // namespace accio::io
