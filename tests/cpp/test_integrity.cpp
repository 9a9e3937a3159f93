// Data integrity of the host mechanisms against the plain calls: what a write that fails leaves in
// the file and where it says it failed (as pwrite would: every byte before the reported offset
// written), and offsets past 2^31 and 2^32.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <cerrno>
#include <ostream>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "engine/file.hpp"
#include "configs.hpp"
#include "helpers.hpp"

using namespace accio;
using namespace testing_accio;

namespace {
constexpr uint64_t M = 1 << 20;

const std::vector<Config> kConfigs = {
    {"posix", {{"mechanism", "posix"}}},
    {"parallel", {{"mechanism", "parallel"}, {"threads", "3"}, {"task_size", "256k"}}},
    {"direct", {{"mechanism", "direct"}, {"threads", "3"}, {"task_size", "256k"}, {"buffer_size", "256k"}}},
    {"uring", {{"mechanism", "uring"}, {"queue_depth", "4"}, {"task_size", "256k"}, {"buffer_size", "256k"}}},
    {"uring_direct",
     {{"mechanism", "uring"}, {"direct", "on"}, {"queue_depth", "4"}, {"task_size", "256k"}, {"buffer_size", "256k"}}},
    {"auto", {{"mechanism", "auto"}, {"threads", "3"}}},
};

class Integrity : public ::testing::TestWithParam<Config> {};

// A write that runs into RLIMIT_FSIZE stops where pwrite stops: the limit is reported as the offset
// that failed with EFBIG, the file holds every byte of the request before it and ends there. The
// limits include one that is not a multiple of the O_DIRECT alignment (the kernel then takes an
// O_DIRECT write short, to the limit: a short write, not the end of anything) and requests with
// unaligned heads and tails.
TEST_P(Integrity, AWriteStoppedByTheFileSizeLimitEndsWherePwriteWould) {
  const Config& cfg = GetParam();
  TempDir dir;
  std::mt19937_64 rng(11);
  std::vector<char> src(3 * M);
  fill_random(src.data(), src.size(), rng);
  struct Case {
    rlim_t limit;
    uint64_t off;
    size_t n;
  };
  for (const Case& c : {Case{M + 512, 0, 3 * M}, Case{M, 1, 3 * M - 5}, Case{M + 512, 4096 + 7, 3 * M - 4096 - 100},
                        Case{2 * M + 100, 3, 3 * M - 3}, Case{M + 512, M, M / 4}, Case{M + 512, M - 4096, M / 2}}) {
    SCOPED_TRACE(std::string(cfg.name) + " limit " + std::to_string(c.limit) + " write of " + std::to_string(c.n) +
                 " at " + std::to_string(c.off));
    const std::string path = dir.file("limit");
    ::unlink(path.c_str());
    int err = 0;
    int64_t at = -2;
    {
      auto f = engine::File::open(path, "w+", make_settings(cfg));
      FileSizeLimit limit(c.limit);
      ASSERT_TRUE(limit.ok());
      try {
        f->pwrite(src.data() + c.off, c.n, c.off);
      } catch (const base::Error& e) {
        err = e.errnum();
        at = e.offset();
      }
    }
    EXPECT_EQ(err, EFBIG) << "the write reported success or another error";
    EXPECT_EQ(at, static_cast<int64_t>(c.limit)) << "the offset reported is not where the write stopped";
    const std::vector<char> got = file_bytes(path);
    EXPECT_EQ(got.size(), c.limit) << "the file does not end at the limit";
    if (got.size() != c.limit) continue;
    EXPECT_TRUE(std::all_of(got.begin(), got.begin() + static_cast<ptrdiff_t>(c.off), [](char b) { return b == 0; }));
    EXPECT_TRUE(std::equal(got.begin() + static_cast<ptrdiff_t>(c.off), got.end(), src.begin() + static_cast<ptrdiff_t>(c.off)))
        << "bytes before the limit were not written";
  }
}

// A write that runs out of room (a 1 MiB tmpfs) reports ENOSPC at the lowest byte it could not
// write, every byte of the request before it in the file (bytes after it may be there too: pieces
// are written side by side).
TEST_P(Integrity, AWriteOutOfRoomHasEveryByteBeforeTheReportedOffset) {
  const Config& cfg = GetParam();
  TempDir dir;
  if (mount("tmpfs", dir.path().c_str(), "tmpfs", 0, "size=1m") != 0) GTEST_SKIP() << "cannot mount a tmpfs here";
  struct Unmount {
    std::string p;
    ~Unmount() { umount2(p.c_str(), MNT_DETACH); }
  } um{dir.path()};
  std::mt19937_64 rng(13);
  std::vector<char> src(3 * M);
  fill_random(src.data(), src.size(), rng);
  for (const uint64_t off : {uint64_t{0}, uint64_t{1}, uint64_t{4096 + 7}}) {
    SCOPED_TRACE(std::string(cfg.name) + " write at " + std::to_string(off));
    const std::string path = dir.file("full");
    ::unlink(path.c_str());
    int err = 0;
    int64_t at = -2;
    {
      auto f = engine::File::open(path, "w+", make_settings(cfg));
      try {
        f->pwrite(src.data() + off, src.size() - off, off);
      } catch (const base::Error& e) {
        err = e.errnum();
        at = e.offset();
      }
    }
    EXPECT_EQ(err, ENOSPC) << "the write reported success or another error";
    const std::vector<char> got = file_bytes(path);
    ASSERT_GE(at, static_cast<int64_t>(off));
    ASSERT_LE(static_cast<size_t>(at), got.size()) << "the file ends before the offset reported";
    EXPECT_TRUE(std::equal(got.begin() + static_cast<ptrdiff_t>(off), got.begin() + at, src.begin() + static_cast<ptrdiff_t>(off)))
        << "bytes before the offset reported were not written";
  }
}

// Offsets at and across 2^31 and 2^32 (a sparse file): the same bytes as pwrite and pread, and
// reads that start at or past the end read nothing.
TEST_P(Integrity, OffsetsAcross2To31And2To32) {
  const Config& cfg = GetParam();
  TempDir dir;
  const std::string path = dir.file("big");
  auto f = engine::File::open(path, "w+", make_settings(cfg));
  std::mt19937_64 rng(12);
  Buffer src(3 * M), dst(3 * M + 8192);
  const uint64_t G = uint64_t{1} << 30;
  struct Case {
    uint64_t off;
    size_t n;
    size_t shift;
  };
  for (const Case& c : {Case{2 * G - 4096 - 3, M + 77, 0}, Case{2 * G - 1, 2, 5}, Case{4 * G - M - 1, 2 * M + 3, 1},
                        Case{4 * G, 3 * M, 0}, Case{4 * G + 5 * M + 11, M, 7}}) {
    SCOPED_TRACE(std::string(cfg.name) + ": " + std::to_string(c.n) + " bytes at " + std::to_string(c.off));
    fill_random(src.data(c.shift), c.n, rng);
    ASSERT_EQ(f->pwrite(src.data(c.shift), c.n, c.off), c.n);
    std::vector<char> plain(c.n);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pread(fd, plain.data(), c.n, static_cast<off_t>(c.off)), static_cast<ssize_t>(c.n));
    ::close(fd);
    EXPECT_TRUE(std::equal(plain.begin(), plain.end(), src.data(c.shift)));
    ASSERT_EQ(f->pread(dst.data(c.shift + 1), c.n, c.off), c.n);
    EXPECT_TRUE(std::equal(plain.begin(), plain.end(), dst.data(c.shift + 1)));
  }
  const uint64_t end = f->size();
  EXPECT_EQ(end, 4 * G + 6 * M + 11);
  EXPECT_EQ(f->pread(dst.data(), 4096, end), 0u);
  EXPECT_EQ(f->pread(dst.data(), 4096, end + 1), 0u);
  EXPECT_EQ(f->pread(dst.data(), 4096, end + 8 * G), 0u);
  EXPECT_EQ(f->pread(dst.data(3), 3 * M, end - M - 5), M + 5);
  EXPECT_EQ(f->pread(dst.data(), 0, end + 1), 0u);
  EXPECT_EQ(f->pwrite(src.data(), 0, end + G), 0u);  // writes nothing, and does not move the end
  EXPECT_EQ(f->size(), end);
}

