// Fault tests: every error names op, path, offset and errno; shortages fall back with one warning;
// nothing crashes or silently corrupts. EFBIG, ENOSPC, EINTR and short transfers (injected through
// the syscall table and by a signal storm), tiny RLIMIT_MEMLOCK, no huge pages, permissions,
// missing paths, directories, closed handles, bad settings.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/time.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/log.hpp"
#include "base/sys.hpp"
#include "engine/file.hpp"
#include "helpers.hpp"
#include "mem/staging.hpp"

using namespace accio;
using namespace testing_accio;

namespace {
const char* kMechs[] = {"posix", "parallel", "direct", "uring"};

base::Settings mech(const char* m, bool direct = false) {
  auto s = base::Settings::defaults();
  s.set("mechanism", m);
  s.set("task_size", "256k");
  s.set("buffer_size", "256k");
  s.set("threads", "3");
  if (direct) s.set("direct", "on");
  return s;
}

template <class F>
base::Error expect_error(F&& f) {
  try {
    f();
  } catch (const base::Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error thrown";
  return base::Error(0, "", "", -1);
}

TEST(Faults, MissingPathDirectoryAndBadMode) {
  TempDir d;
  auto e = expect_error([&] { engine::File::open(d.file("nope"), "r", mech("posix")); });
  EXPECT_EQ(e.errnum(), ENOENT);
  EXPECT_EQ(e.op(), "open");
  EXPECT_NE(std::string(e.what()).find(d.file("nope")), std::string::npos);
  e = expect_error([&] { engine::File::open(d.path(), "r", mech("posix")); });
  EXPECT_EQ(e.errnum(), EISDIR);
  e = expect_error([&] { engine::File::open(d.path(), "w", mech("posix")); });
  EXPECT_EQ(e.errnum(), EISDIR);
  e = expect_error([&] { engine::File::open(d.file("x"), "rwx", mech("posix")); });
  EXPECT_EQ(e.errnum(), EINVAL);
  EXPECT_NE(std::string(e.what()).find("invalid mode"), std::string::npos);
  auto s = mech("posix");
  s.mechanism = "warp";
  e = expect_error([&] { engine::File::open(d.file("x"), "w", s); });
  EXPECT_EQ(e.errnum(), EINVAL);
  EXPECT_NE(std::string(e.what()).find("unknown mechanism 'warp'"), std::string::npos);
}

TEST(Faults, WrongAccessModeAndClosedHandle) {
  TempDir d;
  { auto f = engine::File::open(d.file("a"), "w", mech("posix")); }
  auto f = engine::File::open(d.file("a"), "r", mech("posix"));
  char b[16] = {};
  auto e = expect_error([&] { f->pwrite(b, sizeof b, 0); });
  EXPECT_EQ(e.errnum(), EBADF);
  EXPECT_NE(std::string(e.what()).find("not opened for writing (open it with mode r+, w, w+, a, a+, x or x+"), std::string::npos)
      << e.what();  // what to do, not only what is wrong
  auto w = engine::File::open(d.file("a"), "w", mech("posix"));
  e = expect_error([&] { w->pread(b, sizeof b, 0); });
  EXPECT_EQ(e.errnum(), EBADF);
  EXPECT_NE(std::string(e.what()).find("not opened for reading (open it with mode r, r+, w+, a+ or x+"), std::string::npos)
      << e.what();
  f->close();
  e = expect_error([&] { f->pread(b, sizeof b, 0); });
  EXPECT_EQ(e.errnum(), EBADF);
  EXPECT_NE(std::string(e.what()).find("closed"), std::string::npos);
  f->close();  // closing twice is harmless
}

TEST(Faults, ReadOnlyFileOpenedForWrite) {
  TempDir d;
  const std::string p = d.file("ro");
  { auto f = engine::File::open(p, "w", mech("posix")); }
  ASSERT_EQ(chmod(p.c_str(), 0444), 0);
  DropCap nodac(CAP_DAC_OVERRIDE);  // root would otherwise bypass the permission bits
  for (const char* mode : {"w", "r+", "a"}) {
    auto e = expect_error([&] { engine::File::open(p, mode, mech("posix")); });
    EXPECT_EQ(e.errnum(), EACCES) << mode;
    EXPECT_EQ(e.path(), p);
  }
}

TEST(Faults, NoSpaceOnDevFull) {
  for (const char* m : kMechs) {
    auto f = engine::File::open("/dev/full", "w", mech(m));
    std::vector<char> b(1 << 20, 'x');
    auto e = expect_error([&] { f->pwrite(b.data(), b.size(), 0); });
    EXPECT_EQ(e.errnum(), ENOSPC) << m;
    EXPECT_NE(std::string(e.what()).find("/dev/full"), std::string::npos) << e.what();
    EXPECT_EQ(f->stats().errors, 1u);
  }
}

TEST(Faults, NoSpaceOnSmallTmpfs) {
  TempDir d;
  if (mount("tmpfs", d.path().c_str(), "tmpfs", 0, "size=1m") != 0) GTEST_SKIP() << "cannot mount a tmpfs here";
  struct Unmount {
    std::string p;
    ~Unmount() { umount2(p.c_str(), MNT_DETACH); }
  } um{d.path()};
  std::vector<char> b(3 << 20, 'y');
  for (const char* m : kMechs) {
    for (bool direct : {false, true}) {
      auto f = engine::File::open(d.file(std::string(m) + (direct ? "d" : "")), "w", mech(m, direct));
      auto e = expect_error([&] { f->pwrite(b.data() + 1, b.size() - 1, 1); });
      EXPECT_EQ(e.errnum(), ENOSPC) << m;
      EXPECT_GE(e.offset(), 0);
      f->close();
      unlink(d.file(std::string(m) + (direct ? "d" : "")).c_str());
    }
  }
}

TEST(Faults, FileTooLargeUnderRlimitFsize) {
  TempDir d;
  FileSizeLimit limit(1 << 20);
  ASSERT_TRUE(limit.ok());
  std::vector<char> b(3 << 20, 'z');
  for (const char* m : kMechs) {
    for (bool direct : {false, true}) {
      auto f = engine::File::open(d.file(m), "w", mech(m, direct));
      auto e = expect_error([&] { f->pwrite(b.data(), b.size(), 0); });
      EXPECT_EQ(e.errnum(), EFBIG) << m << " direct=" << direct << ": " << e.what();
      EXPECT_EQ(e.offset(), 1 << 20) << m;  // the first byte past the limit, as pwrite (Integrity tests more)
      EXPECT_EQ(f->size(), size_t{1} << 20);
    }
  }
}

// The syscall table lets us interrupt and shorten every transfer deterministically.
std::atomic<int> g_calls{0};
ssize_t flaky_pread(int fd, void* b, size_t n, off_t o) {
  int c = g_calls.fetch_add(1);
  if (c % 3 == 0) {
    errno = EINTR;
    return -1;
  }
  if (c % 3 == 1 && n > 1 && (o % 4096 == 0) && fcntl(fd, F_GETFL) & O_DIRECT) n = n / 4096 > 1 ? (n / 4096 / 2) * 4096 : n;
  else if (c % 3 == 1 && n > 1 && !(fcntl(fd, F_GETFL) & O_DIRECT)) n = n / 2;
  return base::sys::real_ops().pread(fd, b, n, o);
}
ssize_t flaky_pwrite(int fd, const void* b, size_t n, off_t o) {
  int c = g_calls.fetch_add(1);
  if (c % 3 == 0) {
    errno = EINTR;
    return -1;
  }
  if (c % 3 == 1 && n > 1 && !(fcntl(fd, F_GETFL) & O_DIRECT)) n = n / 2;
  return base::sys::real_ops().pwrite(fd, b, n, o);
}

TEST(Faults, InterruptedAndShortTransfersAreRetried) {
  TempDir d;
  base::sys::ops() = {&flaky_pread, &flaky_pwrite};
  std::mt19937_64 rng(7);
  std::vector<char> src(5 << 20), dst(5 << 20);
  fill_random(src.data(), src.size(), rng);
  for (const char* m : {"posix", "parallel", "direct", "posix+realign", "parallel+realign"}) {
    const std::string name = m;
    const bool realign = name.find("+realign") != std::string::npos;
    auto s = mech(name.substr(0, name.find('+')).c_str());
    s.set("realign", realign ? "on" : "off");  // dst.data() is 5 bytes off the file offsets below
    auto f = engine::File::open(d.file(m), "w+", s);
    ASSERT_EQ(f->pwrite(src.data() + 3, src.size() - 3, 5), src.size() - 3) << m;
    ASSERT_EQ(f->pread(dst.data(), src.size(), 5), src.size() - 3) << m;
    EXPECT_TRUE(std::equal(src.begin() + 3, src.end(), dst.begin())) << m;
  }
  base::sys::ops() = base::sys::real_ops();
  EXPECT_GT(g_calls.load(), 30);
}

// An aligned O_DIRECT write that the kernel refuses (EINVAL: a filesystem or device that takes no
// O_DIRECT writes there) is written through the page cache, and says so once: it was silent, and the
// statistics still said direct (review, session 27). Where the buffered write fails too
// (RLIMIT_FSIZE's cut: the kernel refuses an O_DIRECT write past an unaligned limit), the error is
// the write's, with no warning.
std::atomic<int> g_refused{0};
ssize_t refusing_pwrite(int fd, const void* b, size_t n, off_t o) {
  if (fcntl(fd, F_GETFL) & O_DIRECT) {
    g_refused.fetch_add(1);
    errno = EINVAL;
    return -1;
  }
  return base::sys::real_ops().pwrite(fd, b, n, o);
}

TEST(Faults, ARefusedODirectWriteGoesThroughThePageCacheAndSaysSo) {
  TempDir d;
  std::mt19937_64 rng(8);
  Buffer src(3 << 20);
  fill_random(src.data(), 3 << 20, rng);
  auto f = engine::File::open(d.file("refused"), "w+", mech("direct"));
  base::sys::ops() = {base::sys::real_ops().pread, &refusing_pwrite};
  EXPECT_EQ(f->pwrite(src.data(), 3 << 20, 4096), size_t{3} << 20);
  EXPECT_EQ(f->pwrite(src.data(), 1 << 20, 8 << 20), size_t{1} << 20);
  base::sys::ops() = base::sys::real_ops();
  EXPECT_GT(g_refused.load(), 0);
  std::vector<char> back(3 << 20);
  ASSERT_EQ(f->pread(back.data(), 3 << 20, 4096), size_t{3} << 20);
  EXPECT_TRUE(std::equal(back.begin(), back.end(), src.data()));
  int said = 0;
  for (auto& w : base::warnings())
    said += w.find("O_DIRECT refused an aligned write of '" + d.file("refused") + "'") != std::string::npos &&
            w.find("direct=off") != std::string::npos;
  EXPECT_EQ(said, 1);
}

// realign: a read of 64 KiB or more into a buffer misaligned against the file offset reaches the
// kernel aligned like the offset (through the per-thread buffer) with realign=on, as it is with off,
// below 64 KiB and for a buffer aligned like the offset; the bytes arrive either way.
std::atomic<int> g_misaligned{0}, g_misaligned_small{0}, g_preads{0};
ssize_t watching_pread(int fd, void* b, size_t n, off_t o) {
  g_preads.fetch_add(1);
  if ((reinterpret_cast<uintptr_t>(b) - static_cast<uint64_t>(o)) & 31) (n >= (64 << 10) ? g_misaligned : g_misaligned_small).fetch_add(1);
  return base::sys::real_ops().pread(fd, b, n, o);
}

// A file of n random bytes (seeded), written by posix; returns its bytes.
std::vector<char> random_file(const std::string& path, size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<char> src(n);
  fill_random(src.data(), src.size(), rng);
  auto w = engine::File::open(path, "w", mech("posix"));
  EXPECT_EQ(w->pwrite(src.data(), src.size(), 0), src.size());
  return src;
}

TEST(Faults, RealignReadsMisalignedBuffersThroughAnAlignedOne) {
  TempDir d;
  const std::vector<char> src = random_file(d.file("r"), (3 << 20) + 777, 11);
  Buffer buf(src.size() + 64);
  struct Case {
    const char* mech;
    const char* realign;
    size_t shift, n;
    uint64_t off;
    bool misaligned_seen;
  };
  const Case cases[] = {
      {"posix", "on", 8, src.size() + 64, 0, false},  // the short read at the end of the file too
      {"posix", "off", 8, src.size() + 64, 0, true},
      {"parallel", "on", 24, src.size(), 1000, false},
      {"parallel", "off", 24, src.size(), 1000, true},
      {"posix", "on", 8, 60 << 10, 0, false},          // below 64 KiB: as it is (small below)
      {"posix", "on", 40, 1 << 20, 8, false},          // 40 - 8: aligned like the offset: as it is, and aligned
      {"posix", "on", 0, 1 << 20, 4096 + 3, false},    // a page-aligned buffer at an odd offset: through it
  };
  base::sys::ops() = {&watching_pread, base::sys::real_ops().pwrite};
  for (const Case& c : cases) {
    auto s = mech(c.mech);
    s.set("realign", c.realign);
    auto f = engine::File::open(d.file("r"), "r", s);
    g_misaligned = g_misaligned_small = g_preads = 0;
    std::memset(buf.data(), 0, src.size() + 64);
    const size_t want = static_cast<size_t>(std::min<uint64_t>(c.n, src.size() - c.off));
    ASSERT_EQ(f->pread(buf.data() + c.shift, c.n, c.off), want) << c.mech << " " << c.realign;
    const auto from = src.begin() + static_cast<std::ptrdiff_t>(c.off);
    EXPECT_TRUE(std::equal(from, from + static_cast<std::ptrdiff_t>(want), buf.data() + c.shift))
        << c.mech << " " << c.realign << " shift " << c.shift;
    EXPECT_EQ(buf.data()[c.shift + want], 0) << "nothing written past what was read";
    EXPECT_GT(g_preads.load(), 0);
    // Misaligned preads of 64 KiB or more (a split request's last task may be smaller: as it is).
    EXPECT_EQ(g_misaligned.load() > 0, c.misaligned_seen) << c.mech << " " << c.realign << " shift " << c.shift
                                                          << " n " << want;
    if (c.n < (64 << 10)) {
      EXPECT_GT(g_misaligned_small.load(), 0) << "a small request reaches the kernel as it is";
    }
  }
  base::sys::ops() = base::sys::real_ops();
  auto s = mech("posix");
  EXPECT_THROW(s.set("realign", "sometimes"), base::Error);
}

// realign against the real kernel (preadv2 RWF_NOWAIT): a hot file's chunks all come from the page
// cache; a dropped one's first chunk comes back short and the rest is read straight (where the
// filesystem can drop pages). Skipped where the filesystem takes no RWF_NOWAIT (tmpfs: EOPNOTSUPP;
// realign reads piece by piece there, which the other tests cover).
std::atomic<int> g_real_cached{0}, g_real_short{0};
ssize_t counting_cached(int fd, void* b, size_t n, off_t o) {
  g_real_cached.fetch_add(1);
  const ssize_t r = base::sys::real_ops().pread_cached(fd, b, n, o);
  if (r < static_cast<ssize_t>(n)) g_real_short.fetch_add(1);
  return r;
}

TEST(Faults, RealignReadsHotAndColdFilesWithTheRealKernel) {
  TempDir d;
  const std::string path = d.file("r");
  const std::vector<char> src = random_file(path, (4 << 20) + 5, 17);
  {
    const int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    char one;
    const ssize_t r = base::sys::real_ops().pread_cached(fd, &one, 1, 0);
    const int e = errno;
    ::close(fd);
    if (r < 0 && (e == EOPNOTSUPP || e == ENOSYS)) GTEST_SKIP() << "no RWF_NOWAIT reads on " << path;
  }
  Buffer buf(src.size() + 64);
  base::sys::ops() = {base::sys::real_ops().pread, base::sys::real_ops().pwrite, &counting_cached};
  for (bool cold : {false, true}) {
    bool dropped = false;
    if (cold) {
      const int fd = ::open(path.c_str(), O_RDONLY);
      ASSERT_GE(fd, 0);
      fdatasync(fd);
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      void* m = mmap(nullptr, src.size(), PROT_READ, MAP_SHARED, fd, 0);
      ASSERT_NE(m, MAP_FAILED);
      std::vector<unsigned char> vec((src.size() + 4095) / 4096);
      ASSERT_EQ(mincore(m, src.size(), vec.data()), 0);
      dropped = !(vec[0] & 1);
      munmap(m, src.size());
      ::close(fd);
    }
    auto s = mech("posix");
    s.set("realign", "on");
    auto f = engine::File::open(path, "r", s);
    g_real_cached = g_real_short = 0;
    std::memset(buf.data(), 0, src.size() + 64);
    ASSERT_EQ(f->pread(buf.data() + 24, src.size(), 0), src.size()) << cold;
    EXPECT_TRUE(std::equal(src.begin(), src.end(), buf.data() + 24)) << cold;
    if (!cold) {
      EXPECT_EQ(g_real_cached.load(), 5) << "four 1 MiB chunks and the last 5 bytes, all from the page cache";
      EXPECT_EQ(g_real_short.load(), 0);
    } else if (dropped) {
      EXPECT_EQ(g_real_cached.load(), 1) << "the first chunk comes back short: the rest is read straight";
      EXPECT_EQ(g_real_short.load(), 1);
    }
  }
  base::sys::ops() = base::sys::real_ops();
}

// A table that replaces pread but keeps the kernel's cached read (test_future gates its reads so)
// sees every read through its pread: the cached read does not go around it.
TEST(Faults, ACachedReadNeverGoesAroundAReplacedPread) {
  TempDir d;
  const std::vector<char> src = random_file(d.file("r"), 3 << 20, 19);
  Buffer buf(src.size() + 64);
  base::sys::ops().pread = &watching_pread;  // pread_cached stays the real one
  auto s = mech("posix");
  s.set("realign", "on");
  auto f = engine::File::open(d.file("r"), "r", s);
  g_preads = 0;
  ASSERT_EQ(f->pread(buf.data() + 8, src.size(), 0), src.size());
  EXPECT_EQ(g_preads.load(), 3) << "every 1 MiB piece through the replaced pread";
  base::sys::ops() = base::sys::real_ops();
}

// posix realigns only what the page cache holds (preadv2 RWF_NOWAIT): the first piece the kernel
// would wait for the device for ends it, and the rest of the request goes straight into the
// program's buffer in one read (a cold read keeps a plain read's depth); parallel's tasks realign
// every piece. A kernel or filesystem that takes no RWF_NOWAIT gets piece-by-piece realign.
std::atomic<int> g_cached_calls{0};
std::atomic<uint64_t> g_cold_from{~uint64_t{0}};  // offsets from here "are not cached"
std::atomic<int> g_cached_errno{0};               // set: every cached read fails so
std::atomic<int> g_cached_eintr{0};               // this many calls first fail with EINTR
ssize_t fake_cached(int fd, void* b, size_t n, off_t o) {
  g_cached_calls.fetch_add(1);
  if (g_cached_eintr.load() > 0) {
    g_cached_eintr.fetch_sub(1);
    errno = EINTR;
    return -1;
  }
  if (g_cached_errno.load()) {
    errno = g_cached_errno.load();
    return -1;
  }
  const uint64_t cold = g_cold_from.load();
  if (static_cast<uint64_t>(o) >= cold) {
    errno = EAGAIN;
    return -1;
  }
  return base::sys::real_ops().pread(fd, b, std::min<uint64_t>(n, cold - static_cast<uint64_t>(o)), o);
}

TEST(Faults, RealignReadsWhatIsNotCachedStraightIntoTheBuffer) {
  TempDir d;
  const std::vector<char> src = random_file(d.file("r"), (5 << 20) + 123, 13);
  Buffer buf(src.size() + 64);
  struct Case {
    const char* mech;
    uint64_t cold_from;  // ~0: all cached
    int err;             // the cached read's errno for every call (0: none)
    int misaligned;      // misaligned preads of 64 KiB or more expected
    int cached_min, cached_max;  // cached reads
  };
  const Case cases[] = {
      {"posix", ~uint64_t{0}, 0, 0, 9, 9},     // all cached: every piece through the buffer (and one at the
                                               // end), after 3 interrupted calls
      {"posix", 0, 0, 1, 1, 1},                // nothing cached: one probe, then the whole request straight
      {"posix", (2 << 20) + 4096 + 100, 0, 1, 3, 3},  // cached up to the middle of a piece: its cached part
                                                      // through the buffer, the rest straight, in one read
      {"parallel", 0, 0, 0, 0, 0},             // parallel's tasks: every piece through the buffer, cold or not
      {"posix", ~uint64_t{0}, EOPNOTSUPP, 0, 1, 1},  // no RWF_NOWAIT here: piece by piece, never asked again
  };
  base::sys::ops() = {&watching_pread, base::sys::real_ops().pwrite, &fake_cached};
  g_cached_eintr = 3;  // interrupted cached reads are asked again (the first case: 3 more calls)
  for (const Case& c : cases) {
    auto s = mech(c.mech);
    s.set("realign", "on");
    auto f = engine::File::open(d.file("r"), "r", s);
    g_misaligned = g_misaligned_small = g_preads = g_cached_calls = 0;
    g_cold_from = c.cold_from;
    g_cached_errno = c.err;
    std::memset(buf.data(), 0, src.size() + 64);
    ASSERT_EQ(f->pread(buf.data() + 8, src.size() + 64, 0), src.size()) << c.cold_from;
    EXPECT_TRUE(std::equal(src.begin(), src.end(), buf.data() + 8)) << c.cold_from;
    EXPECT_EQ(buf.data()[8 + src.size()], 0);
    EXPECT_EQ(g_misaligned.load(), c.misaligned) << c.cold_from << " errno " << c.err;
    EXPECT_GE(g_cached_calls.load(), c.cached_min) << c.mech << " " << c.cold_from;
    EXPECT_LE(g_cached_calls.load(), c.cached_max) << c.mech << " " << c.cold_from;
    if (c.err) {  // refused once: not asked again, in this process
      g_cached_calls = 0;
      ASSERT_EQ(f->pread(buf.data() + 8, 1 << 20, 0), size_t{1} << 20);
      EXPECT_EQ(g_cached_calls.load(), 0);
      // per file: another file of the same process asks again
      auto other = engine::File::open(d.file("r"), "r", s);
      ASSERT_EQ(other->pread(buf.data() + 8, 1 << 20, 0), size_t{1} << 20);
      EXPECT_EQ(g_cached_calls.load(), 1);
    }
  }
  // A real error from the cached read is the request's error, named so.
  g_cold_from = ~uint64_t{0};
  g_cached_errno = EIO;
  auto s = mech("posix");
  s.set("realign", "on");
  auto f = engine::File::open(d.file("r"), "r", s);
  try {
    f->pread(buf.data() + 8, 1 << 20, 4096);
    ADD_FAILURE() << "no error";
  } catch (const base::Error& e) {
    EXPECT_EQ(e.errnum(), EIO);
    EXPECT_NE(std::string(e.what()).find("preadv2"), std::string::npos) << e.what();
  }
  g_cached_errno = 0;
  base::sys::ops() = base::sys::real_ops();
}

void on_alarm(int) {}

TEST(Faults, SignalStormDuringLongTransfers) {
  TempDir d;
  struct sigaction sa {};
  sa.sa_handler = on_alarm;  // no SA_RESTART: interrupted waits return EINTR
  struct sigaction old {};
  sigaction(SIGALRM, &sa, &old);
  itimerval it{{0, 200}, {0, 200}}, stop{};
  setitimer(ITIMER_REAL, &it, nullptr);
  std::mt19937_64 rng(11);
  std::vector<char> src(24 << 20), dst(24 << 20);
  fill_random(src.data(), src.size(), rng);
  for (const char* m : kMechs) {
    for (bool direct : {false, true}) {
      auto f = engine::File::open(d.file(m), "w+", mech(m, direct));
      ASSERT_EQ(f->pwrite(src.data(), src.size(), 0), src.size());
      f->fsync();
      ASSERT_EQ(f->pread(dst.data(), dst.size(), 0), dst.size());
      EXPECT_EQ(src, dst) << m;
    }
  }
  setitimer(ITIMER_REAL, &stop, nullptr);
  sigaction(SIGALRM, &old, nullptr);
}

TEST(Faults, TinyMemlockFallsBackWithOneWarning) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers turn mlock into a no-op that succeeds";
#endif
  rlimit old{};
  getrlimit(RLIMIT_MEMLOCK, &old);
  rlimit tiny{4096, old.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_MEMLOCK, &tiny), 0);
  {
    DropCap nolock(CAP_IPC_LOCK);  // root would otherwise ignore RLIMIT_MEMLOCK
    mem::StagingPool pool(1 << 20, 2, false);
    EXPECT_FALSE(pool.buffer(0).locked);
    std::memset(pool.data(1), 7, 1 << 20);  // usable
    mem::StagingPool again(1 << 20, 2, false);
    EXPECT_FALSE(again.buffer(1).locked);
  }
  setrlimit(RLIMIT_MEMLOCK, &old);
  int n = 0;
  for (auto& w : base::warnings()) n += w.find("RLIMIT_MEMLOCK") != std::string::npos && w.find("lock staging") != std::string::npos;
  EXPECT_EQ(n, 1) << "one warning naming the limit";
}

