// accio mechanisms: O_DIRECT in one place. How a file is opened for O_DIRECT and which alignment it
// needs (File::open_as and accio_probe), whether a request may use it (direct, uring, staged and the
// planner), and how a request is cut into an unaligned head, an aligned middle and an unaligned tail
// (the mechanisms that read or write with O_DIRECT).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "base/settings.hpp"
#include "io/mechanism.hpp"

namespace accio::io {

// ---- opening ----

// An O_DIRECT descriptor on a file and the alignment it needs, or why there is none.
struct DirectOpen {
  int fd = -1;              // O_DIRECT descriptor (O_CLOEXEC), -1 when refused; the caller closes it
  std::string refused;      // why fd is -1
  size_t off_align = 4096;  // file offset and length alignment (>= the page size)
  size_t mem_align = 4096;  // buffer address alignment
  // What statx(STATX_DIOALIGN) reported (Linux 6.1+): both 0 where it reports nothing, and then the
  // alignments above are the page size.
  uint32_t reported_off_align = 0, reported_mem_align = 0;
};

// Opens `path` with O_DIRECT | O_CLOEXEC | flags (flags: an access mode, or O_TMPFILE | O_RDWR for a
// directory). `known_fd`, an open descriptor of the file or -1, is asked for the alignment first, so
// a file whose filesystem reports no O_DIRECT support is never opened; with -1 the new descriptor
// is asked. With known_fd the file reopened is known_fd's (through /proc/self/fd), whatever `path`
// names by then. A refusal (EINVAL from open, an alignment of 0) is a result, not an error.
DirectOpen open_direct(const std::string& path, int flags, int known_fd = -1);

// ---- using ----

// Whether requests on `file` with settings `s` can use its O_DIRECT descriptor: the file has one and
// a staging buffer holds at least one aligned block. *why (may be null) says why not.
bool direct_usable(const FileRef& file, const base::Settings& s, std::string* why);

// ---- splitting ----

// [off, off+n) cut at multiples of `align`: head [off, mid), middle [mid, tail) of whole aligned
// blocks, tail [tail, end). A range with no whole block inside has no middle and is all head
// (mid == tail == end). Offsets are absolute file offsets.
struct DirectSplit {
  uint64_t off, mid, tail, end;
  size_t head_len() const { return static_cast<size_t>(mid - off); }
  size_t middle_len() const { return static_cast<size_t>(tail - mid); }
  size_t tail_len() const { return static_cast<size_t>(end - tail); }
  bool has_middle() const { return tail > mid; }
};
DirectSplit split_direct(uint64_t off, size_t n, size_t align);

// One piece of a request: `len` bytes at file offset `file_off`, `buf_off` bytes into the buffer.
using PieceFn = std::function<void(size_t buf_off, uint64_t file_off, size_t len)>;
// How every O_DIRECT writer writes [off, off+n) of `file`: the unaligned head and tail, or a range
// with no whole block, through `edge` (the buffered descriptor: no read-modify-write of a block, the
// file size exact), then the aligned middle through `middle`. Empty pieces are not passed on. A
// tail that throws base::Error does not stop the middle: the middle's error, else the tail's, is
// rethrown, so that every byte before the offset an error reports is written (as with pwrite).
// On ext4, a middle of 1 MiB or more that goes past the end of the file gets the file's new size
// first (fallocate): ext4 runs direct writes that move the end one at a time (see odirect.cpp).
void write_direct_split(const FileRef& file, uint64_t off, size_t n, const PieceFn& edge, const PieceFn& middle);

// Writes [off, off+n), an aligned range, on file's O_DIRECT descriptor, or throws base::Error. A
// write the kernel takes short at an offset O_DIRECT cannot go on from (RLIMIT_FSIZE not a multiple
// of the alignment: the kernel cuts the write there), or refuses with EINVAL, goes on through the
// buffered descriptor, which writes the rest or fails where pwrite would (EFBIG at the limit).
// A refused (EINVAL) write that the buffered descriptor then wrote whole gives one warning per file
// (warn_direct_write_refused), which names the fallback: RLIMIT_FSIZE's cut fails there instead.
void write_direct_full(const FileRef& file, const void* buf, size_t n, uint64_t off);
void warn_direct_write_refused(const FileRef& file, uint64_t off);

// How an O_DIRECT reader that reads into the caller's memory reads [off, off+n): through
// direct_read(buf, len, off) only up to the end of the file as fstat gives it now, and what lies
// beyond (a file that grew since) through the buffered descriptor. Past the end of the file an
// O_DIRECT read fills the caller's buffer with zeros to the end of the request (ext4 maps the range
// as a hole), where pread changes no byte after its count: a 16 MiB `direct` read of an 8 MiB file
// zeroed the buffer's other 8 MiB, under `auto` too for a cold file (shim audit, session 27).
using DirectReadFn = std::function<size_t(char* buf, size_t len, uint64_t off)>;
size_t read_within_size(const FileRef& file, char* buf, size_t n, uint64_t off, const DirectReadFn& direct_read);

// How an O_DIRECT reader that goes through staging buffers reads [off, off+n): widened to whole
// aligned blocks, in chunks of at most `chunk` bytes (a multiple of align). read(i, file_off, len)
// reads chunk i into its buffer and returns the bytes it got (fewer at the end of the file); then
// use(i, skip, buf_off, len) takes the wanted `len` bytes at `skip` in that buffer for `buf_off` in
// the request. Stops after a short chunk. Returns the bytes used: n, or fewer at the end of the file.
using ChunkReadFn = std::function<size_t(size_t i, uint64_t file_off, size_t len)>;
using ChunkUseFn = std::function<void(size_t i, size_t skip, size_t buf_off, size_t len)>;
size_t read_direct_widened(uint64_t off, size_t n, size_t align, size_t chunk, const ChunkReadFn& read,
                           const ChunkUseFn& use);

}  // namespace accio::io
