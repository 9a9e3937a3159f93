// Completion callbacks on request futures: the engine's Future/Promise, accio_future_on_complete and
// accio::Future::on_complete. Exactly once whether the request completes before or after the
// callback is registered (including racing it), on the completing worker or the registering thread,
// errors carried with their operation, path and offset, and a future freed inside its callback, right
// after it, or while it runs (the free waits). Requests are held in flight deterministically through
// the syscall table (a pread that waits for the test to open a gate). Run under TSan too.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "accio/accio.hpp"
#include "base/error.hpp"
#include "base/sys.hpp"
#include "engine/future.hpp"
#include "helpers.hpp"
#include "io/mechanism.hpp"

using namespace accio;
using namespace testing_accio;
using namespace std::chrono_literals;

namespace {

// A latch the test opens once.
class Gate {
 public:
  void open() {
    {
      std::lock_guard lk(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void wait() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return open_; });
  }
  bool wait_for(std::chrono::milliseconds t) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, t, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// ---- the engine's Future and Promise ----

struct Seen {
  std::atomic<int> calls{0};
  std::atomic<int64_t> result{0};
  std::thread::id thread;
  engine::Future* fut = nullptr;
};
void record(void* p) {
  auto* s = static_cast<Seen*>(p);
  s->thread = std::this_thread::get_id();
  s->result = s->fut->result();  // the outcome is readable inside the callback (no self-deadlock)
  s->calls++;
}

// A promise, its future, and what record() saw of the future's callback.
struct Watched {
  engine::Promise p;
  engine::Future f = p.get_future();
  Seen s;
  Watched() { s.fut = &f; }
  bool arm() { return f.on_complete(&record, &s); }
};

TEST(EngineFuture, AlreadyCompleteRunsAtOnceOnTheCaller) {
  Watched w;
  auto& [p, f, s] = w;
  p.set_value(4096);
  ASSERT_TRUE(w.arm());
  EXPECT_EQ(s.calls, 1);
  EXPECT_EQ(s.result, 4096);
  EXPECT_EQ(s.thread, std::this_thread::get_id());
  EXPECT_FALSE(f.on_complete(&record, &s)) << "a second callback is refused";
  f.finish();  // returns: the callback has run
  EXPECT_EQ(s.calls, 1);
}

TEST(EngineFuture, CompletesLaterOnTheCompletingThread) {
  Watched w;
  auto& [p, f, s] = w;
  ASSERT_TRUE(w.arm());
  EXPECT_EQ(s.calls, 0);
  EXPECT_FALSE(f.wait_for(1ms));
  std::thread::id worker;
  std::thread t([&] {
    worker = std::this_thread::get_id();
    p.set_value(7);
  });
  t.join();
  EXPECT_EQ(s.calls, 1);
  EXPECT_EQ(s.result, 7);
  EXPECT_EQ(s.thread, worker);
  EXPECT_EQ(f.get(), 7u);
  EXPECT_EQ(f.get(), 7u) << "get() may be called again";
  EXPECT_THROW(p.set_value(8), std::logic_error) << "a request completes once";
}

TEST(EngineFuture, WaitingInt64MaxNanosecondsIsForever) {
  // libstdc++ adds the duration to now(): INT64_MAX ns overflowed into the past, and "wait
  // forever" (the C API's INT64_MAX, Fortran's huge(0)) answered "not done" at once.
  Watched w;
  auto& [p, f, s] = w;
  ASSERT_TRUE(w.arm());
  std::thread t([&p] {
    std::this_thread::sleep_for(20ms);
    p.set_value(3);
  });
  EXPECT_TRUE(f.wait_for(std::chrono::nanoseconds(INT64_MAX)));
  t.join();
  EXPECT_EQ(f.get(), 3u);
}

TEST(EngineFuture, ErrorCarriesErrnoAndDetails) {
  Watched w;
  auto& [p, f, s] = w;
  ASSERT_TRUE(w.arm());
  p.set_error(std::make_exception_ptr(base::Error(ENOSPC, "pwrite", "/data/x", 8192)));
  EXPECT_EQ(s.calls, 1);
  EXPECT_EQ(s.result, -ENOSPC);
  try {
    f.get();
    ADD_FAILURE() << "get() did not throw";
  } catch (const base::Error& e) {
    EXPECT_EQ(e.errnum(), ENOSPC);
    EXPECT_EQ(e.op(), "pwrite");
    EXPECT_EQ(e.path(), "/data/x");
    EXPECT_EQ(e.offset(), 8192);
  }
  engine::Promise q;  // an error that is not an engine error counts as EIO
  q.set_error(std::make_exception_ptr(std::runtime_error("boom")));
  EXPECT_EQ(q.get_future().result(), -EIO);
  EXPECT_THROW(q.get_future().get(), std::runtime_error);
}

// Registration racing completion: exactly one of the two threads runs the callback, every time.
TEST(EngineFuture, RegistrationRacingCompletionRunsOnce) {
  constexpr int kRounds = 2000;
  for (int i = 0; i < kRounds; ++i) {
    Watched w;
    auto& [p, f, s] = w;
    std::atomic<bool> go{false};
    std::thread t([&] {
      while (!go.load(std::memory_order_acquire)) {}
      p.set_value(static_cast<size_t>(i));
    });
    go.store(true, std::memory_order_release);
    ASSERT_TRUE(w.arm());
    t.join();
    f.finish();
    ASSERT_EQ(s.calls, 1) << "round " << i;
    ASSERT_EQ(s.result, i);
  }
}

TEST(EngineFuture, FinishWaitsForTheCallbackExceptInsideIt) {
  engine::Promise p;
  auto* f = new engine::Future(p.get_future());
  Gate release, entered;
  struct Ctx {
    Gate *release, *entered;
    engine::Future* f;
    std::atomic<bool> returned{false};
  } ctx{&release, &entered, f};
  ASSERT_TRUE(f->on_complete(
      [](void* a) {
        auto* c = static_cast<Ctx*>(a);
        c->f->finish();  // inside its own callback: returns at once
        c->entered->open();
        c->release->wait();
        c->returned = true;
      },
      &ctx));
  std::thread worker([&] { p.set_value(1); });
  entered.wait();
  std::atomic<bool> finished{false};
  std::thread waiter([&] {
    f->finish();  // a waiter while the callback runs: returns after it
    finished = true;
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(finished) << "finish() returned while the callback still ran";
  EXPECT_TRUE(f->wait_for(0ns)) << "the outcome is there for waiters while the callback runs";
  release.open();
  waiter.join();
  EXPECT_TRUE(ctx.returned);
  delete f;  // destroyed after the callback; the promise side still holds the state
  worker.join();
}

// The last handle destroyed inside its own callback, the worker's promise already gone: nothing of
// the state is touched after (ASan checks).
TEST(EngineFuture, DestroyedInsideItsCallbackAfterThePromiseWentAway) {
  engine::Future* f;
  {
    engine::Promise p;
    f = new engine::Future(p.get_future());
    p.set_value(3);
  }
  int calls = 0;
  struct Ctx {
    engine::Future* f;
    int* calls;
  } ctx{f, &calls};
  ASSERT_TRUE(f->on_complete(
      [](void* a) {
        auto* c = static_cast<Ctx*>(a);
        EXPECT_EQ(c->f->get(), 3u);
        delete c->f;
        ++*c->calls;
      },
      &ctx));
  EXPECT_EQ(calls, 1);
}

// fork() copies a request's future but not the worker that completes it: in the child, waiting
// for it ends at once with ECANCELED (instead of for ever), its callback is not run, and finish()
// returns; the child's own requests and the parent's copy are unaffected.
TEST(EngineFuture, AParentsRequestFailsInAForkedChildInsteadOfHanging) {
  Watched w;
  auto& [p, f, s] = w;
  ASSERT_TRUE(w.arm());
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!f.wait_for(0ns)) _exit(2);  // (would wait for ever below)
    bool ok = f.result() == -ECANCELED && s.calls == 0;
    try {
      f.get();
      ok = false;
    } catch (const base::Error& e) {
      ok = ok && e.errnum() == ECANCELED && std::string(e.what()).find("fork") != std::string::npos;
    }
    f.finish();
    engine::Promise q;
    q.set_value(5);
    _exit(ok && q.get_future().get() == 5 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_FALSE(f.wait_for(0ns));
  p.set_value(1);
  EXPECT_EQ(s.calls, 1);
  EXPECT_EQ(s.result, 1);
}

// In a forked child, a callback registered on a parent's unfinished request runs at once, with
// ECANCELED, exactly once (it used to be stored and never run); the parent's copy is unaffected.
TEST(EngineFuture, ACallbackAddedInAForkedChildToAParentsRequestRunsAtOnce) {
  Watched w;
  auto& [p, f, s] = w;
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(30);  // a hang fails the test instead of stalling it
    bool ok = w.arm() && s.calls == 1 && s.result == -ECANCELED && s.thread == std::this_thread::get_id();
    ok = ok && !f.on_complete(&record, &s);  // one callback, still
    f.finish();
    _exit(ok && s.calls == 1 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_TRUE(w.arm());
  EXPECT_EQ(s.calls, 0);
  p.set_value(3);
  EXPECT_EQ(s.calls, 1);
  EXPECT_EQ(s.result, 3);
}

TEST(EngineFuture, EmptyFutureIsAnError) {
  engine::Future f;
  EXPECT_FALSE(f.valid());
  EXPECT_THROW(f.wait(), std::future_error);
  EXPECT_THROW(f.on_complete(&record, nullptr), std::future_error);
}

// ---- the C API, on real requests ----

// A pread that waits at the gate (requests stay in flight until the test opens it), or fails.
Gate* g_gate = nullptr;
std::atomic<int> g_entered{0};
ssize_t gated_pread(int fd, void* b, size_t n, off_t o) {
  g_entered++;
  g_gate->wait();
  return base::sys::real_ops().pread(fd, b, n, o);
}
ssize_t failing_pread(int, void*, size_t, off_t) {
  errno = EIO;
  return -1;
}

class CFuture : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("data");
    FILE* w = fopen(path_.c_str(), "wb");
    ASSERT_TRUE(w);
    data_.resize(1 << 20);
    for (size_t i = 0; i < data_.size(); ++i) data_[i] = static_cast<char>(i * 131 + 7);
    ASSERT_EQ(fwrite(data_.data(), 1, data_.size(), w), data_.size());
    fclose(w);
    accio_settings* s = accio_settings_new();
    ASSERT_EQ(accio_settings_set(s, "mechanism", "posix"), 0);
    ASSERT_EQ(accio_open(&f_, path_.c_str(), "r", s), 0) << accio_last_error();
    accio_settings_free(s);
    g_gate = &gate_;
    g_entered = 0;
  }
  void TearDown() override {
    gate_.open();  // a test that failed early leaves no request held
    accio_close(f_);
    base::sys::ops() = base::sys::real_ops();
  }
  Gate gate_;  // gated_pread holds requests in flight until a test opens it
  TempDir dir_;
  std::string path_;
  std::vector<char> data_;
  accio_file* f_ = nullptr;
};

struct CSeen {
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  int64_t result = 0;
  int wait_result = 0;  // accio_future_wait inside the callback
  std::string error;    // accio_last_error() inside the callback
  std::thread::id thread;
  bool free_inside = false;

  void wait_calls(int n) {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, 30s, [&] { return calls >= n; })) << "callback not called";
  }
};
void c_record(accio_future* fut, int64_t result, void* arg) {
  auto* s = static_cast<CSeen*>(arg);
  const int64_t w = accio_future_wait(fut);
  const std::string err = w < 0 ? accio_last_error() : "";
  const bool free_inside = s->free_inside;
  if (free_inside) accio_future_free(fut);
  std::lock_guard lk(s->mu);
  s->calls++;
  s->result = result;
  s->wait_result = static_cast<int>(w);
  s->error = err;
  s->thread = std::this_thread::get_id();
  s->cv.notify_all();
}

TEST_F(CFuture, AlreadyCompleteRunsAtOnceOnTheCaller) {
  std::vector<char> buf(4096);
  accio_future* fut;
  ASSERT_EQ(accio_pread_async(f_, buf.data(), buf.size(), 8192, &fut), 0);
  ASSERT_EQ(accio_future_wait(fut), 4096);
  CSeen s;
  ASSERT_EQ(accio_future_on_complete(fut, &c_record, &s), 0);
  EXPECT_EQ(s.calls, 1);
  EXPECT_EQ(s.result, 4096);
  EXPECT_EQ(s.thread, std::this_thread::get_id());
  EXPECT_EQ(accio_future_on_complete(fut, &c_record, &s), -EBUSY);
  EXPECT_NE(std::string(accio_last_error()).find("completion callback already"), std::string::npos);
  EXPECT_EQ(accio_future_on_complete(fut, nullptr, &s), -EINVAL);
  EXPECT_EQ(accio_future_on_complete(nullptr, &c_record, &s), -EINVAL);
  accio_future_free(fut);
  EXPECT_EQ(s.calls, 1);
  EXPECT_EQ(0, memcmp(buf.data(), data_.data() + 8192, buf.size()));
}

TEST_F(CFuture, CompletesLaterOnAWorker) {
  base::sys::ops().pread = &gated_pread;
  std::vector<char> buf(65536);
  accio_future* fut;
  ASSERT_EQ(accio_pread_async(f_, buf.data(), buf.size(), 4096, &fut), 0);
  while (g_entered.load() == 0) std::this_thread::yield();  // the request is running, held at the gate
  CSeen s;
  ASSERT_EQ(accio_future_on_complete(fut, &c_record, &s), 0);
  EXPECT_EQ(accio_future_ready(fut, 0), 0);
  EXPECT_EQ(s.calls, 0);
  gate_.open();
  s.wait_calls(1);
  EXPECT_EQ(s.result, 65536);
  EXPECT_EQ(s.wait_result, 65536);
  EXPECT_NE(s.thread, std::this_thread::get_id());
  EXPECT_EQ(0, memcmp(buf.data(), data_.data() + 4096, buf.size())) << "the data is there when the callback runs";
  accio_future_free(fut);
  EXPECT_EQ(s.calls, 1);
}

TEST_F(CFuture, ErrorCompletionCarriesTheError) {
  base::sys::ops().pread = &failing_pread;
  std::vector<char> buf(4096);
  accio_future* fut;
  ASSERT_EQ(accio_pread_async(f_, buf.data(), buf.size(), 12288, &fut), 0);
  CSeen s;
  ASSERT_EQ(accio_future_on_complete(fut, &c_record, &s), 0);
  s.wait_calls(1);
  EXPECT_EQ(s.result, -EIO);
  EXPECT_EQ(s.wait_result, -EIO);
  EXPECT_NE(s.error.find("pread"), std::string::npos) << s.error;
  EXPECT_NE(s.error.find(path_), std::string::npos) << s.error;
  EXPECT_NE(s.error.find("12288"), std::string::npos) << s.error;
  EXPECT_EQ(accio_future_wait(fut), -EIO);  // the same error, here too
  EXPECT_EQ(accio_last_errno(), EIO);
  EXPECT_EQ(accio_last_error_offset(), 12288);
  accio_future_free(fut);
}

TEST_F(CFuture, FreeInsideTheCallback) {
  base::sys::ops().pread = &gated_pread;
  std::vector<char> buf(4096);
  CSeen later, now;
  later.free_inside = now.free_inside = true;
  accio_future* fut;
  ASSERT_EQ(accio_pread_async(f_, buf.data(), buf.size(), 0, &fut), 0);
  ASSERT_EQ(accio_future_on_complete(fut, &c_record, &later), 0);  // fire and forget: freed on the worker
  gate_.open();
  later.wait_calls(1);
  EXPECT_EQ(later.result, 4096);
  ASSERT_EQ(accio_pread_async(f_, buf.data(), buf.size(), 0, &fut), 0);
  ASSERT_EQ(accio_future_wait(fut), 4096);
  ASSERT_EQ(accio_future_on_complete(fut, &c_record, &now), 0);  // freed on this thread, at once
  EXPECT_EQ(now.calls, 1);
}

TEST_F(CFuture, FreeWhileTheCallbackRunsWaitsForIt) {
  base::sys::ops().pread = &gated_pread;  // in flight until registered: the callback runs on a worker
  std::vector<char> buf(4096);
  accio_future* fut;
  ASSERT_EQ(accio_pread_async(f_, buf.data(), buf.size(), 0, &fut), 0);
  Gate entered, release;
  struct Ctx {
    Gate *entered, *release;
    std::atomic<bool> returned{false};
  } ctx{&entered, &release};
  ASSERT_EQ(accio_future_on_complete(
                fut,
                [](accio_future*, int64_t, void* a) {
                  auto* c = static_cast<Ctx*>(a);
                  c->entered->open();
                  c->release->wait();
                  c->returned = true;
                },
                &ctx),
            0);
  gate_.open();
  if (!entered.wait_for(30s)) FAIL() << "callback not called";
  std::thread releaser([&] {
    std::this_thread::sleep_for(20ms);
    release.open();
  });
  accio_future_free(fut);  // waits for the callback: ctx must outlive it
  EXPECT_TRUE(ctx.returned);
  releaser.join();
}

// Many requests from several threads, each callback registered right after submission (racing the
// worker) and freeing its future; every callback runs once with the right count and data.
TEST_F(CFuture, ManyConcurrentFuturesEachCalledOnce) {
  constexpr int kThreads = 4, kPerThread = 300;
  constexpr size_t kSize = 4096;
  std::vector<char> bufs(size_t{kThreads} * kPerThread * kSize);
  std::atomic<int> calls{0}, bad{0};
  std::mutex mu;
  std::condition_variable cv;
  struct Ctx {
    std::atomic<int>*calls, *bad;
    std::mutex* mu;
    std::condition_variable* cv;
  } ctx{&calls, &bad, &mu, &cv};
  auto cb = [](accio_future* fut, int64_t result, void* a) {
    auto* c = static_cast<Ctx*>(a);
    if (result != static_cast<int64_t>(kSize)) c->bad->fetch_add(1);
    accio_future_free(fut);
    std::lock_guard lk(*c->mu);
    c->calls->fetch_add(1);
    c->cv->notify_all();
  };
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const size_t k = size_t{static_cast<size_t>(t)} * kPerThread + i;
        const int64_t off = static_cast<int64_t>((k * kSize) % data_.size());
        accio_future* fut;
        if (accio_pread_async(f_, bufs.data() + k * kSize, kSize, off, &fut) != 0 ||
            accio_future_on_complete(fut, cb, &ctx) != 0)
          bad.fetch_add(1);
      }
    });
  for (auto& t : ts) t.join();
  std::unique_lock lk(mu);
  ASSERT_TRUE(cv.wait_for(lk, 60s, [&] { return calls.load() == kThreads * kPerThread; })) << calls.load();
  EXPECT_EQ(bad.load(), 0);
  for (size_t k = 0; k < size_t{kThreads} * kPerThread; ++k)
    ASSERT_EQ(0, memcmp(bufs.data() + k * kSize, data_.data() + (k * kSize) % data_.size(), kSize)) << k;
}

