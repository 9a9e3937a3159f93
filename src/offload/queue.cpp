// accio offload: the host side of the channel protocol (queue.hpp): a queue's memory, encoding
// requests into slots and the arena, publishing them, collecting results in order, host functions
// at their barrier (veo_call_async_vh), timeouts, and failing what is pending when the worker dies.
#include "offload/queue.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

#include "base/sys.hpp"
#include "offload/proc.hpp"
#include "offload/report.hpp"

namespace accio::offload {
namespace {

int memfd_for(size_t* len) {
  // Huge pages when the system has them to spare; otherwise normal pages (THP if shmem allows).
  constexpr size_t kHuge = 2u << 20;
  int fd = memfd_create("accio-offload", MFD_CLOEXEC | MFD_HUGETLB);
  if (fd >= 0) {
    size_t hl = align_up(*len, kHuge);
    void* probe = MAP_FAILED;
    if (ftruncate(fd, off_t(hl)) == 0)
      probe = mmap(nullptr, hl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (probe != MAP_FAILED) {
      munmap(probe, hl);
      *len = hl;
      return fd;
    }
    close(fd);
  }
  fd = memfd_create("accio-offload", MFD_CLOEXEC);
  if (fd < 0) return -errno;
  if (ftruncate(fd, off_t(*len)) != 0) {
    int e = errno;
    close(fd);
    return -e;
  }
  return fd;
}

}  // namespace

Channel::~Channel() {
  stop_vh_runner();
  if (base) munmap(base, map_len);
  if (sock >= 0) close(sock);
}

bool Channel::dead() const { return proc->dead.load(std::memory_order_acquire); }

uint64_t Channel::deadline() const {
  return proc->opts.timeout_ms > 0 ? now_ns() + uint64_t(proc->opts.timeout_ms) * 1000000u : UINT64_MAX;
}

size_t Channel::call_bytes(const struct ::veo_args* a) const {
  if (!a) return 0;
  size_t n = a->a.size(), stack = 0;
  for (const auto& x : a->a)
    if (is_stack(x.type)) stack += align_up(x.len, 16);
  bool inline_ok = n <= size_t(kInlineArgs) && stack == 0;
  return inline_ok ? 0 : align_up(align_up(n, 8) + 8 * n, 16) + stack;
}

bool Channel::args_set(const struct ::veo_args* a) const {
  const size_t n = a ? a->a.size() : 0;
  for (size_t i = 0; i < n; ++i)
    if (a->a[i].type == 0) {
      report("veo_call_async: argument #" + std::to_string(i) + " of " + std::to_string(n) + " is not set");
      return false;
    }
  return true;
}

bool Channel::encode_call(const Piece& p, Slot& s, Shadow& sh, char* data) {
  const struct ::veo_args* a = p.args;
  size_t n = a ? a->a.size() : 0;
  s.nargs = uint16_t(n);
  s.size = a ? a->ret : 0;
  uint8_t* types = s.types;
  uint64_t* vals = s.vals;
  if (s.data_len) {
    s.flags |= kArgsInArena | kDataIn;
    types = reinterpret_cast<uint8_t*>(data);
    vals = reinterpret_cast<uint64_t*>(data + align_up(n, 8));
  }
  size_t stack = align_up(align_up(n, 8) + 8 * n, 16);
  for (size_t i = 0; i < n; ++i) {
    const auto& x = a->a[i];
    if (x.type == 0) {
      report("veo_call_async: argument #" + std::to_string(i) + " of " + std::to_string(n) + " is not set");
      return false;
    }
    types[i] = x.type;
    if (is_stack(x.type)) {
      vals[i] = stack;
      if (x.type != kStackOut && x.len) std::memcpy(data + stack, x.buf, x.len);
      if (x.type != kStackIn) {
        sh.copies.push_back(Copy{x.back ? x.back : x.buf, s.data_off + stack, x.len});
        sh.post = true;
        s.flags |= kDataBack;
      }
      stack += align_up(x.len, 16);
    } else {
      vals[i] = x.val;
    }
  }
  return true;
}

bool Channel::start_runner() {
  if (vh_runner_) return true;
  try {
    vh_runner_ = new std::thread(base::sys::quiet_thread(&Channel::vh_loop, this));
    vh_runner_pid_ = getpid();
  } catch (const std::exception& e) {
    report(name() + ": cannot start the thread that runs host functions and queued requests (" + e.what() + ")");
    return false;
  }
  return true;
}

// Queues one piece: into the ring if it has room and nothing waits on the host before it, else on
// the host. Never waits for long (put_slow).
bool Channel::put(std::unique_lock<std::mutex>& lk, const Piece& p, uint64_t reqid, bool last,
                  const std::shared_ptr<void>* keep) {
  if (p.op == kVhBarrier && !start_runner()) return false;  // before the slot is taken: a refusal leaves the queue as it was
  if (dead()) [[unlikely]] {
    report(name() + ": " + proc->why_dead());
    return false;
  }
  // Small transfers on shm travel in the slot itself.
  const bool in_slot = transport == kShm && (p.op == kWriteMem || p.op == kReadMem) && p.data_len <= kSlotDataBytes;
  const size_t len = p.op == kCall ? call_bytes(p.args) : in_slot ? 0 : p.data_len;
  if (len > arena_size) [[unlikely]] {
    // A call whose stack arguments do not fit the arena (submit's, its only piece) is staged.
    if (p.op == kCall && last && !p.value) return put_staged(lk, p, reqid);
    report("a request of " + std::to_string(len) + " bytes does not fit the " + std::to_string(arena_size) +
           "-byte arena of " + name() + " (ACCIO_OFFLOAD_ARENA)");
    return false;
  }
  if (npending_ == 0) [[likely]] {
    uint64_t start = 0;
    if (room(len, &start)) return publish_piece_inline(lk, p, reqid, last, start, len, in_slot);
  }
  return put_slow(lk, p, reqid, last, len, in_slot, keep);
}

// No room in the ring or the arena, or pieces wait on the host before this one. While the worker
// is completing requests, the piece waits for room for up to kRoomWaitNs (the lock held, so that a
// multi-piece request is not interleaved with another thread's), collecting what completes and
// moving waiting pieces into the ring meanwhile. A queue submitted faster than the worker runs it
// (AVEO's tests 1 and 3: 10000 calls, 256 slots) so costs what waiting for room cost before
// submission stopped blocking; deferring instead took two allocations, a copy of the arguments
// and the progress thread's work per piece, and once one piece waited on the host every later one
// did too (a third of tests 1 and 3's calls were deferred). A worker that completes nothing within
// kRoomWaitNs (a kernel that runs long, or waits for the host) gets no wait: the piece waits on
// the host at once, and so do the next ones until the worker completes something.
bool Channel::put_slow(std::unique_lock<std::mutex>& lk, const Piece& p, uint64_t reqid, bool last, size_t len,
                       bool in_slot, const std::shared_ptr<void>* keep) {
  for (;;) {
    // Collect only when out of room: reading `done` on every submission would pull its cache
    // line away from the worker each time.
    harvest(lk);
    uint64_t start = 0;
    if (npending_ == 0 && room(len, &start)) return publish_piece(lk, p, reqid, last, start, len, in_slot);
    if (transport != kShm || harvested == stalled_at_ || dead()) break;
    // One budget per call (submit, transfer), not per piece: a 256 MiB transfer's 256 pieces each
    // waiting for room held the caller, and every thread of the context, for most of the transfer.
    if (!call_wait_until_) call_wait_until_ = now_ns() + kRoomWaitNs;
    if (!progress_within(call_wait_until_)) {
      stalled_at_ = harvested;
      break;
    }
  }
  if (p.op == kCall && !args_set(p.args)) return false;  // checked now: it is encoded later
  return defer(p, reqid, last, keep);
}

// Spins (the lock held) until the worker completes a request or `until` passes.
bool Channel::progress_within(uint64_t until) const {
  for (unsigned k = 1;; ++k) {
    if (h->done.load(std::memory_order_acquire) > harvested) return true;
    cpu_relax();
    if ((k & 15) == 0 && now_ns() >= until) return false;
  }
}

bool Channel::defer(const Piece& p, uint64_t reqid, bool last, const std::shared_ptr<void>* keep) {
  if (!start_runner()) return false;
  Pending q{p, reqid, last, keep ? *keep : nullptr};
  try {
    if (p.op == kCall && p.args) {
      // AVEO copies a call's arguments and IN data at submission: the caller may change or free
      // them (and the veo_args) once veo_call_async returns. OUT data goes to the caller's buffer.
      struct OwnedArgs {
        ::veo_args args;
        std::vector<std::unique_ptr<char[]>> bufs;
        std::shared_ptr<void> outer;
      };
      auto own = std::make_shared<OwnedArgs>();
      own->args = *p.args;
      if (keep) own->outer = *keep;
      for (auto& x : own->args.a) {
        if (!is_stack(x.type)) continue;
        if (x.type != kStackIn) x.back = x.back ? x.back : x.buf;
        if (x.type != kStackOut && x.len) {
          own->bufs.emplace_back(new char[x.len]);
          std::memcpy(own->bufs.back().get(), x.buf, x.len);
          x.buf = own->bufs.back().get();
        }
      }
      q.p.args = &own->args;
      q.keep = own;
    } else if (p.in_len && p.op != kWriteMem) {  // a name: copied (a transfer's source is the caller's)
      auto buf = std::shared_ptr<char[]>(new char[p.in_len]);
      std::memcpy(buf.get(), p.in, p.in_len);
      q.p.in = buf.get();
      q.keep = buf;
    }
    pending_.push_back(std::move(q));
  } catch (const std::bad_alloc&) {
    report(name() + ": out of memory queueing a request on the host");
    return false;
  }
  // The progress thread sleeps on vh_cv_ only while nothing waits on the host.
  if (npending_++ == 0) vh_cv_.notify_one();
  return true;
}

void Channel::drain(std::unique_lock<std::mutex>& lk) {
  while (npending_ && !dead()) {
    Pending& q = pending_.front();
    const Piece& p = q.p;
    const bool in_slot = transport == kShm && (p.op == kWriteMem || p.op == kReadMem) && p.data_len <= kSlotDataBytes;
    const size_t len = p.op == kCall ? call_bytes(p.args) : in_slot ? 0 : p.data_len;
    uint64_t start = 0;
    if (!room(len, &start)) return;
    Pending q2 = std::move(q);
    pending_.pop_front();
    --npending_;
    if (!publish_piece(lk, q2.p, q2.reqid, q2.last, start, len, in_slot)) {
      fail_request(q2.reqid, EPIPE, last_error());
      return;
    }
  }
}

// A request that cannot complete (a piece could not be sent, or the worker is gone before its
// pieces reached the ring): it fails with this reason, and its pieces still on the host go.
void Channel::forget_pending(uint64_t reqid) {
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [&](const Pending& q) { return q.reqid == reqid; }),
                 pending_.end());
  npending_ = pending_.size();
}

