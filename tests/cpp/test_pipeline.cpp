// The staging ring pipeline of `staged` (src/io/pipeline.cpp), without a GPU: a fake copy queue runs
// its copies on a thread, slowed when a test wants overlap, and records which buffer is busy. The
// tests check the schedule: data arrives in the right place, no buffer is refilled while its copy is
// in flight, the file side overlaps the copy side, end of file and errors drain the queue.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include "io/pipeline.hpp"

namespace {
using accio::io::StagingRing;

class FakeQueue final : public StagingRing {
 public:
  FakeQueue(unsigned k, size_t size, int copy_us = 0) : size_(size), copy_us_(copy_us), bufs_(k, std::vector<char>(size)),
                                                        busy_(k, 0), marks_(k, 0) {
    worker_ = std::thread([this] { loop(); });
  }
  ~FakeQueue() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  unsigned buffers() const override { return static_cast<unsigned>(bufs_.size()); }
  size_t buffer_size() const override { return size_; }
  char* buffer(unsigned i) override { return bufs_[i].data(); }
  void to_device(char* dev, unsigned s, size_t from, size_t n) override {
    EXPECT_LE(from + n, size_);
    push({[=, this] { std::memcpy(dev, bufs_[s].data() + from, n); }, s});
  }
  void to_host(unsigned s, const char* dev, size_t n) override {
    EXPECT_LE(n, size_);
    push({[=, this] { std::memcpy(bufs_[s].data(), dev, n); }, s});
  }
  void mark(unsigned s) override {
    std::lock_guard lk(mu_);
    marks_[s] = seq_;  // done once every op queued so far ran
  }
  void wait(unsigned s) override {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return done_ >= marks_[s]; });
  }
  void drain() override {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return ops_.empty() && !running_; });
    ++drains_;
  }
  // The file side calls this before it fills buffer s: the buffer must not have a copy pending.
  bool buffer_busy(unsigned s) {
    std::lock_guard lk(mu_);
    return busy_[s] > 0;
  }
  bool copy_in_flight() {
    std::lock_guard lk(mu_);
    return !ops_.empty() || running_;
  }
  unsigned copies() const { return copies_; }
  unsigned drains() const { return drains_; }

 private:
  struct Op {
    std::function<void()> fn;
    unsigned buffer;
  };
  void push(Op op) {
    std::lock_guard lk(mu_);
    ++seq_;
    ++busy_[op.buffer];
    ops_.push_back(std::move(op));
    cv_.notify_all();
  }
  void loop() {
    std::unique_lock lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !ops_.empty(); });
      if (ops_.empty()) return;
      Op op = std::move(ops_.front());
      ops_.pop_front();
      running_ = true;
      lk.unlock();
      if (copy_us_) std::this_thread::sleep_for(std::chrono::microseconds(copy_us_));
      op.fn();
      lk.lock();
      running_ = false;
      --busy_[op.buffer];
      ++done_;
      ++copies_;
      cv_.notify_all();
    }
  }

  size_t size_;
  int copy_us_;
  std::vector<std::vector<char>> bufs_;
  std::vector<int> busy_;
  std::vector<uint64_t> marks_;
  std::deque<Op> ops_;
  uint64_t seq_ = 0, done_ = 0;
  bool running_ = false, stop_ = false;
  unsigned copies_ = 0, drains_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread worker_;
};

std::vector<char> pattern(size_t n, unsigned seed) {
  std::vector<char> v(n);
  std::mt19937 g(seed);
  for (auto& c : v) c = static_cast<char>(g());
  return v;
}

// A "file" in memory with read_full semantics; checks the buffer it fills is not being copied.
struct MemFile {
  std::vector<char> data;
  FakeQueue* q;
  size_t align = 1;
  int reads = 0, overlapped = 0;
  size_t read(char* buf, size_t n, uint64_t off) {
    EXPECT_EQ(off % align, 0u);
    EXPECT_EQ(n % align, 0u);
    for (unsigned s = 0; s < q->buffers(); ++s)
      if (q->buffer(s) == buf) {
        EXPECT_FALSE(q->buffer_busy(s)) << "buffer " << s << " refilled while its copy runs";
      }
    ++reads;
    if (q->copy_in_flight()) ++overlapped;
    if (off >= data.size()) return 0;
    const size_t got = std::min<size_t>(n, data.size() - off);
    std::memcpy(buf, data.data() + off, got);
    return got;
  }
};