TEST(Faults, HugePagesOrDocumentedFallback) {
  mem::StagingPool huge(3 << 20, 1, true);
  auto info = mem::huge_page_info();
  const auto& b = huge.buffer(0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.ptr) % 4096, 0u);
  if (info.free * info.size_kib * 1024 >= 4 << 20) EXPECT_EQ(b.backing, mem::Backing::hugetlb);
  else if (info.thp_mode != "never") EXPECT_EQ(b.backing, mem::Backing::thp);
  else EXPECT_EQ(b.backing, mem::Backing::small_pages);
  mem::StagingPool small(1 << 20, 1, false);
  EXPECT_EQ(small.buffer(0).backing, mem::Backing::small_pages);
}

// The huge-page probe reads /proc/meminfo with plain C parsing (no iostreams, issue 17): the same
// numbers as sscanf finds here, and the THP mode from sysfs.
TEST(Faults, HugePageProbeReadsMeminfo) {
  long total = -1, size_kib = -1;
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f)) {
      std::sscanf(line, "HugePages_Total: %ld", &total);
      std::sscanf(line, "Hugepagesize: %ld", &size_kib);
    }
    std::fclose(f);
  }
  ASSERT_GE(size_kib, 0) << "no Hugepagesize in /proc/meminfo";
  const mem::HugePageInfo h = mem::huge_page_info();
  EXPECT_EQ(h.total, total);
  EXPECT_EQ(h.size_kib, size_kib);
  EXPECT_GE(h.free, 0);  // free pages may change between the two reads: only bounds
  EXPECT_LE(h.free, h.total);
  EXPECT_TRUE(h.thp_mode == "always" || h.thp_mode == "madvise" || h.thp_mode == "never" || h.thp_mode == "unknown")
      << h.thp_mode;
  std::string text;
  ASSERT_TRUE(base::sys::read_file("/proc/self/status", text));
  EXPECT_NE(text.find("Pid:"), std::string::npos);
  EXPECT_FALSE(base::sys::read_file("/proc/self/status", text, 16));  // larger than max
  EXPECT_EQ(errno, EFBIG);
  EXPECT_FALSE(base::sys::read_file("/nonexistent/accio", text));
  EXPECT_EQ(errno, ENOENT);
}

