// accio mechanism `uring`: io_uring with up to `queue_depth` requests in flight from one thread.
// Rings are shared by the process (leased per request), each with the staging pool registered as
// fixed buffers and a sparse table of registered files. The file side is buffered, or O_DIRECT
// with `direct=on`; O_DIRECT pieces that the user buffer cannot take go through fixed buffers.
// Buffered writes go to the ring with RWF_NOWAIT: a filesystem that cannot write buffered without
// blocking answers -EAGAIN (ext4: no FOP_BUFFER_WASYNC) or -EOPNOTSUPP (tmpfs), where io_uring
// would otherwise hand every piece to an io-wq worker thread (a wake-up and a hand-back per piece: 20x slower than pwrite for
// 4 KiB writes). From then on (at once for -EOPNOTSUPP, after three refused requests in a row for
// -EAGAIN, which XFS or btrfs may give in passing) that handle's buffered writes are plain pwrite in
// the calling thread, which is what the worker would have done, without the round trip (docs/api.md):
// one pwrite per piece the ring would have sent, never one for the whole request (write_pieces).
// Buffered reads into a buffer that realign would take (posix's read_host: misaligned against the
// file offset, on a CPU whose kernel copy is slow for it) go through the staging buffers, each piece
// placed at its offset's page offset, where the page cache holds the request (cachestat, or mincore,
// of its head and tail; a cold request goes straight into the program's buffer). The pieces are read
// with RWF_NOWAIT all the same: from the first one the kernel would wait for the device for (evicted
// since, or in the middle), the rest goes straight. A file that takes no RWF_NOWAIT (tmpfs) is
// realigned piece by piece without it, as posix does.
#include <liburing.h>

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "base/error.hpp"
#include "base/fork.hpp"
#include "base/log.hpp"
#include "base/sys.hpp"
#include "io/mechanism.hpp"
#include "io/odirect.hpp"
#include "mem/staging.hpp"

namespace accio::io {
namespace {
using base::Error;

constexpr unsigned kRingEntries = 1024;  // upper bound of queue_depth

// uring's own knob (a row of the settings table; docs/api.md lists it).
const base::Knob kQueueDepth{{"queue_depth", "ACCIO_QUEUE_DEPTH",
                              "io_uring requests in flight per request (at most 1024 run at once)", "count", "16", 1,
                              4096}};
constexpr unsigned kFixedFiles = 64;  // registered-file table size per ring
constexpr size_t kMaxPiece = size_t{1} << 30;  // bytes per SQE (its length is 32 bits)

// One piece of the request in flight.
struct Op {
  uint64_t foff = 0;   // file offset of the piece
  size_t len = 0;      // bytes asked of the kernel
  size_t done = 0;     // bytes completed
  char* mem = nullptr;  // where the kernel reads/writes (user memory or a staging buffer)
  int buf = -1;        // staging buffer index, -1 for user memory
};

// One io_uring instance with its registered buffers and files.
struct IoUring {
  io_uring ring{};
  bool fixed_bufs = false;
  bool fixed_files = false;
  std::vector<uint64_t> file_key = std::vector<uint64_t>(kFixedFiles, 0);  // per file index; 0 = empty
  unsigned next_evict = 0;
  std::mutex mu;  // held for the whole request: a ring serves one request at a time
  // The request's pieces, reused by every request on this ring (no allocation per request).
  std::vector<Op> ops;
  std::vector<unsigned> free_ops, resubmit;
  // Retired: a request found the ring unusable (retire()). Never leased again; its registered files
  // are not touched (by number: the number may be another ring's now).
  std::atomic<bool> broken{false};
  bool released = false;  // its memory is unmapped and its descriptor closed or given up (retire)

  ~IoUring() {
    if (!released) io_uring_queue_exit(&ring);
  }

  // Takes the ring out of use once nothing is in flight on it. fd_ours: the kernel refused the
  // ring for another reason than its descriptor (closed behind the engine's back: EBADF; its number
  // another file's: EOPNOTSUPP), so the descriptor is still this ring's and is closed with it.
  // Otherwise only its memory is unmapped: the ring then goes with its last reference (its
  // registered buffers unpinned, its registered files let go), and the number, perhaps taken by
  // another file now, is left alone.
  void retire(bool fd_ours) {
    broken.store(true, std::memory_order_relaxed);
    if (released) return;
    released = true;
    if (fd_ours) {
      io_uring_queue_exit(&ring);
      return;
    }
    munmap(ring.sq.sqes, ring.sq.ring_entries * sizeof(io_uring_sqe));
    munmap(ring.sq.ring_ptr, ring.sq.ring_sz);
    if (ring.cq.ring_ptr && ring.cq.ring_ptr != ring.sq.ring_ptr) munmap(ring.cq.ring_ptr, ring.cq.ring_sz);
  }

