// uring's buffered writes: where the kernel would hand them to io-wq (the RWF_NOWAIT probe answers
// -EAGAIN, as ext4 does), they are written with pwrite in the calling thread. Checks that the bytes
// are right on every path (the probe request, later requests, requests that straddle pieces in
// flight, short and interrupted pwrites), that errors keep their errno and the lowest offset, and
// that on ext4 a handle stops going through the ring after three refused buffered writes, and that
// the inline pwrites are the ring's pieces (task_size each), not one pwrite per request.
// uring's O_DIRECT side submits a queue in two halves (two io_uring_enter calls, so that the block
// layer cannot merge the whole queue into one device request): every queue depth, odd and even,
// moves the same bytes as posix, with unaligned heads, tails and buffers, reads across end of file,
// and an error in the second half keeps its errno and offset.
#include <fcntl.h>
#include <sys/mman.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/vfs.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/sys.hpp"
#include "engine/file.hpp"
#include "helpers.hpp"
#include "mem/staging.hpp"

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

// Every pwrite of the inline path since reset(): (offset, length), in call order.
struct PwriteLog {
  static std::mutex mu;
  static std::vector<std::pair<uint64_t, size_t>> calls;
  static ssize_t pwrite(int fd, const void* b, size_t n, off_t o) {
    {
      std::lock_guard lk(mu);
      calls.emplace_back(static_cast<uint64_t>(o), n);
    }
    return base::sys::real_ops().pwrite(fd, b, n, o);
  }
  static std::vector<std::pair<uint64_t, size_t>> take() {
    std::lock_guard lk(mu);
    return std::exchange(calls, {});
  }
};
std::mutex PwriteLog::mu;
std::vector<std::pair<uint64_t, size_t>> PwriteLog::calls;

// The pieces the ring cuts [off, off+n) into: `step` bytes from off, the last one shorter.
std::vector<std::pair<uint64_t, size_t>> pieces(uint64_t off, size_t n, size_t step) {
  std::vector<std::pair<uint64_t, size_t>> out;
  for (uint64_t at = off; at < off + n; at += step) out.emplace_back(at, std::min<uint64_t>(step, off + n - at));
  return out;
}

// SQEs this process's io_uring instances have taken (the kernel's SqTail of each, /proc/self/fdinfo);
// -1 if the kernel does not show them.
int64_t ring_sqes() {
  int64_t total = 0;
  bool seen = false;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(e.path(), ec).string() != "anon_inode:[io_uring]") continue;
    std::ifstream info("/proc/self/fdinfo/" + e.path().filename().string());
    for (std::string line; std::getline(info, line);)
      if (line.rfind("SqTail:", 0) == 0) {
        total += std::stoll(line.substr(7));
        seen = true;
      }
  }
  return seen ? total : -1;
}

// On ext4 (buffered writes would go to io-wq) the first buffered write finds out, and every later
// one on the handle is pwrite in the caller without the ring. Either way the pwrites are the ring's
// pieces (task_size each, from the request's offset), never one pwrite for a request of many
// pieces: one 1 GiB pwrite to a fresh file ran at a sixth of fio's speed half the time (issue 19).
TEST(UringWrites, Ext4BufferedWritesSkipTheRingPieceByPiece) {
  TempDir d;
  if (!on_ext4(d.path())) GTEST_SKIP() << d.path() << " is not ext4";
  RestoreOps restore;
  base::sys::ops() = {base::sys::real_ops().pread, &PwriteLog::pwrite};
  std::vector<char> src(1 << 20, 'q');
  auto f = engine::File::open(d.file("e"), "w+", uring("4k", 16));
  PwriteLog::take();
  // -EAGAIN may be passing on other filesystems, so three refused requests in a row make it final;
  // each of them falls back to pwrite on its own. The requests start 100 bytes into a piece.
  for (int i = 0; i < 3; ++i) {
    const uint64_t off = i * src.size() + 100;
    ASSERT_EQ(f->pwrite(src.data(), src.size(), off), src.size());
    EXPECT_EQ(PwriteLog::take(), pieces(off, src.size(), 4096)) << "request " << i;
  }
  const int64_t sqes = ring_sqes();
  const uint64_t off = 3 * src.size() + 100;
  ASSERT_EQ(f->pwrite(src.data(), src.size(), off), src.size());
  EXPECT_EQ(PwriteLog::take(), pieces(off, src.size(), 4096)) << "the fourth request";
  if (sqes >= 0) {
    EXPECT_EQ(ring_sqes(), sqes) << "the fourth request still went to the ring";
  }
  // A new handle on the same file probes again and ends up the same way.
  auto g = engine::File::open(d.file("e"), "r+", uring("64k", 16));
  for (int i = 0; i < 3; ++i) ASSERT_EQ(g->pwrite(src.data(), 4096, 4096 * i), 4096u);
  PwriteLog::take();
  const int64_t sqes_g = ring_sqes();
  ASSERT_EQ(g->pwrite(src.data(), src.size(), 3 << 20), src.size());
  EXPECT_EQ(PwriteLog::take(), pieces(3 << 20, src.size(), 64 << 10));
  if (sqes_g >= 0) {
    EXPECT_EQ(ring_sqes(), sqes_g);
  }
  // Reads still go through the ring (no pwrite, bytes right).
  std::vector<char> back(src.size() * 4 + 100);
  EXPECT_EQ(g->pread(back.data(), back.size(), 0), back.size());
  EXPECT_TRUE(PwriteLog::take().empty());
  if (sqes_g >= 0) {
    EXPECT_GT(ring_sqes(), sqes_g);
  }
  EXPECT_EQ(back, std::vector<char>(back.size(), 'q'));
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

bool direct_ok(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0644);
  if (fd < 0) return false;
  close(fd);
  unlink(path.c_str());
  return true;
}

