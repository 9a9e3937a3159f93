// accio engine: Future and Promise. One mutex per request guards the outcome and the callback slot;
// a callback is taken out of the slot under it by exactly one of the completing and the registering
// thread, and runs outside it, so a callback may wait on, read or free its own future.
#include "engine/future.hpp"

#include <cerrno>
#include <future>
#include <stdexcept>
#include <utility>

#include "base/error.hpp"
#include "base/fork.hpp"

namespace accio::engine {
namespace {

// With st.mu held: a request of the parent's, looked at in a forked child, is complete with
// ECANCELED, and a callback the parent registered is counted as run (it runs in the parent only).
void settle_if_orphaned(detail::FutureState& st) {
  if (st.done || st.forks == base::fork_count()) return;
  st.done = true;
  st.errnum = ECANCELED;
  st.error = std::make_exception_ptr(base::Error(
      ECANCELED, "wait", "", base::kNoOffset, "the request was started before fork() and runs in the parent only"));
  st.fn = nullptr;
  st.called = st.claimed;  // one the child registers later runs at once (on_complete)
}

// The future whose callback this thread is running (finish() must not wait for itself).
thread_local const detail::FutureState* t_calling = nullptr;

// noexcept: a callback that throws ends the process (std::terminate) where it threw, instead of
// leaving its future never called back (finish() would wait for ever) and unwinding a worker.
void run_callback(detail::FutureState& st, CompletionFn fn, void* arg) noexcept {
  const detail::FutureState* outer = std::exchange(t_calling, &st);  // a callback may complete another
  fn(arg);
  t_calling = outer;
  {
    std::lock_guard lk(st.mu);
    st.called = true;
  }
  st.cv.notify_all();
}

detail::FutureState& state(const std::shared_ptr<detail::FutureState>& st) {
  if (!st) throw std::future_error(std::future_errc::no_state);
  return *st;
}

}  // namespace

detail::FutureState::FutureState() : forks(base::fork_count()) {}

void Future::wait() const {
  detail::FutureState& st = state(st_);
  std::unique_lock lk(st.mu);
  settle_if_orphaned(st);
  st.cv.wait(lk, [&] { return st.done; });
}

bool Future::wait_for(std::chrono::nanoseconds timeout) const {
  // INT64_MAX ns, the idiom for "forever" (Fortran's huge(0)), overflowed now() + timeout into the
  // past in libstdc++: "not done" at once. Anything past a century is forever.
  if (timeout > std::chrono::hours(24 * 365 * 100)) {
    wait();
    return true;
  }
  detail::FutureState& st = state(st_);
  std::unique_lock lk(st.mu);
  settle_if_orphaned(st);
  return st.cv.wait_for(lk, timeout, [&] { return st.done; });
}

// The outcome never changes once done is set under the mutex, so it is read without it after wait().
size_t Future::get() const {
  wait();
  if (st_->error) std::rethrow_exception(st_->error);
  return st_->value;
}

int64_t Future::result() const {
  wait();
  return st_->errnum ? -static_cast<int64_t>(st_->errnum) : static_cast<int64_t>(st_->value);
}

bool Future::on_complete(CompletionFn fn, void* arg) {
  detail::FutureState& st = state(st_);
  std::unique_lock lk(st.mu);
  if (st.claimed) return false;
  settle_if_orphaned(st);  // a parent's request in a forked child: called back now, with ECANCELED
  st.claimed = true;
  if (!st.done) {  // the completing thread runs it
    st.fn = fn;
    st.arg = arg;
    return true;
  }
  lk.unlock();
  const std::shared_ptr<detail::FutureState> keep = st_;  // the callback may destroy this Future
  run_callback(*keep, fn, arg);
  return true;
}

void Future::finish() const {
  detail::FutureState& st = state(st_);
  std::unique_lock lk(st.mu);
  settle_if_orphaned(st);
  st.cv.wait(lk, [&] { return st.done && (!st.claimed || st.called || t_calling == &st); });
}

void Promise::set_value(size_t n) {
  std::unique_lock lk(st_->mu);
  if (st_->done) throw std::logic_error("accio: a request was completed twice");
  st_->value = n;
  complete(std::move(lk));
}

void Promise::set_error(std::exception_ptr e) {
  int errnum = EIO;
  try {
    std::rethrow_exception(e);
  } catch (const base::Error& x) {
    if (x.errnum() > 0) errnum = x.errnum();
  } catch (...) {
  }
  std::unique_lock lk(st_->mu);
  if (st_->done) throw std::logic_error("accio: a request was completed twice");
  st_->error = std::move(e);
  st_->errnum = errnum;
  complete(std::move(lk));
}

// Called with the mutex held and the outcome set: publishes it, runs the callback when one was
// registered before (a later one runs in its registering thread instead), and wakes the waiters.
// They are woken once, after the callback (which must be prompt): a waiter that goes on to free the
// future then need not wait for the callback again (a thread switch on a small machine). The
// outcome is visible to anyone who looks before that (done is checked before sleeping).
void Promise::complete(std::unique_lock<std::mutex> lk) {
  detail::FutureState& st = *st_;  // this promise's reference keeps the state alive throughout
  st.done = true;
  const CompletionFn fn = std::exchange(st.fn, nullptr);
  void* const arg = st.arg;
  lk.unlock();
  if (fn)
    run_callback(st, fn, arg);  // notifies
  else
    st.cv.notify_all();
}

}  // namespace accio::engine
