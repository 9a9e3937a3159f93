// The timed inner loop of `accio bench`: one phase (write, read, random read, ... of one case) run by
// N threads, each on its own accio handle and byte range, started together at a barrier, each
// timing itself with CLOCK_MONOTONIC (the clock of Python's time.monotonic_ns). Everything that is
// not the transfer — buffer allocation and first touch, the random permutation — happens before the
// barrier. Native so that per-record overhead is that of the C API, as in IOzone and IOR, not of
// the Python interpreter. The Python side (accio/bench/) turns the returned intervals into
// bandwidth by IOR's rule: total bytes / (latest end - earliest start). Every request is also timed
// on its own (submission to completion) into a log-linear histogram, for IOPS and latency
// percentiles per phase as fio reports them; a phase may run for a time instead of once over its
// range (fio's time_based), and keep up to `iodepth` requests in flight per thread (asynchronous
// submission: a queue-depth sweep).
#pragma once

#include <accio/accio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
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
  int64_t runtime_ns = 0;  // > 0: go round the range again until this much time has passed (fio time_based)
  int iodepth = 1;         // requests in flight per thread; > 1 submits asynchronously (accio_p*_async)
  bool time_requests = true;  // each request's latency into the histogram (two clock reads per request)
  // Set (by the caller's poll, below) to end the phase after the requests in flight: Ctrl-C took
  // effect only when the phase ended, 16 s into a 20 s --runtime (bench audit, session 25).
  const std::atomic<bool>* stop = nullptr;
};

// Request latencies, log-linear: exact below kSub ns, then kSub buckets per power of two, so that a
// value is known within 1/kSub (1.6%) in 32 KiB per thread whatever the number of requests.
struct Histogram {
  static constexpr int kSubBits = 6;
  static constexpr uint64_t kSub = uint64_t(1) << kSubBits;
  std::vector<uint64_t> counts = std::vector<uint64_t>((64 - kSubBits + 1) * kSub);

  static size_t bucket(uint64_t v) {
    if (v < kSub) return size_t(v);
    const int e = 63 - __builtin_clzll(v);  // e >= kSubBits
    return size_t(e - kSubBits + 1) * kSub + size_t((v >> (e - kSubBits)) - kSub);
  }
  // The smallest value of bucket b, and one past its largest.
  static uint64_t lower(size_t b) {
    if (b < kSub) return b;
    const size_t g = b / kSub;
    return (kSub + b % kSub) << (g - 1);
  }
  static uint64_t upper(size_t b) { return b < kSub ? b + 1 : lower(b) + (uint64_t(1) << (b / kSub - 1)); }
  void add(int64_t ns) { ++counts[bucket(uint64_t(std::max<int64_t>(ns, 0)))]; }
  void merge(const Histogram& o) {
    for (size_t i = 0; i < counts.size(); ++i) counts[i] += o.counts[i];
  }
};