void Channel::fail_request(uint64_t reqid, int err, const std::string& why) {
  forget_pending(reqid);
  if (reqid < res_base) return;
  Result& r = results[reqid - res_base];
  if (!r.failed) {
    r.failed = true;
    r.status = kError;
    r.err = err;
    if (r.message.empty()) r.message = why;
  }
  r.final = true;  // its last piece never reaches the ring; those that did complete harmlessly
}

void Channel::abandon(uint64_t reqid) {
  std::lock_guard<std::mutex> g(mu);
  forget_pending(reqid);
  for (uint64_t i = harvested; i < head; ++i) {
    Shadow& sh = shadow[i % nslots];
    if (sh.reqid != reqid) continue;
    sh.copy.dst = nullptr;
    sh.copies.clear();
  }
  if (reqid >= res_base && reqid < next_reqid) {
    Result& r = results[reqid - res_base];
    r.picked = true;
    r.final = true;
    pop_picked();
  }
}

// A call whose arguments do not fit the arena (AVEO takes up to 63 MB of stack arguments): the
// worker allocates a staging area for them, the IN data goes there in arena-sized pieces, the call
// gets pointers into it, OUT data comes back in pieces, and the area is freed, all in order as one
// request whose result is the call's.
bool Channel::put_staged(std::unique_lock<std::mutex>& lk, const Piece& p, uint64_t reqid) {
  const struct ::veo_args* a = p.args;
  if (!args_set(a)) return false;
  uint64_t total = 0;
  for (const auto& x : a->a)
    if (is_stack(x.type)) total += align_up(x.len, 16);
  if (total > kMaxStackArgs) {
    report("veo_call_async: " + std::to_string(total) + " bytes of stack arguments exceed AVEO's limit of " +
           std::to_string(kMaxStackArgs) + " bytes (63 MiB: the VE stack is 64 MiB) and the " +
           std::to_string(arena_size) + "-byte arena of " + name() +
           " (ACCIO_OFFLOAD_ARENA); pass larger data in memory from veo_alloc_mem");
    return false;
  }
  struct Staged {
    ::veo_args args;                 // the call's, with its stack arguments as kStageRef offsets
    std::unique_ptr<char[]> image;   // the IN and INOUT data, copied at submission
  };
  std::shared_ptr<Staged> st;
  try {
    st = std::make_shared<Staged>();
    st->args.ret = a->ret;
    st->args.a = a->a;
    st->image.reset(new char[total]);
  } catch (const std::bad_alloc&) {
    report("veo_call_async: out of memory copying " + std::to_string(total) + " bytes of stack arguments");
    return false;
  }
  const std::shared_ptr<void> keep = st;
  const size_t piece = std::max<size_t>(4096, std::min<size_t>(arena_size / 8, 1u << 20));
  Piece alloc;
  alloc.op = kStageAlloc;
  alloc.size = total;
  if (!put(lk, alloc, reqid, false, &keep)) return false;
  uint64_t off = 0;
  for (auto& x : st->args.a) {
    if (!is_stack(x.type)) continue;
    if (x.type != kStackOut && x.len) std::memcpy(st->image.get() + off, x.buf, x.len);
    for (size_t k = 0; x.type != kStackOut && k < x.len; k += piece) {
      Piece w;
      w.op = kWriteMem;
      w.slot_flags = kStageRel;
      w.addr = off + k;
      w.data_len = std::min(piece, x.len - k);
      w.in = st->image.get() + off + k;
      w.in_len = w.data_len;
      if (!put(lk, w, reqid, false, &keep)) return false;
    }
    x.val = off;  // the call sees stage + off; x.buf still names the caller's buffer for OUT/INOUT
    off += align_up(x.len, 16);
  }
  // The call itself: its arguments point into the staging area.
  ::veo_args call_args;
  call_args.ret = a->ret;
  call_args.a = st->args.a;
  for (auto& x : call_args.a)
    if (is_stack(x.type)) x = ::veo_args::Arg{kStageRef, x.val, nullptr, 0, nullptr};
  Piece c;
  c.op = kCall;
  c.addr = p.addr;
  c.args = &call_args;  // encoded now, or copied by defer
  c.value = true;
  if (!put(lk, c, reqid, false, &keep)) return false;
  for (const auto& x : st->args.a) {
    if (x.type != kStackOut && x.type != kStackInOut) continue;
    for (size_t k = 0; k < x.len; k += piece) {
      Piece r;
      r.op = kReadMem;
      r.slot_flags = kStageRel;
      r.after_value = true;
      r.addr = x.val + k;
      r.data_len = std::min(piece, x.len - k);
      r.out = x.buf + k;
      if (!put(lk, r, reqid, false, &keep)) return false;
    }
  }
  Piece f;
  f.op = kStageFree;
  f.after_value = true;
  return put(lk, f, reqid, true, &keep);
}

