// accio mechanism `direct`: O_DIRECT, bypassing the page cache. Aligned middles go straight to or
// from the user buffer when its address is aligned, everything else through reused staging buffers.
// Unaligned write heads/tails go through the buffered descriptor (no read-modify-write races, exact
// file size); the middle is split into tasks run on the pool like `parallel`.
#include <algorithm>
#include <cstring>
#include <memory>

#include "base/log.hpp"
#include "io/mechanism.hpp"
#include "io/odirect.hpp"
#include "mem/staging.hpp"

namespace accio::io {
namespace {

// Reads [off, off+n) through one staging buffer, aligned reads on the O_DIRECT descriptor.
size_t staged_read(const IoContext& c, char* buf, size_t n, uint64_t off) {
  const size_t A = c.file.off_align;
  const auto pool = staging_pool(c);  // held while its buffers are leased
  mem::StagingLease lease(*pool);
  return read_direct_widened(
      off, n, A, align_down(lease.size(), A),
      [&](size_t, uint64_t cur, size_t len) { return read_full(c.file.direct_fd, lease.data(), len, cur, c.file.path, A); },
      [&](size_t, size_t skip, size_t done, size_t len) { std::memcpy(buf + done, lease.data() + skip, len); });
}

size_t read_task(const IoContext& c, char* buf, size_t n, uint64_t off) {
  const DirectSplit s = split_direct(off, n, c.file.off_align);
  if (!s.has_middle() || !is_aligned(buf + s.head_len(), c.file.mem_align)) return staged_read(c, buf, n, off);
  size_t got = 0;
  if (s.head_len()) {
    got = staged_read(c, buf, s.head_len(), off);
    if (got < s.head_len()) return got;
  }
  const size_t m = read_full(c.file.direct_fd, buf + got, s.middle_len(), s.mid, c.file.path, c.file.off_align);
  got += m;
  if (m < s.middle_len() || !s.tail_len()) return got;
  return got + staged_read(c, buf + got, s.tail_len(), s.tail);
}

// Writes an aligned range [off, off+n) on the O_DIRECT descriptor.
void write_task(const IoContext& c, const char* buf, size_t n, uint64_t off) {
  if (is_aligned(buf, c.file.mem_align)) return write_direct_full(c.file, buf, n, off);
  const auto pool = staging_pool(c);  // held while its buffers are leased
  mem::StagingLease lease(*pool);
  const size_t chunk = align_down(lease.size(), c.file.off_align);
  for (size_t done = 0; done < n;) {
    const size_t len = std::min(chunk, n - done);
    std::memcpy(lease.data(), buf + done, len);
    write_direct_full(c.file, lease.data(), len, off + done);
    done += len;
  }
}

class Direct final : public Mechanism {
 public:
  const char* name() const override { return "direct"; }
  int rank() const override { return 2; }
  bool always_direct() const override { return true; }

  const Mechanism& resolve(const IoContext& c) const override {
    std::string why;
    if (direct_usable(c.file, c.settings, &why)) return *this;
    base::warn_once("direct-fallback:" + why, "O_DIRECT cannot be used for '" + c.file.path + "' (" + why +
                                                  "): mechanism direct runs as posix");
    return *find("posix");
  }

  size_t read(const IoContext& c, void* buf, size_t n, uint64_t off) const override {
    return read_within_size(c.file, static_cast<char*>(buf), n, off, [&](char* p, size_t len, uint64_t at) {
      const size_t task = task_bytes(c.settings, len, c.settings.threads, c.file.off_align);
      return split_run(c.runner, c.settings.threads, at, len, task,
                       [&](uint64_t o, size_t l, size_t bo) { return read_task(c, p + bo, l, o); });
    });
  }

  void write(const IoContext& c, const void* buf, size_t n, uint64_t off) const override {
    const auto* p = static_cast<const char*>(buf);
    const size_t A = c.file.off_align;
    write_direct_split(
        c.file, off, n, [&](size_t bo, uint64_t o, size_t len) { write_full(c.file.fd, p + bo, len, o, c.file.path); },
        [&](size_t bo, uint64_t mid, size_t len) {
          const char* m = p + bo;
          split_run(c.runner, c.settings.threads, mid, len, task_bytes(c.settings, len, c.settings.threads, A),
                    [&](uint64_t o, size_t l, size_t mo) {
                      write_task(c, m + mo, l, o);
                      return l;
                    });
        });
  }
};

ACCIO_REGISTER_MECHANISM(Direct, "threads", "task_size", "buffer_size", "buffer_count", "huge_pages");
}  // namespace
}  // namespace accio::io
