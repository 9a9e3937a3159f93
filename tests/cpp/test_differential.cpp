// Differential test: for every mechanism, random sequences of reads, writes, appends and sparse
// writes (sizes 0 to 64 MiB, unaligned offsets, sizes and buffers, reads crossing EOF) compared byte
// for byte with an in-memory reference model and a plain pread of the final file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include "engine/file.hpp"
#include "helpers.hpp"

using namespace accio;
using namespace testing_accio;

namespace {
struct Config {
  const char* name;
  std::vector<std::pair<const char*, const char*>> settings;
};
const std::vector<Config> kConfigs = {
    {"posix", {{"mechanism", "posix"}}},
    {"parallel", {{"mechanism", "parallel"}, {"threads", "4"}, {"task_size", "64k"}}},
    // Reads into buffers misaligned against the file offset through the aligned per-thread buffer,
    // on every CPU (realign=auto takes it only where the kernel's copy is slow for them).
    {"posix_realign", {{"mechanism", "posix"}, {"realign", "on"}}},
    {"parallel_realign", {{"mechanism", "parallel"}, {"threads", "3"}, {"task_size", "1m"}, {"realign", "on"}}},
    {"parallel_no_realign", {{"mechanism", "parallel"}, {"threads", "2"}, {"task_size", "1m"}, {"realign", "off"}}},
    {"direct", {{"mechanism", "direct"}, {"threads", "3"}, {"task_size", "64k"}, {"buffer_size", "64k"}, {"buffer_count", "4"}}},
    {"direct_big", {{"mechanism", "direct"}, {"threads", "2"}, {"task_size", "1m"}}},
    {"uring", {{"mechanism", "uring"}, {"queue_depth", "8"}, {"task_size", "64k"}, {"buffer_size", "64k"}}},
    {"uring_realign", {{"mechanism", "uring"}, {"realign", "on"}, {"queue_depth", "4"}, {"task_size", "64k"}, {"buffer_size", "64k"}, {"buffer_count", "2"}}},
    {"uring_direct", {{"mechanism", "uring"}, {"direct", "on"}, {"queue_depth", "8"}, {"task_size", "64k"}, {"buffer_size", "64k"}, {"buffer_count", "4"}}},
    {"auto", {{"mechanism", "auto"}, {"task_size", "256k"}, {"threads", "2"}}},
};

class Differential : public ::testing::TestWithParam<Config> {};

base::Settings make_settings(const Config& c) {
  auto s = base::Settings::defaults();
  for (auto& [k, v] : c.settings) s.set(k, v);
  return s;
}

TEST_P(Differential, RandomOpsMatchReference) {
  const Config& cfg = GetParam();
  TempDir dir;
  const std::string path = dir.file("data");
  auto f = engine::File::open(path, "w+", make_settings(cfg));
  std::vector<char> ref;
  std::mt19937_64 rng(0xacc10 + std::hash<std::string>{}(cfg.name));
  const size_t kMaxBig = size_t{64} << 20;
  Buffer buf(kMaxBig + 8192), out(kMaxBig + 8192);

  auto rand = [&](uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(rng); };
  auto pick_size = [&]() -> size_t {
    switch (rand(0, 9)) {
      case 0: return 0;
      case 1: case 2: case 3: return rand(1, 5000);
      case 4: case 5: case 6: return rand(1, 600 << 10);
      case 7: case 8: return rand(1, 4 << 20);
      default: return rand(0, 3) * 4096;
    }
  };
  auto pick_off = [&]() -> uint64_t {
    uint64_t o = rand(0, ref.size() + (1 << 20));
    return rand(0, 2) == 0 ? o / 4096 * 4096 : o;
  };
  auto pick_shift = [&]() -> size_t { return rand(0, 1) ? 0 : rand(1, 511); };
  auto do_write = [&](uint64_t off, size_t n) {
    char* p = buf.data(pick_shift());
    fill_random(p, n, rng);
    ASSERT_EQ(f->pwrite(p, n, off), n);
    if (n && off + n > ref.size()) ref.resize(off + n, 0);
    std::copy(p, p + n, ref.begin() + static_cast<ptrdiff_t>(off));
    ASSERT_EQ(f->size(), ref.size()) << "after write of " << n << " at " << off;
  };
  auto do_read = [&](uint64_t off, size_t n) {
    n = std::min(n, kMaxBig + 4096);
    char* p = out.data(pick_shift());
    size_t got = f->pread(p, n, off);
    size_t want = off >= ref.size() ? 0 : std::min<size_t>(n, ref.size() - off);
    ASSERT_EQ(got, want) << "read of " << n << " at " << off << " (size " << ref.size() << ")";
    ASSERT_TRUE(std::equal(p, p + got, ref.begin() + static_cast<ptrdiff_t>(std::min<uint64_t>(off, ref.size()))))
        << "data differs: read of " << n << " at " << off;
  };

  // One transfer at the top of the size range, unaligned on both ends.
  do_write(4096 + 123, kMaxBig - 200);
  do_read(0, kMaxBig + 4096);
  do_read(777, kMaxBig - 1000);

  const size_t nops = env_count("ACCIO_TEST_OPS", 120);
  for (size_t i = 0; i < nops && !HasFatalFailure(); ++i) {
    switch (rand(0, 9)) {
      case 0: case 1: case 2: case 3: do_write(pick_off(), pick_size()); break;
      case 4: case 5: case 6: do_read(pick_off(), pick_size()); break;
      case 7: {  // append
        size_t n = pick_size();
        char* p = buf.data(pick_shift());
        fill_random(p, n, rng);
        uint64_t at = f->append(p, n);
        ASSERT_EQ(at, ref.size());
        ref.insert(ref.end(), p, p + n);
        break;
      }
      case 8: do_write(ref.size() + rand(1, 3 << 20), rand(1, 70000)); break;  // sparse: leaves a hole
      default: do_read(rand(0, ref.size()), ref.size() + 10); break;           // crosses EOF
    }
  }
  // The whole file through a plain descriptor.
  std::vector<char> all(ref.size() + 1);
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  size_t done = 0;
  for (ssize_t r; (r = ::pread(fd, all.data() + done, all.size() - done, static_cast<off_t>(done))) > 0;) done += r;
  ::close(fd);
  ASSERT_EQ(done, ref.size());
  ASSERT_TRUE(std::equal(ref.begin(), ref.end(), all.begin()));
  auto st = f->stats();
  EXPECT_GT(st.reads, 0u);
  EXPECT_GT(st.writes, 0u);
  EXPECT_EQ(st.errors, 0u);
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, Differential, ::testing::ValuesIn(kConfigs),
                         [](const auto& p) { return std::string(p.param.name); });
}  // namespace