  // Returns the fd to put in an SQE and sets *fixed when it is a registered-file index.
  int file_index(uint64_t key, int fd, bool* fixed) {
    *fixed = false;
    if (!fixed_files) return fd;
    unsigned index = kFixedFiles;
    for (unsigned i = 0; i < kFixedFiles; ++i) {
      if (file_key[i] == key) {
        *fixed = true;
        return static_cast<int>(i);
      }
      if (index == kFixedFiles && file_key[i] == 0) index = i;
    }
    if (index == kFixedFiles) index = next_evict++ % kFixedFiles;
    if (io_uring_register_files_update(&ring, index, &fd, 1) != 1) return fd;
    file_key[index] = key;
    *fixed = true;
    return static_cast<int>(index);
  }
  void drop(uint64_t key) {
    for (unsigned i = 0; i < kFixedFiles; ++i)
      if (file_key[i] == key) {
        int none = -1;
        io_uring_register_files_update(&ring, i, &none, 1);
        file_key[i] = 0;
      }
  }
};

// liburing 2.2 and later enter the kernel through enter_ring_fd, which is ring_fd until the ring's
// descriptor is registered (never here); 2.1 has no such member.
template <class Ring>
auto renumber_enter(Ring* r, int from, int to, int) -> decltype(r->enter_ring_fd, void()) {
  if (r->enter_ring_fd == from) r->enter_ring_fd = to;
}
template <class Ring>
void renumber_enter(Ring*, int, int, long) {}

int init_ring(io_uring* r) {
  io_uring_params p{};
  p.flags = IORING_SETUP_COOP_TASKRUN;
  int rc = io_uring_queue_init_params(kRingEntries, r, &p);
  if (rc == -EINVAL) {
    p = io_uring_params{};
    rc = io_uring_queue_init_params(kRingEntries, r, &p);
  }
  if (rc == 0) {  // the ring's descriptor out of the program's numbers, as the engine's files' (set_aside)
    const int from = r->ring_fd;
    r->ring_fd = base::sys::set_aside(from);
    renumber_enter(r, from, r->ring_fd, 0);
  }
  return rc;
}

// Rings for one staging pool, which registered its buffers. They go when the pool does
// (SetOfPool, attached to it: StagingPool::shared frees a pool no request holds), before its
// buffers are unmapped; otherwise they are leaked at exit on purpose (requests may outlive static
// destructors). A forked child builds its own: the parent's rings are shared memory with the
// parent's kernel ring.
struct IoUringSet {
  std::mutex mu;
  std::vector<std::unique_ptr<IoUring>> rings;
};
struct IoUringSets {
  std::mutex mu;
  std::map<mem::StagingPool*, IoUringSet*> map;
};
base::PerProcess<IoUringSets> g_sets;

// Closes the pool's rings when the pool is freed (no request holds it, so none uses them), and
// forgets them, so that a new pool at the same address gets rings of its own.
struct SetOfPool final : mem::StagingPool::Attachment {
  IoUringSets* sets;
  mem::StagingPool* pool;
  SetOfPool(IoUringSets* s, mem::StagingPool* p) : sets(s), pool(p) {}
  ~SetOfPool() override {
    IoUringSet* set = nullptr;
    {
      std::lock_guard lk(sets->mu);
      auto it = sets->map.find(pool);
      if (it == sets->map.end()) return;
      set = it->second;
      sets->map.erase(it);
    }
    delete set;  // io_uring_queue_exit on each ring: the kernel unregisters the buffers
  }
};

// Open handles (file ids) whose buffered writes the kernel would punt to io-wq (a RWF_NOWAIT write
// came back -EAGAIN or -EOPNOTSUPP): uring writes them with pwrite in the calling thread. -EOPNOTSUPP
// (tmpfs) is final at once. -EAGAIN is final on ext4 (no FMODE_BUF_WASYNC: every such write gets
// it) but can be passing on XFS or btrfs (a contended inode lock, dirty throttling), so a handle
// goes inline for good only after kStrikes requests in a row were refused; a request whose ring
// writes all went through clears its strikes.
struct InlineWrites {
  static constexpr int kStrikes = 3;
  std::mutex mu;
  std::unordered_map<uint64_t, int> strikes;
  bool has(uint64_t id) {
    std::lock_guard lk(mu);
    auto it = strikes.find(id);
    return it != strikes.end() && it->second >= kStrikes;
  }
  void strike(uint64_t id, bool final) {
    std::lock_guard lk(mu);
    int& n = strikes[id];
    n = final ? kStrikes : std::min(n + 1, kStrikes);
  }
  void clear(uint64_t id) {
    std::lock_guard lk(mu);
    strikes.erase(id);
  }
};
base::PerProcess<InlineWrites> g_inline_writes;

class IoUringLease {
 public:
  explicit IoUringLease(mem::StagingPool& pool) {
    IoUringSet* set;
    {
      IoUringSets& sets = g_sets.get();
      std::lock_guard lk(sets.mu);
      auto& s = sets.map[&pool];
      if (!s) {
        s = new IoUringSet;
        pool.attach(std::make_unique<SetOfPool>(&sets, &pool));
      }
      set = s;
    }
    std::lock_guard lk(set->mu);
    for (auto& r : set->rings)
      if (!r->broken.load(std::memory_order_relaxed) && r->mu.try_lock()) {
        ring_ = r.get();
        return;
      }
    auto r = std::make_unique<IoUring>();
    if (int rc = init_ring(&r->ring); rc < 0) throw Error(-rc, "io_uring_queue_init", "", base::kNoOffset);
    auto iov = pool.iovecs();
    int rc = io_uring_register_buffers(&r->ring, iov.data(), static_cast<unsigned>(iov.size()));
    r->fixed_bufs = rc == 0;
    if (rc < 0)
      base::warn_once("uring-bufs", std::string("io_uring cannot register the staging buffers (") + std::strerror(-rc) +
                                        "): raise RLIMIT_MEMLOCK (ulimit -l) to the staging pool size; "
                                        "using unregistered buffers");
    r->fixed_files = io_uring_register_files_sparse(&r->ring, kFixedFiles) == 0;
    r->mu.lock();
    ring_ = r.get();
    set->rings.push_back(std::move(r));
  }
  ~IoUringLease() { ring_->mu.unlock(); }
  IoUring* operator->() const { return ring_; }

