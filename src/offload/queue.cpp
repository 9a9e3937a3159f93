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
    if (x.type >= kStackIn) stack += align_up(x.len, 16);
  bool inline_ok = n <= size_t(kInlineArgs) && stack == 0;
  return inline_ok ? 0 : align_up(align_up(n, 8) + 8 * n, 16) + stack;
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
    if (x.type >= kStackIn) {
      vals[i] = stack;
      if (x.type != kStackOut && x.len) std::memcpy(data + stack, x.buf, x.len);
      if (x.type != kStackIn) {
        sh.copies.push_back(Copy{x.buf, s.data_off + stack, x.len});
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

// Publishes one piece: waits for a free slot and room in the arena (collecting results meanwhile).
bool Channel::put(std::unique_lock<std::mutex>& lk, const Piece& p, uint64_t reqid, bool last) {
  if (p.op == kVhBarrier && !vh_runner_) {  // started before the slot is taken: a refusal leaves the queue as it was
    try {
      vh_runner_ = new std::thread(&Channel::vh_loop, this);
      vh_runner_pid_ = getpid();
    } catch (const std::exception& e) {
      report(name() + ": cannot start the thread that runs host functions (" + e.what() + ")");
      return false;
    }
  }
  // Small transfers on shm travel in the slot itself.
  const bool in_slot = transport == kShm && (p.op == kWriteMem || p.op == kReadMem) && p.data_len <= kSlotDataBytes;
  const size_t len = p.op == kCall ? call_bytes(p.args) : in_slot ? 0 : p.data_len;
  if (len > arena_size) {
    report("a request of " + std::to_string(len) + " bytes of stack arguments does not fit the " +
           std::to_string(arena_size) + "-byte arena of " + name() + " (ACCIO_OFFLOAD_ARENA)");
    return false;
  }
  const uint64_t limit = deadline();
  uint64_t start = 0;
  for (;;) {
    if (dead()) {
      report(name() + ": " + proc->why_dead());
      return false;
    }
    start = align_up(a_head, 64);
    if (len && start % arena_size + len > arena_size) start += arena_size - start % arena_size;
    if (head - harvested < nslots && (len == 0 || start + len - a_tail <= arena_size)) break;
    // Collect only when out of room: reading `done` on every submission would pull its cache
    // line away from the worker each time.
    const uint64_t before = harvested;
    harvest(lk);
    if (harvested != before) continue;
    if (!wait_progress(lk, limit)) {
      report(name() + ": no room for a request after " + std::to_string(proc->opts.timeout_ms) +
             " ms (ACCIO_OFFLOAD_TIMEOUT_MS)");
      return false;
    }
  }
  const uint64_t i = head;
  Slot& s = slots[i % nslots];
  Shadow& sh = shadow[i % nslots];
  sh = Shadow{};
  sh.reqid = reqid;
  sh.last = last;
  s.op = p.op;
  s.nargs = 0;
  // Set with the slot's first stores: or'ed in after the encoding instead, this flag (never set
  // for a call) made AVEO's tests 1-4 take 1.1-1.5x as long on the 2-vCPU VM, for a reason not
  // established (docs/performance.md, "Offload runtime").
  s.flags = last ? 0 : kMorePieces;
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

// Socket transport: sends all of a frame. While the worker cannot take more, its responses are
// collected so that it is never stuck sending to us while we are stuck sending to it.
bool Channel::send_frame(std::unique_lock<std::mutex>& lk, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t w = ::send(sock, c, n, MSG_NOSIGNAL);
    if (w > 0) {
      c += w;
      n -= size_t(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN) return false;
    harvest(lk, false);  // responses only: running a host function here would interleave frames
    if (dead()) {
      errno = EPIPE;
      return false;
    }
    pollfd pf{sock, POLLOUT | POLLIN, 0};
    poll(&pf, 1, 50);
  }
  return true;
}

void Channel::finish(uint64_t i) {
  Slot& s = slots[i % nslots];
  Shadow& sh = shadow[i % nslots];
  a_tail = sh.arena_end;
  if (sh.reqid < res_base) return;  // dropped
  Result& r = results[sh.reqid - res_base];
  if (s.status == kOk) {
    if (sh.post) {  // a success's host side: data to copy back, an allocation to record
      if (sh.copy.dst)
        std::memcpy(sh.copy.dst, (s.flags & kDataInSlot) ? slot_data(s) : arena + sh.copy.off, sh.copy.len);
      for (const Copy& c : sh.copies) std::memcpy(c.dst, arena + c.off, c.len);
      if (s.op == kAlloc) {  // veo_free_mem takes only what was allocated (veo_alloc_mem or _async)
        std::lock_guard<std::mutex> g(proc->mu);
        proc->allocs[s.result] = s.size;
      }
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
      r.value = s.op == kVhBarrier ? s.size : s.result;
    }
    r.final = true;
  }
}

// Collects completed requests in order, and (run_vh) runs a host function once every request
// before it has completed (the worker waits at its barrier meanwhile).
void Channel::harvest(std::unique_lock<std::mutex>& lk, bool run_vh) {
  for (;;) {
    if (transport == kShm) {
      const uint64_t d = h->done.load(std::memory_order_acquire);
      while (harvested < d) finish(harvested++);
    } else {
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
    Result& r = results[shadow[harvested % nslots].reqid - res_base];
    if (!r.failed && r.message.empty()) r.message = why;
    finish(harvested);
  }
}

// Waits (without the lock) until the worker completes something, the proc dies or the deadline
// passes. Returns false only at the deadline.
bool Channel::wait_progress(std::unique_lock<std::mutex>& lk, uint64_t limit) {
  if (now_ns() >= limit) return false;
  const uint64_t spin = proc->opts.spin_us < 0 ? kSpinForever : uint64_t(proc->opts.spin_us) * 1000;
  lk.unlock();
  if (transport == kShm) {
    const uint64_t seen = h->done.load(std::memory_order_acquire);
    if (seen == harvested)
      wait_above(h->done, seen, h->host_sleeping, spin, 50000000,
                 [&] { return dead() || now_ns() >= limit; });
  } else {
    pollfd pf{sock, POLLIN, 0};
    poll(&pf, 1, 50);
  }
  lk.lock();
  return true;
}

int Channel::result(uint64_t reqid, uint64_t* ret, bool block, std::string* message) {
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
      return VEO_COMMAND_ERROR;
    }
  }
}

void Channel::sync() {
  std::unique_lock<std::mutex> lk(mu);
  const uint64_t target = head;
  for (;;) {
    harvest(lk);
    if (harvested >= target) return;
    if (dead()) {
      fail_pending();
      return;
    }
    wait_progress(lk, UINT64_MAX);
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
  while (!vh_stop_) {
    if (vh_queued_ == 0 || dead()) {  // nothing to run (a dead worker's are failed by its waiters)
      vh_cv_.wait(lk, [&] { return vh_stop_ || (vh_queued_ > 0 && !dead()); });
      continue;
    }
    const uint64_t before = harvested;
    harvest(lk, true);
    // Sleep until the worker completes something; a slice at a time, so that a stop is seen soon.
    if (harvested == before && !vh_stop_) wait_progress(lk, now_ns() + 50000000);
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
  const uint64_t reqid = new_request();
  if (put(lk, p, reqid, true)) return reqid;
  drop(reqid);
  return VEO_REQUEST_ID_INVALID;
}

int Channel::call(const Piece& p, uint64_t* result_out, std::string* message) {
  const uint64_t reqid = submit(p);
  if (reqid == VEO_REQUEST_ID_INVALID) {
    if (message) *message = last_error();
    return VEO_COMMAND_ERROR;
  }
  return result(reqid, result_out, true, message);
}

int Channel::transfer(bool write, uint64_t addr, void* host, size_t n, uint64_t* reqid) {
  std::unique_lock<std::mutex> lk = lock_to_submit();
  *reqid = new_request();
  const size_t piece = std::max<size_t>(4096, std::min<size_t>(arena_size / 8, 1u << 20));
  if (n == 0) {
    if (put(lk, Piece{}, *reqid, true)) return 0;
    drop(*reqid);
    return -1;
  }
  for (size_t off = 0; off < n; off += piece) {
    Piece p;
    p.op = write ? kWriteMem : kReadMem;
    p.addr = addr + off;
    p.data_len = std::min(piece, n - off);
    if (write) {
      p.in = static_cast<const char*>(host) + off;
      p.in_len = p.data_len;
    } else {
      p.out = static_cast<char*>(host) + off;
    }
    if (!put(lk, p, *reqid, off + piece >= n)) {
      drop(*reqid);
      return -1;
    }
  }
  return 0;
}

}  // namespace accio::offload