TEST(Faults, BadSettingsAreClearErrors) {
  auto s = base::Settings::defaults();
  auto e = expect_error([&] { s.set("threads", "many"); });
  EXPECT_EQ(e.errnum(), EINVAL);
  EXPECT_NE(std::string(e.what()).find("threads"), std::string::npos);
  e = expect_error([&] { s.set("task_size", "1q"); });
  EXPECT_EQ(e.errnum(), EINVAL);
  e = expect_error([&] { s.set("bogus", "1"); });
  EXPECT_NE(std::string(e.what()).find("unknown setting 'bogus'"), std::string::npos);
  setenv("ACCIO_QUEUE_DEPTH", "0", 1);
  e = expect_error([&] { base::Settings::from_env(); });
  EXPECT_NE(std::string(e.what()).find("ACCIO_QUEUE_DEPTH"), std::string::npos);
  unsetenv("ACCIO_QUEUE_DEPTH");
  setenv("ACCIO_TASK_SIZE", "8MiB", 1);
  EXPECT_EQ(base::Settings::from_env().task_size, size_t{8} << 20);
  unsetenv("ACCIO_TASK_SIZE");
  EXPECT_EQ(base::parse_size("4k"), 4096u);
  EXPECT_EQ(base::parse_size("2 GiB"), size_t{2} << 30);
  EXPECT_EQ(base::format_size(size_t{4} << 20), "4MiB");
}