struct Interval {
  int64_t start_ns, end_ns;
  int64_t bytes;
  int64_t ops = 0;  // requests completed
  Histogram latency;
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

namespace detail {
// One request slot of a thread: its record buffer (host, and device on a device target) and, while
// a request is in flight, its future, offset, length and submission time.
struct Slot {
  std::unique_ptr<Aligned> host;
  std::unique_ptr<Device> dev;
  void* rec = nullptr;
  accio_future* fut = nullptr;
  int64_t off = 0, submitted = 0;
  size_t len = 0;
  Slot() = default;
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
  ~Slot() { accio_future_free(fut); }  // waits if still in flight (a failed phase)
};

inline void stamp_record(const Slot& s, int64_t off) {
  uint64_t v = stamp(off);
  if (s.dev) accio::detail::check(accio_device_copy(s.rec, &v, 8));  // a few microseconds per record
  else memcpy(s.rec, &v, 8);
}

inline void check_read(const Slot& s, const Phase& ph, int64_t r) {
  if (size_t(r) != s.len)
    throw std::runtime_error("short read: " + std::to_string(r) + " of " + std::to_string(s.len) +
                             " bytes at offset " + std::to_string(s.off) + " (file shorter than the case?)");
  if (ph.verify && s.len >= 8) {
    uint64_t v;
    if (s.dev) accio::detail::check(accio_device_copy(&v, s.rec, 8));
    else memcpy(&v, s.rec, 8);
    if (v != stamp(s.off))
      throw std::runtime_error("verification failed: the record at offset " + std::to_string(s.off) +
                               " does not hold what the write phase put there");
  }
}
}  // namespace detail

// Runs the phase; returns one interval per job. The first error of any thread is rethrown after all
// threads have stopped (the others finish their current record and stop early).
// poll (optional): called by the caller's thread every 20 ms while the jobs run, each then on a
// thread of its own (without it the caller's thread runs the first job); it may set *ph.stop. An
// exception from it stops the jobs and is rethrown once they have ended.
inline std::vector<Interval> run_phase(const std::vector<Job>& jobs, const Phase& ph,
                                       const std::function<void()>& poll = {}) {
  if (ph.record == 0) throw std::invalid_argument("record size must be positive");
  if (ph.iodepth < 1) throw std::invalid_argument("iodepth must be at least 1");
  if (ph.runtime_ns < 0) throw std::invalid_argument("runtime must not be negative");
  const size_t n = jobs.size();
  std::vector<Interval> out(n);
  std::vector<std::exception_ptr> errors(n);
  std::atomic<bool> failed{false}, halted{false};  // halted: poll threw
  std::exception_ptr poll_error;
  std::barrier sync(static_cast<std::ptrdiff_t>(n));
  auto body = [&](size_t i) {
    const Job& j = jobs[i];
    Interval& iv = out[i];
    std::vector<int64_t> offs;
    std::vector<detail::Slot> slots(size_t(ph.iodepth));
    try {
      for (int64_t o = 0; o < j.length; o += int64_t(ph.record)) offs.push_back(j.offset + o);
      if (ph.random) std::shuffle(offs.begin(), offs.end(), std::mt19937_64(ph.seed + i));
      for (size_t q = 0; q < slots.size(); ++q) {
        auto& s = slots[q];
        s.host = std::make_unique<detail::Aligned>(ph.record);
        // Incompressible contents, every page touched before the clock starts.
        uint64_t x = ph.seed * 2654435761u + i * 1021 + q + 1, *w = static_cast<uint64_t*>(s.host->p);
        for (size_t k = 0; k < ph.record / 8; ++k) {
          x ^= x << 13, x ^= x >> 7, x ^= x << 17;
          w[k] = x;
        }
        s.rec = s.host->p;
        if (ph.device >= 0) {
          s.dev = std::make_unique<detail::Device>(ph.device, ph.record);
          accio::detail::check(accio_device_copy(s.dev->p, s.host->p, ph.record));
          s.rec = s.dev->p;
        }
      }
    } catch (...) {
      errors[i] = std::current_exception();
      failed = true;
    }
    sync.arrive_and_wait();
    const int64_t t0 = now_ns();
    // Completes the request in slot s (asynchronous) or records the one just made (synchronous).
    const bool clock = ph.time_requests || ph.runtime_ns > 0;
    auto complete = [&](detail::Slot& s, int64_t r) {
      const int64_t t = clock ? now_ns() : 0;
      accio::detail::check(r);
      if (!ph.write) detail::check_read(s, ph, r);
      if (ph.time_requests) iv.latency.add(t - s.submitted);
      iv.bytes += r;
      ++iv.ops;
      return t;
    };
    try {
      const bool async = ph.iodepth > 1;
      int64_t t = t0;
      // Once over the range; time-based: until runtime_ns has passed, going round the range again
      // if need be (fio's time_based; the clock is then read at every completion).
      auto stopped = [&] {
        return halted.load(std::memory_order_relaxed) || (ph.stop && ph.stop->load(std::memory_order_relaxed));
      };
      for (size_t k = 0; !offs.empty() && !failed.load(std::memory_order_relaxed) && !stopped(); ++k) {
        if (ph.runtime_ns > 0 ? t - t0 >= ph.runtime_ns : k >= offs.size()) break;
        auto& s = slots[k % slots.size()];
        if (s.fut) {  // the slot's previous request first
          t = complete(s, accio_future_wait(s.fut));
          accio_future_free(s.fut);
          s.fut = nullptr;
        }
        s.off = offs[k % offs.size()];
        s.len = size_t(std::min<int64_t>(int64_t(ph.record), j.offset + j.length - s.off));
        if (ph.write && s.len >= 8) detail::stamp_record(s, s.off);
        if (ph.time_requests) s.submitted = now_ns();
        if (async) {
          accio::detail::check(ph.write ? accio_pwrite_async(j.file, s.rec, s.len, s.off, &s.fut)
                                        : accio_pread_async(j.file, s.rec, s.len, s.off, &s.fut));
        } else {
          t = complete(s, ph.write ? accio_pwrite(j.file, s.rec, s.len, s.off) : accio_pread(j.file, s.rec, s.len, s.off));
        }
      }
      for (auto& s : slots)  // drain what is still in flight
        if (s.fut) {
          int64_t r = accio_future_wait(s.fut);
          accio_future_free(s.fut);
          s.fut = nullptr;
          if (!failed) complete(s, r);
        }
      if (ph.fsync && !failed && !stopped()) accio::detail::check(accio_fsync(j.file));
    } catch (...) {
      errors[i] = std::current_exception();
      failed = true;
    }
    iv.start_ns = t0;
    iv.end_ns = now_ns();
  };
  std::vector<std::thread> threads;
  if (!poll) {
    for (size_t i = 1; i < n; ++i) threads.emplace_back(body, i);
    if (n) body(0);
  } else {  // every job on a thread of its own; the caller's thread calls poll until they are done
    // Woken by the last job, or every 20 ms to poll: a plain 20 ms sleep made every phase last at
    // least 20 ms (a 40 us phase took 20.2 ms, and tune's budget bought half the samples: review,
    // session 25).
    std::mutex mu;
    std::condition_variable cv;
    size_t done = 0;
    for (size_t i = 0; i < n; ++i) threads.emplace_back([&, i] {
        body(i);
        std::lock_guard lk(mu);
        if (++done == n) cv.notify_one();
      });
    std::unique_lock lk(mu);
    while (!cv.wait_for(lk, std::chrono::milliseconds(20), [&] { return done == n; })) {
      lk.unlock();
      try {
        if (!poll_error) poll();
      } catch (...) {  // the threads are running: they stop, then it is rethrown
        poll_error = std::current_exception();
        halted = true;
      }
      lk.lock();
    }
  }
  for (auto& t : threads) t.join();
  if (poll_error) std::rethrow_exception(poll_error);
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

}  // namespace accio_bench