base::Settings uring_direct(const char* task, unsigned qd) {
  auto s = uring(task, qd);
  s.set("direct", "on");
  s.set("buffer_size", "64k");
  s.set("buffer_count", "4");
  return s;
}

// Writes and reads of a whole queue and more (3 MiB and 1.5 queue of pieces), at every queue depth
// from 1 (nothing to split) through odd depths (halves of 2 and 3 pieces) to 16, with aligned and
// unaligned file offsets and user buffers (unaligned pieces go through the staging buffers).
TEST(UringDirect, HalfQueueSubmissionIsByteExact) {
  TempDir d;
  if (!direct_ok(d.file("probe"))) GTEST_SKIP() << d.path() << " does not take O_DIRECT";
  std::mt19937_64 rng(64);
  const size_t kSize = (3 << 20) + 12345;
  Buffer src(kSize + 4096), back(kSize + 8192);
  fill_random(src.data(), kSize + 4096, rng);
  for (const char* task : {"4k", "64k"}) {
    for (unsigned qd : {1u, 2u, 3u, 5u, 16u}) {
      for (size_t shift : {size_t{0}, size_t{1000}}) {  // file offset and buffer misalignment
        SCOPED_TRACE(std::string("task ") + task + " qd " + std::to_string(qd) + " shift " + std::to_string(shift));
        const std::string p = d.file(std::string("f") + task + std::to_string(qd) + "_" + std::to_string(shift));
        const size_t n = kSize - shift;
        {
          auto f = engine::File::open(p, "w+", uring_direct(task, qd));
          ASSERT_EQ(f->pwrite(src.data(shift), n, shift), n);
          ASSERT_EQ(f->pwrite(src.data(), shift, 0), shift);
          // A whole-file read, then one from past the middle across end of file.
          ASSERT_EQ(f->pread(back.data(shift), kSize + 4096, 0), kSize);
          ASSERT_EQ(std::memcmp(back.data(shift), src.data(), kSize), 0);
          const size_t mid = kSize / 2 + shift;
          ASSERT_EQ(f->pread(back.data(), kSize, mid), kSize - mid);
          ASSERT_EQ(std::memcmp(back.data(), src.data(mid), kSize - mid), 0);
        }
        ASSERT_EQ(contents(p, kSize), std::vector<char>(src.data(), src.data() + kSize));
      }
    }
  }
}

// RLIMIT_FSIZE stops an O_DIRECT write at 576 KiB, the second piece of the first queue's second
// half (16 pieces of 64 KiB, halves of 8): EFBIG at the limit, every byte before it on disk.
TEST(UringDirect, ErrorInTheSecondHalfKeepsErrnoAndOffset) {
  TempDir d;
  if (!direct_ok(d.file("probe"))) GTEST_SKIP() << d.path() << " does not take O_DIRECT";
  const uint64_t limit = 9 * (64 << 10);
  Buffer src(4 << 20);
  std::memset(src.data(), 'd', 4 << 20);
  {
    FileSizeLimit lim(limit);
    ASSERT_TRUE(lim.ok());
    auto f = engine::File::open(d.file("big"), "w", uring_direct("64k", 16));
    try {
      f->pwrite(src.data(), 4 << 20, 0);
      ADD_FAILURE() << "no error past RLIMIT_FSIZE";
    } catch (const base::Error& e) {
      EXPECT_EQ(e.errnum(), EFBIG) << e.what();
      EXPECT_EQ(e.offset(), static_cast<int64_t>(limit)) << e.what();
      EXPECT_EQ(e.path(), d.file("big"));
    }
    EXPECT_EQ(f->size(), limit);
  }
  EXPECT_EQ(contents(d.file("big"), limit), std::vector<char>(limit, 'd'));
}

}  // namespace

