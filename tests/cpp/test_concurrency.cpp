// Concurrency: many threads issuing requests on one handle and on many handles, async requests and
// batches, close while requests are in flight; the thread pool's caller-participation contract.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <thread>
#include <vector>

#include "engine/file.hpp"
#include "engine/thread_pool.hpp"
#include "helpers.hpp"

using namespace accio;
using namespace testing_accio;

namespace {
base::Settings mech(const char* m) {
  auto s = base::Settings::defaults();
  s.set("mechanism", m);
  s.set("task_size", "128k");
  s.set("buffer_size", "128k");
  s.set("buffer_count", "3");  // fewer buffers than threads: waiting for a buffer must not deadlock
  s.set("threads", "4");
  s.set("queue_depth", "4");
  return s;
}

class Concurrency : public ::testing::TestWithParam<const char*> {};

TEST_P(Concurrency, ManyThreadsOneHandle) {
  TempDir d;
  auto s = mech(GetParam());
  if (std::string(GetParam()) == "uring") s.set("direct", "on");
  auto f = engine::File::open(d.file("shared"), "w+", s);
  const int kThreads = 8;
  const size_t kRegion = (1 << 20) + 333;  // unaligned regions share O_DIRECT blocks at the seams
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<char> src(kRegion), dst(kRegion);
      for (int round = 0; round < 6; ++round) {
        fill_random(src.data(), src.size(), rng);
        f->pwrite(src.data(), kRegion, t * kRegion);
        if (f->pread(dst.data(), kRegion, t * kRegion) != kRegion || src != dst) bad++;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(f->size(), kThreads * kRegion);
  EXPECT_EQ(f->stats().writes, 6u * kThreads);
}

TEST_P(Concurrency, ManyHandlesAsyncAndBatches) {
  TempDir d;
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int t = 0; t < 6; ++t)
    ts.emplace_back([&, t] {
      auto f = engine::File::open(d.file("f" + std::to_string(t)), "w+", mech(GetParam()));
      std::mt19937_64 rng(100 + t);
      std::vector<std::vector<char>> src(8, std::vector<char>(300000)), dst(8, std::vector<char>(300000));
      std::vector<engine::Request> w, r;
      for (size_t i = 0; i < 8; ++i) {
        fill_random(src[i].data(), src[i].size(), rng);
        w.push_back({src[i].data(), src[i].size(), i * 300000});
        r.push_back({dst[i].data(), dst[i].size(), i * 300000});
      }
      for (auto& fu : f->submit(w, true)) fu.get();
      auto a = f->pread_async(dst[0].data(), 300000, 0);
      if (a.get() != 300000) bad++;
      for (auto& fu : f->submit(r, false))
        if (fu.get() != 300000) bad++;
      if (src != dst) bad++;
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST_P(Concurrency, CloseWaitsForRequestsInFlight) {
  TempDir d;
  auto f = engine::File::open(d.file("c"), "w+", mech(GetParam()));
  std::vector<char> src(4 << 20, 'q');
  std::vector<engine::Future> futs;
  for (int i = 0; i < 4; ++i) futs.push_back(f->pwrite_async(src.data(), src.size(), i * src.size()));
  f->close();  // must not return while writes still use the descriptors
  for (auto& fu : futs) EXPECT_EQ(fu.get(), src.size());
  auto g = engine::File::open(d.file("c"), "r", mech("posix"));
  EXPECT_EQ(g->size(), 4 * src.size());
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, Concurrency, ::testing::Values("posix", "parallel", "direct", "uring", "auto"));

TEST(ThreadPool, CallerTakesPartAndNestedSplitsDoNotDeadlock) {
  auto& pool = engine::ThreadPool::shared();
  pool.ensure(2);
  std::atomic<int> sum{0};
  // Outer split on pool threads, each issuing an inner split: must finish even with 2 workers.
  pool.run(16, 8, [&](size_t) { pool.run(16, 8, [&](size_t j) { sum += static_cast<int>(j); }); });
  EXPECT_EQ(sum.load(), 16 * 120);
}
}  // namespace

// The pool's threads take no signal meant for the process: a program that blocks SIGUSR1 after its
// first parallel read, to take it with sigtimedwait (or a signalfd), gets it. The workers took the
// mask of the thread that started them, and a signal for the process went to one of them: its
// default action ended the process (shim audit, session 24).
TEST(Concurrency, PoolThreadsLeaveTheProcesssSignalsToTheProgramsThreads) {
  TempDir d;
  std::vector<char> src(8 << 20, 'q');
  std::ofstream(d.file("in"), std::ios::binary).write(src.data(), static_cast<std::streamsize>(src.size()));
  auto s = base::Settings::defaults();
  s.set("mechanism", "parallel");
  s.set("threads", "4");
  s.set("task_size", "1m");
  auto f = engine::File::open(d.file("in"), "r", s);
  std::vector<char> got(src.size());
  ASSERT_EQ(f->pread(got.data(), got.size(), 0), got.size());  // the workers exist, signals open here
  sigset_t usr1, old;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &usr1, &old), 0);
  ASSERT_EQ(kill(getpid(), SIGUSR1), 0);  // for the process: any thread that does not block it
  const timespec wait{5, 0};
  EXPECT_EQ(sigtimedwait(&usr1, nullptr, &wait), SIGUSR1);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}
