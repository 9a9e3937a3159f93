// accio engine: thread pool implementation.
#include "engine/thread_pool.hpp"

#include <atomic>
#include <memory>

#include "base/fork.hpp"
#include "base/sys.hpp"

namespace accio::engine {

ThreadPool& ThreadPool::shared() {
  // Never destroyed (workers may be mid-request at exit); a forked child gets a new, empty pool.
  static base::PerProcess<ThreadPool> pool;
  return pool.get();
}

void ThreadPool::ensure(unsigned n) {
  std::lock_guard lk(mu_);
  while (threads_.size() < n) {
    threads_.push_back(base::sys::quiet_thread([this] { worker(); }));
    threads_.back().detach();
  }
}

unsigned ThreadPool::size() {
  std::lock_guard lk(mu_);
  return static_cast<unsigned>(threads_.size());
}

void ThreadPool::submit(std::function<void()> job) {
  {
    std::lock_guard lk(mu_);
    if (threads_.empty()) {
      threads_.push_back(base::sys::quiet_thread([this] { worker(); }));
      threads_.back().detach();
    }
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void ThreadPool::worker() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return !jobs_.empty(); });
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

namespace {
struct SplitState {
  std::function<void(size_t)> fn;
  size_t ntasks;
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::mutex mu;
  std::condition_variable cv;

  // Claims and runs tasks until none are left.
  void drain() {
    for (size_t i; (i = next.fetch_add(1)) < ntasks;) {
      fn(i);
      if (done.fetch_add(1) + 1 == ntasks) {
        std::lock_guard lk(mu);
        cv.notify_all();
      }
    }
  }
};
}  // namespace

void ThreadPool::run(size_t ntasks, unsigned width, const std::function<void(size_t)>& fn) {
  if (ntasks == 0) return;
  if (ntasks == 1 || width <= 1) {
    for (size_t i = 0; i < ntasks; ++i) fn(i);
    return;
  }
  auto st = std::make_shared<SplitState>();
  st->fn = fn;
  st->ntasks = ntasks;
  const size_t helpers = std::min<size_t>(width, ntasks) - 1;
  ensure(static_cast<unsigned>(helpers));
  for (size_t h = 0; h < helpers; ++h) submit([st] { st->drain(); });
  st->drain();
  std::unique_lock lk(st->mu);
  st->cv.wait(lk, [&] { return st->done.load() == ntasks; });
}

}  // namespace accio::engine
