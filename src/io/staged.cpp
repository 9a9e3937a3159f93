// accio mechanism `staged`: device targets through reused staging rings. Each worker leases a ring
// (k page-locked, huge-page-backed host buffers registered with the driver, one stream, one event
// per buffer), created on first use and kept for the process. A request is split into tasks over
// `threads` workers on disjoint ranges; inside a task the file side of chunk i+1 overlaps the copy
// of chunk i (io/pipeline.hpp). `direct=on` reads and writes the file side with O_DIRECT.
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "base/fork.hpp"
#include "base/log.hpp"
#include "io/mechanism.hpp"
#include "io/odirect.hpp"
#include "io/pipeline.hpp"
#include "mem/cuda.hpp"
#include "mem/staging.hpp"

namespace accio::io {
namespace {
namespace cu = mem::cuda;

// staged's own knob (a row of the settings table; docs/api.md lists it).
const base::Knob kRingDepth{{"ring_depth", "ACCIO_RING_DEPTH",
                             "staging buffers per worker ring for GPU buffers (1 = no overlap of file side and copy)",
                             "count", "3", 1, 64}};

// A staging ring in CUDA: registered host buffers, one stream, one event per buffer.
class CudaStagingRing final : public StagingRing {
 public:
  CudaStagingRing(int device, size_t size, unsigned depth, bool huge) : d_(*cu::load()), size_(size) {
    cu::ContextGuard g(device);
    cu::check(d_, d_.StreamCreate(&stream_, cu::kStreamBlocking), "cuStreamCreate");
    for (unsigned i = 0; i < depth; ++i) {
      bufs_.push_back(mem::map_host_buffer(size, huge, false));
      cu::register_host(bufs_.back().ptr, bufs_.back().mapped);  // refused: one warning, pageable buffers
      ev_.emplace_back();
      cu::check(d_, d_.EventCreate(&ev_.back(), cu::kEventDisableTiming), "cuEventCreate");
    }
    marked_.assign(depth, false);
    instance_ = cu::primary_instance(device);
  }
  // Rings live for the process (see StagingRingLease); nothing to free, but for a ring made in a
  // primary context the program has reset since (see retire_if_gone).

  // Whether the GPU's primary context was reset since this ring was made in it (cudaDeviceReset; `now`
  // is its instance now): its stream, events and registrations are gone with that context, and the
  // driver hands back the same handle for the new one. The host buffers are unregistered (an error
  // where the registration died with the context, as expected, is ignored) and unmapped; the stream
  // and events are left alone, as destroying them there may crash (UCX skips it too,
  // openucx/ucx#11437).
  bool retire_if_gone(uint64_t now) {
    if (!cu::instance_gone(instance_, now)) return false;
    for (mem::HostBuffer& b : bufs_) {
      cu::unregister_host(b.ptr);
      mem::unmap_host_buffer(b);
    }
    bufs_.clear();
    return true;
  }

  unsigned buffers() const override { return static_cast<unsigned>(bufs_.size()); }
  size_t buffer_size() const override { return size_; }
  char* buffer(unsigned b) override { return static_cast<char*>(bufs_[b].ptr); }
  void to_device(char* dev, unsigned s, size_t from, size_t n) override {
    cu::check(d_, d_.MemcpyHtoDAsync(reinterpret_cast<cu::CUdeviceptr>(dev), buffer(s) + from, n, stream_),
              "cuMemcpyHtoDAsync");
  }
  void to_host(unsigned s, const char* dev, size_t n) override {
    cu::check(d_, d_.MemcpyDtoHAsync(buffer(s), reinterpret_cast<cu::CUdeviceptr>(dev), n, stream_),
              "cuMemcpyDtoHAsync");
  }
  void mark(unsigned s) override {
    cu::check(d_, d_.EventRecord(ev_[s], stream_), "cuEventRecord");
    marked_[s] = true;
  }
  void wait(unsigned s) override {
    if (!marked_[s]) return;
    marked_[s] = false;
    cu::check(d_, d_.EventSynchronize(ev_[s]), "cuEventSynchronize");
  }
  void drain() override {
    std::fill(marked_.begin(), marked_.end(), false);
    cu::check(d_, d_.StreamSynchronize(stream_), "cuStreamSynchronize");
  }

