// The O_DIRECT helpers (src/io/odirect.hpp) that direct, uring, staged, the planner, File and
// accio_probe share: the head/middle/tail split at every edge, the write policy built on it, the
// usability check, and opening a file with O_DIRECT (refusals are results, not errors).
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ostream>

#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "helpers.hpp"
#include "io/odirect.hpp"

using namespace accio;
using testing_accio::TempDir;

namespace {
constexpr size_t A = 4096;

struct Piece {
  std::string kind;
  size_t buf_off;
  uint64_t file_off;
  size_t len;
  bool operator==(const Piece& o) const {
    return kind == o.kind && buf_off == o.buf_off && file_off == o.file_off && len == o.len;
  }
};
std::ostream& operator<<(std::ostream& os, const Piece& p) {
  return os << p.kind << "(buf+" << p.buf_off << ", at " << p.file_off << ", " << p.len << ")";
}

// The pieces of a write on no file (fd -1: the new end is not set first).
std::vector<Piece> write_pieces(uint64_t off, size_t n) {
  std::vector<Piece> out;
  io::FileRef none;
  none.off_align = A;
  io::write_direct_split(
      none, off, n, [&](size_t b, uint64_t o, size_t l) { out.push_back({"edge", b, o, l}); },
      [&](size_t b, uint64_t o, size_t l) { out.push_back({"middle", b, o, l}); });
  return out;
}

void expect_split(uint64_t off, size_t n, uint64_t mid, uint64_t tail) {
  const io::DirectSplit s = io::split_direct(off, n, A);
  EXPECT_EQ(s.off, off);
  EXPECT_EQ(s.mid, mid) << "off " << off << " n " << n;
  EXPECT_EQ(s.tail, tail) << "off " << off << " n " << n;
  EXPECT_EQ(s.end, off + n);
  EXPECT_EQ(s.head_len() + s.middle_len() + s.tail_len(), n);
}
}  // namespace

TEST(DirectSplit, AlignedWholeIsAllMiddle) {
  expect_split(0, 4 * A, 0, 4 * A);
  expect_split(3 * A, A, 3 * A, 4 * A);
  EXPECT_TRUE(io::split_direct(0, A, A).has_middle());
}

TEST(DirectSplit, UnalignedHeadAndTail) {
  expect_split(100, 3 * A, A, 3 * A);  // head 100..4096, middle 4096..12288, tail 12288..12388
  const io::DirectSplit s = io::split_direct(100, 3 * A, A);
  EXPECT_EQ(s.head_len(), A - 100);
  EXPECT_EQ(s.middle_len(), 2 * A);
  EXPECT_EQ(s.tail_len(), 100u);
  expect_split(A - 1, A + 2, A, 2 * A);  // one byte of head, one block, one byte of tail
  expect_split(0, A + 1, 0, A);          // aligned start, unaligned tail only
  expect_split(1, A - 1 + A, A, 2 * A);  // unaligned head, aligned end
}

TEST(DirectSplit, NoWholeBlockIsAllHead) {
  expect_split(100, 50, 150, 150);     // inside one block
  expect_split(A - 10, 20, A + 10, A + 10);  // straddles a boundary, no whole block
  expect_split(0, A - 1, A - 1, A - 1);      // aligned start, shorter than a block
  expect_split(1, A, A + 1, A + 1);          // a block's length, not on a block
  EXPECT_FALSE(io::split_direct(1, A, A).has_middle());
}

TEST(DirectSplit, ZeroLength) {
  for (uint64_t off : {uint64_t{0}, uint64_t{A}, uint64_t{77}}) {
    const io::DirectSplit s = io::split_direct(off, 0, A);
    EXPECT_FALSE(s.has_middle());
    EXPECT_EQ(s.head_len() + s.tail_len(), 0u);
  }
  EXPECT_TRUE(write_pieces(0, 0).empty());
  EXPECT_TRUE(write_pieces(77, 0).empty());
}

