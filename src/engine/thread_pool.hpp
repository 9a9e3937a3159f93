// accio engine: the process-wide thread pool. Grows to the largest `threads` setting in use; split
// requests run with the caller taking part, so a request never waits on a helper that has not
// started (no deadlock when pool threads themselves issue split requests).
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "base/fork.hpp"
#include "io/mechanism.hpp"

namespace accio::engine {

class ThreadPool final : public io::TaskRunner {
 public:
  static ThreadPool& shared();
  void ensure(unsigned threads);  // grow to at least `threads` workers
  unsigned size();
  void submit(std::function<void()> job);
  void run(size_t ntasks, unsigned width, const std::function<void(size_t)>& fn) override;

 private:
  friend class base::PerProcess<ThreadPool>;
  ThreadPool() = default;
  void worker();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
};

}  // namespace accio::engine
