// accio mechanisms: the staging ring pipeline of `staged`, written against an abstract StagingRing so
// its scheduling is tested without a GPU (tests/cpp/test_pipeline.cpp). One worker owns one ring: k
// staging buffers, an in-order stream of asynchronous copies, and a completion marker per buffer.
// Reads: the file read of chunk i+1 (into buffer i+1 mod k) overlaps the host-to-device copy of
// chunk i. Writes, reversed: the device-to-host copy of chunk i+k overlaps the pwrite of chunk i.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

namespace accio::io {

class StagingRing {
 public:
  virtual ~StagingRing() = default;
  virtual unsigned buffers() const = 0;
  virtual size_t buffer_size() const = 0;
  virtual char* buffer(unsigned b) = 0;
  // Queue, in order: dev[0..n) <- buffer b[from..from+n), or buffer b[0..n) <- dev[0..n).
  virtual void to_device(char* dev, unsigned b, size_t from, size_t n) = 0;
  virtual void to_host(unsigned b, const char* dev, size_t n) = 0;
  virtual void mark(unsigned b) = 0;  // buffer b is busy until everything queued so far completes
  virtual void wait(unsigned b) = 0;  // blocks until b's last mark completed (no-op if none)
  virtual void drain() = 0;           // blocks until everything queued completed
};

// read_full semantics: up to n bytes at off into buf; short only at end of file.
using ChunkRead = std::function<size_t(char* buf, size_t n, uint64_t off)>;
// write_full semantics: all n bytes or throws.
using ChunkWrite = std::function<void(const char* buf, size_t n, uint64_t off)>;

// Reads file bytes [off, off+n) into device memory dev. File reads start and end at multiples of
// `align` (1, or the O_DIRECT alignment: the wanted bytes are copied out of the aligned chunk).
// Returns the bytes read, short only at end of file. Drains the queue before it returns or throws,
// so no copy touches a buffer or dev afterwards.
size_t pipeline_read(StagingRing& q, char* dev, size_t n, uint64_t off, size_t align, const ChunkRead& rd);
// Writes device memory dev[0..n) to file bytes [off, off+n) in chunks of the buffer size rounded down
// to `align` (off must be aligned when align > 1). Drains the queue before it returns or throws.
void pipeline_write(StagingRing& q, const char* dev, size_t n, uint64_t off, size_t align, const ChunkWrite& wr);

}  // namespace accio::io
