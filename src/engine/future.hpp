// accio engine: the future of one request and the promise its worker completes. The worker completes
// it once, with a byte count or an error; any thread may then wait for it and read the outcome, as
// often as it likes. One completion callback may be registered: it runs exactly once, on the thread
// that completes the request (an engine worker: the callback must not block), or at once on the
// registering thread when the request has already completed. A callback must not throw: one that
// does ends the process (std::terminate). Replaces std::future, which has no way
// to be told of completion but to park a thread in get().
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>

namespace accio::engine {

using CompletionFn = void (*)(void* arg);

namespace detail {
struct FutureState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;     // the outcome below is set and never changes again
  bool claimed = false;  // a callback is registered (it runs, or has run, exactly once)
  bool called = false;   // the callback has returned
  size_t value = 0;
  int errnum = 0;        // the error's errno (EIO for an error that is not a base::Error), 0 when none
  std::exception_ptr error;
  CompletionFn fn = nullptr;  // set until the completing thread takes it
  void* arg = nullptr;
  unsigned forks;             // base::fork_count() when the request started (see Future)
  FutureState();
};
}  // namespace detail

// A request started before fork() runs in the parent only: in the child, its future is complete
// with ECANCELED as soon as someone waits or registers a callback (which then runs at once); a
// callback the parent registered never runs there.
class Future {
 public:
  Future() = default;
  bool valid() const { return st_ != nullptr; }
  // Waits; the byte count, or throws the request's error. Any number of calls, from any thread.
  size_t get() const;
  // Waits; the byte count, or -errno of the request's error (what the C API returns).
  int64_t result() const;
  void wait() const;
  bool wait_for(std::chrono::nanoseconds timeout) const;  // true once complete
  // Registers fn(arg), run exactly once when the request completes (see the file's comment). false,
  // with nothing registered, when a callback is registered already.
  bool on_complete(CompletionFn fn, void* arg);
  // Waits until the request has completed and its callback, if one is registered, has returned;
  // returns at once when called from inside that callback. What to wait for before freeing what the
  // callback uses.
  void finish() const;

 private:
  friend class Promise;
  explicit Future(std::shared_ptr<detail::FutureState> st) : st_(std::move(st)) {}
  std::shared_ptr<detail::FutureState> st_;
};

// The worker's side: completes the future once (a second completion is a bug: std::logic_error).
// Copyable, so that a job holding it fits in a std::function.
class Promise {
 public:
  Promise() : st_(std::make_shared<detail::FutureState>()) {}
  Future get_future() const { return Future(st_); }
  void set_value(size_t n);
  void set_error(std::exception_ptr e);  // e.g. std::current_exception()

 private:
  void complete(std::unique_lock<std::mutex> lk);
  std::shared_ptr<detail::FutureState> st_;
};

}  // namespace accio::engine
