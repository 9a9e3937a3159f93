// What a forked child of a busy process can do: a DataLoader's or a multiprocessing pool's workers
// fork while the parent's other threads are inside accio calls, and the child must neither wait for
// a lock one of those threads held at the fork (the thread does not exist there) nor see a table
// half updated. Each child runs under a deadline: a hang fails the test instead of stalling it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "accio/accio.h"
#include "helpers.hpp"

namespace {

// Waits for child pid up to `seconds`; its exit status, or -1 after killing it when it hung.
int reap(pid_t pid, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0 || std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Forks while `busy` parent threads run, until a child (which runs `child` and exits 0 on true)
// hung or failed: at most 400 forks (the old locks hung within a few dozen) or 60 s (a fork takes
// milliseconds on a loaded machine; the deadline is for a slow one). Returns the first bad child's
// status (-1: hung), or 0; *forks says how many were made.
template <class Child>
int fork_until_bad(const Child& child, int* forks) {
  int bad = 0;
  *forks = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (; *forks < 400 && bad == 0 && std::chrono::steady_clock::now() < until; ++*forks) {
    const pid_t pid = fork();
    if (pid < 0) return 128;
    if (pid == 0) _exit(child() ? 0 : 1);
    const int status = reap(pid, 60);
    if (status != 0) bad = status;
  }
  return bad;
}

// accio_host_alloc and accio_host_free in a child forked while other threads allocate and free
// pinned memory: the table of live allocations was guarded by one lock that a parent's thread could
// hold at the fork, and every allocation in the child then waited for ever (accio.pinned_empty in a
// multiprocessing worker, about one fork in forty under a Python loop of pinned_empty). The child
// also frees a buffer the parent allocated before the fork: the table came along whole.
TEST(Fork, AChildAllocatesPinnedMemoryWhileTheParentsThreadsDo) {
  void* before = nullptr;
  int how = 0;
  ASSERT_EQ(accio_host_alloc(4096, &before, &how), 0) << accio_last_error();
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int t = 0; t < 3; ++t)
    busy.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        void* p = nullptr;
        int h = 0;
        if (accio_host_alloc(4096, &p, &h) == 0) accio_host_free(p);
      }
    });
  int forks = 0;
  const int bad = fork_until_bad(
      [&] {
        void* p = nullptr;
        int h = 0;
        bool ok = accio_host_alloc(1 << 16, &p, &h) == 0;
        if (ok) {
          memset(p, 1, 1 << 16);
          ok = accio_host_free(p) == 0;
        }
        return ok && accio_host_free(before) == 0 && accio_host_free(before) == -EINVAL;  // the parent's, once
      },
      &forks);
  stop = true;
  for (auto& t : busy) t.join();
  EXPECT_EQ(bad, 0) << "a child forked while other threads allocated pinned memory " << (bad < 0 ? "hung" : "failed")
                    << " (fork " << forks << ")";
  EXPECT_EQ(accio_host_free(before), 0) << "the parent's table keeps its allocation";
}

// A child forked while other threads make requests on a handle uses that handle: every request
// took the handle's lock twice (begin and end), and a parent's thread that held it at the fork left
// it held for ever in the child, so the child's first request on an inherited handle (a Dataset's
// open file in a DataLoader worker) waited for ever. The child reads, writes and closes it.
TEST(Fork, AChildUsesAHandleTheParentsThreadsAreUsing) {
  testing_accio::TempDir dir;
  const std::string path = dir.file("shared.bin");
  std::vector<char> data(1 << 16);
  std::mt19937_64 rng(27);
  testing_accio::fill_random(data.data(), data.size(), rng);
  accio_settings* s = accio_settings_new();
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(accio_settings_set(s, "mechanism", "posix"), 0);
  accio_file* f = nullptr;
  ASSERT_EQ(accio_open(&f, path.c_str(), "w+", s), 0) << accio_last_error();
  accio_settings_free(s);
  ASSERT_EQ(accio_pwrite(f, data.data(), data.size(), 0), static_cast<int64_t>(data.size())) << accio_last_error();
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int t = 0; t < 3; ++t)
    busy.emplace_back([&] {
      char b[512];
      while (!stop.load(std::memory_order_relaxed)) accio_pread(f, b, sizeof b, 0);
    });
  int forks = 0;
  const int bad = fork_until_bad(
      [&] {
        std::vector<char> b(data.size());
        return accio_pread(f, b.data(), b.size(), 0) == static_cast<int64_t>(b.size()) && b == data &&
               accio_pwrite(f, data.data(), 4096, 0) == 4096 && accio_close(f) == 0;
      },
      &forks);
  stop = true;
  for (auto& t : busy) t.join();
  EXPECT_EQ(bad, 0) << "a child forked while other threads read the handle " << (bad < 0 ? "hung" : "failed")
                    << " (fork " << forks << ")";
  EXPECT_EQ(accio_close(f), 0) << accio_last_error();
}

}  // namespace
