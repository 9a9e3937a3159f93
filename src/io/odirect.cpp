// accio mechanisms: O_DIRECT in one place (see odirect.hpp).
#include "io/odirect.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <string>

#include "base/error.hpp"
#include "base/log.hpp"
#include "base/sys.hpp"

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
  // The file known_fd is open on, not whatever `path` names now: by path, a "write a temporary,
  // rename it over" between the two opens gave one handle two descriptors on two files (its aligned
  // body read from, or written to, the other one). Where /proc is not mounted: by path, refused
  // unless it is the same inode.
  int fd = -1;
  if (known_fd >= 0) fd = ::open(("/proc/self/fd/" + std::to_string(known_fd)).c_str(), flags | O_DIRECT | O_CLOEXEC);
  if (fd < 0 && (known_fd < 0 || errno == ENOENT)) {
    fd = ::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, 0600);
    struct stat a, b;
    if (fd >= 0 && known_fd >= 0 &&
        (fstat(fd, &a) != 0 || fstat(known_fd, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino)) {
      ::close(fd);
      d.refused = "open with O_DIRECT: " + path + " was replaced while it was opened";
      return d;
    }
  }
  if (fd < 0) {
    d.refused = std::string("open with O_DIRECT: ") + std::strerror(errno);
    return d;
  }
  if (known_fd < 0 && !learn(fd)) {
    ::close(fd);
    d.refused = unsupported;
    return d;
  }
  d.fd = base::sys::set_aside(fd);
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

// ext4 runs a direct write that moves the end of the file under the inode lock and waits for it
// before it takes the next, so the pieces of a request into a fresh file run at a queue depth of
// one. fio on this project's VM (ext4, a fresh 1 GiB file, io_uring QD16, O_DIRECT, fallocate=none
// against native: results/uring/fio_fallocate.json): 64 KiB writes gain 3.8x, 1 MiB 1.6x with the
// file's size set first (issue 19). So on ext4 a request whose aligned middle takes the end of the
// file at least kSetEndFrom bytes further gives the file its new size first (fallocate), once per
// request: fallocate waits for the direct writes in flight on the file, so it pays only where a
// request has pieces to run side by side. Other filesystems are left as they were, unmeasured (xfs and btrfs have rules
// of their own for such writes; NFS would pay a round trip, tmpfs would zero every page first).
// No room (ENOSPC, EDQUOT, RLIMIT_FSIZE): the size is not set, the writes go as before, and the one
// that finds no room reports where, every byte before it written. A write that fails after the size
// was set leaves it set: the unwritten rest reads as zeros, as after an interrupted write of a file
// sized ahead. Shrinking it back could cut off another writer's data written meanwhile.
constexpr uint64_t kSetEndFrom = 1 << 20;
constexpr long kExt4Magic = 0xEF53;  // ext2/3/4 (files without extents answer EOPNOTSUPP: nothing set)

void set_end_first(const FileRef& f, uint64_t from, uint64_t end) {
  struct stat st;
  struct statfs fs;
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
  const uint64_t start = std::max(static_cast<uint64_t>(st.st_size), from);
  if (start >= end || end - start < kSetEndFrom || ::fstatfs(f.fd, &fs) != 0 || fs.f_type != kExt4Magic) return;
  // RLIMIT_FSIZE: allocating past it would succeed (KEEP_SIZE is not checked against it) and leave
  // blocks past the end that the writes, stopped at the limit, never use.
  struct rlimit lim;
  if (::getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && end > lim.rlim_cur) return;
  // The blocks first, the size kept: where there is no room, the size has not moved (the writes
  // then use what was allocated). Then the size, by the last byte alone (its block already there):
  // fallocate never shrinks a file, so a writer that moved the end further meanwhile keeps it.
  // Either failing leaves the size where it was, and the writes move it as before.
  if (::fallocate(f.fd, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(start), static_cast<off_t>(end - start)) == 0)
    (void)::fallocate(f.fd, 0, static_cast<off_t>(end - 1), 1);
}

}  // namespace

void write_direct_split(const FileRef& file, uint64_t off, size_t n, const PieceFn& edge, const PieceFn& middle) {
  const DirectSplit s = split_direct(off, n, file.off_align);
  if (s.has_middle()) set_end_first(file, s.mid, s.end);
  if (s.head_len()) edge(0, s.off, s.head_len());
  // The tail before the middle (the middle's direct writes then do not move the end), but a tail
  // that fails does not stop the middle: the error reported is the lowest, with every byte before
  // it written, as pwrite leaves a file. A tail past RLIMIT_FSIZE, or with no room left, reported
  // its own offset with the whole middle before it unwritten.
  std::exception_ptr tail_error;
  if (s.tail_len()) {
    try {
      edge(static_cast<size_t>(s.tail - off), s.tail, s.tail_len());
    } catch (const base::Error&) {  // a tail always has a middle before it
      tail_error = std::current_exception();
    }
  }
  if (s.has_middle()) middle(static_cast<size_t>(s.mid - off), s.mid, s.middle_len());
  if (tail_error) std::rethrow_exception(tail_error);
}

void warn_direct_write_refused(const FileRef& file, uint64_t off) {
  base::warn_once("direct-write-einval:" + file.path,
                  "O_DIRECT refused an aligned write of '" + file.path + "' at offset " + std::to_string(off) +
                      " (EINVAL); it went through the page cache instead, as will any other write O_DIRECT "
                      "refuses: the filesystem or device may take no O_DIRECT writes here (set direct=off, or "
                      "use mechanism parallel)");
}

void write_direct_full(const FileRef& file, const void* buf, size_t n, uint64_t off) {
  const auto* p = static_cast<const char*>(buf);
  size_t done = 0;
  bool refused = false;
  while (done < n && (off + done) % file.off_align == 0) {
    const ssize_t r = base::sys::ops().pwrite(file.direct_fd, p + done, n - done, static_cast<off_t>(off + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EINVAL) {  // refused as O_DIRECT: the buffered descriptor writes it or says why not
        refused = true;
        break;
      }
      throw base::Error(errno, "pwrite", file.path, static_cast<int64_t>(off + done));
    }
    if (r == 0) throw base::Error(EIO, "pwrite", file.path, static_cast<int64_t>(off + done), "write made no progress");
    done += static_cast<size_t>(r);
  }
  if (done == n) return;
  write_full(file.fd, p + done, n - done, off + done, file.path);
  // Written after all: not RLIMIT_FSIZE's cut (the buffered write would have failed at the limit),
  // so O_DIRECT refused this aligned write outright, which says so once.
  if (refused) warn_direct_write_refused(file, off + done);
}

size_t read_within_size(const FileRef& file, char* buf, size_t n, uint64_t off, const DirectReadFn& direct_read) {
  struct stat st;
  if (fstat(file.fd, &st) != 0) throw base::Error(errno, "fstat", file.path, static_cast<int64_t>(off));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  const size_t within = off >= size ? 0 : static_cast<size_t>(std::min<uint64_t>(n, size - off));
  const size_t got = within ? direct_read(buf, within, off) : 0;
  if (got < within || got == n) return got;  // the end of the file came sooner (truncated), or all read
  return got + read_full(file.fd, buf + got, n - got, off + got, file.path);
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