TEST(Faults, DirectOnFilesystemWithoutODirectFallsBack) {
  // /dev/zero is not a regular file: no O_DIRECT descriptor, so direct runs as posix, once warned.
  auto f = engine::File::open("/dev/zero", "r", mech("direct"));
  EXPECT_STREQ(f->plan(1 << 20, false).name(), "posix");
  std::vector<char> b(1 << 20, 1);
  EXPECT_EQ(f->pread(b.data(), b.size(), 0), b.size());
  EXPECT_EQ(b[12345], 0);
  EXPECT_EQ(f->stats().last_mechanism, io::find("posix")->id);
}

TEST(Faults, OverflowingOffsetIsRejected) {
  TempDir d;
  auto f = engine::File::open(d.file("o"), "w+", mech("posix"));
  char b[8];
  auto e = expect_error([&] { f->pread(b, 8, ~uint64_t{0} - 2); });
  EXPECT_EQ(e.errnum(), EINVAL);
  e = expect_error([&] { f->pread(nullptr, 8, 0); });
  EXPECT_EQ(e.errnum(), EFAULT);
}

TEST(Faults, SizesAboveInt64MaxAreRejectedAndHugeReadsEndAtTheFile) {
  // A size above INT64_MAX wrapped the check (off <= INT64_MAX - n) and passed: parallel "read"
  // SIZE_MAX bytes, returned as -1 with no error; INT64_MAX made 2^41 tasks, skipped one by one
  // past the end of the file (hours). Now EINVAL, and a read far past the end stops with the file.
  TempDir d;
  const std::string p = d.file("h");
  {
    auto w = engine::File::open(p, "w", mech("posix"));
    std::vector<char> data(10000, 'h');
    w->pwrite(data.data(), data.size(), 0);
  }
  std::vector<char> b(1 << 16);
  for (const char* m : {"posix", "parallel", "direct", "uring", "auto"}) {
    SCOPED_TRACE(m);
    auto f = engine::File::open(p, "r", mech(m));
    auto e = expect_error([&] { f->pread(b.data(), SIZE_MAX, 0); });
    EXPECT_EQ(e.errnum(), EINVAL);
    EXPECT_NE(std::string(e.what()).find("INT64_MAX"), std::string::npos) << e.what();
    e = expect_error([&] { f->pread(b.data(), size_t{1} << 63, 0); });
    EXPECT_EQ(e.errnum(), EINVAL);
    // Split into tasks: the file's 10000 bytes, at once (it never returned). In one pread (posix, or
    // direct falling back where the filesystem refuses O_DIRECT, as tmpfs): the kernel's EFAULT.
    try {
      EXPECT_EQ(f->pread(b.data(), static_cast<size_t>(INT64_MAX), 0), 10000u);
    } catch (const base::Error& refused) {
      EXPECT_EQ(refused.errnum(), EFAULT) << refused.what();
    }
  }
}
}  // namespace