TEST(DirectSplit, WritePolicyEdgesFirstThenMiddle) {
  using V = std::vector<Piece>;
  EXPECT_EQ(write_pieces(0, 2 * A), (V{{"middle", 0, 0, 2 * A}}));
  EXPECT_EQ(write_pieces(100, 3 * A),
            (V{{"edge", 0, 100, A - 100}, {"edge", 3 * A - 100, 3 * A, 100}, {"middle", A - 100, A, 2 * A}}));
  EXPECT_EQ(write_pieces(0, A + 5), (V{{"edge", A, A, 5}, {"middle", 0, 0, A}}));
  EXPECT_EQ(write_pieces(5, 2 * A - 5), (V{{"edge", 0, 5, A - 5}, {"middle", A - 5, A, A}}));
  EXPECT_EQ(write_pieces(10, 100), (V{{"edge", 0, 10, 100}}));  // sub-block: all through the edge path
  EXPECT_EQ(write_pieces(A - 10, 20), (V{{"edge", 0, A - 10, 20}}));
}

// A tail that fails does not stop the middle: the lowest error is the one reported, every byte
// before it written, as pwrite leaves a file (the tail past RLIMIT_FSIZE reported its own offset
// with the whole middle unwritten).
TEST(DirectSplit, AFailedTailStillWritesTheMiddle) {
  using V = std::vector<Piece>;
  io::FileRef none;
  none.off_align = A;
  std::vector<Piece> out;
  auto edge = [&](size_t b, uint64_t o, size_t l) {
    out.push_back({"edge", b, o, l});
    if (o == 3 * A) throw base::Error(EFBIG, "pwrite", "f", static_cast<int64_t>(o));
  };
  auto middle = [&](size_t b, uint64_t o, size_t l) { out.push_back({"middle", b, o, l}); };
  auto offset_of = [](auto&& f) -> int64_t {
    try {
      f();
    } catch (const base::Error& e) {
      return e.offset();
    }
    return -2;
  };
  EXPECT_EQ(offset_of([&] { io::write_direct_split(none, 100, 3 * A, edge, middle); }), static_cast<int64_t>(3 * A));
  EXPECT_EQ(out, (V{{"edge", 0, 100, A - 100}, {"edge", 3 * A - 100, 3 * A, 100}, {"middle", A - 100, A, 2 * A}}));
  auto failing_middle = [&](size_t, uint64_t o, size_t) { throw base::Error(ENOSPC, "pwrite", "f", static_cast<int64_t>(o + 5)); };
  EXPECT_EQ(offset_of([&] { io::write_direct_split(none, 100, 3 * A, edge, failing_middle); }), static_cast<int64_t>(A + 5));
}

namespace {
uint64_t size_of(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : ~0ull;
}

bool on_ext4(int fd) {
  struct statfs fs;
  return ::fstatfs(fd, &fs) == 0 && fs.f_type == 0xEF53;
}

struct OpenFile {
  io::FileRef ref;
  explicit OpenFile(const std::string& path, uint64_t size = 0) {
    ref.path = path;
    ref.off_align = A;
    ref.fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (ref.fd < 0 || ::ftruncate(ref.fd, static_cast<off_t>(size)) != 0) std::abort();
  }
  ~OpenFile() { ::close(ref.fd); }
};
constexpr uint64_t M = 1 << 20;
}  // namespace