 private:
  IoUring* ring_ = nullptr;
};

// Pieces per io_uring_enter on the O_DIRECT side: at most half the queue. The block layer merges
// contiguous bios submitted together (one plug) into one device request, up to max_sectors_kb: a
// whole queue of 16 x 64 KiB pieces went to the disk as one ~1 MiB request (perf, a liburing loop
// submitting so: 1137 requests for 16384 pieces; fio, one piece per enter, 11389), so the disk had
// one request in flight and sat idle while the caller reaped it and submitted the next (0.79 x fio
// on hot 64 KiB O_DIRECT writes). In two halves, the second is in flight while the first is reaped
// and replaced; a refill is usually half a queue anyway, so this costs about one extra enter per
// request. Buffered pieces do not reach the block layer as bios (page-cache copies, readahead,
// writeback).
unsigned submit_batch(unsigned qd) { return std::max(1u, (qd + 1) / 2); }

// Writes [at, at+len) of a request that starts at file offset `off` from `user` (the request's
// buffer) with pwrite in the calling thread, one pwrite per piece the ring would have sent: pieces of
// `step` bytes from `off`, as an io-wq worker would have written them. Not one pwrite for the whole
// range: that holds the inode lock for all of it (other requests on the file wait that long), and
// the page cache sizes its folios by the write, so one 1 GiB pwrite allocates the largest folios
// where the caller asked for pieces of `step`. On this project's VM (virtio-balloon free page
// reporting: the host takes back free memory) those came from memory the host had to fault in
// again, and fresh-file writes ran at 0.2 x fio in half the samples (docs/performance.md, issue 19).
void write_pieces(const IoContext& c, const char* user, uint64_t off, uint64_t at, size_t len, size_t step) {
  for (const uint64_t end = at + len; at < end;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(step - (at - off) % step, end - at));
    write_full(c.file.fd, user + (at - off), n, at, c.file.path);
    at += n;
  }
}

// Whether the page cache holds a realigned read's request: its head and tail inside the file, by
// cachestat (under a microsecond), or mincore before Linux 6.5; true where neither can say, and the
// pieces' RWF_NOWAIT finds out.
// Without it a cold request's first queue of pieces came back -EAGAIN, each having started the
// kernel's readahead where the stream was not reading yet: cold reads into a bytearray ran at
// 0.93-0.98x of realign=off (docs/performance.md).
bool cached_request(int fd, uint64_t off, size_t n) {
  struct stat st;
  if (fstat(fd, &st) != 0) return true;
  const uint64_t end = std::min<uint64_t>(off + n, static_cast<uint64_t>(st.st_size));
  uint64_t cached = 0, pages = 0;
  return end <= off || !base::sys::sample_cached(fd, off, end - off, &cached, &pages) || cached >= pages;
}

bool probe(std::string* why) {
  static const std::pair<bool, std::string> result = [] {
    io_uring r;
    int rc = init_ring(&r);
    if (rc < 0) return std::make_pair(false, std::string("io_uring_setup failed: ") + std::strerror(-rc));
    io_uring_queue_exit(&r);
    return std::make_pair(true, std::string());
  }();
  if (why) *why = result.second;
  return result.first;
}

class Uring final : public Mechanism {
 public:
  const char* name() const override { return "uring"; }
  int rank() const override { return 3; }
  bool available(std::string* why) const override { return probe(why); }

