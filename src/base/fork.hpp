// accio base: process-wide state that survives fork(). A forked child has one thread; the parent's
// locks may be held there by threads that do not exist in the child, its thread pool has no
// threads, and its io_uring rings are shared with the parent. So each such object lives behind a
// PerProcess<T>: in the child the parent's copy is leaked (never touched again) and a fresh one is
// built on first use.
#pragma once
#include <atomic>

namespace accio::base {

// How many forks led to this process (0 in the one that was started): state recorded under an older
// count belongs to a parent, e.g. work its threads were doing, which never finishes in the child.
unsigned fork_count();

class ForkReset {
 public:
  ForkReset();  // registers itself; the registry is walked in the child right after fork
  ForkReset(const ForkReset&) = delete;
  ForkReset& operator=(const ForkReset&) = delete;
  virtual void reset_in_child() = 0;
  ForkReset* next_ = nullptr;

 protected:
  ~ForkReset() = default;  // PerProcess objects are statics: never destroyed while registered
};

template <class T>
class PerProcess final : public ForkReset {
 public:
  T& get() {
    T* p = p_.load(std::memory_order_acquire);
    if (p) return *p;
    T* fresh = new T;
    if (p_.compare_exchange_strong(p, fresh, std::memory_order_acq_rel)) return *fresh;
    delete fresh;  // another thread won the race; p is its object
    return *p;
  }
  T* operator->() { return &get(); }
  void reset_in_child() override { p_.store(nullptr, std::memory_order_relaxed); }  // leaks the parent's

 private:
  std::atomic<T*> p_{nullptr};
};

}  // namespace accio::base