 private:
  const cu::Driver& d_;
  size_t size_;
  cu::CUstream stream_ = nullptr;
  std::vector<mem::HostBuffer> bufs_;
  std::vector<cu::CUevent> ev_;
  std::vector<bool> marked_;
  uint64_t instance_ = 0;  // the primary context's instance it was made in (0: unknown)
};

// Rings per (device, buffer size, depth, huge pages), leased one per task and created on demand, so
// a set grows to the largest number of concurrent tasks. Kept for the process: the rings hold
// pinned memory that is expensive to register, and reusing it is the point.
struct StagingRingSet {
  std::vector<std::unique_ptr<CudaStagingRing>> all;
  std::vector<CudaStagingRing*> free;
  std::vector<std::unique_ptr<CudaStagingRing>> retired;  // of a context reset since: kept, never used
};
struct StagingRingSets {
  std::mutex mu;
  std::map<std::tuple<int, size_t, unsigned, bool>, StagingRingSet> sets;  // node-stable
};
base::PerProcess<StagingRingSets> g_staging_rings;

class StagingRingLease {
 public:
  StagingRingLease(int device, const base::Settings& s) : pools_(g_staging_rings.get()) {
    {
      std::lock_guard lk(pools_.mu);
      set_ = &pools_.sets[{device, s.buffer_size, static_cast<unsigned>(kRingDepth.num(s)), s.huge_pages}];
      if (!set_->free.empty()) {  // rings of a primary context the program reset since: all retired
        const uint64_t now = cu::primary_instance(device);
        std::erase_if(set_->free, [&](CudaStagingRing* r) {
          if (!r->retire_if_gone(now)) return false;
          const auto owned = std::find_if(set_->all.begin(), set_->all.end(), [&](const auto& o) { return o.get() == r; });
          set_->retired.push_back(std::move(*owned));
          set_->all.erase(owned);
          return true;
        });
      }
      if (!set_->free.empty()) {
        ring_ = set_->free.back();
        set_->free.pop_back();
        return;
      }
    }
    auto r = std::make_unique<CudaStagingRing>(device, s.buffer_size, static_cast<unsigned>(kRingDepth.num(s)), s.huge_pages);
    std::lock_guard lk(pools_.mu);
    ring_ = r.get();
    set_->all.push_back(std::move(r));
  }
  ~StagingRingLease() {
    std::lock_guard lk(pools_.mu);
    set_->free.push_back(ring_);
  }
  StagingRingLease(const StagingRingLease&) = delete;
  StagingRingLease& operator=(const StagingRingLease&) = delete;
  CudaStagingRing& operator*() const { return *ring_; }

 private:
  StagingRingSets& pools_;
  StagingRingSet* set_ = nullptr;
  CudaStagingRing* ring_ = nullptr;
};

class Staged final : public Mechanism {
 public:
  const char* name() const override { return "staged"; }
  int rank() const override { return 11; }
  bool device() const override { return true; }
  bool available(std::string* why) const override { return cu::load(why) != nullptr; }

  size_t read(const IoContext& c, void* buf, size_t n, uint64_t off) const override {
    const bool direct = use_direct(c);
    const size_t A = direct ? c.file.off_align : 1;
    const int fd = direct ? c.file.direct_fd : c.file.fd;
    auto* dev = static_cast<char*>(buf);
    return split_run(c.runner, c.settings.threads, off, n, task_bytes(c.settings, n, c.settings.threads, A),
                     [&](uint64_t o, size_t len, size_t bo) {
                       cu::ContextGuard g(c.target);
                       StagingRingLease ring(c.target.device, c.settings);
                       return pipeline_read(*ring, dev + bo, len, o, A, [&](char* b, size_t l, uint64_t fo) {
                         return read_full(fd, b, l, fo, c.file.path, A);
                       });
                     });
  }

  void write(const IoContext& c, const void* buf, size_t n, uint64_t off) const override {
    const auto* dev = static_cast<const char*>(buf);
    if (!use_direct(c)) return write_range(c, dev, n, off, c.file.fd, 1);
    // O_DIRECT for the aligned middle; the unaligned head and tail through the buffered descriptor.
    write_direct_split(
        c.file, off, n, [&](size_t bo, uint64_t o, size_t len) { write_range(c, dev + bo, len, o, c.file.fd, 1); },
        [&](size_t bo, uint64_t o, size_t len) { write_range(c, dev + bo, len, o, c.file.direct_fd, c.file.off_align); });
  }

 private:
  static bool use_direct(const IoContext& c) {
    if (!c.settings.direct) return false;
    std::string why;
    if (direct_usable(c.file, c.settings, &why)) return true;
    base::warn_once("staged-direct:" + why,
                    "staged: O_DIRECT cannot be used for '" + c.file.path + "' (" + why + "): file side buffered");
    return false;
  }
  static void write_range(const IoContext& c, const char* dev, size_t n, uint64_t off, int fd, size_t A) {
    split_run(c.runner, c.settings.threads, off, n, task_bytes(c.settings, n, c.settings.threads, A),
              [&](uint64_t o, size_t len, size_t bo) {
                cu::ContextGuard g(c.target);
                StagingRingLease ring(c.target.device, c.settings);
                pipeline_write(*ring, dev + bo, len, o, A,
                           [&](const char* b, size_t l, uint64_t fo) {
                             if (fd == c.file.direct_fd) write_direct_full(c.file, b, l, fo);  // cut short: on buffered
                             else write_full(fd, b, l, fo, c.file.path);
                           });
                return len;
              });
  }
};

ACCIO_REGISTER_MECHANISM(Staged, "threads", "task_size", "ring_depth", "direct", "buffer_size", "huge_pages");
}  // namespace
}  // namespace accio::io