// realign: a buffered read into a buffer misaligned against the file offset goes through the staging
// buffers where the page cache holds it, as posix's does through its aligned buffer: a cold request
// goes straight into the buffer; one whose middle was evicted (head and tail cached) finds out from
// RWF_NOWAIT piece by piece (a piece cut short at the evicted part, then -EAGAIN) and reads the rest
// straight; a file that takes no RWF_NOWAIT (tmpfs, in /dev/shm where it is one) is realigned piece
// by piece without it. Byte for byte each time; the staging pool's leases say which path was taken.
namespace {
// Which of the file's pages the page cache holds (mincore).
std::vector<unsigned char> cached_pages(const std::string& path, size_t n) {
  std::vector<unsigned char> vec((n + 4095) / 4096);
  const int fd = ::open(path.c_str(), O_RDONLY);
  void* m = fd >= 0 ? mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (m != MAP_FAILED) {
    if (mincore(m, n, vec.data()) != 0) vec.clear();
    munmap(m, n);
  } else {
    vec.clear();
  }
  if (fd >= 0) ::close(fd);
  return vec;
}

void drop_pages(const std::string& path, off_t off, off_t len) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  fdatasync(fd);  // dirty pages are not dropped
  posix_fadvise(fd, off, len, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void realigned_reads(const std::string& dir) {
  SCOPED_TRACE(dir);
  const std::string path = dir + "/r";
  std::mt19937_64 rng(65);
  const size_t kSize = (6 << 20) + 5;
  Buffer src(kSize), back(kSize + 64);
  fill_random(src.data(), kSize, rng);
  {
    std::ofstream(path, std::ios::binary).write(src.data(), static_cast<std::streamsize>(kSize));
  }
  auto settings = [](const char* realign) {
    auto s = uring("1m", 4);
    s.set("realign", realign);
    return s;
  };
  const auto s_on = settings("on");
  // Held by the test, so it is the pool the reads use (an idle one could be freed and made again).
  const auto pool_ref = mem::StagingPool::shared(s_on.buffer_size, s_on.buffer_count, s_on.huge_pages);
  mem::StagingPool& pool = *pool_ref;
  auto read = [&](const char* realign, size_t shift, uint64_t off) {
    auto f = engine::File::open(path, "r", settings(realign));
    std::memset(back.data(), 0, kSize + 64);
    const uint64_t before = pool.leases();
    EXPECT_EQ(f->pread(back.data(shift), kSize + 64, off), kSize - off);  // across end of file
    EXPECT_EQ(std::memcmp(back.data(shift), src.data(off), kSize - off), 0) << realign << " " << shift << " " << off;
    return pool.leases() - before;
  };
  (void)contents(path, kSize);  // hot
  // 24 bytes off the file offset: pieces of 1 MiB through staging buffers, the last 5 bytes too
  EXPECT_EQ(read("on", 24, 0), 7u);
  EXPECT_EQ(read("on", 24 + 100, 100), 7u) << "from offset 100: 1 MiB pieces, each at its page offset";
  EXPECT_EQ(read("off", 24, 0), 0u) << "realign=off: straight into the buffer";
  EXPECT_EQ(read("on", 32, 0), 0u) << "32 bytes off reads at full speed: nothing to realign";
  EXPECT_EQ(read("on", 0, 4096), 0u);
  // Other threads hold the whole pool: the request reads straight rather than wait for them (it
  // used to wait in acquire(), for as long as they held it).
  {
    std::vector<unsigned> held;
    for (unsigned i = 0; i < pool.count(); ++i) held.push_back(pool.acquire());
    auto pending = std::async(std::launch::async, [&] { return read("on", 24, 0); });
    const bool done = pending.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    EXPECT_TRUE(done) << "the read waited for buffers other threads hold";
    if (done) {
      EXPECT_EQ(pending.get(), 0u) << "no staging buffer was free: straight";
    }
    for (unsigned b : held) pool.release(b);
  }
  // The middle evicted (2-4 MiB: whole large folios, which ext4 may use), head and tail (the last
  // 32 KiB, which the cachestat sample reads) cached:
  // realigned until the piece from 1 MiB + 100 comes back short at 2 MiB, then -EAGAIN (what came
  // is copied on, the rest of that piece read straight), straight afterwards.
  drop_pages(path, 2 << 20, 2 << 20);
  const auto mid = cached_pages(path, kSize);
  if (!mid.empty() && (mid[0] & 1) && (mid.back() & 1) && !(mid[(2 << 20) / 4096] & 1)) {
    const uint64_t n = read("on", 24 + 100, 100);
    EXPECT_GE(n, 2u) << "the cached head went through staging";
    EXPECT_LE(n, 4u) << "at most a queue of pieces before the rest went straight";
  } else {
    std::cerr << "note: " << dir << " kept 2-4 MiB cached after POSIX_FADV_DONTNEED: the evicted-middle case is not "
              << "checked here\n";
  }
  // Cold: straight from the start where cachestat can tell (else the first queue finds out).
  drop_pages(path, 0, 0);
  const auto cold = cached_pages(path, kSize);
  if (!cold.empty() && !(cold[0] & 1)) {
    const uint64_t n = read("on", 24, 0);
    EXPECT_EQ(n, 0u) << "a cold request goes straight (cachestat, or mincore without it, says so)";
  } else {
    std::cerr << "note: " << dir << " kept the file cached after POSIX_FADV_DONTNEED (tmpfs): the cold case is "
              << "not checked here\n";
  }
}
}  // namespace

TEST(UringReads, RealignedReadsGoThroughStagingWhereCached) {
  TempDir d;
  realigned_reads(d.path());
  struct statfs st {};
  if (statfs("/dev/shm", &st) == 0 && st.f_type == TMPFS_MAGIC && access("/dev/shm", W_OK) == 0) {
    char tmpl[] = "/dev/shm/accio-test-XXXXXX";
    if (mkdtemp(tmpl)) {
      // tmpfs answers RWF_NOWAIT with -EOPNOTSUPP (6.18 does): the hot reads' 7 leases each show the
      // pieces realigned without it, where stopping at the refusal gave 4 (one queue)
      realigned_reads(tmpl);
      std::error_code ec;
      std::filesystem::remove_all(tmpl, ec);
    }
  }
}

namespace {
// The descriptors of io_uring instances in this process (/proc/self/fd links "anon_inode:[io_uring]").
std::vector<int> ring_fds() {
  std::vector<int> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto to = std::filesystem::read_symlink(e.path(), ec);
    if (!ec && to.string().find("io_uring") != std::string::npos) out.push_back(std::stoi(e.path().filename()));
  }
  return out;
}
}  // namespace

