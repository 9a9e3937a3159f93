// accio mechanism `posix`: plain pread/pwrite in the calling thread. The baseline every other
// mechanism is compared with, and the fallback when one cannot run.
#include "io/mechanism.hpp"

namespace accio::io {
namespace {

class Posix final : public Mechanism {
 public:
  const char* name() const override { return "posix"; }
  bool cpu_touches_buffer() const override { return false; }
  int rank() const override { return 0; }
  size_t read(const IoContext& c, void* buf, size_t n, uint64_t off) const override {
    return read_host(c, buf, n, off, ColdRealign::kStraight);
  }
  void write(const IoContext& c, const void* buf, size_t n, uint64_t off) const override {
    write_full(c.file.fd, buf, n, off, c.file.path);
  }
};

ACCIO_REGISTER_MECHANISM(Posix, "realign");
}  // namespace
}  // namespace accio::io
