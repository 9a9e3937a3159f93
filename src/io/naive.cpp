// accio mechanism `naive`: the baseline for device targets, what a program does without accio. Each
// request reads into a freshly allocated pageable host buffer with one pread loop, then copies it
// to the device with a synchronous cuMemcpy (writes: the reverse). Every report compares to it.
#include <memory>

#include "io/mechanism.hpp"
#include "mem/cuda.hpp"

namespace accio::io {
namespace {
namespace cu = mem::cuda;

class Naive final : public Mechanism {
 public:
  const char* name() const override { return "naive"; }
  int rank() const override { return 10; }
  bool device() const override { return true; }
  bool available(std::string* why) const override { return cu::load(why) != nullptr; }

  size_t read(const IoContext& c, void* buf, size_t n, uint64_t off) const override {
    auto tmp = std::make_unique_for_overwrite<char[]>(n ? n : 1);
    const size_t got = read_full(c.file.fd, tmp.get(), n, off, c.file.path);
    if (got) {
      const cu::Driver& d = *cu::load();
      cu::ContextGuard g(c.target);
      cu::check(d, d.MemcpyHtoD(reinterpret_cast<cu::CUdeviceptr>(buf), tmp.get(), got), "cuMemcpyHtoD", c.file.path,
                static_cast<int64_t>(off));
    }
    return got;
  }

  void write(const IoContext& c, const void* buf, size_t n, uint64_t off) const override {
    auto tmp = std::make_unique_for_overwrite<char[]>(n ? n : 1);
    if (n) {
      const cu::Driver& d = *cu::load();
      cu::ContextGuard g(c.target);
      cu::check(d, d.MemcpyDtoH(tmp.get(), reinterpret_cast<cu::CUdeviceptr>(buf), n), "cuMemcpyDtoH", c.file.path,
                static_cast<int64_t>(off));
    }
    write_full(c.file.fd, tmp.get(), n, off, c.file.path);
  }
};

ACCIO_REGISTER_MECHANISM(Naive);
}  // namespace
}  // namespace accio::io