  const Mechanism& resolve(const IoContext& c) const override {
    std::string why;
    if (probe(&why)) {
      if (c.settings.direct && !direct_usable(c.file, c.settings, &why))
        base::warn_once("uring-direct:" + why,
                        "O_DIRECT cannot be used for '" + c.file.path + "' (" + why + "): uring runs buffered");
      return *this;
    }
    base::warn_once("uring-missing", "io_uring is not available (" + why + "): mechanism uring runs as parallel");
    return *find("parallel");
  }

  size_t read(const IoContext& c, void* buf, size_t n, uint64_t off) const override {
    return run(c, static_cast<char*>(buf), n, off, false);
  }
  void write(const IoContext& c, const void* buf, size_t n, uint64_t off) const override {
    run(c, const_cast<char*>(static_cast<const char*>(buf)), n, off, true);
  }
  void forget(uint64_t file_id) const override {
    IoUringSets& sets = g_sets.get();
    std::lock_guard lk(sets.mu);
    for (auto& [pool, set] : sets.map) {
      std::lock_guard sl(set->mu);
      for (auto& r : set->rings) {
        std::lock_guard rl(r->mu);
        if (r->broken.load(std::memory_order_relaxed)) continue;
        r->drop(file_id * 2);
        r->drop(file_id * 2 + 1);
      }
    }
    g_inline_writes->clear(file_id);
  }

 private:
  size_t run(const IoContext& c, char* user, size_t n, uint64_t off, bool write) const {
    if (n == 0) return 0;
    const bool direct = c.settings.direct && direct_usable(c.file, c.settings, nullptr);
    if (!direct) return ring_range(c, user, n, off, write, false);
    if (!write)  // O_DIRECT only within the file: past its end the kernel zeroes the caller's buffer
      return read_within_size(c.file, user, n, off,
                              [&](char* p, size_t len, uint64_t at) { return ring_range(c, p, len, at, false, true); });
    // Unaligned head and tail through the buffered descriptor, as in `direct`.
    write_direct_split(
        c.file, off, n,
        [&](size_t bo, uint64_t o, size_t len) { write_full(c.file.fd, user + bo, len, o, c.file.path); },
        [&](size_t bo, uint64_t o, size_t len) { ring_range(c, user + bo, len, o, true, true); });
    return n;
  }