// put's own copy is inlined into it (the common case: room at once); the slow paths call this one.
bool Channel::publish_piece(std::unique_lock<std::mutex>& lk, const Piece& p, uint64_t reqid, bool last,
                            uint64_t start, size_t len, bool in_slot) {
  return publish_piece_inline(lk, p, reqid, last, start, len, in_slot);
}

inline bool Channel::publish_piece_inline(std::unique_lock<std::mutex>& lk, const Piece& p, uint64_t reqid, bool last,
                                          uint64_t start, size_t len, bool in_slot) {
  const uint64_t i = head;
  Slot& s = slots[i % nslots];
  Shadow& sh = shadow[i % nslots];
  sh = Shadow{};
  sh.reqid = reqid;
  sh.last = last;
  sh.value = p.value;
  s.op = p.op;
  s.nargs = 0;
  // Set with the slot's first stores: or'ed in after the encoding instead, this flag (never set
  // for a call) made AVEO's tests 1-4 take 1.1-1.5x as long on the 2-vCPU VM, for a reason not
  // established (docs/performance.md, "Offload runtime").
  s.flags = uint16_t(((last && !p.after_value) || p.value ? 0 : kMorePieces) | p.slot_flags);
  s.addr = p.addr;
  s.size = p.size;
  s.data_off = len ? start % arena_size : 0;
  s.data_len = in_slot ? p.data_len : len;
  s.status = kUnfinished;
  s.err = 0;
  s.result = 0;
  char* data = in_slot ? slot_data(s) : arena + s.data_off;
  if (in_slot) s.flags |= kDataInSlot;
  if (p.op == kCall) {
    if (!encode_call(p, s, sh, data)) return false;
  } else {
    if (p.in_len) {
      std::memcpy(data, p.in, p.in_len);
      s.flags |= kDataIn;
    }
    if (p.out) {
      sh.copy = Copy{p.out, s.data_off, s.data_len};
      s.flags |= kDataBack;
      sh.post = true;
    }
    if (p.op == kAlloc) sh.post = true;
    if (p.op == kLoadLib || p.op == kGetSym) s.flags |= kDataBack;  // the worker's message
    sh.vh = p.vh;
    if (p.op == kVhBarrier) sh.vh_arg = p.vh_arg;  // the union's other member (src) is kCopyMem's
    if (p.op == kCopyMem) s.vals[0] = p.src;
  }
  sh.arena_end = len ? start + len : a_head;
  a_head = sh.arena_end;
  head = i + 1;
  if (p.op == kVhBarrier) {
    ++vh_queued_;
    vh_cv_.notify_one();
  }
  if (transport == kShm) {
    publish(h->head, head, h->worker_sleeping);
  } else {
    SocketRequest rq{i, s};
    if (!send_frame(lk, &rq, sizeof rq) || ((s.flags & kDataIn) && !send_frame(lk, data, s.data_len))) {
      report(name() + ": sending a request: " + errstr(errno));
      return false;
    }
  }
  return true;
}

