// Staging pools are bounded by what is in use (audit session 20, S1): StagingPool::shared keeps the
// pools someone holds plus the kIdlePools most recently used idle ones, and frees the rest with the
// io_uring rings registered on them. Reads through direct and uring with many distinct buffer sizes
// stay byte-correct, and locked memory and rings do not pile up.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/sys.hpp"
#include "engine/file.hpp"
#include "helpers.hpp"
#include "mem/staging.hpp"

using namespace accio;
using namespace testing_accio;

namespace {

// A /proc/self/status field in kB ("VmLck").
long status_kb(const char* key) {
  std::string text;
  if (!base::sys::read_file("/proc/self/status", text)) return -1;
  const size_t at = text.find(std::string(key) + ":");
  return at == std::string::npos ? -1 : std::strtol(text.c_str() + at + std::strlen(key) + 1, nullptr, 10);
}

// io_uring instances this process holds (each ring is a descriptor on anon_inode:[io_uring]).
int uring_fds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (dirent* e = readdir(d)) {
    char target[256];
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t len = readlink(link.c_str(), target, sizeof target - 1);
    if (len > 0 && std::string(target, static_cast<size_t>(len)).find("io_uring") != std::string::npos) ++n;
  }
  closedir(d);
  return n;
}

TEST(StagingPools, IdlePoolsPastTheMostRecentAreFreed) {
  const size_t before = mem::StagingPool::shared_pools();
  for (size_t i = 1; i <= 20; ++i) {
    auto p = mem::StagingPool::shared(i * 4096 + 1000000, 1, false);
    EXPECT_EQ(p->buffer_size(), i * 4096 + 1000000);
    EXPECT_LE(mem::StagingPool::shared_pools(), before + mem::StagingPool::kIdlePools + 1);
  }
}

TEST(StagingPools, AHeldPoolIsKeptAndTheSameOneIsHandedOut) {
  auto held = mem::StagingPool::shared(3 << 20, 1, false);
  for (size_t i = 1; i <= 10; ++i) (void)mem::StagingPool::shared(i * 8192 + 2000000, 1, false);
  EXPECT_EQ(mem::StagingPool::shared(3 << 20, 1, false).get(), held.get());
  // The most recently used idle one is kept too: asking again gives the same pool, not a new one.
  const void* last = mem::StagingPool::shared(5 << 20, 1, false).get();
  EXPECT_EQ(mem::StagingPool::shared(5 << 20, 1, false).get(), last);
}

// n random bytes (from seed) written to path; returns them.
std::vector<char> random_file(const std::string& path, size_t n, uint64_t seed) {
  std::vector<char> src(n);
  std::mt19937_64 rng(seed);
  fill_random(src.data(), n, rng);
  std::ofstream(path, std::ios::binary).write(src.data(), static_cast<std::streamsize>(n));
  return src;
}

class PoolsUnder : public ::testing::TestWithParam<const char*> {};

// 20 handles, each with its own buffer_size, opened, read and closed in turn: the bytes are right,
// and locked memory and io_uring rings stay at a few pools' worth (before: every pool and its rings
// stayed for the life of the process, 20 x 2 x ~10 MiB here).
TEST_P(PoolsUnder, DistinctBufferSizesKeepLockedMemoryBounded) {
  TempDir dir;
  const std::string path = dir.file("data");
  constexpr size_t kSize = (3 << 20) + 4321;
  const std::vector<char> src = random_file(path, kSize, 7);
  Buffer back(kSize);
  const long lck0 = status_kb("VmLck");
  const int rings0 = uring_fds();
  long lck_max = 0;
  size_t pools_max = 0;
  constexpr size_t kLargest = 20u << 20;
  for (size_t i = 1; i <= 20; ++i) {
    auto s = base::Settings::defaults();
    s.set("mechanism", GetParam());
    s.set("buffer_size", std::to_string(i << 20));
    s.set("buffer_count", "2");
    s.set("realign", "on");
    auto f = engine::File::open(path, "r", s);
    std::memset(back.data(), 0, kSize);
    ASSERT_EQ(f->pread(back.data(3), kSize - 5, 5), kSize - 5);  // unaligned: through the staging buffers
    ASSERT_EQ(std::memcmp(back.data(3), src.data() + 5, kSize - 5), 0) << "buffer_size " << i << " MiB";
    f->close();
    lck_max = std::max(lck_max, status_kb("VmLck") - lck0);
    pools_max = std::max(pools_max, mem::StagingPool::shared_pools());  // the idle ones of earlier tests count too
  }
  // The pools themselves: VmLck alone cannot fail where RLIMIT_MEMLOCK (8 MiB for a user by
  // default; CI runs as root) refuses every pool's mlock (review s20, NIT 6).
  EXPECT_LE(pools_max, mem::StagingPool::kIdlePools + 1) << "staging pools pile up";
  // ...and the reads did go through the shared pools (or the bound above would hold for any read
  // path): the pool handed out for the last handle's settings is the one its read leased from.
  auto last = mem::StagingPool::shared(kLargest, 2, base::Settings::defaults().huge_pages);
  EXPECT_GT(last->leases(), 0u) << "the reads did not use the shared staging pools";
  // In use plus kIdlePools idle, each at most 2 x 20 MiB (rounded to huge pages).
  const long bound_kb = static_cast<long>((mem::StagingPool::kIdlePools + 1) * 2 * (kLargest + (2 << 20)) / 1024);
  EXPECT_LE(lck_max, bound_kb) << "locked staging memory piles up";
  if (std::string(GetParam()) == "uring") {
    EXPECT_LE(uring_fds() - rings0, static_cast<int>(4 * (mem::StagingPool::kIdlePools + 1))) << "rings pile up";
  }
}

// Open handles keep the pool their requests took (FileRef::pool_hold): four handles with their own
// buffer_size, used in turn, each found its pool freed (past the two most recent idle ones) and
// built and locked a new one per request (16-78 ms against ~80 us for the read, review s20).
TEST_P(PoolsUnder, OpenHandlesWithTheirOwnSettingsKeepTheirPools) {
  TempDir dir;
  const std::string path = dir.file("data");
  constexpr size_t kSize = (1 << 20) + 777;
  const std::vector<char> src = random_file(path, kSize, 11);
  std::vector<std::shared_ptr<engine::File>> files;
  for (size_t i = 0; i < 2 + mem::StagingPool::kIdlePools; ++i) {
    auto s = base::Settings::defaults();
    s.set("mechanism", GetParam());
    s.set("buffer_size", std::to_string((i + 1) * 1000 * 1024));
    s.set("buffer_count", "2");
    s.set("realign", "on");
    files.push_back(engine::File::open(path, "r", s));
  }
  Buffer back(kSize);
  std::vector<const void*> first;
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < files.size(); ++i) {
      ASSERT_EQ(files[i]->pread(back.data(3), kSize - 5, 5), kSize - 5);
      ASSERT_EQ(std::memcmp(back.data(3), src.data() + 5, kSize - 5), 0);
      const void* pool = files[i]->ref().pool_hold.pool.get();
      ASSERT_NE(pool, nullptr);
      if (round == 0) first.push_back(pool);
      EXPECT_EQ(pool, first[i]) << "handle " << i << " got a new pool in round " << round;
    }
    EXPECT_GE(mem::StagingPool::shared_pools(), files.size()) << "a pool of an open handle was freed";
  }
  for (auto& f : files) f->close();
  EXPECT_EQ(files[0]->ref().pool_hold.pool, nullptr);  // released at close
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, PoolsUnder, ::testing::Values("direct", "uring"));

}  // namespace
