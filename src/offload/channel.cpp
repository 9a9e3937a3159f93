// accio offload: futex helpers shared by the host library and the worker.
#include "offload/channel.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

namespace accio::offload {

int futex_wait(uint32_t* word, uint32_t expected, int64_t timeout_ns) {
  timespec ts{}, *tp = nullptr;
  if (timeout_ns >= 0) {
    ts.tv_sec = static_cast<time_t>(timeout_ns / 1000000000);
    ts.tv_nsec = static_cast<long>(timeout_ns % 1000000000);
    tp = &ts;
  }
  long r = syscall(SYS_futex, word, FUTEX_WAIT, expected, tp, nullptr, 0);
  return r == 0 ? 0 : -errno;
}

void futex_wake_all(uint32_t* word) { syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

}  // namespace accio::offload
