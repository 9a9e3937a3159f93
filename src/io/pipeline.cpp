// accio mechanisms: the staging ring pipeline (see pipeline.hpp).
#include "io/pipeline.hpp"

#include <algorithm>
#include <cerrno>
#include <exception>

#include "base/error.hpp"
#include "io/mechanism.hpp"
#include "io/odirect.hpp"

namespace accio::io {
namespace {
// Runs body; on an exception waits for the copies in flight (they use the buffers) and rethrows.
template <class F>
auto drained(StagingRing& q, F&& body) {
  try {
    auto r = body();
    q.drain();
    return r;
  } catch (...) {
    try {
      q.drain();
    } catch (...) {
    }
    throw;
  }
}

size_t chunk_size(const StagingRing& q, size_t align) {
  const size_t c = align_down(q.buffer_size(), align);
  if (c == 0 || q.buffers() == 0)
    throw base::Error(EINVAL, "staging ring", "", base::kNoOffset, "staging buffers smaller than the O_DIRECT alignment");
  return c;
}
}  // namespace

size_t pipeline_read(StagingRing& q, char* dev, size_t n, uint64_t off, size_t align, const ChunkRead& rd) {
  const size_t A = std::max<size_t>(align, 1), chunk = chunk_size(q, A), k = q.buffers();
  return drained(q, [&] {
    // chunk i goes through buffer i % k; the copy out of it, queued k chunks ago, must be done first
    return read_direct_widened(
        off, n, A, chunk,
        [&](size_t i, uint64_t cur, size_t len) {
          const auto b = static_cast<unsigned>(i % k);
          q.wait(b);
          return rd(q.buffer(b), len, cur);
        },
        [&](size_t i, size_t skip, size_t done, size_t len) {
          const auto b = static_cast<unsigned>(i % k);
          q.to_device(dev + done, b, skip, len);
          q.mark(b);
        });
  });
}

void pipeline_write(StagingRing& q, const char* dev, size_t n, uint64_t off, size_t align, const ChunkWrite& wr) {
  const size_t A = std::max<size_t>(align, 1), chunk = chunk_size(q, A), k = q.buffers();
  const size_t chunks = (n + chunk - 1) / chunk;
  auto fetch = [&](size_t i) {  // queue the copy of chunk i into its buffer
    const auto b = static_cast<unsigned>(i % k);
    q.to_host(b, dev + i * chunk, std::min(chunk, n - i * chunk));
    q.mark(b);
  };
  drained(q, [&] {
    for (size_t i = 0; i < std::min(chunks, k); ++i) fetch(i);
    for (size_t i = 0; i < chunks; ++i) {
      const auto b = static_cast<unsigned>(i % k);
      q.wait(b);
      wr(q.buffer(b), std::min(chunk, n - i * chunk), off + i * chunk);
      if (i + k < chunks) fetch(i + k);
    }
    return 0;
  });
}

}  // namespace accio::io
