// accio mechanism `naive`: the baseline for device targets, what a careful program does without
// accio. A request is moved in chunks of at most 64 MiB through one pageable host buffer per thread,
// allocated once and reused: read a chunk with a pread loop, then copy it to the device with a
// synchronous cuMemcpyHtoD, whose DMA a read waits for at its end (a copy from pageable memory
// returns once the bytes are staged); writes the reverse. No pinning, no overlap, one thread. It is the
// baseline every device ratio is quoted against, so it must not be slower than the usual user code
// (`torch.from_numpy(np.fromfile(p, np.uint8)).cuda()`, which faults in a fresh buffer of the whole
// file); `make gpu-check` measures the two side by side.
#include <algorithm>
#include <memory>

#include "io/mechanism.hpp"
#include "mem/cuda.hpp"

namespace accio::io {
namespace {
namespace cu = mem::cuda;

constexpr size_t kChunk = 64u << 20;

// The calling thread's bounce buffer, min(n, kChunk) bytes at least; freed when the thread ends.
char* bounce(size_t n) {
  thread_local std::unique_ptr<char[]> buf;
  thread_local size_t size = 0;
  const size_t want = std::clamp<size_t>(n, 1, kChunk);
  if (size < want) {
    buf.reset();  // never hold two
    buf = std::make_unique_for_overwrite<char[]>(want);
    size = want;
  }
  return buf.get();
}

class Naive final : public Mechanism {
 public:
  const char* name() const override { return "naive"; }
  int rank() const override { return 10; }
  bool device() const override { return true; }
  bool available(std::string* why) const override { return cu::load(why) != nullptr; }
  // Any GPU memory, a context's the program made itself too: the copies are synchronous, in the
  // memory's own context, on no stream of accio's.
  bool serves(const cu::Target& t) const override { return t.on_device(); }

  size_t read(const IoContext& c, void* buf, size_t n, uint64_t off) const override {
    const cu::Driver& d = *cu::load();
    cu::ContextGuard g(c.target);
    char* tmp = bounce(n);
    size_t done = 0;
    while (done < n) {
      const size_t want = std::min(kChunk, n - done);
      const size_t got = read_full(c.file.fd, tmp, want, off + done, c.file.path);
      if (got)
        cu::check(d, d.MemcpyHtoD(reinterpret_cast<cu::CUdeviceptr>(static_cast<char*>(buf) + done), tmp, got),
                  "cuMemcpyHtoD", c.file.path, static_cast<int64_t>(off + done));
      done += got;
      if (got < want) break;  // end of file
    }
    // A copy from pageable memory returns before its DMA has landed: done when the read returns.
    if (done) cu::wait_copies_landed(c.file.path, static_cast<int64_t>(off));
    return done;
  }

  void write(const IoContext& c, const void* buf, size_t n, uint64_t off) const override {
    const cu::Driver& d = *cu::load();
    cu::ContextGuard g(c.target);
    char* tmp = bounce(n);
    for (size_t done = 0; done < n;) {
      const size_t len = std::min(kChunk, n - done);
      cu::check(d, d.MemcpyDtoH(tmp, reinterpret_cast<cu::CUdeviceptr>(static_cast<const char*>(buf) + done), len),
                "cuMemcpyDtoH", c.file.path, static_cast<int64_t>(off + done));
      write_full(c.file.fd, tmp, len, off + done, c.file.path);
      done += len;
    }
  }
};

ACCIO_REGISTER_MECHANISM(Naive);
}  // namespace
}  // namespace accio::io
