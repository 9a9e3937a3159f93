// Appends (File::append, the C API's accio_append, modes a/a+) behave as O_APPEND: each lands at the
// file's current end, whoever else writes there (another handle, another process, a truncate), a
// failed append reserves nothing, and concurrent appends never overlap. For every mechanism: the
// audit of session 20 (M3) found appends reserving from an end of file each handle cached at open.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "accio/accio.h"
#include "base/error.hpp"
#include "base/sys.hpp"
#include "engine/file.hpp"
#include "helpers.hpp"

using namespace accio;
using namespace testing_accio;

namespace {
const char* kMechs[] = {"posix", "parallel", "direct", "uring", "auto"};

base::Settings mech(const char* m) {
  auto s = base::Settings::defaults();
  s.set("mechanism", m);
  s.set("task_size", "64k");  // records below are split into several tasks by parallel and uring
  s.set("buffer_size", "64k");
  s.set("threads", "3");
  s.set("profile", "off");
  return s;
}

std::string slurp(const std::string& p) {
  std::string out;
  EXPECT_TRUE(base::sys::read_file(p.c_str(), out));
  return out;
}

void put(const std::string& p, const std::string& s) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, s.data(), s.size()), static_cast<ssize_t>(s.size()));
  ::close(fd);
}

int errnum_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const base::Error& e) {
    return e.errnum();
  }
  return 0;
}

// A record: writer (1 byte), sequence number (4 bytes), then `len` bytes of a pattern of both, and
// the total length is fixed, so a file of records can be checked record by record.
std::string record(unsigned char writer, uint32_t seq, size_t len) {
  std::string r(len, '\0');
  r[0] = static_cast<char>(writer);
  std::memcpy(&r[1], &seq, 4);
  for (size_t i = 5; i < len; ++i) r[i] = static_cast<char>(writer * 31 + seq * 7 + i);
  return r;
}

// Checks that `content` is whole records of `len` bytes, each intact; counts them per writer.
std::map<int, std::vector<uint32_t>> records_of(const std::string& content, size_t len) {
  std::map<int, std::vector<uint32_t>> seen;
  EXPECT_EQ(content.size() % len, 0u) << "the file is not whole records";
  for (size_t at = 0; at + len <= content.size(); at += len) {
    const unsigned char w = static_cast<unsigned char>(content[at]);
    uint32_t seq;
    std::memcpy(&seq, &content[at + 1], 4);
    const std::string want = record(w, seq, len);
    if (content.compare(at, len, want) != 0) {
      ADD_FAILURE() << "record at " << at << " is torn or overwritten";
      return seen;
    }
    seen[w].push_back(seq);
  }
  return seen;
}

class Append : public ::testing::TestWithParam<const char*> {
 protected:
  TempDir dir_;
  std::string path_ = dir_.file("log");
};

TEST_P(Append, TwoHandlesAppendingInTurnKeepEachOthersBytes) {
  put(path_, "0123456789");
  auto a = engine::File::open(path_, "a", mech(GetParam()));
  auto b = engine::File::open(path_, "a", mech(GetParam()));
  EXPECT_EQ(a->append("AAAA", 4), 10u);
  EXPECT_EQ(b->append("BBBB", 4), 14u);
  EXPECT_EQ(a->append("CC", 2), 18u);
  a->close();
  b->close();
  EXPECT_EQ(slurp(path_), "0123456789AAAABBBBCC");
}