TEST(Ring, ReadsEverySizeOffsetAndAlignment) {
  for (size_t align : {size_t{1}, size_t{512}}) {
    for (unsigned k : {1u, 2u, 3u}) {
      FakeQueue q(k, 4096);
      MemFile f{pattern(50000, k), &q, align};
      for (auto [off, n] : {std::pair<uint64_t, size_t>{0, 0}, {0, 1}, {0, 4096}, {7, 4096}, {4095, 9000},
                            {1000, 40000}, {49000, 5000}, {50000, 10}, {60000, 10}}) {
        std::vector<char> dev(n + 1, 'x');
        const size_t got = accio::io::pipeline_read(q, dev.data(), n, off, align, [&](char* b, size_t l, uint64_t o) {
          return f.read(b, l, o);
        });
        const size_t want = off >= f.data.size() ? 0 : std::min<size_t>(n, f.data.size() - off);
        ASSERT_EQ(got, want) << "off " << off << " n " << n << " align " << align << " k " << k;
        EXPECT_EQ(0, std::memcmp(dev.data(), f.data.data() + std::min<size_t>(off, f.data.size()), got));
        EXPECT_EQ(dev[got], 'x') << "wrote past the bytes read";
        EXPECT_FALSE(q.copy_in_flight()) << "returned with a copy in flight";
      }
    }
  }
}

TEST(Ring, FileSideOverlapsSlowCopies) {
  FakeQueue q(3, 1024, 2000);  // each copy takes 2 ms
  MemFile f{pattern(64 * 1024, 7), &q};
  std::vector<char> dev(f.data.size());
  ASSERT_EQ(accio::io::pipeline_read(q, dev.data(), dev.size(), 0, 1, [&](char* b, size_t l, uint64_t o) { return f.read(b, l, o); }),
            dev.size());
  EXPECT_EQ(dev, f.data);
  EXPECT_EQ(f.reads, 64);
  // With k = 3 the reader runs ahead while copies are queued: nearly every read after the first
  // overlaps a copy (the single-buffer case below cannot).
  EXPECT_GE(f.overlapped, 60) << "reads did not overlap copies";

  FakeQueue q1(1, 1024, 2000);
  MemFile f1{f.data, &q1};
  accio::io::pipeline_read(q1, dev.data(), dev.size(), 0, 1, [&](char* b, size_t l, uint64_t o) { return f1.read(b, l, o); });
  EXPECT_EQ(f1.overlapped, 0) << "one buffer must wait for its copy before the next read";
}

TEST(Ring, ReadErrorDrainsAndPropagates) {
  FakeQueue q(2, 1024, 500);
  MemFile f{pattern(10000, 3), &q};
  std::vector<char> dev(10000);
  int calls = 0;
  EXPECT_THROW(accio::io::pipeline_read(q, dev.data(), dev.size(), 0, 1,
                                    [&](char* b, size_t l, uint64_t o) -> size_t {
                                      if (++calls == 4) throw std::runtime_error("EIO at chunk 4");
                                      return f.read(b, l, o);
                                    }),
               std::runtime_error);
  EXPECT_FALSE(q.copy_in_flight()) << "copies still ran after the error returned";
  EXPECT_EQ(0, std::memcmp(dev.data(), f.data.data(), 3 * 1024)) << "chunks before the error were delivered";
}

TEST(Ring, WritesInOrderWithoutOverwritingASlotBeingWritten) {
  for (unsigned k : {1u, 2u, 4u}) {
    for (size_t align : {size_t{1}, size_t{512}}) {
      FakeQueue q(k, 1000, 300);
      const std::vector<char> dev = pattern(20000, k);
      std::vector<char> file(40000, 0);
      uint64_t next = 4096;
      accio::io::pipeline_write(q, dev.data(), dev.size(), 4096, align, [&](const char* b, size_t n, uint64_t off) {
        EXPECT_EQ(off, next) << "out of order";
        EXPECT_EQ(off % align, 0u);
        if (off + n < 4096 + dev.size()) {
          EXPECT_EQ(n % align, 0u);
        }
        for (unsigned s = 0; s < q.buffers(); ++s)
          if (q.buffer(s) == b) {
            EXPECT_FALSE(q.buffer_busy(s)) << "buffer being written is also being filled";
          }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        std::memcpy(file.data() + off, b, n);  // the buffer must still hold chunk `off` after the sleep
        next = off + n;
      });
      EXPECT_EQ(next, 4096 + dev.size());
      EXPECT_EQ(0, std::memcmp(file.data() + 4096, dev.data(), dev.size())) << "k " << k << " align " << align;
      EXPECT_FALSE(q.copy_in_flight());
    }
  }
}

TEST(Ring, WriteErrorDrains) {
  FakeQueue q(3, 1000, 300);
  const std::vector<char> dev = pattern(9000, 1);
  int calls = 0;
  EXPECT_THROW(accio::io::pipeline_write(q, dev.data(), dev.size(), 0, 1,
                                     [&](const char*, size_t, uint64_t) {
                                       if (++calls == 2) throw std::runtime_error("ENOSPC");
                                     }),
               std::runtime_error);
  EXPECT_FALSE(q.copy_in_flight());
}

TEST(Ring, RejectsSlotsSmallerThanTheAlignment) {
  FakeQueue q(2, 256);
  std::vector<char> dev(1024);
  EXPECT_ANY_THROW(accio::io::pipeline_read(q, dev.data(), 1024, 0, 512, [](char*, size_t, uint64_t) { return size_t{0}; }));
}

}  // namespace