// ext4 runs direct writes that move the end of the file one at a time (it waits for each under the
// inode lock), so on ext4 a middle of 1 MiB or more past the end finds the file at its new size
// already; edges are written first and see it too. Smaller middles, overwrites, requests with no
// whole block, and other filesystems leave the size alone.
TEST(DirectSplit, MiddlePastTheEndFindsTheNewEndSetOnExt4) {
  TempDir dir;
  OpenFile f(dir.file("grow"), 3 * A);
  const bool ext4 = on_ext4(f.ref.fd);
  std::vector<uint64_t> seen;
  auto look = [&](size_t, uint64_t, size_t) { seen.push_back(size_of(f.ref.fd)); };
  io::write_direct_split(f.ref, 2 * A, 4 * M + 7, look, look);  // tail edge, then the middle
  const uint64_t grown = ext4 ? 2 * A + 4 * M + 7 : 3 * A;
  EXPECT_EQ(seen, (std::vector<uint64_t>{grown, grown})) << (ext4 ? "ext4" : "not ext4");
  const uint64_t now = size_of(f.ref.fd);
  seen.clear();
  io::write_direct_split(f.ref, (now + A) / A * A, 16 * A, look, look);  // a middle under 1 MiB
  EXPECT_EQ(seen, (std::vector<uint64_t>{now}));
  seen.clear();
  io::write_direct_split(f.ref, 0, 2 * A, look, look);  // inside the file
  EXPECT_EQ(seen, (std::vector<uint64_t>{now}));
  seen.clear();
  io::write_direct_split(f.ref, 20 * M + 1, 10, look, look);  // no whole block: all edge
  EXPECT_EQ(seen, (std::vector<uint64_t>{now}));
  if (!ext4) GTEST_SKIP() << dir.path() << " is not ext4: the size was left alone, as checked";
}

// The new end from an unaligned old end is exact; a writer that took the end further meanwhile keeps
// it (fallocate never shrinks); only the part past the end counts towards the 1 MiB.
TEST(DirectSplit, NewEndIsExactAndNeverShrinks) {
  TempDir dir;
  OpenFile f(dir.file("ends"), 5000);  // an unaligned old end
  if (!on_ext4(f.ref.fd)) GTEST_SKIP() << dir.path() << " is not ext4";
  std::vector<uint64_t> seen;
  auto look = [&](size_t, uint64_t, size_t) { seen.push_back(size_of(f.ref.fd)); };
  io::write_direct_split(f.ref, 0, 3 * M + 123, look, look);
  EXPECT_EQ(seen, (std::vector<uint64_t>{3 * M + 123, 3 * M + 123}));
  ASSERT_EQ(::ftruncate(f.ref.fd, 10 * M), 0);  // another writer took it further
  seen.clear();
  io::write_direct_split(f.ref, 4 * M, 2 * M, look, look);  // inside: untouched
  EXPECT_EQ(seen, (std::vector<uint64_t>{10 * M}));
  seen.clear();
  io::write_direct_split(f.ref, 2 * M, 8 * M + 4 * A, look, look);  // 16 KiB past the end: under 1 MiB
  EXPECT_EQ(seen, (std::vector<uint64_t>{10 * M}));
  EXPECT_EQ(size_of(f.ref.fd), 10 * M);
}

// A middle that fails after the new end was set leaves it set (the unwritten rest reads as zeros):
// setting it back could cut off another writer's data written in the range meanwhile.
TEST(DirectSplit, FailedMiddleLeavesTheNewEnd) {
  TempDir dir;
  OpenFile f(dir.file("fail"), 2 * A);
  if (!on_ext4(f.ref.fd)) GTEST_SKIP() << dir.path() << " is not ext4";
  auto none = [](size_t, uint64_t, size_t) {};
  auto fail = [&](size_t, uint64_t, size_t) { throw base::Error(EIO, "pwrite", f.ref.path, 5 * A); };
  EXPECT_THROW(io::write_direct_split(f.ref, 0, 4 * M, none, fail), base::Error);
  EXPECT_EQ(size_of(f.ref.fd), 4 * M);
}

