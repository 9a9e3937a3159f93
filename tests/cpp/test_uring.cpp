// uring's buffered writes: where the kernel would hand them to io-wq (the RWF_NOWAIT probe answers
// -EAGAIN, as ext4 does), they are written with pwrite in the calling thread. Checks that the bytes
// are right on every path (the probe request, later requests, requests that straddle pieces in
// flight, short and interrupted pwrites), that errors keep their errno and the lowest offset, and
// that on ext4 a handle stops going through the ring after three refused buffered writes.
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/vfs.h>

#include <atomic>
#include <cerrno>
#include <random>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/sys.hpp"
#include "engine/file.hpp"
#include "helpers.hpp"

using namespace accio;
using namespace testing_accio;

namespace {

base::Settings uring(const char* task, unsigned qd) {
  auto s = base::Settings::defaults();
  s.set("mechanism", "uring");
  s.set("task_size", task);
  s.set("queue_depth", std::to_string(qd));
  return s;
}

std::vector<char> contents(const std::string& path, size_t n) {
  auto s = base::Settings::defaults();
  s.set("mechanism", "posix");
  auto f = engine::File::open(path, "r", s);
  std::vector<char> out(n + 1);
  out.resize(f->pread(out.data(), out.size(), 0));
  return out;
}

bool on_ext4(const std::string& dir) {
  struct statfs st {};
  return statfs(dir.c_str(), &st) == 0 && st.f_type == EXT4_SUPER_MAGIC;
}

std::atomic<int> g_pwrites{0};
ssize_t counting_pwrite(int fd, const void* b, size_t n, off_t o) {
  g_pwrites.fetch_add(1);
  return base::sys::real_ops().pwrite(fd, b, n, o);
}
std::atomic<int> g_flaky{0};
ssize_t flaky_pwrite(int fd, const void* b, size_t n, off_t o) {
  const int c = g_flaky.fetch_add(1);
  if (c % 3 == 0) {
    errno = EINTR;
    return -1;
  }
  if (c % 3 == 1 && n > 1) n /= 2;
  return base::sys::real_ops().pwrite(fd, b, n, o);
}

struct RestoreOps {
  ~RestoreOps() { base::sys::ops() = base::sys::real_ops(); }
};

// Small writes at odd offsets, several pieces in flight, on a fresh file and then over it: every
// byte where the reference says, whichever path (ring or inline) each request took.
TEST(UringWrites, SmallBufferedWritesAreByteExact) {
  const char* env = std::getenv("ACCIO_TEST_DIR");
  const std::string user_dir = env ? env : "";
  for (const char* dir : {"", "/dev/shm"}) {  // the test directory (ext4 here), then tmpfs
    if (*dir) setenv("ACCIO_TEST_DIR", dir, 1);
    TempDir d;
    if (env) setenv("ACCIO_TEST_DIR", user_dir.c_str(), 1);
    else unsetenv("ACCIO_TEST_DIR");
    const std::string p = d.file("small");
    std::mt19937_64 rng(19);
    std::vector<char> ref(3 << 20, 0), src(ref.size());
    fill_random(src.data(), src.size(), rng);
    auto f = engine::File::open(p, "w+", uring("4k", 8));
    // Requests of 1 byte .. 96 KiB (up to 24 pieces of 4 KiB, three rounds of the queue).
    for (int i = 0; i < 400; ++i) {
      const size_t n = 1 + rng() % (96 << 10);
      const uint64_t off = rng() % (ref.size() - n);
      ASSERT_EQ(f->pwrite(src.data() + off, n, off), n) << dir;
      std::copy(src.begin() + off, src.begin() + off + n, ref.begin() + off);
    }
    const uint64_t size = f->size();
    ref.resize(size);
    f->close();
    EXPECT_EQ(contents(p, size), ref) << dir;
  }
}

// On ext4 (buffered writes would go to io-wq) the first buffered write finds out, and every later
// one on the handle is pwrite in the caller: one pwrite for a request the size of 256 pieces.
TEST(UringWrites, Ext4BufferedWritesSkipTheRing) {
  TempDir d;
  if (!on_ext4(d.path())) GTEST_SKIP() << d.path() << " is not ext4";
  RestoreOps restore;
  base::sys::ops() = {base::sys::real_ops().pread, &counting_pwrite};
  std::vector<char> src(1 << 20, 'q');
  auto f = engine::File::open(d.file("e"), "w+", uring("4k", 16));
  // -EAGAIN may be passing on other filesystems, so three refused requests in a row make it final;
  // each of them falls back to pwrite on its own.
  for (int i = 0; i < 3; ++i) {
    const int before = g_pwrites.load();
    ASSERT_EQ(f->pwrite(src.data(), src.size(), i * src.size()), src.size());
    EXPECT_GT(g_pwrites.load() - before, 0) << "request " << i << " did not fall back to pwrite";
  }
  const int before = g_pwrites.load();
  ASSERT_EQ(f->pwrite(src.data(), src.size(), 3 * src.size()), src.size());
  EXPECT_EQ(g_pwrites.load() - before, 1) << "the fourth request still went to the ring";
  // A new handle on the same file probes again and ends up the same way.
  auto g = engine::File::open(d.file("e"), "r+", uring("4k", 16));
  for (int i = 0; i < 3; ++i) ASSERT_EQ(g->pwrite(src.data(), 4096, 4096 * i), 4096u);
  const int before_g = g_pwrites.load();
  ASSERT_EQ(g->pwrite(src.data(), 4096, 4096 * 3), 4096u);
  EXPECT_EQ(g_pwrites.load() - before_g, 1);
  // Reads still go through the ring (no pwrite, bytes right).
  std::vector<char> back(2 << 20);
  EXPECT_EQ(g->pread(back.data(), back.size(), 0), back.size());
  EXPECT_EQ(back, std::vector<char>(2 << 20, 'q'));
}

// The inline path retries interrupted and short pwrites like posix.
TEST(UringWrites, InlineWritesRetryShortAndInterrupted) {
  TempDir d;
  RestoreOps restore;
  base::sys::ops() = {base::sys::real_ops().pread, &flaky_pwrite};
  std::mt19937_64 rng(5);
  std::vector<char> src(2 << 20);
  fill_random(src.data(), src.size(), rng);
  auto f = engine::File::open(d.file("f"), "w+", uring("64k", 8));
  ASSERT_EQ(f->pwrite(src.data() + 3, src.size() - 3, 3), src.size() - 3);
  ASSERT_EQ(f->pwrite(src.data(), 3, 0), 3u);
  f->close();
  EXPECT_EQ(contents(d.file("f"), src.size()), src);
}

// An error in the middle of a request names the errno and an offset at or past the failure, and
// nothing before it is lost: RLIMIT_FSIZE stops the file at 1 MiB, on the probe request and after.
TEST(UringWrites, ErrorsKeepErrnoAndOffset) {
  TempDir d;
  std::vector<char> src(3 << 20, 'z');
  {
    FileSizeLimit limit(1 << 20);
    ASSERT_TRUE(limit.ok());
    auto f = engine::File::open(d.file("big"), "w", uring("64k", 8));
    for (int round = 0; round < 2; ++round) {  // the probe request, then the known-inline handle
      try {
        f->pwrite(src.data(), src.size(), 0);
        ADD_FAILURE() << "no error past RLIMIT_FSIZE";
      } catch (const base::Error& e) {
        EXPECT_EQ(e.errnum(), EFBIG) << e.what();
        EXPECT_GE(e.offset(), 1 << 20) << e.what();
        EXPECT_EQ(e.path(), d.file("big"));
      }
      EXPECT_EQ(f->size(), uint64_t{1} << 20);
    }
  }
  EXPECT_EQ(contents(d.file("big"), 1 << 20), std::vector<char>(1 << 20, 'z'));
}

}  // namespace