// ---- the C++ API ----

// A forked child closes a file that had a request in flight at the fork (running in the parent, held
// at the gate): the parent's request never ends in the child, so close() must not wait for it (it
// waited for ever). The child's own requests on the file work; the parent's completes in the parent.
TEST_F(CFuture, AForkedChildClosesAFileWithTheParentsRequestInFlight) {
  base::sys::ops().pread = &gated_pread;
  std::vector<char> buf(65536);
  accio_future* fut;
  ASSERT_EQ(accio_pread_async(f_, buf.data(), buf.size(), 4096, &fut), 0);
  while (g_entered.load() == 0) std::this_thread::yield();  // in flight, held at the gate
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(30);  // a hang fails the test instead of stalling it
    base::sys::ops() = base::sys::real_ops();
    std::vector<char> mine(4096);
    bool ok = accio_pread(f_, mine.data(), mine.size(), 0) == 4096 && memcmp(mine.data(), data_.data(), 4096) == 0;
    ok = ok && accio_future_wait(fut) == -ECANCELED;
    accio_future_free(fut);
    ok = ok && accio_close(f_) == 0;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(accio_future_ready(fut, 0), 0) << "the parent's request is still held";
  gate_.open();
  EXPECT_EQ(accio_future_wait(fut), 65536);
  accio_future_free(fut);
}

