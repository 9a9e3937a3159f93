// accio mechanisms: O_DIRECT in one place (see odirect.hpp).
#include "io/odirect.hpp"

#include "base/error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace accio::io {

DirectOpen open_direct(const std::string& path, int flags, int known_fd) {
  DirectOpen d;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  d.off_align = d.mem_align = page;
  // Reads the alignment of fd into d; false when the filesystem says O_DIRECT is not supported.
  auto learn = [&](int fd) {
#ifdef STATX_DIOALIGN
    struct statx sx {};
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN)) {
      if (sx.stx_dio_offset_align == 0) return false;
      d.reported_off_align = sx.stx_dio_offset_align;
      d.reported_mem_align = sx.stx_dio_mem_align;
      d.off_align = std::max<size_t>(page, sx.stx_dio_offset_align);
      d.mem_align = std::max<size_t>(sx.stx_dio_mem_align, 1);
    }
#endif
    (void)fd;
    return true;
  };
  const char* unsupported = "the filesystem does not support O_DIRECT on this file";
  if (known_fd >= 0 && !learn(known_fd)) {
    d.refused = unsupported;
    return d;
  }
  const int fd = ::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) {
    d.refused = std::string("open with O_DIRECT: ") + std::strerror(errno);
    return d;
  }
  if (known_fd < 0 && !learn(fd)) {
    ::close(fd);
    d.refused = unsupported;
    return d;
  }
  d.fd = fd;
  return d;
}

bool direct_usable(const FileRef& file, const base::Settings& s, std::string* why) {
  if (file.direct_fd >= 0 && s.buffer_size >= file.off_align) return true;
  if (why) *why = file.direct_fd < 0 ? file.no_direct : "buffer_size is below the O_DIRECT alignment";
  return false;
}

DirectSplit split_direct(uint64_t off, size_t n, size_t align) {
  const uint64_t end = off + n, mid = align_up(off, align), tail = align_down(end, align);
  if (tail <= mid) return {off, end, end, end};
  return {off, mid, tail, end};
}

namespace {

// Direct writes that move the end of the file run one at a time: ext4 waits for each such write
// under the inode lock before it takes the next (xfs and btrfs serialise them too), so a queue of
// them is a queue of one. fio on this project's VM (ext4, a fresh 1 GiB file, io_uring QD16,
// O_DIRECT): 64 KiB writes 331-378 MiB/s, 1 MiB 727-878; with the file's size set first
// (fallocate=native or truncate) 1272-1497 and 1333-1465 (issue 19). So the file gets its new end
// before the middle is written: fallocate (the blocks allocated), else ftruncate (a hole) where the
// filesystem has no fallocate; where there is no room for it (ENOSPC, EDQUOT, EFBIG), nothing.
struct NewEnd {
  bool set = false;  // this request moved the end
  uint64_t old_size = 0, end = 0;
};

// Sets the size back from `from` to `to` unless someone else moved the end meanwhile.
void shrink_back(const FileRef& f, uint64_t from, uint64_t to) {
  struct stat st;
  if (to < from && ::fstat(f.fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == from &&
      ::ftruncate(f.fd, static_cast<off_t>(to)) != 0) {
    // Nothing better to do: the write's own error is the one to report.
  }
}

NewEnd set_end_first(const FileRef& f, uint64_t from, uint64_t end) {
  NewEnd x;
  struct stat st;
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) >= end) return x;
  x.old_size = static_cast<uint64_t>(st.st_size);
  x.end = end;
  const uint64_t start = std::max(x.old_size, from);
  if (::fallocate(f.fd, 0, static_cast<off_t>(start), static_cast<off_t>(end - start)) == 0) {
    x.set = true;
    return x;
  }
  const int e = errno;
  if (e == ENOSPC || e == EDQUOT || e == EFBIG) {
    // No room for all of it: the writes go as they would have, and the one that finds no room
    // reports where, with every byte before it written. A partial allocation may have moved the end.
    if (::fstat(f.fd, &st) == 0 && static_cast<uint64_t>(st.st_size) > x.old_size)
      shrink_back(f, static_cast<uint64_t>(st.st_size), x.old_size);
    return x;
  }
  x.set = ::ftruncate(f.fd, static_cast<off_t>(end)) == 0;  // no fallocate here (EOPNOTSUPP...): a hole
  return x;
}

}  // namespace

void write_direct_split(const FileRef& file, uint64_t off, size_t n, const PieceFn& edge, const PieceFn& middle) {
  const DirectSplit s = split_direct(off, n, file.off_align);
  const NewEnd x = s.has_middle() ? set_end_first(file, s.mid, s.end) : NewEnd{};
  try {
    if (s.head_len()) edge(0, s.off, s.head_len());
    if (s.tail_len()) edge(static_cast<size_t>(s.tail - off), s.tail, s.tail_len());
    if (s.has_middle()) middle(static_cast<size_t>(s.mid - off), s.mid, s.middle_len());
  } catch (const base::Error& e) {
    if (x.set) shrink_back(file, x.end, std::max(x.old_size, e.offset() >= 0 ? static_cast<uint64_t>(e.offset()) : 0));
    throw;
  } catch (...) {
    if (x.set) shrink_back(file, x.end, x.old_size);
    throw;
  }
}

size_t read_direct_widened(uint64_t off, size_t n, size_t align, size_t chunk, const ChunkReadFn& read,
                           const ChunkUseFn& use) {
  const size_t A = std::max<size_t>(align, 1);
  const uint64_t end = off + n, aend = align_up(end, A);
  size_t done = 0;
  for (size_t i = 0; done < n; ++i) {
    const uint64_t p = off + done, cur = align_down(p, A);
    const size_t len = static_cast<size_t>(std::min<uint64_t>(chunk, aend - cur));
    const size_t got = read(i, cur, len);
    const uint64_t use_end = std::min<uint64_t>(cur + got, end);
    if (use_end > p) {
      const size_t take = static_cast<size_t>(use_end - p);
      use(i, static_cast<size_t>(p - cur), done, take);
      done += take;
    }
    if (got < len) break;  // end of file
  }
  return done;
}

}  // namespace accio::io