// No room for the new end (here RLIMIT_FSIZE; ENOSPC and EDQUOT alike): the pieces go as they would
// have without it, at the old size, so that the write that finds no room reports where, every byte
// before it written (Faults.FileTooLargeUnderRlimitFsize, UringDirect.ErrorInTheSecondHalf...).
TEST(DirectSplit, NoRoomWritesAsWithout) {
  TempDir dir;
  const std::string path = dir.file("full");
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    OpenFile f(path, A);
    if (!on_ext4(f.ref.fd)) _exit(20);
    const rlimit lim{M / 4, M / 4};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(10);
    std::vector<uint64_t> seen;
    auto look = [&](size_t, uint64_t, size_t) { seen.push_back(size_of(f.ref.fd)); };
    try {
      io::write_direct_split(f.ref, 0, 2 * M, look, look);
    } catch (const base::Error&) {
      _exit(11);
    }
    struct stat sb;
    const bool no_blocks_past_end = ::fstat(f.ref.fd, &sb) == 0 && static_cast<uint64_t>(sb.st_blocks) * 512 <= A;
    _exit(seen != std::vector<uint64_t>{A} ? 12 : size_of(f.ref.fd) != A ? 13 : !no_blocks_past_end ? 14 : 0);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  if (WEXITSTATUS(st) == 20) GTEST_SKIP() << dir.path() << " is not ext4";
  EXPECT_EQ(WEXITSTATUS(st), 0) << "10 setrlimit, 11 threw, 12 the middle saw another size, 13 size moved, "
                                   "14 blocks allocated past the end";
}

// The read side: widened to whole blocks, in chunks, the wanted bytes taken out of each; every
// offset and length against a 10000-byte "file" (a short last block), 512-byte blocks, 1 KiB chunks.
TEST(DirectSplit, WidenedReadTakesExactlyTheWantedBytes) {
  std::vector<char> file(10000);
  for (size_t i = 0; i < file.size(); ++i) file[i] = static_cast<char>(i * 7 + 3);
  const size_t A = 512, chunk = 1024;
  for (uint64_t off : {uint64_t{0}, uint64_t{1}, uint64_t{511}, uint64_t{512}, uint64_t{1500}, uint64_t{9990}, uint64_t{10000}}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{511}, size_t{512}, size_t{1025}, size_t{3000}, size_t{20000}}) {
      std::vector<char> out(n, 0), staging(chunk);
      size_t reads = 0;
      const size_t got = io::read_direct_widened(
          off, n, A, chunk,
          [&](size_t i, uint64_t cur, size_t len) {
            EXPECT_EQ(i, reads++);
            EXPECT_EQ(cur % A, 0u);
            EXPECT_EQ(len % A, 0u);
            EXPECT_LE(len, chunk);
            const size_t have = cur < file.size() ? std::min(len, file.size() - size_t(cur)) : 0;
            std::memcpy(staging.data(), file.data() + std::min<size_t>(cur, file.size()), have);
            return have;
          },
          [&](size_t, size_t skip, size_t buf_off, size_t len) {
            ASSERT_LE(buf_off + len, n);
            std::memcpy(out.data() + buf_off, staging.data() + skip, len);
          });
      const size_t want = off < file.size() ? std::min(n, file.size() - size_t(off)) : 0;
      EXPECT_EQ(got, want) << "off " << off << " n " << n;
      if (want) {  // out is empty (no data pointer) when n is 0
        EXPECT_EQ(0, std::memcmp(out.data(), file.data() + off, want));
      }
    }
  }
}

TEST(DirectUsable, NeedsADescriptorAndABlockPerBuffer) {
  io::FileRef f;
  f.off_align = 8192;
  base::Settings s;
  s.buffer_size = 1 << 20;
  std::string why = "untouched";
  f.no_direct = "open with O_DIRECT: Invalid argument";
  EXPECT_FALSE(io::direct_usable(f, s, &why));
  EXPECT_EQ(why, f.no_direct);
  EXPECT_FALSE(io::direct_usable(f, s, nullptr));
  f.direct_fd = 99;  // never used: the check only reads the handle's facts
  EXPECT_TRUE(io::direct_usable(f, s, &why));
  s.buffer_size = 4096;
  EXPECT_FALSE(io::direct_usable(f, s, &why));
  EXPECT_EQ(why, "buffer_size is below the O_DIRECT alignment");
  s.buffer_size = 8192;
  EXPECT_TRUE(io::direct_usable(f, s, nullptr));
}