// A C++ callback that throws ends the process with its message (it used to escape into the engine
// worker or the registering thread, leaving the future never called back and its free waiting for ever).
TEST_F(CFuture, CppOnCompleteThatThrowsTerminates) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  accio::File f(path_, "r", accio::Settings().set("mechanism", "posix"));
  std::vector<char> buf(4096);
  EXPECT_DEATH(
      {
        // The dying child (this test run again, SetUp and all) never destroys its TempDir: it goes
        // here, the file is open already.
        std::filesystem::remove_all(dir_.path());
        accio::Future fut = f.pread_async(buf.data(), buf.size(), 0);
        fut.get();
        fut.on_complete([](accio::Completion) { throw std::runtime_error("callback threw here"); });
      },
      "callback threw here");
}

}  // namespace

// A mechanism whose batch() throws (its contract says it never does): File::submit must still
// complete each request of the batch, with the error, instead of dropping their promises.
namespace accio::io {
namespace {
class BatchThrows final : public Mechanism {
 public:
  const char* name() const override { return "test_batch_throws"; }
  int rank() const override { return 1; }
  size_t read(const IoContext& c, void* buf, size_t n, uint64_t off) const override {
    return read_full(c.file.fd, buf, n, off, c.file.path);
  }
  void write(const IoContext& c, const void* buf, size_t n, uint64_t off) const override {
    write_full(c.file.fd, buf, n, off, c.file.path);
  }
  size_t batch_limit(const IoContext&, size_t) const override { return 8; }
  void batch(const IoContext& c, BatchItem*, size_t, bool) const override {
    throw base::Error(EIO, "batch", c.file.path, base::kNoOffset, "the test's batch failed");
  }
};
ACCIO_REGISTER_MECHANISM(BatchThrows);
}  // namespace
}  // namespace accio::io

