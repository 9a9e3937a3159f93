// accio base: the fork registry (see fork.hpp).
#include "base/fork.hpp"

#include <pthread.h>

namespace accio::base {
namespace {
std::atomic<ForkReset*> g_head{nullptr};

void in_child() {
  for (ForkReset* r = g_head.load(); r; r = r->next_) r->reset_in_child();
}

bool install() {
  pthread_atfork(nullptr, nullptr, in_child);
  return true;
}
}  // namespace

ForkReset::ForkReset() {
  static const bool installed = install();
  (void)installed;
  ForkReset* head = g_head.load();
  do next_ = head;
  while (!g_head.compare_exchange_weak(head, this));
}

}  // namespace accio::base