  // Moves [off, off+n) through the ring; with `direct`, writes are aligned and reads are widened to
  // whole blocks (the wanted bytes are copied out of staging buffers). Buffered writes of a file
  // whose filesystem would punt them to io-wq are written inline, and buffered reads realigned
  // while they are cached (see the top of this file).
  size_t ring_range(const IoContext& c, char* user, size_t n, uint64_t off, bool write, bool direct) const {
    const bool buffered_write = write && !direct;
    const size_t A = direct ? c.file.off_align : 1;
    const uint64_t end = off + n;
    const uint64_t lo = direct ? align_down(off, A) : off, hi = direct ? align_up(end, A) : end;
    const unsigned qd = std::min(static_cast<unsigned>(kQueueDepth.num(c.settings)), kRingEntries);
    const size_t step = std::min<size_t>(task_bytes(c.settings, hi - lo, qd, A), kMaxPiece);
    if (buffered_write && g_inline_writes->has(c.file.id)) {
      write_pieces(c, user, off, off, n, step);
      return n;
    }
    const int fd = direct ? c.file.direct_fd : c.file.fd;
    const uint64_t key = c.file.id * 2 + (direct ? 1 : 0);
    // Held for the request: the rings leased from it are the pool's (SetOfPool).
    const std::shared_ptr<mem::StagingPool> held = staging_pool(c);
    mem::StagingPool& pool = *held;
    const size_t chunk = std::max<size_t>(align_down(pool.buffer_size(), A), A);
    const unsigned batch = direct ? submit_batch(qd) : qd;  // pieces per io_uring_enter
    const bool user_aligned_mode = direct && is_aligned(user + (align_up(off, A) - off), c.file.mem_align);
    // Buffered reads through the staging buffers while the page cache holds them (cleared at the
    // first piece it does not).
    bool realign = !write && !direct && realigns(c, user, n, off) && cached_request(c.file.fd, off, n);

    IoUringLease ring(pool);
    bool fixed_file = false;
    const int sqe_fd = ring->file_index(key, fd, &fixed_file);
    std::vector<Op>& ops = ring->ops;
    std::vector<unsigned>& free_ops = ring->free_ops;
    std::vector<unsigned>& resubmit = ring->resubmit;
    ops.assign(qd, Op{});
    free_ops.clear();
    for (unsigned i = qd; i-- > 0;) free_ops.push_back(i);
    unsigned inflight = 0, staged = 0;  // pieces in flight; of them holding a staging buffer
    uint64_t cur = lo, eof_at = end;
    int err = 0;
    uint64_t err_off = end;
    int dead = 0;  // the kernel refused the ring: no more submissions (1: its descriptor; 2: otherwise)
    bool inline_rest = false;  // a buffered write came back refused: the rest is written here

    // Writes [at, at+len) of the user buffer with pwrite, piece by piece; an error is recorded, not
    // thrown, because pieces may still be in flight.
    auto write_inline = [&](uint64_t at, size_t len) {
      try {
        write_pieces(c, user, off, at, len, step);
      } catch (const Error& e) {
        const uint64_t at_err = e.offset() >= 0 ? static_cast<uint64_t>(e.offset()) : at;
        if (at_err < err_off) {
          err = e.errnum();
          err_off = at_err;
        }
      }
    };
    auto submit_op = [&](unsigned i) {
      Op& o = ops[i];
      io_uring_sqe* sqe = io_uring_get_sqe(&ring->ring);
      const unsigned len = static_cast<unsigned>(o.len - o.done);
      if (o.buf >= 0 && ring->fixed_bufs) {
        if (write) io_uring_prep_write_fixed(sqe, sqe_fd, o.mem + o.done, len, o.foff + o.done, o.buf);
        else io_uring_prep_read_fixed(sqe, sqe_fd, o.mem + o.done, len, o.foff + o.done, o.buf);
      } else {
        if (write) io_uring_prep_write(sqe, sqe_fd, o.mem + o.done, len, o.foff + o.done);
        else io_uring_prep_read(sqe, sqe_fd, o.mem + o.done, len, o.foff + o.done);
      }
      // -EAGAIN instead of a punt to io-wq (writes) or a wait for the device (realigned reads)
      if (buffered_write || (o.buf >= 0 && !direct && !c.file.no_cached_reads.set.load(std::memory_order_relaxed)))
        sqe->rw_flags = RWF_NOWAIT;
      if (fixed_file) sqe->flags |= IOSQE_FIXED_FILE;
      io_uring_sqe_set_data64(sqe, i);
      ++inflight;
    };
    // Copies the part of a staged read piece that has come and that the user asked for.
    auto copy_staged = [&](const Op& o) {
      const uint64_t a = std::max(o.foff, off), b = std::min(o.foff + o.done, end);
      if (b <= a) return;
      if (direct) std::memcpy(user + (a - off), o.mem + (a - o.foff), b - a);
      else copy_out(user + (a - off), o.mem + (a - o.foff), b - a, n >= kRealignChunk);  // realigned
    };
    auto drop_op = [&](unsigned i) {  // its staging buffer back, nothing copied
      Op& o = ops[i];
      if (o.buf >= 0) {
        pool.release(static_cast<unsigned>(o.buf));
        --staged;
      }
      o = Op{};
      free_ops.push_back(i);
    };
    auto finish_op = [&](unsigned i) {
      Op& o = ops[i];
      if (!write && o.buf >= 0) copy_staged(o);
      drop_op(i);
    };
    // Prepares the next piece at `cur`; returns false if a staging buffer is needed and none is free.
    auto next_piece = [&](Op& o) -> bool {
      bool to_user = direct ? user_aligned_mode && cur >= off && cur + A <= end : !realign;
      int b = -1;
      if (!to_user) {
        b = pool.try_acquire();
        if (b < 0 && staged > 0) return false;             // this request's own pieces free some
        if (b < 0 && realign) to_user = true;              // other threads hold the pool: straight
        else if (b < 0 && inflight > 0) return false;
        else if (b < 0) b = static_cast<int>(pool.acquire());
        if (b >= 0) ++staged;
      }
      o.foff = cur;
      if (to_user) {
        const uint64_t limit = direct ? align_down(end, A) : hi;
        o.len = static_cast<size_t>(std::min<uint64_t>(step, limit - cur));
        o.mem = user + (cur - off);
      } else {
        o.buf = b;
        o.mem = static_cast<char*>(pool.data(static_cast<unsigned>(b)));
        if (realign) {  // at the offset's page offset, a piece the CPU's cache holds until it is copied on
          const size_t lead = cur % 4096;
          o.mem += lead;
          o.len = static_cast<size_t>(std::min<uint64_t>(std::min(chunk, kRealignChunk + lead) - lead, hi - cur));
        } else {
          o.len = static_cast<size_t>(std::min<uint64_t>(user_aligned_mode ? A : chunk, hi - cur));
        }
        if (write) std::memcpy(o.mem, user + (cur - off), o.len);
      }
      o.len = std::min(o.len, kMaxPiece);
      cur += o.len;
      return true;
    };

    while (true) {
      if (inline_rest && !err && cur < hi) {
        write_inline(cur, static_cast<size_t>(hi - cur));
        cur = hi;
      }
      unsigned unsent = 0;
      while (!err && inflight < qd && cur < hi && cur < eof_at && !free_ops.empty()) {
        unsigned i = free_ops.back();
        if (!next_piece(ops[i])) break;
        free_ops.pop_back();
        submit_op(i);
        // A failure here leaves the pieces in the SQ ring: the submit_and_wait below sends them again
        // and reports the error.
        if (++unsent == batch && inflight < qd && cur < hi) {
          io_uring_submit(&ring->ring);
          unsent = 0;
        }
      }
      if (inflight == 0) break;
      if (!dead) {
        int rc;
        do rc = io_uring_submit_and_wait(&ring->ring, 1);
        while (rc == -EINTR);
        if (rc < 0 && rc != -EBUSY && rc != -EAGAIN) {
          // The ring is unusable (EBADF, or EOPNOTSUPP where its number is another file's now: a
          // program closed it behind the engine's back). The pieces the kernel took still complete,
          // into the mapped completion queue, and are waited out below; those still in the
          // submission queue never will: they are dropped, or the wait spun for ever at 100% CPU
          // (shim audit, session 24). The ring is retired once nothing is in flight (retire).
          err = -rc;
          err_off = std::min(err_off, cur);
          dead = rc == -EBADF || rc == -EOPNOTSUPP ? 1 : 2;
          io_uring_sq& sq = ring->ring.sq;
          for (unsigned h = io_uring_smp_load_acquire(sq.khead); h != sq.sqe_tail; ++h, --inflight) {
            const unsigned i = static_cast<unsigned>(sq.sqes[h & *sq.kring_mask].user_data);
            err_off = std::min(err_off, ops[i].foff + ops[i].done);  // a piece never done
            drop_op(i);
          }
        }
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));  // no descriptor to wait on
      }
      io_uring_cqe* cqe;
      unsigned head, seen = 0;
      resubmit.clear();
      io_uring_for_each_cqe(&ring->ring, head, cqe) {
        ++seen;
        const unsigned i = static_cast<unsigned>(io_uring_cqe_get_data64(cqe));
        Op& o = ops[i];
        const int res = cqe->res;
        --inflight;
        // The kernel would block or punt (-EAGAIN), or takes no RWF_NOWAIT for this file: write it here.
        if (buffered_write && (res == -EAGAIN || res == -EOPNOTSUPP)) {
          if (!inline_rest) g_inline_writes->strike(c.file.id, res == -EOPNOTSUPP);
          inline_rest = true;
          if (o.foff + o.done < err_off) write_inline(o.foff + o.done, o.len - o.done);
          finish_op(i);
          continue;
        }
        // An O_DIRECT write refused (-EINVAL) or taken short at an offset O_DIRECT cannot go on from:
        // the kernel cuts a write at RLIMIT_FSIZE, which need not be aligned. The rest of the piece
        // goes through the buffered descriptor, which writes it or fails where pwrite would (EFBIG
        // at the limit). A write is never short for the end of a file: taken for one, the rest of
        // the piece and every later one were dropped and the request reported written.
        if (write && direct &&
            (res == -EINVAL || (res > 0 && static_cast<size_t>(res) < o.len - o.done && (o.foff + o.done + res) % A != 0))) {
          if (res > 0) o.done += static_cast<size_t>(res);
          const uint64_t at = o.foff + o.done;
          if (at < err_off) {
            write_inline(at, o.len - o.done);
            if (res == -EINVAL && err_off > at + (o.len - o.done)) warn_direct_write_refused(c.file, at);  // written
          }
          finish_op(i);
          continue;
        }
        // A file that takes no RWF_NOWAIT (tmpfs): its realigned pieces are read without it from now on.
        if (!write && !direct && o.buf >= 0 && res == -EOPNOTSUPP) {
          c.file.no_cached_reads.set.store(true, std::memory_order_relaxed);
          resubmit.push_back(i);
          continue;
        }
        // A realigned read the page cache does not hold: what came is copied on, and this piece and
        // every later one go straight into the user's buffer.
        if (!write && !direct && o.buf >= 0 && res == -EAGAIN) {
          realign = false;
          copy_staged(o);
          pool.release(static_cast<unsigned>(o.buf));
          --staged;
          o.buf = -1;
          o.mem = user + (o.foff - off);
          resubmit.push_back(i);
          continue;
        }
        if (res == -EINTR || res == -EAGAIN) {
          resubmit.push_back(i);
          continue;
        }
        if (res < 0) {
          if (o.foff + o.done < err_off) {
            err = -res;
            err_off = o.foff + o.done;
          }
          finish_op(i);
          continue;
        }
        if (res == 0 && write) {
          err = EIO;
          err_off = std::min(err_off, o.foff + o.done);
          finish_op(i);
          continue;
        }
        o.done += static_cast<size_t>(res);
        if (o.done < o.len && res > 0 && (o.foff + o.done) % A == 0) {
          resubmit.push_back(i);  // short transfer: ask for the rest
          continue;
        }
        if (o.done < o.len && write) {  // a write has no end of file to stop at: never dropped silently
          err = EIO;
          err_off = std::min(err_off, o.foff + o.done);
        } else if (o.done < o.len) {
          eof_at = std::min(eof_at, o.foff + o.done);  // read hit end of file
        }
        finish_op(i);
      }
      io_uring_cq_advance(&ring->ring, seen);
      for (unsigned i : resubmit) {
        if (dead) drop_op(i);
        else submit_op(i);
      }
    }
    if (dead) ring->retire(dead == 2);
    if (err) throw Error(err, write ? "io_uring write" : "io_uring read", c.file.path, static_cast<int64_t>(err_off));
    if (buffered_write && !inline_rest) g_inline_writes->clear(c.file.id);  // the ring took them all
    return static_cast<size_t>(std::clamp(eof_at, off, end) - off);
  }
};

ACCIO_REGISTER_MECHANISM(Uring, "queue_depth", "task_size", "direct", "buffer_size", "buffer_count", "huge_pages",
                         "realign");
}  // namespace
}  // namespace accio::io