namespace {

TEST_F(CFuture, ABatchThatThrowsFailsEachOfItsRequests) {
  accio_settings* s = accio_settings_new();
  ASSERT_EQ(accio_settings_set(s, "mechanism", "test_batch_throws"), 0) << accio_last_error();
  accio_file* f = nullptr;
  ASSERT_EQ(accio_open(&f, path_.c_str(), "r", s), 0) << accio_last_error();
  accio_settings_free(s);
  std::vector<char> buf(3 * 4096);
  accio_request reqs[3];
  for (int i = 0; i < 3; ++i) reqs[i] = accio_request{buf.data() + i * 4096, 4096, i * 4096};
  accio_future* futs[3] = {};
  ASSERT_EQ(accio_submit(f, ACCIO_OP_READ, reqs, 3, futs), 0) << accio_last_error();
  for (accio_future* fut : futs) {
    EXPECT_EQ(accio_future_ready(fut, 30'000'000'000), 1) << "the request was never completed";
    EXPECT_EQ(accio_future_wait(fut), -EIO);
    EXPECT_NE(std::string(accio_last_error()).find("the test's batch failed"), std::string::npos) << accio_last_error();
  }
  for (accio_future* fut : futs) accio_future_free(fut);
  EXPECT_EQ(accio_close(f), 0);
}

TEST_F(CFuture, CppOnCompleteGetsAValueOrAnError) {
  accio::File f(path_, "r", accio::Settings().set("mechanism", "posix"));
  std::vector<char> buf(4096);
  std::promise<int64_t> got;
  accio::Future fut = f.pread_async(buf.data(), buf.size(), 4096);
  fut.on_complete([&got](accio::Completion c) { got.set_value(static_cast<int64_t>(c.get())); });
  EXPECT_EQ(got.get_future().get(), 4096);
  EXPECT_THROW(fut.on_complete([](accio::Completion) {}), accio::Error);

  base::sys::ops().pread = &failing_pread;
  std::promise<std::string> err;
  accio::Future bad = f.pread_async(buf.data(), buf.size(), 0);
  bad.on_complete([&err](accio::Completion c) {
    try {
      c.get();
      err.set_value("no error");
    } catch (const accio::Error& e) {
      err.set_value(std::to_string(e.errnum()) + " " + e.op() + " " + std::to_string(c.result()));
    }
  });
  EXPECT_EQ(err.get_future().get(), std::to_string(EIO) + " pread " + std::to_string(-EIO));
}

}  // namespace