TEST_P(Append, AnotherWritersAppendIsNotOverwritten) {
  put(path_, "0123456789");
  auto f = engine::File::open(path_, "a+", mech(GetParam()));
  const int other = ::open(path_.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(other, 0);
  ASSERT_EQ(::write(other, "XYZ", 3), 3);
  EXPECT_EQ(f->append("Q", 1), 13u);
  ASSERT_EQ(::write(other, "!", 1), 1);
  EXPECT_EQ(f->append("RS", 2), 15u);
  ::close(other);
  f->close();
  EXPECT_EQ(slurp(path_), "0123456789XYZQ!RS");
}

TEST_P(Append, AnAppendAfterATruncateLandsAtTheNewEnd) {
  put(path_, "0123456789");
  auto f = engine::File::open(path_, "a+", mech(GetParam()));
  EXPECT_EQ(f->append("ab", 2), 10u);
  ASSERT_EQ(::ftruncate(f->fd(), 3), 0);
  EXPECT_EQ(f->append("hi", 2), 3u);
  ASSERT_EQ(::ftruncate(f->fd(), 0), 0);
  EXPECT_EQ(f->append("x", 1), 0u);
  f->close();
  EXPECT_EQ(slurp(path_), "x");
}

TEST_P(Append, AFailedAppendReservesNothing) {
  put(path_, "0123456789");
  auto f = engine::File::open(path_, "a", mech(GetParam()));
  EXPECT_EQ(errnum_of([&] { f->append(nullptr, 10); }), EFAULT);
  EXPECT_EQ(f->append("abc", 3), 10u);
  // A buffer that is not mapped: the kernel refuses it having written nothing.
  void* hole = mmap(nullptr, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(hole, MAP_FAILED);
  EXPECT_EQ(errnum_of([&] { f->append(hole, 8192); }), EFAULT);
  munmap(hole, 8192);
  // A size no write can have: refused, and the end does not wrap.
  EXPECT_NE(errnum_of([&] { f->append("x", std::numeric_limits<size_t>::max()); }), 0);
  EXPECT_EQ(f->append("def", 3), 13u);
  EXPECT_EQ(f->size(), 16u);
  f->close();
  EXPECT_EQ(slurp(path_), "0123456789abcdef");
}

TEST_P(Append, AnAppendPastTheFileSizeLimitLeavesNoHole) {
  put(path_, "0123456789");
  auto f = engine::File::open(path_, "a", mech(GetParam()));
  const std::string big(100, 'B');
  {
    FileSizeLimit lim(10);  // nothing more fits: EFBIG, no byte written
    ASSERT_TRUE(lim.ok());
    EXPECT_EQ(errnum_of([&] { f->append(big.data(), big.size()); }), EFBIG);
  }
  EXPECT_EQ(f->append("abc", 3), 10u);
  {
    FileSizeLimit lim(20);  // 7 bytes fit: they stay, as write(2)'s would, then EFBIG
    ASSERT_TRUE(lim.ok());
    try {
      f->append(big.data(), big.size());
      ADD_FAILURE() << "an append past RLIMIT_FSIZE succeeded";
    } catch (const base::Error& e) {
      EXPECT_EQ(e.errnum(), EFBIG);
      EXPECT_EQ(e.offset(), 20);  // where the byte that did not fit would have gone
      EXPECT_NE(std::string(e.what()).find("after 7 of 100 bytes"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::strerror(EFBIG)), std::string::npos) << e.what();
    }
  }
  const uint64_t end = f->size();
  EXPECT_EQ(f->append("def", 3), end);
  f->close();
  const std::string got = slurp(path_);
  EXPECT_EQ(got.size(), end + 3);
  EXPECT_EQ(got.find('\0'), std::string::npos) << "a NUL hole";
  EXPECT_EQ(got.substr(0, 13), "0123456789abc");
  EXPECT_EQ(got.substr(got.size() - 3), "def");
}

// ...nor with a plain O_APPEND writer's records (writer 9), one written after the open.
TEST_P(Append, ThreadsOfOneHandleNeverOverlap) {
  auto f = engine::File::open(path_, "a", mech(GetParam()));
  constexpr unsigned kThreads = 4, kEach = 20;
  constexpr size_t kLen = 150'000;  // several tasks each under parallel and uring
  const int plain = ::open(path_.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(plain, 0);
  ASSERT_EQ(::write(plain, record(9, 0, kLen).data(), kLen), static_cast<ssize_t>(kLen));
  std::vector<std::thread> ts;
  std::vector<std::vector<uint64_t>> offs(kThreads);
  for (unsigned t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      for (uint32_t i = 0; i < kEach; ++i) {
        const std::string r = record(static_cast<unsigned char>(t + 1), i, kLen);
        offs[t].push_back(f->append(r.data(), r.size()));
      }
    });
  ts.emplace_back([&] {
    for (uint32_t i = 1; i < kEach; ++i)
      if (::write(plain, record(9, i, kLen).data(), kLen) != static_cast<ssize_t>(kLen)) ADD_FAILURE();
  });
  for (auto& t : ts) t.join();
  ::close(plain);
  f->close();
  const std::string got = slurp(path_);
  ASSERT_EQ(got.size(), (kThreads + 1) * kEach * kLen);
  const auto seen = records_of(got, kLen);
  EXPECT_EQ(seen.count(9) ? seen.at(9).size() : 0u, kEach);
  for (unsigned t = 0; t < kThreads; ++t) {
    EXPECT_EQ(seen.at(static_cast<int>(t + 1)).size(), kEach);
    for (uint32_t i = 0; i < kEach; ++i)  // the offset returned is where the record is
      EXPECT_EQ(got.compare(offs[t][i], kLen, record(static_cast<unsigned char>(t + 1), i, kLen)), 0);
  }
}

TEST_P(Append, TwoProcessesNeverOverlap) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer kills a child that starts threads after a fork (the Python tests cover processes)";
#endif
  put(path_, "");
  constexpr uint32_t kEach = 40;
  constexpr size_t kLen = 100'000;
  // Both children open, then both start: the parent closes `go` once each has said it opened.
  int go[2], opened[2];
  ASSERT_EQ(pipe(go), 0);
  ASSERT_EQ(pipe(opened), 0);
  std::vector<pid_t> kids;
  for (unsigned char w = 1; w <= 2; ++w) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      try {
        ::close(go[1]);
        auto f = engine::File::open(path_, "a", mech(GetParam()));
        char c = 'o';
        if (::write(opened[1], &c, 1) != 1 || ::read(go[0], &c, 1) != 0) _exit(3);
        for (uint32_t i = 0; i < kEach; ++i) {
          const std::string r = record(w, i, kLen);
          const uint64_t at = f->append(r.data(), r.size());
          if (at % kLen) rc = 2;  // between two whole records
        }
        f->close();
      } catch (...) {
        rc = 1;
      }
      _exit(rc);
    }
    kids.push_back(pid);
  }
  ::close(opened[1]);  // a child that dies before it says so ends the read below (0), not hangs it
  for (int i = 0; i < 2; ++i) {
    char c;
    ASSERT_EQ(::read(opened[0], &c, 1), 1);
  }
  ::close(go[1]);
  ::close(go[0]);
  ::close(opened[0]);
  for (pid_t k : kids) {
    int st = 0;
    ASSERT_EQ(waitpid(k, &st, 0), k);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child status " << st;
  }
  const std::string got = slurp(path_);
  ASSERT_EQ(got.size(), 2 * kEach * kLen);
  const auto seen = records_of(got, kLen);
  for (int w = 1; w <= 2; ++w) {
    ASSERT_EQ(seen.at(w).size(), kEach);
    for (uint32_t i = 0; i < kEach; ++i) EXPECT_EQ(seen.at(w)[i], i);  // each writer's in its order
  }
}

// Through the C API too: the offset written at, and -errno with nothing reserved.
TEST_P(Append, CApiReturnsTheOffsetAndReservesNothingOnFailure) {
  put(path_, "0123456789");
  accio_settings* s = accio_settings_new();
  ASSERT_EQ(accio_settings_set(s, "mechanism", GetParam()), 0);
  accio_file* f = nullptr;
  ASSERT_EQ(accio_open(&f, path_.c_str(), "a", s), 0);
  accio_settings_free(s);
  EXPECT_EQ(accio_append(f, nullptr, 10), -EFAULT);
  EXPECT_EQ(accio_append(f, "abc", 3), 10);
  EXPECT_LT(accio_append(f, "x", SIZE_MAX), 0);
  EXPECT_EQ(accio_append(f, "def", 3), 13);
  EXPECT_EQ(accio_close(f), 0);
  EXPECT_EQ(slurp(path_), "0123456789abcdef");
}

INSTANTIATE_TEST_SUITE_P(Mechanisms, Append, ::testing::ValuesIn(kMechs));

}  // namespace