// Socket transport: sends a frame without waiting. What the socket does not take now (the worker
// reads frames only as it reaches them, so a kernel that runs long fills the socket) waits in
// outbuf_, in order, and goes out as the worker reads (flush_out, from harvest: a waiter, or the
// queue's progress thread, started for it). False only when the socket failed.
bool Channel::send_frame(std::unique_lock<std::mutex>&, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  if (out_off_ == outbuf_.size()) {
    while (n) {
      ssize_t w = ::send(sock, c, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        c += w;
        n -= size_t(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return false;
    }
  }
  if (n) {
    try {
      outbuf_.append(c, n);
    } catch (const std::bad_alloc&) {
      errno = ENOMEM;
      return false;
    }
    if (start_runner()) vh_cv_.notify_one();
  }
  return true;
}

void Channel::flush_out() {
  while (out_off_ < outbuf_.size()) {
    ssize_t w = ::send(sock, outbuf_.data() + out_off_, outbuf_.size() - out_off_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      out_off_ += size_t(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    break;  // the worker is gone: the watchdog says so, and what is pending fails
  }
  outbuf_.clear();
  out_off_ = 0;
}

void Channel::finish(uint64_t i) {
  Slot& s = slots[i % nslots];
  Shadow& sh = shadow[i % nslots];
  a_tail = sh.arena_end;
  if (sh.reqid < res_base) return;  // dropped
  Result& r = results[sh.reqid - res_base];
  if (s.status == kOk) {
    if (sh.post && !r.failed) {  // a success's host side: data to copy back, an allocation to record
      if (sh.copy.dst)
        std::memcpy(sh.copy.dst, (s.flags & kDataInSlot) ? slot_data(s) : arena + sh.copy.off, sh.copy.len);
      for (const Copy& c : sh.copies) std::memcpy(c.dst, arena + c.off, c.len);
      if (s.op == kAlloc) {  // veo_free_mem takes only what was allocated (veo_alloc_mem or _async)
        std::lock_guard<std::mutex> g(proc->mu);
        proc->allocs[s.result] = s.size;
      }
    }
    if (sh.value && !r.failed) {  // a staged call's call piece: the request's result
      r.value = s.result;
      r.has_value = true;
    }
  } else if (!r.failed) {
    r.failed = true;
    r.status = s.status == kException ? kException : kError;
    r.err = s.err;
    r.value = s.result;
    if (s.op == kLoadLib || s.op == kGetSym) {  // name, NUL, then the worker's message
      const char* d = arena + s.data_off;
      size_t nlen = strnlen(d, s.data_len);
      size_t mlen = nlen + 1 < s.data_len ? strnlen(d + nlen + 1, s.data_len - nlen - 1) : 0;
      if (mlen) r.message.assign(d + nlen + 1, mlen);  // else keep the reason already there (a dead worker)
    }
  }
  if (sh.last) {
    if (!r.failed) {
      r.status = kOk;
      if (!r.has_value) r.value = s.op == kVhBarrier ? s.size : s.result;
    }
    r.final = true;
  }
}

// Collects completed requests in order, moves waiting pieces into the room that frees,
// and (run_vh) runs a host function once every request before it has completed (the worker waits
// at its barrier meanwhile).
void Channel::harvest(std::unique_lock<std::mutex>& lk, bool run_vh) {
  if (!run_vh) host_harvested_ = true;
  for (;;) {
    if (transport == kShm) {
      const uint64_t d = h->done.load(std::memory_order_acquire);
      while (harvested < d) finish(harvested++);
    } else {
      if (out_off_ < outbuf_.size()) flush_out();
      while (harvested < head) {
        SocketResponse r;
        ssize_t got = ::recv(sock, &r, sizeof r, MSG_DONTWAIT);
        if (got <= 0) break;
        if (size_t(got) < sizeof r && !recv_all(sock, reinterpret_cast<char*>(&r) + got, sizeof r - size_t(got))) break;
        Slot& s = slots[harvested % nslots];
        s.status = r.status;
        s.err = r.err;
        s.result = r.result;
        if ((s.flags & kDataBack) && !recv_all(sock, arena + s.data_off, s.data_len)) break;
        finish(harvested++);
      }
    }
    if (npending_) drain(lk);
    if (harvested == head || !run_vh) return;
    Slot& s = slots[harvested % nslots];
    Shadow& sh = shadow[harvested % nslots];
    if (s.op != kVhBarrier || sh.vh_state != 0 || dead()) return;
    sh.vh_state = 1;
    const uint64_t i = harvested;
    auto fn = sh.vh;
    void* arg = sh.vh_arg;
    lk.unlock();
    const uint64_t v = fn(arg);
    lk.lock();
    Slot& s2 = slots[i % nslots];
    s2.size = v;  // the barrier's result travels in `size`, which the worker leaves alone
    shadow[i % nslots].vh_state = 2;
    --vh_queued_;
    if (transport == kShm) {
      publish(h->vh_released, i + 1, h->worker_vh_sleeping);
    } else {
      SocketRequest rel{};
      rel.index = i;
      rel.slot.op = kVhRelease;
      send_frame(lk, &rel, sizeof rel);
      // the worker answers the barrier with its own response, which does not carry `size`
    }
  }
}

// The worker is gone: what it finished is collected, everything else fails. A request the
// worker marked in its fatal-signal handler is an exception with that signal.
void Channel::fail_pending() {
  if (transport == kSocket) {
    // The handler may have sent the running request's exception before the worker died.
    while (harvested < head) {
      SocketResponse r;
      if (::recv(sock, &r, sizeof r, MSG_DONTWAIT) != ssize_t(sizeof r)) break;
      Slot& s = slots[harvested % nslots];
      s.status = r.status;
      s.err = r.err;
      s.result = r.result;
      if (r.status == kException) {
        finish(harvested++);
        break;
      }
      if (s.flags & kDataBack) break;  // its data cannot follow reliably
      finish(harvested++);
    }
  } else {
    const uint64_t d = h->done.load(std::memory_order_acquire);
    while (harvested < d && harvested < head) finish(harvested++);
  }
  const std::string why = proc->why_dead();
  for (; harvested < head; ++harvested) {
    Slot& s = slots[harvested % nslots];
    if (s.status != kException) {
      s.status = kError;
      s.err = EPIPE;
    }
    const uint64_t rid = shadow[harvested % nslots].reqid;
    if (rid >= res_base) {
      Result& r = results[rid - res_base];
      if (!r.failed && r.message.empty()) r.message = why;
    }
    finish(harvested);
  }
  while (npending_) fail_request(pending_.front().reqid, EPIPE, why);  // never reached the ring
  outbuf_.clear();
  out_off_ = 0;
}

// Waits (without the lock) until the worker completes something, the proc dies or the deadline
// passes. Returns false only at the deadline.
bool Channel::wait_progress(std::unique_lock<std::mutex>& lk, uint64_t limit) {
  if (now_ns() >= limit) return false;
  const uint64_t spin = proc->opts.spin_us < 0 ? kSpinForever : uint64_t(proc->opts.spin_us) * 1000;
  const short events = short(POLLIN | (out_off_ < outbuf_.size() ? POLLOUT : 0));  // socket: frames to send too
  lk.unlock();
  if (transport == kShm) {
    const uint64_t seen = h->done.load(std::memory_order_acquire);
    if (seen == harvested)
      wait_above(h->done, seen, h->host_sleeping, spin, 50000000,
                 [&] { return dead() || now_ns() >= limit; });
  } else {
    pollfd pf{sock, events, 0};
    poll(&pf, 1, 50);
  }
  lk.lock();
  return true;
}

namespace {
// errno as the caller had it when a wait returns, unless it ran out (ETIMEDOUT, which callers read:
// the Python wrapper keeps a request that timed out): the timed-out futex slices on the way do not
// leak out as if the wait had.
struct KeepErrno {
  int saved = errno;
  bool restore = true;
  ~KeepErrno() {
    if (restore) errno = saved;
  }
  void timed_out() {
    restore = false;
    errno = ETIMEDOUT;
  }
};
}  // namespace

int Channel::result(uint64_t reqid, uint64_t* ret, bool block, std::string* message) {
  KeepErrno keep_errno;
  std::unique_lock<std::mutex> lk(mu);
  const uint64_t limit = block ? deadline() : 0;
  for (;;) {
    if (reqid < res_base || reqid >= next_reqid || results[reqid - res_base].picked) {
      report(name() + ": request " + std::to_string(reqid) + " is unknown or was already picked up");
      return VEO_COMMAND_ERROR;
    }
    harvest(lk);
    if (dead() && !results[reqid - res_base].final) fail_pending();
    Result& r = results[reqid - res_base];
    if (r.final) {
      if (ret) *ret = r.value;
      int st = int(r.status);
      if (st == kException) {
        report(name() + ": request " + std::to_string(reqid) + " raised " + signame(r.err) + " in the worker");
      } else if (st == kError) {
        std::string why = !r.message.empty() ? r.message : errstr(r.err);
        if (message) *message = why;
        else report(name() + ": request " + std::to_string(reqid) + ": " + why);
      }
      r.picked = true;
      pop_picked();
      return st;
    }
    if (!block) return VEO_COMMAND_UNFINISHED;
    if (!wait_progress(lk, limit)) {
      report(name() + ": request " + std::to_string(reqid) + " did not finish within " +
             std::to_string(proc->opts.timeout_ms) + " ms (ACCIO_OFFLOAD_TIMEOUT_MS)");
      keep_errno.timed_out();  // the request is still queued (a failed one is picked up): callers tell them apart
      return VEO_COMMAND_ERROR;
    }
  }
}

bool Channel::sync() {
  KeepErrno keep_errno;
  std::unique_lock<std::mutex> lk(mu);
  const uint64_t target = head + npending_;  // the waiting pieces take the next ring positions
  const uint64_t limit = deadline();  // ACCIO_OFFLOAD_TIMEOUT_MS bounds this wait too
  for (;;) {
    harvest(lk);
    // Waiting pieces another thread dropped meanwhile (a timed-out veo_read_mem) never take their
    // positions: the target shrinks with them, or sync waited for ever.
    if (harvested >= std::min(target, head + npending_)) return true;
    if (dead()) {
      fail_pending();
      return true;
    }
    if (!wait_progress(lk, limit)) {
      report(name() + ": veo_context_sync: its requests did not finish within " + std::to_string(proc->opts.timeout_ms) +
             " ms (ACCIO_OFFLOAD_TIMEOUT_MS)");
      keep_errno.timed_out();
      return false;
    }
  }
}

bool Channel::map(uint32_t kind, uint32_t n, uint64_t arena_bytes, int64_t spin_us, int* worker_fd) {
  transport = kind;
  nslots = n;
  arena_size = arena_bytes;
  const uint64_t arena_off = align_up(kSlotsOffset + uint64_t(nslots) * sizeof(Slot), 4096);
  size_t len = arena_off + arena_size;
  int fd = -1;
  void* mem = MAP_FAILED;
  if (transport == kShm) {
    fd = memfd_for(&len);
    if (fd < 0) {
      report("veo_context_open: memfd_create: " + errstr(-fd));
      return false;
    }
    mem = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  } else {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      report("veo_context_open: socketpair: " + errstr(errno));
      return false;
    }
    sock = sv[0];
    fd = sv[1];
    mem = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  if (mem == MAP_FAILED) {
    report("veo_context_open: mmap of " + std::to_string(len) + " bytes: " + errstr(errno));
    close(fd);
    return false;
  }
  base = static_cast<char*>(mem);
  map_len = len;
  h = new (mem) ChannelHeader{};
  h->magic = kMagic;
  h->protocol = kProtocol;
  h->nslots = nslots;
  h->spin_us = spin_us < 0 ? UINT32_MAX : uint32_t(std::min<int64_t>(spin_us, UINT32_MAX - 1));
  h->arena_off = arena_off;
  h->arena_size = arena_size;
  slots = reinterpret_cast<Slot*>(base + kSlotsOffset);
  arena = base + arena_off;
  shadow.resize(nslots);
  if (transport == kShm) madvise(mem, len, MADV_HUGEPAGE);
  *worker_fd = fd;
  return true;
}

namespace {
thread_local const Channel* t_vh_runner_of = nullptr;  // the queue whose host functions this thread runs
}  // namespace

bool Channel::on_vh_runner() const { return t_vh_runner_of == this; }

void Channel::vh_loop() {
  t_vh_runner_of = this;
  std::unique_lock<std::mutex> lk(mu);
  // The poll below backs off while nothing completes (a kernel that runs for minutes with pieces
  // waiting behind it cost 10000 wake-ups a second, each taking the lock), and starts over at progress.
  int poll_us = kDrainPollUs;
  while (!vh_stop_) {
    auto idle = [&] { return (vh_queued_ == 0 && npending_ == 0 && out_off_ == outbuf_.size()) || dead(); };
    if (idle()) {  // nothing to do (a dead worker's requests are failed by its waiters)
      vh_cv_.wait(lk, [&] { return vh_stop_ || !idle(); });
      continue;
    }
    if (vh_queued_ == 0 && transport == kShm && std::exchange(host_harvested_, false)) {
      // Only pieces waiting for room, and a host thread that submits or waits has collected since
      // the last look: it moves them itself; taking the lock to do it too would only contend.
      vh_cv_.wait_for(lk, std::chrono::microseconds(kDrainPollUs));
      continue;
    }
    const uint64_t before = harvested;
    harvest(lk, true);
    if (harvested != before) poll_us = kDrainPollUs;
    if (harvested != before || vh_stop_) continue;
    if (vh_queued_ || transport != kShm) {
      // Sleep until the worker completes something; a slice at a time, so that a stop is seen soon.
      wait_progress(lk, now_ns() + 50000000);
    } else {
      // Only pieces waiting on the host for room: a thread that submits or waits on this queue
      // moves them itself; this one polls, so that it neither spins on a CPU the worker needs nor
      // sleeps on `done`, which would make the worker wake it at every completion (a system call
      // per request).
      vh_cv_.wait_for(lk, std::chrono::microseconds(poll_us));
      poll_us = std::min(poll_us * 2, kDrainPollMaxUs);
    }
  }
}

void Channel::stop_vh_runner() {
  if (!vh_runner_) return;
  if (getpid() != vh_runner_pid_) return;  // a forked child: the thread is the parent's
  {
    std::lock_guard<std::mutex> g(mu);
    vh_stop_ = true;
  }
  vh_cv_.notify_all();
  wake_all();
  vh_runner_->join();
  delete vh_runner_;
  vh_runner_ = nullptr;
}

void Channel::wake_all() {
  if (transport == kShm) futex_wake_all(low_word(h->done));
}

void Channel::wait_unblocked(std::unique_lock<std::mutex>& lk) {
  const pthread_t self = pthread_self();
  block_cv_.wait(lk, [&] { return block_depth_ == 0 || pthread_equal(block_owner_, self); });
}

void Channel::block_begin() {
  std::unique_lock<std::mutex> lk(mu);
  wait_unblocked(lk);
  block_owner_ = pthread_self();
  ++block_depth_;
}

bool Channel::block_end() {
  std::lock_guard<std::mutex> g(mu);
  if (!block_depth_ || !pthread_equal(block_owner_, pthread_self())) return false;
  if (--block_depth_ == 0) block_cv_.notify_all();
  return true;
}

uint64_t Channel::submit(const Piece& p) {
  std::unique_lock<std::mutex> lk = lock_to_submit();
  call_wait_until_ = 0;  // this call's wait for room starts unspent (put_slow)
  const uint64_t reqid = new_request();
  if (put(lk, p, reqid, true)) return reqid;  // a call too large for the arena is staged there
  drop(reqid);
  return VEO_REQUEST_ID_INVALID;
}

int Channel::call(const Piece& p, uint64_t* result_out, std::string* message) {
  const uint64_t reqid = submit(p);
  if (reqid == VEO_REQUEST_ID_INVALID) {
    if (message) *message = last_error();
    return VEO_COMMAND_ERROR;
  }
  const int st = result(reqid, result_out, true, message);
  // A wait that timed out leaves the request queued, and its caller (veo_call_sync, veo_alloc_mem,
  // ...) has no id to collect it with: it is abandoned, so that its OUT and INOUT stack data are not
  // copied into the caller's buffers after it returned (they may be its stack by then), and its
  // result does not stay in the table for good. (A result picked up already makes this a no-op.)
  if (st != VEO_COMMAND_OK) abandon(reqid);
  return st;
}

int Channel::transfer(bool write, uint64_t addr, void* host, size_t n, uint64_t* reqid, bool copy_source) {
  std::unique_lock<std::mutex> lk = lock_to_submit();
  call_wait_until_ = 0;  // this call's wait for room starts unspent (put_slow)
  *reqid = new_request();
  const size_t piece = std::max<size_t>(4096, std::min<size_t>(arena_size / 8, 1u << 20));
  if (n == 0) {
    if (put(lk, Piece{}, *reqid, true)) return 0;
    drop(*reqid);
    return -1;
  }
  std::shared_ptr<char[]> copy;  // the rest of a write's source, once its pieces wait on the host
  size_t copy_from = 0;
  for (size_t off = 0; off < n; off += piece) {
    Piece p;
    p.op = write ? kWriteMem : kReadMem;
    p.addr = addr + off;
    p.data_len = std::min(piece, n - off);
    if (write) {
      p.in = copy ? copy.get() + (off - copy_from) : static_cast<const char*>(host) + off;
      p.in_len = p.data_len;
    } else {
      p.out = static_cast<char*>(host) + off;
    }
    const std::shared_ptr<void> keep = copy;
    if (!put(lk, p, *reqid, off + piece >= n, copy ? &keep : nullptr)) {
      drop(*reqid);
      return -1;
    }
    if (write && copy_source && !copy && npending_) {
      // This piece waits on the host (it is the last there), and so will the rest: veo_async_write_mem
      // promises its source is copied at submission, so they are copied now.
      try {
        copy.reset(new char[n - off]);
      } catch (const std::bad_alloc&) {
        report(name() + ": out of memory copying the " + std::to_string(n - off) +
               " bytes of a write that wait for room on the host");
        drop(*reqid);
        return -1;
      }
      std::memcpy(copy.get(), static_cast<const char*>(host) + off, n - off);
      copy_from = off;
      pending_.back().p.in = copy.get();
      pending_.back().keep = copy;
    }
  }
  return 0;
}

}  // namespace accio::offload
