// accio mechanism `parallel`: the request split into tasks of `task_size` bytes (or evenly) run on the shared
// thread pool, at most `threads` at once; a request of one task runs in the caller (no pool hop).
#include "io/mechanism.hpp"

namespace accio::io {
namespace {

class Parallel final : public Mechanism {
 public:
  const char* name() const override { return "parallel"; }
  bool cpu_touches_buffer() const override { return false; }
  int rank() const override { return 1; }
  size_t read(const IoContext& c, void* buf, size_t n, uint64_t off) const override {
    auto* p = static_cast<char*>(buf);
    return split_run(c.runner, c.settings.threads, off, n, task_bytes(c.settings, n, c.settings.threads, 1),
                     [&](uint64_t o, size_t len, size_t bo) { return read_host(c, p + bo, len, o, ColdRealign::kPieces); });
  }
  void write(const IoContext& c, const void* buf, size_t n, uint64_t off) const override {
    auto* p = static_cast<const char*>(buf);
    split_run(c.runner, c.settings.threads, off, n, task_bytes(c.settings, n, c.settings.threads, 1), [&](uint64_t o, size_t len, size_t bo) {
      write_full(c.file.fd, p + bo, len, o, c.file.path);
      return len;
    });
  }
};

ACCIO_REGISTER_MECHANISM(Parallel, "threads", "task_size", "realign");
}  // namespace
}  // namespace accio::io
