// accio offload: the waiting and socket helpers of the wire format (channel.hpp), used by both
// sides: futex_wait/futex_wake_all on the shared counters, and whole-frame send/recv over a socket
// (the socket transport's frames, the control messages, the worker's fatal-signal handler).
#include "offload/channel.hpp"

#include <linux/futex.h>
#include <poll.h>
#include <sys/socket.h>
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

bool send_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= size_t(w);
  }
  return true;
}

bool recv_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    ssize_t r = ::recv(fd, c, n, MSG_WAITALL);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) {
      pollfd pf{fd, POLLIN, 0};
      if (poll(&pf, 1, 1000) == 0) return false;
      continue;
    }
    if (r <= 0) return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

}  // namespace accio::offload
