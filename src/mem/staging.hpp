// accio memory: staging buffers. A pool of page-aligned, locked, huge-page-backed host buffers,
// allocated once per (size, count, huge_pages) and reused while it is in use or among the few most
// recently used idle pools (StagingPool::shared). Shortages (no huge pages, RLIMIT_MEMLOCK too small)
// degrade with one warning naming the limit to raise.
#pragma once
#include <sys/uio.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace accio::mem {

enum class Backing { hugetlb, thp, small_pages };
const char* backing_name(Backing b);

// One anonymous mapping: hugetlb when reserved, else THP via madvise, else 4 KiB pages.
struct HostBuffer {
  void* ptr = nullptr;
  size_t size = 0;   // usable bytes (requested size)
  size_t mapped = 0;  // bytes mapped (rounded to the page size in use)
  Backing backing = Backing::small_pages;
  bool locked = false;
};
HostBuffer map_host_buffer(size_t size, bool huge_pages, bool lock);
void unmap_host_buffer(HostBuffer& b);

class StagingPool {
 public:
  StagingPool(size_t buffer_size, unsigned count, bool huge_pages);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  size_t buffer_size() const { return size_; }
  unsigned count() const { return static_cast<unsigned>(bufs_.size()); }
  void* data(unsigned i) const { return bufs_[i].ptr; }
  const HostBuffer& buffer(unsigned i) const { return bufs_[i]; }
  std::vector<iovec> iovecs() const;  // for io_uring / device registration

  unsigned acquire();         // blocks until a buffer is free
  int try_acquire();          // -1 when none is free
  void release(unsigned i);
  uint64_t leases() const;    // buffers acquired since the pool was made (for tests: which path a request took)

  // The process-wide pool for these settings, created on first use. Hold the pointer while its
  // buffers are used (leases, rings registered on it): a pool nobody holds is idle, and only the
  // kIdlePools most recently used idle pools are kept; the others are freed by the next call, so
  // staging memory stays bounded by the pools in use plus those few (audit session 20, S1: every
  // distinct buffer_size used to lock a pool for the life of the process).
  static std::shared_ptr<StagingPool> shared(size_t buffer_size, unsigned count, bool huge_pages);
  static constexpr unsigned kIdlePools = 2;
  // Pools shared() holds now, in use or idle (for tests).
  static size_t shared_pools();

  // What another layer keeps with the pool (uring: the rings that registered its buffers),
  // destroyed when the pool is, before its buffers are unmapped.
  struct Attachment {
    virtual ~Attachment() = default;
  };
  void attach(std::unique_ptr<Attachment> a);

 private:
  std::vector<std::unique_ptr<Attachment>> attached_;  // under mu_
  size_t size_;
  std::vector<HostBuffer> bufs_;
  std::vector<unsigned> free_;
  uint64_t leases_ = 0;  // under mu_
  mutable std::mutex mu_;
  std::condition_variable cv_;
};

// RAII lease of one staging buffer.
class StagingLease {
 public:
  explicit StagingLease(StagingPool& p) : pool_(&p), idx_(p.acquire()) {}
  ~StagingLease() { pool_->release(idx_); }
  StagingLease(const StagingLease&) = delete;
  StagingLease& operator=(const StagingLease&) = delete;
  char* data() const { return static_cast<char*>(pool_->data(idx_)); }
  size_t size() const { return pool_->buffer_size(); }
  unsigned index() const { return idx_; }

 private:
  StagingPool* pool_;
  unsigned idx_;
};

// Huge-page and locking facts for `accio info`.
struct HugePageInfo {
  long total = 0, free = 0, size_kib = 0;
  std::string thp_mode;  // always | madvise | never | unknown
};
HugePageInfo huge_page_info();

}  // namespace accio::mem