// A read across the end of the file changes no byte of the buffer after its count, as pread leaves
// them: the O_DIRECT reads (direct, uring with direct=on, auto's plans for cold ranges) went straight
// into an aligned buffer past the end, where the kernel fills it with zeros to the end of the request
// (shim audit, session 27: a 16 MiB read of an 8 MiB file zeroed the other 8 MiB). A file that grows
// after the read began is read to its new end through the buffered descriptor.
TEST_P(Integrity, AReadAcrossTheEndChangesNoByteAfterItsCount) {
  const Config& cfg = GetParam();
  TempDir dir;
  const std::string path = dir.file("short");
  std::mt19937_64 rng(13);
  Buffer src(6 * M), dst(16 * M);
  fill_random(src.data(), 6 * M, rng);
  for (const uint64_t size : {5 * M + 100, 4 * M, 4 * M + 4096 * 3}) {
    auto f = engine::File::open(path, "w+", make_settings(cfg));
    ASSERT_EQ(f->pwrite(src.data(), size, 0), size);
    ::posix_fadvise(f->fd(), 0, 0, POSIX_FADV_DONTNEED);  // cold: auto's plans for cold ranges too
    for (const uint64_t off : {uint64_t{0}, uint64_t{4096}, uint64_t{M + 1}, size - 1, size, size + 4096}) {
      SCOPED_TRACE(std::string(cfg.name) + ": size " + std::to_string(size) + ", 12 MiB at " + std::to_string(off));
      std::memset(dst.data(), 'x', 16 * M);
      const size_t want = off >= size ? 0 : static_cast<size_t>(size - off);
      ASSERT_EQ(f->pread(dst.data(), 12 * M, off), want);
      EXPECT_TRUE(std::equal(dst.data(), dst.data() + want, src.data() + off));
      EXPECT_EQ(std::count(dst.data() + want, dst.data() + 16 * M, 'x'), static_cast<std::ptrdiff_t>(16 * M - want));
    }
    f->close();
  }
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, Integrity, ::testing::ValuesIn(kConfigs),
                         [](const ::testing::TestParamInfo<Config>& i) { return std::string(i.param.name); });

}  // namespace