TEST(OpenDirect, MissingFileIsARefusalWithErrno) {
  TempDir d;
  const io::DirectOpen o = io::open_direct(d.file("missing"), O_RDONLY);
  EXPECT_EQ(o.fd, -1);
  EXPECT_NE(o.refused.find("open with O_DIRECT: "), std::string::npos) << o.refused;
  EXPECT_NE(o.refused.find(std::strerror(ENOENT)), std::string::npos) << o.refused;
}

TEST(OpenDirect, FileAndDirectoryAgree) {
  TempDir d;
  const std::string p = d.file("f");
  const int fd = ::open(p.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // Asked through the buffered descriptor (File::open_as) or through the new one (accio_probe): the
  // same verdict and alignment for the same file.
  const io::DirectOpen via_known = io::open_direct(p, O_RDWR, fd);
  const io::DirectOpen via_new = io::open_direct(p, O_RDONLY);
  EXPECT_EQ(via_known.fd >= 0, via_new.fd >= 0) << via_known.refused << " / " << via_new.refused;
  for (const io::DirectOpen* o : {&via_known, &via_new}) {
    if (o->fd < 0) {
      EXPECT_FALSE(o->refused.empty());
      continue;
    }
    EXPECT_TRUE(o->refused.empty());
    EXPECT_GE(o->off_align, page);
    EXPECT_GE(o->mem_align, 1u);
    if (o->reported_off_align) {
      EXPECT_EQ(o->off_align, std::max<size_t>(page, o->reported_off_align));
    }
    EXPECT_TRUE(fcntl(o->fd, F_GETFL) & O_DIRECT);
    EXPECT_TRUE(fcntl(o->fd, F_GETFD) & FD_CLOEXEC);
    ::close(o->fd);
  }
  EXPECT_EQ(via_known.off_align, via_new.off_align);
  // A directory: an unnamed O_TMPFILE in it, as `accio info` probes a path before any file exists.
  const io::DirectOpen dir = io::open_direct(d.path(), O_TMPFILE | O_RDWR);
  if (dir.fd >= 0) {
    ::close(dir.fd);
  } else {
    EXPECT_FALSE(dir.refused.empty());
  }
  ::close(fd);
}

TEST(OpenDirect, ReopensTheKnownDescriptorsFileNotWhatThePathNamesNow) {
  // "Write a temporary, rename it over" between File's buffered open and its O_DIRECT open gave one
  // handle two descriptors on two files: the aligned body read from (or written to) the other one
  // (the audit saw 23 of 3379 opens under a renaming thread). Made deterministic: the rename comes
  // between the two opens.
  TempDir d;
  const std::string p = d.file("target"), other = d.file("other");
  for (const std::string& f : {p, other}) {
    const int w = ::open(f.c_str(), O_WRONLY | O_CREAT, 0600);
    ASSERT_GE(w, 0);
    ASSERT_EQ(::ftruncate(w, 1 << 20), 0);
    ::close(w);
  }
  const int fd = ::open(p.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::rename(other.c_str(), p.c_str()), 0);  // p now names another inode
  const io::DirectOpen o = io::open_direct(p, O_RDONLY, fd);
  if (o.fd < 0) {  // a filesystem without O_DIRECT (tmpfs): nothing to compare
    ::close(fd);
    GTEST_SKIP() << o.refused;
  }
  struct stat a {}, b {};
  ASSERT_EQ(fstat(fd, &a), 0);
  ASSERT_EQ(fstat(o.fd, &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino) << "the O_DIRECT descriptor is on the file that replaced the path";
  EXPECT_EQ(a.st_dev, b.st_dev);
  ::close(o.fd);
  ::close(fd);
}