// A program that closes every descriptor it does not know (a daemon's loop, closefrom) closes the
// ring's too. The request that finds it gone fails (the shim redoes it with libc) instead of
// waiting for ever, at 100% CPU, for pieces the kernel never took; the next request gets a new
// ring. Once with the ring's number left free, once with it taken by another file (EOPNOTSUPP).
// Shim audit, session 24.
TEST(UringRings, ARingClosedBehindTheEnginesBackFailsItsRequestAndIsReplaced) {
  TempDir d;
  std::vector<char> src(4 << 20);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 7 + 3);
  std::ofstream(d.file("in"), std::ios::binary).write(src.data(), static_cast<std::streamsize>(src.size()));
  for (bool reuse : {false, true}) {
    auto f = engine::File::open(d.file("in"), "r", uring("256k", 8));
    std::vector<char> got(src.size());
    ASSERT_EQ(f->pread(got.data(), got.size(), 0), got.size());  // the ring exists now
    const auto rings = ring_fds();
    ASSERT_FALSE(rings.empty());
    for (int fd : rings) close(fd);
    std::vector<int> taken;
    if (reuse)
      for (size_t i = 0; i < rings.size(); ++i) taken.push_back(open(d.file("in").c_str(), O_RDONLY));
    auto done = std::async(std::launch::async, [&] {
      try {
        f->pread(got.data(), got.size(), 0);
        return std::string("served");
      } catch (const base::Error& e) {
        return std::string("error: ") + e.what();
      }
    });
    ASSERT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "the request never ended";
    const std::string what = done.get();
    EXPECT_NE(what.find("error: io_uring read"), std::string::npos) << what;
    std::fill(got.begin(), got.end(), 0);
    EXPECT_EQ(f->pread(got.data(), got.size(), 0), got.size());  // a new ring
    EXPECT_EQ(got, src);
    for (int fd : taken) close(fd);
  }
}
