// accio base: the fork registry (see fork.hpp).
#include "base/fork.hpp"

#include <pthread.h>

namespace accio::base {
namespace {
std::atomic<ForkReset*> g_head{nullptr};
std::atomic<unsigned> g_forks{0};

void in_child() {
  g_forks.fetch_add(1, std::memory_order_relaxed);
  for (ForkReset* r = g_head.load(); r; r = r->next_) r->reset_in_child();
}

void install() {
  static const int rc = pthread_atfork(nullptr, nullptr, in_child);  // once
  (void)rc;
}
// Installed at load, so that fork_count() counts with no ForkReset registered yet.
[[maybe_unused]] const bool g_installed = (install(), true);
}  // namespace

unsigned fork_count() { return g_forks.load(std::memory_order_relaxed); }

ForkReset::ForkReset() {
  install();  // a ForkReset constructed before g_installed (static initialisation order)
  ForkReset* head = g_head.load();
  do next_ = head;
  while (!g_head.compare_exchange_weak(head, this));
}

}  // namespace accio::base
