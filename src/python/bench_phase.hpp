// The timed inner loop of `accio bench`: one phase (write, read, random read, ... of one case) run by
// N threads, each on its own accio handle and byte range, started together at a barrier, each
// timing itself with CLOCK_MONOTONIC (the clock of Python's time.monotonic_ns). Everything that is
// not the transfer — buffer allocation and first touch, the random permutation — happens before the
// barrier. Native so that per-record overhead is that of the C API, as in IOzone and IOR, not of
// the Python interpreter. The Python side (accio/bench/) turns the returned intervals into
// bandwidth by IOR's rule: total bytes / (latest end - earliest start).
#pragma once

#include <accio/accio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdint>
#include <exception>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "accio/accio.hpp"

namespace accio_bench {

struct Job {
  accio_file* file;
  int64_t offset;  // first byte of this thread's range
  int64_t length;  // bytes in the range
};

struct Phase {
  size_t record;        // bytes per request
  bool write;           // pwrite (else pread)
  bool random;          // records in a random permutation of the range (IOzone -i 2)
  bool fsync;           // fsync inside the timed region (IOzone -e, IOR -e)
  bool verify;          // reads check the stamp that writes put at the head of every record
  uint64_t seed;
  int device = -1;      // >= 0: the records live in GPU memory on this device (accio_device_alloc)
};

struct Interval {
  int64_t start_ns, end_ns;
  int64_t bytes;
};

inline int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// What a write stamps into the first 8 bytes of the record at `off`, and a read expects there.
inline uint64_t stamp(int64_t off) { return uint64_t(off) * 0x9E3779B97F4A7C15ull ^ 0xACC10ACC10ACC10Aull; }

namespace detail {
struct Aligned {
  void* p = nullptr;
  explicit Aligned(size_t n) {
    if (posix_memalign(&p, 4096, std::max<size_t>(n, 1)) != 0) throw std::bad_alloc();
  }
  ~Aligned() { free(p); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
};
// The record buffer in GPU memory (--target cuda:N).
struct Device {
  void* p = nullptr;
  Device(int dev, size_t n) { accio::detail::check(accio_device_alloc(dev, n, 0, &p)); }
  ~Device() { accio_device_free(p); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
};
}  // namespace detail

// Runs the phase; returns one interval per job. The first error of any thread is rethrown after all
// threads have stopped (the others finish their current record and stop early).
inline std::vector<Interval> run_phase(const std::vector<Job>& jobs, const Phase& ph) {
  if (ph.record == 0) throw std::invalid_argument("record size must be positive");
  const size_t n = jobs.size();
  std::vector<Interval> out(n);
  std::vector<std::exception_ptr> errors(n);
  std::atomic<bool> failed{false};
  std::barrier sync(static_cast<std::ptrdiff_t>(n));
  auto body = [&](size_t i) {
    const Job& j = jobs[i];
    std::vector<int64_t> offs;
    std::unique_ptr<detail::Aligned> buf;
    std::unique_ptr<detail::Device> dev;  // device target: the records go to and from here
    void* rec = nullptr;
    try {
      for (int64_t o = 0; o < j.length; o += int64_t(ph.record)) offs.push_back(j.offset + o);
      if (ph.random) std::shuffle(offs.begin(), offs.end(), std::mt19937_64(ph.seed + i));
      buf = std::make_unique<detail::Aligned>(ph.record);
      // Incompressible contents, every page touched before the clock starts.
      uint64_t x = ph.seed * 2654435761u + i + 1, *w = static_cast<uint64_t*>(buf->p);
      for (size_t k = 0; k < ph.record / 8; ++k) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        w[k] = x;
      }
      rec = buf->p;
      if (ph.device >= 0) {
        dev = std::make_unique<detail::Device>(ph.device, ph.record);
        accio::detail::check(accio_device_copy(dev->p, buf->p, ph.record));
        rec = dev->p;
      }
    } catch (...) {
      errors[i] = std::current_exception();
      failed = true;
    }
    sync.arrive_and_wait();
    const int64_t t0 = now_ns();
    int64_t done = 0;
    try {
      for (size_t k = 0; k < offs.size() && !failed.load(std::memory_order_relaxed); ++k) {
        const int64_t off = offs[k];
        const size_t len = size_t(std::min<int64_t>(int64_t(ph.record), j.offset + j.length - off));
        const bool stamped = len >= 8;
        if (ph.write) {
          if (stamped) {  // on a device target an 8-byte copy: a few microseconds per record
            uint64_t s = stamp(off);
            if (dev) accio::detail::check(accio_device_copy(rec, &s, 8));
            else memcpy(rec, &s, 8);
          }
          int64_t r = accio::detail::check(accio_pwrite(j.file, rec, len, off));
          done += r;
        } else {
          int64_t r = accio::detail::check(accio_pread(j.file, rec, len, off));
          if (size_t(r) != len)
            throw std::runtime_error("short read: " + std::to_string(r) + " of " + std::to_string(len) +
                                     " bytes at offset " + std::to_string(off) + " (file shorter than the case?)");
          if (ph.verify && stamped) {
            uint64_t s;
            if (dev) accio::detail::check(accio_device_copy(&s, rec, 8));
            else memcpy(&s, rec, 8);
            if (s != stamp(off))
              throw std::runtime_error("verification failed: the record at offset " + std::to_string(off) +
                                       " does not hold what the write phase put there");
          }
          done += r;
        }
      }
      if (ph.fsync && !failed) accio::detail::check(accio_fsync(j.file));
    } catch (...) {
      errors[i] = std::current_exception();
      failed = true;
    }
    out[i] = {t0, now_ns(), done};
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n; ++i) threads.emplace_back(body, i);
  if (n) body(0);
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

}  // namespace accio_bench
