// Differential test: for every mechanism, random sequences of reads, writes, appends and sparse
// writes (sizes 0 to 64 MiB, unaligned offsets, sizes and buffers, reads crossing EOF) compared byte
// for byte with an in-memory reference model and a plain pread of the final file.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "base/sys.hpp"
#include "engine/file.hpp"
#include "configs.hpp"
#include "helpers.hpp"

using namespace accio;
using namespace testing_accio;

namespace {
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

// The descriptors the engine keeps for a file (its own, the O_DIRECT twin, the append descriptor,
// uring's rings) stay out of the numbers a program uses: with stdin closed, the program's next
// open() is 0, as without accio, and none of the engine's new descriptors is below aside_floor()
// (they took 0 and shifted every later number; under `accio run`, a program that had closed its
// stdout wrote into the engine's descriptor of a data file: shim audit, session 24, RISK 14).
std::vector<int> open_descriptors() {
  std::vector<int> fds;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) fds.push_back(std::stoi(e.path().filename()));
  std::sort(fds.begin(), fds.end());
  return fds;
}

TEST_P(Differential, TheEnginesDescriptorsStayOutOfTheProgramsNumbers) {
  const Config& cfg = GetParam();
  TempDir dir;
  const int in = ::dup(0);
  ASSERT_GE(in, 0);
  ASSERT_EQ(::close(0), 0);
  const std::vector<int> before = open_descriptors();
  {
    auto f = engine::File::open(dir.file("data"), "w+", make_settings(cfg));
    std::mt19937_64 rng(7);
    Buffer buf(8 << 20);
    fill_random(buf.data(), 8 << 20, rng);
    ASSERT_EQ(f->pwrite(buf.data(), 8 << 20, 0), size_t{8} << 20);
    ASSERT_EQ(f->pread(buf.data(1), 4 << 20, 4097), size_t{4} << 20);
    ASSERT_EQ(f->append(buf.data(), 1 << 20), uint64_t{8} << 20);
    ASSERT_EQ(f->pread(buf.data(), 8 << 20, 0), size_t{8} << 20);
    const int floor = base::sys::aside_floor();
    for (int fd : open_descriptors()) {
      if (!std::binary_search(before.begin(), before.end(), fd)) {
        EXPECT_GE(fd, floor) << cfg.name << ": the engine's descriptor " << fd;
      }
    }
    const int next = ::open("/dev/null", O_RDONLY);
    EXPECT_EQ(next, 0) << cfg.name;
    ::close(next);
  }
  ASSERT_EQ(::dup2(in, 0), 0);
  ::close(in);
}

// Where set_aside puts descriptors, by the soft limit on them, and where it puts them when nothing
// up there is free: above the standard three, or where they are.
TEST(SetAside, FollowsTheSoftLimitAndFallsBackAboveStdio) {
  struct rlimit was;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &was), 0);
  if (was.rlim_max != RLIM_INFINITY && was.rlim_max < 4096) GTEST_SKIP() << "hard RLIMIT_NOFILE " << was.rlim_max;
  auto soft = [&](rlim_t n) {
    struct rlimit rl = was;
    rl.rlim_cur = n;
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
  };
  soft(4096);
  EXPECT_EQ(base::sys::aside_floor(), 1024);
  soft(1280);
  EXPECT_EQ(base::sys::aside_floor(), 1024);
  soft(1024);
  EXPECT_EQ(base::sys::aside_floor(), 768);
  soft(300);
  EXPECT_EQ(base::sys::aside_floor(), 44);
  soft(259);
  EXPECT_EQ(base::sys::aside_floor(), 3);

  // 300: numbers 44 to 299 all taken, then a descriptor made at 0 goes above stdio, one
  // above stdio stays.
  soft(300);
  const int in = ::dup(0);
  std::vector<int> filler;
  for (int fd = 44; fd < 300; ++fd)
    if (fcntl(in, F_GETFD) >= 0 && fcntl(fd, F_GETFD) < 0) filler.push_back(::dup2(in, fd));
  ASSERT_EQ(::close(0), 0);
  const int low = ::open("/dev/null", O_RDONLY);
  ASSERT_EQ(low, 0);
  const int moved = base::sys::set_aside(low);
  EXPECT_GE(moved, 3);
  EXPECT_LT(moved, 44);
  EXPECT_EQ(fcntl(0, F_GETFD), -1) << "the old number is closed";
  EXPECT_EQ(fcntl(moved, F_GETFD), FD_CLOEXEC);
  ::close(moved);
  const int mid = fcntl(in, F_DUPFD, 3);
  ASSERT_LT(mid, 44);
  EXPECT_EQ(base::sys::set_aside(mid), mid);
  ::close(mid);
  EXPECT_EQ(base::sys::set_aside(-1), -1);
  for (int fd : filler) ::close(fd);
  const int freed = ::open("/dev/null", O_RDONLY);
  ASSERT_EQ(freed, 0);
  const int up = base::sys::set_aside(freed);
  EXPECT_EQ(up, 44);
  ::close(up);
  ASSERT_EQ(::dup2(in, 0), 0);
  ::close(in);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &was), 0);
}

// Closing any descriptor of a file releases the record locks the process holds on it: a descriptor
// of a locked file is not moved (its old number would be closed), and the lock holds, as another
// process sees it, after the engine opened the file and read it with every mechanism.
TEST(SetAside, LeavesALockedFileWhereItIsAndTheLockHeld) {
  TempDir dir;
  const std::string path = dir.file("locked");
  std::vector<char> data(4 << 20, 'l');
  {
    auto w = engine::File::open(path, "w", base::Settings::defaults());
    ASSERT_EQ(w->pwrite(data.data(), data.size(), 0), data.size());
  }
  const int fd = ::open(path.c_str(), O_RDWR);
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  ASSERT_EQ(fcntl(fd, F_SETLK, &fl), 0);
  const int low = ::open(path.c_str(), O_RDONLY);
  EXPECT_EQ(base::sys::set_aside(low), low);
  ::close(low);  // releases the lock, as without accio: take it again
  ASSERT_EQ(fcntl(fd, F_SETLK, &fl), 0);
  auto seen_locked = [&] {
    const pid_t child = fork();
    if (child == 0) {
      const int c = ::open(path.c_str(), O_RDWR);
      struct flock q {};
      q.l_type = F_WRLCK;
      q.l_whence = SEEK_SET;
      _exit(c >= 0 && fcntl(c, F_GETLK, &q) == 0 && q.l_type == F_WRLCK ? 0 : 1);
    }
    int st = 0;
    waitpid(child, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
  };
  for (const Config& cfg : kConfigs) {
    auto f = engine::File::open(path, "r+", make_settings(cfg));
    ASSERT_EQ(f->pread(data.data(), data.size(), 0), data.size()) << cfg.name;
    ASSERT_EQ(f->append(data.data(), 4096), data.size()) << cfg.name;
    ASSERT_EQ(f->pwrite(data.data(), data.size(), 0), data.size()) << cfg.name;
    EXPECT_TRUE(seen_locked()) << cfg.name << ": the lock went when the engine opened the file";
    f.reset();  // the engine's close releases it (the shim keeps a locked file's handle until the program closes it)
    ASSERT_EQ(fcntl(fd, F_SETLK, &fl), 0);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(data.size())), 0);
  }
  ::close(fd);
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, Differential, ::testing::ValuesIn(kConfigs),
                         [](const auto& p) { return std::string(p.param.name); });
}  // namespace
