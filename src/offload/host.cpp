// accio offload: the host side of the VEO API. A proc is a worker process started with
// posix_spawn and connected by a socketpair (control messages, and its death: the socket hangs
// up). Each queue (the proc's own and one per context) is a Channel: a ring of request slots and a
// payload arena in a memfd both processes map (channel.hpp). Requests get ids in submission order;
// results are collected ("harvested") in order by whichever host thread waits, peeks or needs room.
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "accio/ve_offload.h"
#include "base/settings.hpp"
#include "offload/channel.hpp"

extern char** environ;

namespace accio::offload {
namespace {

thread_local std::string t_error;

// Records the calling thread's last error and prints it like VEO's log does (ACCIO_QUIET=1: not).
void report(std::string msg) {
  t_error = std::move(msg);
  static const bool quiet = [] {
    const char* q = getenv("ACCIO_QUIET");
    return q && *q && strcmp(q, "0") != 0;
  }();
  if (!quiet) fprintf(stderr, "accio offload: %s\n", t_error.c_str());
}

std::string errstr(int e) { return std::string(strerror(e)) + " (errno " + std::to_string(e) + ")"; }

std::string signame(int sig) {
  const char* d = strsignal(sig);
  return "signal " + std::to_string(sig) + " (" + (d ? d : "?") + ")";
}

}  // namespace

struct Proc;

// One stack argument, a copy back into the caller's buffer, one result.
struct Copy {
  void* dst;
  uint64_t off;  // arena offset
  size_t len;
};

struct Shadow {  // host-only bookkeeping of one slot
  uint64_t reqid = 0;
  uint64_t arena_end = 0;  // arena counter once this slot's data is released
  bool last = false;       // the last piece of its request
  Copy copy{};             // a read_mem piece
  std::vector<Copy> copies;  // OUT/INOUT stack arguments
  uint64_t (*vh)(void*) = nullptr;
  void* vh_arg = nullptr;
  int vh_state = 0;  // 0 pending, 1 running, 2 released
};

struct Result {
  uint64_t value = 0;
  uint32_t status = kUnfinished;
  int32_t err = 0;
  bool final = false;
  bool failed = false;
  bool picked = false;
  std::string message;
};

// What one request piece asks for.
struct Piece {
  uint32_t op = kNop;
  uint64_t addr = 0, size = 0;
  const struct ::veo_args* args = nullptr;
  const void* in = nullptr;  // copied into the arena
  size_t in_len = 0;
  void* out = nullptr;       // the arena range is copied back here when harvested
  size_t data_len = 0;       // arena bytes (>= in_len)
  uint64_t (*vh)(void*) = nullptr;
  void* vh_arg = nullptr;
};

class Channel {
 public:
  Proc* proc = nullptr;
  uint32_t id = 0;
  uint32_t transport = kShm;
  char* base = nullptr;
  size_t map_len = 0;
  ChannelHeader* h = nullptr;
  Slot* slots = nullptr;
  char* arena = nullptr;
  uint32_t nslots = 0;
  uint64_t arena_size = 0;
  int sock = -1;  // socket transport
  std::mutex mu;

  ~Channel() {
    if (base) munmap(base, map_len);
    if (sock >= 0) close(sock);
  }

  uint64_t new_request() {
    results.emplace_back();
    return next_reqid++;
  }
  // Forgets a request that could not be (fully) submitted; its published pieces still complete.
  void drop(uint64_t reqid) {
    Result& r = results[reqid - res_base];
    r.final = r.picked = true;
    pop_picked();
  }
  bool put(std::unique_lock<std::mutex>& lk, const Piece& p, uint64_t reqid, bool last);
  // Waits for (block) or peeks at a request; fills *ret and returns its VEO_COMMAND_* state.
  int result(uint64_t reqid, uint64_t* ret, bool block, std::string* message = nullptr);
  void sync();
  std::string name() const { return id == 0 ? std::string("the proc queue") : "context " + std::to_string(id); }

 private:
  friend struct Proc;
  uint64_t head = 0, harvested = 0;       // published / collected requests
  uint64_t a_head = 0, a_tail = 0;        // arena allocation counters (bytes, monotonic)
  std::vector<Shadow> shadow;
  uint64_t next_reqid = 0, res_base = 0;  // request ids; results[reqid - res_base]
  std::deque<Result> results;

  friend Channel* make_channel(Proc*, uint32_t, size_t stack);
  bool dead() const;
  uint64_t deadline() const;
  void harvest(std::unique_lock<std::mutex>& lk, bool run_vh = true);
  bool send_frame(std::unique_lock<std::mutex>& lk, const void* p, size_t n);
  void pop_picked() {
    while (!results.empty() && results.front().picked) {
      results.pop_front();
      ++res_base;
    }
  }
  void finish(uint64_t i);
  void fail_pending();
  bool wait_progress(std::unique_lock<std::mutex>& lk, uint64_t deadline);
  bool encode_call(const Piece& p, Slot& s, Shadow& sh, char* data);
  size_t call_bytes(const struct ::veo_args* a) const;
};

}  // namespace accio::offload

// ---- the C handles ----

struct veo_args {
  struct Arg {
    uint8_t type = 0;
    uint64_t val = 0;
    char* buf = nullptr;
    size_t len = 0;
  };
  std::vector<Arg> a;
  uint8_t ret = 0;  // 0: u64, kDouble, kFloat
};

struct veo_thr_ctxt_attr {
  size_t stacksize = 0;
};

struct veo_thr_ctxt : accio::offload::Channel {
  bool main = false;
};

namespace accio::offload {

struct Proc {
  accio_offload_options opts{};
  std::string worker;
  pid_t pid = -1;
  int ctl = -1;
  int stop_pipe[2] = {-1, -1};
  int ident = -1;
  std::atomic<bool> dead{false};
  std::string death;  // why the worker is gone (under mu)
  std::mutex mu;      // contexts, symbols, allocations, the control socket, death
  Channel* chan = nullptr;  // the proc's own queue
  std::vector<veo_thr_ctxt*> contexts;
  std::map<std::pair<uint64_t, std::string>, uint64_t> syms;
  std::unordered_map<uint64_t, size_t> allocs;
  uint32_t next_channel = 0;
  std::thread watchdog;

  std::string why_dead() {
    std::lock_guard<std::mutex> g(mu);
    return death.empty() ? "the worker is gone" : death;
  }
  void watch();
  int sync_op(const Piece& p, uint64_t* result, std::string* message);
  int transfer(Channel* c, bool write, uint64_t addr, void* host, size_t n, uint64_t* reqid);
};

namespace {

constexpr int kMaxProcs = 256;
std::atomic<Proc*> g_procs[kMaxProcs];

// A forked child must not keep its parent's workers alive or talk to them: drop the sockets.
void forget_procs_in_child() {
  for (auto& slot : g_procs) {
    Proc* p = slot.load(std::memory_order_relaxed);
    if (!p) continue;
    if (p->ctl >= 0) close(p->ctl);
    p->ctl = -1;
    p->dead.store(true);
    slot.store(nullptr, std::memory_order_relaxed);
  }
}

int register_proc(Proc* p) {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, forget_procs_in_child); });
  for (int i = 0; i < kMaxProcs; ++i) {
    Proc* expected = nullptr;
    if (g_procs[i].compare_exchange_strong(expected, p)) return i;
  }
  return -1;
}

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

}  // namespace

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
  s.flags = 0;
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
    }
    if (p.op == kLoadLib || p.op == kGetSym) s.flags |= kDataBack;  // the worker's message
    sh.vh = p.vh;
    sh.vh_arg = p.vh_arg;
  }
  sh.arena_end = len ? start + len : a_head;
  a_head = sh.arena_end;
  head = i + 1;
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
    if (sh.copy.dst)
      std::memcpy(sh.copy.dst, (s.flags & kDataInSlot) ? slot_data(s) : arena + sh.copy.off, sh.copy.len);
    for (const Copy& c : sh.copies) std::memcpy(c.dst, arena + c.off, c.len);
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

// Collects completed requests in order, and runs a host function once every request before it
// has completed (the worker waits at its barrier meanwhile).
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

int send_control(int sock, const ControlMsg& m, int fd) {
  char cbuf[CMSG_SPACE(sizeof(int))] = {};
  iovec iov{const_cast<ControlMsg*>(&m), sizeof m};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (fd >= 0) {
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    cmsghdr* cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  }
  ssize_t r;
  do r = sendmsg(sock, &mh, MSG_NOSIGNAL);
  while (r < 0 && errno == EINTR);
  return r == ssize_t(sizeof m) ? 0 : -(errno ? errno : EIO);
}

// A control request and its reply, within a few seconds (a worker that hangs does not hang us).
int control(Proc* p, const ControlMsg& m, int fd, ControlReply* rep) {
  int rc = send_control(p->ctl, m, fd);
  if (rc < 0) return rc;
  pollfd pf{p->ctl, POLLIN, 0};
  if (poll(&pf, 1, 10000) <= 0) return -ETIMEDOUT;
  if (!recv_all(p->ctl, rep, sizeof *rep)) return -EPIPE;
  return rep->status;
}

}  // namespace

// Creates a queue and hands it to the worker, which starts a thread for it. Under p->mu.
Channel* make_channel(Proc* p, uint32_t id, size_t stack) {
  Channel* c = id == 0 ? new Channel : static_cast<Channel*>(new veo_thr_ctxt);
  c->proc = p;
  c->id = id;
  c->transport = uint32_t(p->opts.transport);
  c->nslots = p->opts.slots;
  c->arena_size = p->opts.arena_bytes;
  const uint64_t arena_off = align_up(kSlotsOffset + uint64_t(c->nslots) * sizeof(Slot), 4096);
  size_t len = arena_off + c->arena_size;
  int fd = -1;
  void* mem = MAP_FAILED;
  if (c->transport == kShm) {
    fd = memfd_for(&len);
    if (fd < 0) {
      report("veo_context_open: memfd_create: " + errstr(-fd));
      delete c;
      return nullptr;
    }
    mem = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  } else {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      report("veo_context_open: socketpair: " + errstr(errno));
      delete c;
      return nullptr;
    }
    c->sock = sv[0];
    fd = sv[1];
    mem = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  }
  if (mem == MAP_FAILED) {
    report("veo_context_open: mmap of " + std::to_string(len) + " bytes: " + errstr(errno));
    close(fd);
    delete c;
    return nullptr;
  }
  c->base = static_cast<char*>(mem);
  c->map_len = len;
  c->h = new (mem) ChannelHeader{};
  c->h->magic = kMagic;
  c->h->protocol = kProtocol;
  c->h->nslots = c->nslots;
  c->h->spin_us = p->opts.spin_us < 0 ? UINT32_MAX : uint32_t(std::min<int64_t>(p->opts.spin_us, UINT32_MAX - 1));
  c->h->arena_off = arena_off;
  c->h->arena_size = c->arena_size;
  c->slots = reinterpret_cast<Slot*>(c->base + kSlotsOffset);
  c->arena = c->base + arena_off;
  c->shadow.resize(c->nslots);
  if (c->transport == kShm) madvise(mem, len, MADV_HUGEPAGE);
  ControlMsg m{kCtlOpenChannel, c->transport, id, uint32_t(stack / 1024), len};
  ControlReply rep{};
  // socket: the header goes first (the socket buffer holds it); the worker reads it on opening
  int rc = c->transport == kSocket && !send_all(c->sock, c->h, kHeaderPrefix) ? -EPIPE : 0;
  if (rc == 0) rc = control(p, m, fd, &rep);
  close(fd);
  if (rc < 0) {
    report("opening a queue in the worker (pid " + std::to_string(p->pid) + "): " + errstr(-rc));
    delete c;
    return nullptr;
  }
  if (c->transport == kSocket) fcntl(c->sock, F_SETFL, O_NONBLOCK);
  return c;
}

void Proc::watch() {
  pollfd pf[2] = {{ctl, POLLRDHUP, 0}, {stop_pipe[0], POLLIN, 0}};
  for (;;) {
    int r = poll(pf, 2, -1);
    if (r < 0 && errno == EINTR) continue;
    if (pf[1].revents) return;  // veo_proc_destroy is cleaning up
    if (pf[0].revents & (POLLRDHUP | POLLHUP | POLLERR)) break;
  }
  int st = 0;
  std::string why;
  pid_t w;
  do w = waitpid(pid, &st, 0);
  while (w < 0 && errno == EINTR);
  int crash = 0;
  {
    std::lock_guard<std::mutex> g(mu);
    if (chan) crash = chan->h->crash_signal.load();
    for (auto* c : contexts)
      if (!crash) crash = c->h->crash_signal.load();
  }
  if (w == pid && WIFSIGNALED(st))
    why = "the worker (pid " + std::to_string(pid) + ") died of " + signame(WTERMSIG(st));
  else if (w == pid && WIFEXITED(st))
    why = "the worker (pid " + std::to_string(pid) + ") exited with status " + std::to_string(WEXITSTATUS(st));
  else
    why = "the worker (pid " + std::to_string(pid) + ") hung up";
  if (crash) why += " after a kernel raised " + signame(crash);
  std::lock_guard<std::mutex> g(mu);
  if (death.empty()) death = why;
  dead.store(true, std::memory_order_release);
  auto wake = [](Channel* c) {
    if (c && c->transport == kShm) futex_wake_all(low_word(c->h->done));
  };
  wake(chan);
  for (auto* c : contexts) wake(c);
}

// One request on the proc's own queue, waited for.
int Proc::sync_op(const Piece& p, uint64_t* result, std::string* message) {
  uint64_t reqid;
  {
    std::unique_lock<std::mutex> lk(chan->mu);
    reqid = chan->new_request();
    if (!chan->put(lk, p, reqid, true)) {
      chan->drop(reqid);
      if (message) *message = t_error;
      return VEO_COMMAND_ERROR;
    }
  }
  return chan->result(reqid, result, true, message);
}

// Splits a transfer into arena-sized pieces; the worker copies piece k while we fill piece k+1.
int Proc::transfer(Channel* c, bool write, uint64_t addr, void* host, size_t n, uint64_t* reqid) {
  std::unique_lock<std::mutex> lk(c->mu);
  *reqid = c->new_request();
  const size_t piece = std::max<size_t>(4096, std::min<size_t>(c->arena_size / 8, 1u << 20));
  if (n == 0) {
    if (c->put(lk, Piece{}, *reqid, true)) return 0;
    c->drop(*reqid);
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
    if (!c->put(lk, p, *reqid, off + piece >= n)) {
      c->drop(*reqid);
      return -1;
    }
  }
  return 0;
}

namespace {

Proc* P(veo_proc_handle* h) { return reinterpret_cast<Proc*>(h); }

std::string default_worker() {
  for (const char* env : {"ACCIO_OFFLOAD_WORKER", "VEORUN_BIN"})
    if (const char* w = getenv(env); w && *w) return w;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&accio_offload_options_init), &info) && info.dli_fname) {
    std::string dir = info.dli_fname;
    dir = dir.substr(0, dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/'));
    if (dir.empty()) dir = ".";
    for (const char* rel : {"/accio-offload-worker", "/../libexec/accio-offload-worker"}) {
      std::string cand = dir + rel;
      if (access(cand.c_str(), X_OK) == 0) return cand;
    }
    return dir + "/accio-offload-worker";
  }
  return "accio-offload-worker";
}

int set_node_affinity(pid_t pid, int node) {
  std::string path = "/sys/devices/system/node/node" + std::to_string(node) + "/cpulist";
  FILE* f = fopen(path.c_str(), "r");
  if (!f) return -ENODEV;
  char buf[4096] = {};
  size_t got = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[got] = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (char* tok = strtok(buf, ",\n"); tok; tok = strtok(nullptr, ",\n")) {
    int a = 0, b = 0;
    int k = sscanf(tok, "%d-%d", &a, &b);
    if (k == 1) b = a;
    for (int cpu = a; k >= 1 && cpu <= b && cpu < CPU_SETSIZE; ++cpu) CPU_SET(cpu, &set);
  }
  if (CPU_COUNT(&set) == 0) return -ENODEV;
  return sched_setaffinity(pid, sizeof set, &set) == 0 ? 0 : -errno;
}

Proc* create_proc(const accio_offload_options& o) {
  if (o.venode < -1) {
    report("veo_proc_create: venode " + std::to_string(o.venode) + " is invalid (-1 or a NUMA node)");
    return nullptr;
  }
  if (o.slots < 2 || o.arena_bytes < 65536 || (o.transport != kShm && o.transport != kSocket)) {
    report("veo_proc_create: bad options (slots >= 2, arena >= 64 KiB, transport shm or socket)");
    return nullptr;
  }
  auto* p = new Proc;
  p->opts = o;
  p->worker = o.worker && *o.worker ? o.worker : default_worker();
  p->opts.worker = nullptr;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    report("veo_proc_create: socketpair: " + errstr(errno));
    delete p;
    return nullptr;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 3);  // dup2 clears close-on-exec on fd 3
  char arg0[] = "accio-offload-worker", arg1[] = "--fd", arg2[] = "3";
  char* argv[] = {arg0, arg1, arg2, nullptr};
  pid_t pid;
  int rc = posix_spawn(&pid, p->worker.c_str(), &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(sv[1]);
  if (rc != 0) {
    report("veo_proc_create: starting the worker program " + p->worker + ": " + errstr(rc) +
           " (set ACCIO_OFFLOAD_WORKER)");
    close(sv[0]);
    delete p;
    return nullptr;
  }
  p->pid = pid;
  p->ctl = sv[0];
  if (o.venode >= 0) {
    int e = set_node_affinity(pid, o.venode);
    if (e < 0) {
      report("veo_proc_create: binding the worker to NUMA node " + std::to_string(o.venode) + ": " + errstr(-e));
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      close(p->ctl);
      delete p;
      return nullptr;
    }
  }
  if (pipe2(p->stop_pipe, O_CLOEXEC) != 0) {
    report("veo_proc_create: pipe: " + errstr(errno));
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    close(p->ctl);
    delete p;
    return nullptr;
  }
  {
    std::lock_guard<std::mutex> g(p->mu);
    p->chan = make_channel(p, p->next_channel++, 0);
  }
  p->watchdog = std::thread([p] { p->watch(); });
  if (!p->chan) {
    veo_proc_destroy(reinterpret_cast<veo_proc_handle*>(p));
    return nullptr;
  }
  p->ident = register_proc(p);
  return p;
}

int64_t env_int(const char* name, int64_t dflt, bool* ok) {
  const char* v = getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  long long x = strtoll(v, &end, 10);
  if (*end || x < 0) {
    report(std::string(name) + "=" + v + " is not a non-negative integer");
    *ok = false;
    return dflt;
  }
  return x;
}

veo_thr_ctxt* open_context(veo_proc_handle* h, size_t stack) {
  Proc* p = P(h);
  if (!p) {
    report("veo_context_open: no proc");
    return nullptr;
  }
  if (p->dead) {
    report("veo_context_open: " + p->why_dead());
    return nullptr;
  }
  std::lock_guard<std::mutex> g(p->mu);
  auto* c = static_cast<veo_thr_ctxt*>(make_channel(p, p->next_channel++, stack));
  if (!c) return nullptr;
  c->main = p->contexts.empty();
  p->contexts.push_back(c);
  return c;
}

// Ends a context's worker thread and frees it. p->mu is not held.
void destroy_context(Proc* p, veo_thr_ctxt* c) {
  if (!p->dead) {
    c->sync();
    std::unique_lock<std::mutex> lk(c->mu);
    uint64_t id = c->new_request();
    Piece ex;
    ex.op = kExit;
    bool ok = c->put(lk, ex, id, true);
    lk.unlock();
    if (ok) c->result(id, nullptr, true);
  }
  std::lock_guard<std::mutex> g(p->mu);
  p->contexts.erase(std::remove(p->contexts.begin(), p->contexts.end(), c), p->contexts.end());
  delete c;
}

template <class T>
int set_arg(veo_args* a, int argnum, uint8_t type, T v) {
  if (!a || argnum < 0 || argnum >= VEO_MAX_NUM_ARGS) {
    report("veo_args_set: argument number " + std::to_string(argnum) + " is out of range (0.." +
           std::to_string(VEO_MAX_NUM_ARGS - 1) + ")");
    return -1;
  }
  if (size_t(argnum) >= a->a.size()) a->a.resize(size_t(argnum) + 1);
  auto& x = a->a[size_t(argnum)];
  x = veo_args::Arg{};
  x.type = type;
  std::memcpy(&x.val, &v, sizeof v);
  return 0;
}

uint64_t call_async(veo_thr_ctxt* c, uint64_t addr, veo_args* args, const char* who) {
  if (!c) {
    report(std::string(who) + ": no context");
    return VEO_REQUEST_ID_INVALID;
  }
  if (!addr) {
    report(std::string(who) + ": function address 0");
    return VEO_REQUEST_ID_INVALID;
  }
  std::unique_lock<std::mutex> lk(c->mu);
  Piece p;
  p.op = kCall;
  p.addr = addr;
  p.args = args;
  uint64_t id = c->new_request();
  if (!c->put(lk, p, id, true)) {
    c->drop(id);
    return VEO_REQUEST_ID_INVALID;
  }
  return id;
}

}  // namespace
}  // namespace accio::offload

using namespace accio::offload;

#pragma GCC visibility push(default)
extern "C" {

int veo_api_version(void) { return VEO_API_VERSION; }
const char* veo_version_string(void) { return "accio " ACCIO_VERSION_STRING " (VEO API 11)"; }
const char* accio_offload_last_error(void) { return t_error.c_str(); }

int accio_offload_options_init(accio_offload_options* o) {
  if (!o) return -EINVAL;
  *o = accio_offload_options{};
  o->venode = -1;
  o->worker = nullptr;
  o->transport = ACCIO_OFFLOAD_SHM;
  o->spin_us = 100;
  o->timeout_ms = 0;
  o->arena_bytes = 16u << 20;
  o->slots = 256;
  bool ok = true;
  if (const char* t = getenv("ACCIO_OFFLOAD_TRANSPORT"); t && *t) {
    if (!strcmp(t, "shm")) o->transport = ACCIO_OFFLOAD_SHM;
    else if (!strcmp(t, "socket")) o->transport = ACCIO_OFFLOAD_SOCKET;
    else {
      report(std::string("ACCIO_OFFLOAD_TRANSPORT=") + t + " is not shm or socket");
      ok = false;
    }
  }
  if (const char* s = getenv("ACCIO_OFFLOAD_SPIN_US"); s && !strcmp(s, "forever")) o->spin_us = ACCIO_OFFLOAD_SPIN_FOREVER;
  else o->spin_us = env_int("ACCIO_OFFLOAD_SPIN_US", o->spin_us, &ok);
  o->timeout_ms = env_int("ACCIO_OFFLOAD_TIMEOUT_MS", o->timeout_ms, &ok);
  o->slots = uint32_t(env_int("ACCIO_OFFLOAD_SLOTS", o->slots, &ok));
  if (const char* a = getenv("ACCIO_OFFLOAD_ARENA"); a && *a) {
    try {
      o->arena_bytes = accio::base::parse_size(a);
    } catch (const std::exception& e) {
      report(std::string("ACCIO_OFFLOAD_ARENA: ") + e.what());
      ok = false;
    }
  }
  return ok ? 0 : -EINVAL;
}

struct veo_proc_handle* accio_offload_proc_create(const accio_offload_options* o) {
  accio_offload_options d;
  if (!o) {
    if (accio_offload_options_init(&d) != 0) return nullptr;
    o = &d;
  }
  try {
    return reinterpret_cast<veo_proc_handle*>(create_proc(*o));
  } catch (const std::exception& e) {
    report(std::string("veo_proc_create: ") + e.what());
    return nullptr;
  }
}

struct veo_proc_handle* veo_proc_create_static(int venode, char* veobin) {
  accio_offload_options o;
  if (accio_offload_options_init(&o) != 0) return nullptr;
  o.venode = venode;
  o.worker = veobin;
  return accio_offload_proc_create(&o);
}

struct veo_proc_handle* veo_proc_create(int venode) { return veo_proc_create_static(venode, nullptr); }

int accio_offload_worker_pid(struct veo_proc_handle* h) { return h ? int(P(h)->pid) : -1; }
int veo_proc_identifier(struct veo_proc_handle* h) { return h ? P(h)->ident : -1; }

int veo_proc_destroy(struct veo_proc_handle* h) {
  Proc* p = P(h);
  if (!p) return -1;
  std::vector<veo_thr_ctxt*> ctxs;
  {
    std::lock_guard<std::mutex> g(p->mu);
    ctxs = p->contexts;
  }
  for (auto* c : ctxs) destroy_context(p, c);
  if (!p->dead && p->ctl >= 0) {
    ControlMsg m{kCtlExit, 0, 0, 0, 0};
    ControlReply rep{};
    control(p, m, -1, &rep);
  }
  // The watchdog reaps the worker; one that does not go within a second is killed.
  for (int i = 0; i < 100 && !p->dead && p->watchdog.joinable(); ++i) usleep(10000);
  if (!p->dead && p->pid > 0) {
    kill(p->pid, SIGKILL);
    for (int i = 0; i < 200 && !p->dead && p->watchdog.joinable(); ++i) usleep(10000);
  }
  if (p->watchdog.joinable()) {
    if (!p->dead) {
      char x = 1;
      if (write(p->stop_pipe[1], &x, 1) < 0) {}
    }
    p->watchdog.join();
  }
  if (p->ident >= 0) g_procs[p->ident].store(nullptr);
  delete p->chan;
  if (p->ctl >= 0) close(p->ctl);
  for (int fd : p->stop_pipe)
    if (fd >= 0) close(fd);
  delete p;
  return 0;
}

uint64_t veo_load_library(struct veo_proc_handle* h, const char* libname) {
  if (!h || !libname) {
    report("veo_load_library: no proc or no library name");
    return 0;
  }
  Piece p;
  p.op = kLoadLib;
  p.in = libname;
  p.in_len = strlen(libname) + 1;
  p.data_len = p.in_len + 512;
  uint64_t handle = 0;
  std::string msg;
  int st = P(h)->sync_op(p, &handle, &msg);
  if (st != VEO_COMMAND_OK || !handle) {
    report(std::string("veo_load_library: ") + (msg.empty() ? libname : msg));
    return 0;
  }
  return handle;
}

int veo_unload_library(struct veo_proc_handle* h, const uint64_t libhandle) {
  if (!h || !libhandle) {
    report("veo_unload_library: no proc or library handle 0");
    return -1;
  }
  Proc* pr = P(h);
  Piece p;
  p.op = kUnloadLib;
  p.addr = libhandle;
  std::string msg;
  int st = pr->sync_op(p, nullptr, &msg);
  std::lock_guard<std::mutex> g(pr->mu);
  for (auto it = pr->syms.begin(); it != pr->syms.end();)
    it = it->first.first == libhandle ? pr->syms.erase(it) : std::next(it);
  if (st != VEO_COMMAND_OK) {
    report("veo_unload_library: " + (msg.empty() ? std::string("failed") : msg));
    return -1;
  }
  return 0;
}

uint64_t veo_get_sym(struct veo_proc_handle* h, uint64_t libhandle, const char* symname) {
  if (!h || !symname) {
    report("veo_get_sym: no proc or no symbol name");
    return 0;
  }
  Proc* pr = P(h);
  auto key = std::make_pair(libhandle, std::string(symname));
  {
    std::lock_guard<std::mutex> g(pr->mu);
    auto it = pr->syms.find(key);
    if (it != pr->syms.end()) return it->second;
  }
  Piece p;
  p.op = kGetSym;
  p.addr = libhandle;
  p.in = symname;
  p.in_len = strlen(symname) + 1;
  p.data_len = p.in_len + 512;
  uint64_t addr = 0;
  std::string msg;
  int st = pr->sync_op(p, &addr, &msg);
  if (st != VEO_COMMAND_OK || !addr) {
    report(std::string("veo_get_sym: ") + (msg.empty() ? symname : msg));
    return 0;
  }
  std::lock_guard<std::mutex> g(pr->mu);
  pr->syms[key] = addr;
  return addr;
}

int veo_alloc_mem(struct veo_proc_handle* h, uint64_t* addr, const size_t size) {
  if (!h || !addr) {
    report("veo_alloc_mem: no proc or no address pointer");
    return -2;
  }
  Piece p;
  p.op = kAlloc;
  p.size = size;
  std::string msg;
  int st = P(h)->sync_op(p, addr, &msg);
  if (st != VEO_COMMAND_OK) {
    report("veo_alloc_mem: " + std::to_string(size) + " bytes: " + msg);
    *addr = 0;
    return st == VEO_COMMAND_ERROR && msg.find("errno 12") != std::string::npos ? -1 : -2;
  }
  std::lock_guard<std::mutex> g(P(h)->mu);
  P(h)->allocs[*addr] = size;
  return 0;
}

int veo_free_mem(struct veo_proc_handle* h, uint64_t addr) {
  if (!h) return -1;
  Proc* pr = P(h);
  {
    std::lock_guard<std::mutex> g(pr->mu);
    if (!pr->allocs.erase(addr)) {
      char b[32];
      snprintf(b, sizeof b, "%#llx", static_cast<unsigned long long>(addr));
      report(std::string("veo_free_mem: ") + b + " was not allocated by veo_alloc_mem (or was freed)");
      return -1;
    }
  }
  Piece p;
  p.op = kFree;
  p.addr = addr;
  return pr->sync_op(p, nullptr, nullptr) == VEO_COMMAND_OK ? 0 : -1;
}

int veo_read_mem(struct veo_proc_handle* h, void* dst, uint64_t src, size_t size) {
  if (!h || (!dst && size)) return -1;
  uint64_t id;
  Proc* pr = P(h);
  if (pr->transfer(pr->chan, false, src, dst, size, &id) != 0) return -1;
  return pr->chan->result(id, nullptr, true) == VEO_COMMAND_OK ? 0 : -1;
}

int veo_write_mem(struct veo_proc_handle* h, uint64_t dst, const void* src, size_t size) {
  if (!h || (!src && size)) return -1;
  uint64_t id;
  Proc* pr = P(h);
  if (pr->transfer(pr->chan, true, dst, const_cast<void*>(src), size, &id) != 0) return -1;
  return pr->chan->result(id, nullptr, true) == VEO_COMMAND_OK ? 0 : -1;
}

uint64_t veo_async_read_mem(struct veo_thr_ctxt* c, void* dst, uint64_t src, size_t size) {
  if (!c || (!dst && size)) return VEO_REQUEST_ID_INVALID;
  uint64_t id;
  if (c->proc->transfer(c, false, src, dst, size, &id) != 0) return VEO_REQUEST_ID_INVALID;
  return id;
}

uint64_t veo_async_write_mem(struct veo_thr_ctxt* c, uint64_t dst, const void* src, size_t size) {
  if (!c || (!src && size)) return VEO_REQUEST_ID_INVALID;
  uint64_t id;
  if (c->proc->transfer(c, true, dst, const_cast<void*>(src), size, &id) != 0) return VEO_REQUEST_ID_INVALID;
  return id;
}

int veo_num_contexts(struct veo_proc_handle* h) {
  if (!h) return -1;
  std::lock_guard<std::mutex> g(P(h)->mu);
  return int(P(h)->contexts.size());
}

struct veo_thr_ctxt* veo_get_context(struct veo_proc_handle* h, int idx) {
  if (!h) return nullptr;
  std::lock_guard<std::mutex> g(P(h)->mu);
  if (idx < 0 || size_t(idx) >= P(h)->contexts.size()) {
    report("veo_get_context: no context " + std::to_string(idx));
    return nullptr;
  }
  return P(h)->contexts[size_t(idx)];
}

struct veo_thr_ctxt* veo_context_open(struct veo_proc_handle* h) { return open_context(h, 0); }

struct veo_thr_ctxt* veo_context_open_with_attr(struct veo_proc_handle* h, struct veo_thr_ctxt_attr* a) {
  if (!a) {
    errno = EINVAL;
    return nullptr;
  }
  return open_context(h, a->stacksize);
}

struct veo_thr_ctxt_attr* veo_alloc_thr_ctxt_attr(void) { return new (std::nothrow) veo_thr_ctxt_attr; }
int veo_free_thr_ctxt_attr(struct veo_thr_ctxt_attr* a) {
  if (!a) return -1;
  delete a;
  return 0;
}
int veo_set_thr_ctxt_stacksize(struct veo_thr_ctxt_attr* a, size_t s) {
  if (!a) return -1;
  a->stacksize = s;
  return 0;
}
int veo_get_thr_ctxt_stacksize(struct veo_thr_ctxt_attr* a, size_t* s) {
  if (!a || !s) return -1;
  *s = a->stacksize;
  return 0;
}

// The main context (the first opened) lives until the proc is destroyed, as in AVEO.
int veo_context_close(struct veo_thr_ctxt* c) {
  if (!c) return -1;
  if (c->main) return 0;
  destroy_context(c->proc, c);
  return 0;
}

int veo_get_context_state(struct veo_thr_ctxt* c) {
  if (!c) return VEO_STATE_UNKNOWN;
  return c->proc->dead ? VEO_STATE_EXIT : VEO_STATE_RUNNING;
}

void veo_context_sync(struct veo_thr_ctxt* c) {
  if (c) c->sync();
}

struct veo_args* veo_args_alloc(void) { return new (std::nothrow) veo_args; }
void veo_args_clear(struct veo_args* a) {
  if (a) a->a.clear();
}
void veo_args_free(struct veo_args* a) { delete a; }

int veo_args_set_i64(struct veo_args* a, int n, int64_t v) { return set_arg(a, n, kI64, v); }
int veo_args_set_u64(struct veo_args* a, int n, uint64_t v) { return set_arg(a, n, kU64, v); }
int veo_args_set_i32(struct veo_args* a, int n, int32_t v) { return set_arg(a, n, kI32, v); }
int veo_args_set_u32(struct veo_args* a, int n, uint32_t v) { return set_arg(a, n, kU32, v); }
int veo_args_set_i16(struct veo_args* a, int n, int16_t v) { return set_arg(a, n, kI16, v); }
int veo_args_set_u16(struct veo_args* a, int n, uint16_t v) { return set_arg(a, n, kU16, v); }
int veo_args_set_i8(struct veo_args* a, int n, int8_t v) { return set_arg(a, n, kI8, v); }
int veo_args_set_u8(struct veo_args* a, int n, uint8_t v) { return set_arg(a, n, kU8, v); }
int veo_args_set_double(struct veo_args* a, int n, double v) { return set_arg(a, n, kDouble, v); }
int veo_args_set_float(struct veo_args* a, int n, float v) { return set_arg(a, n, kFloat, v); }

int accio_offload_args_set_ret(struct veo_args* a, int ret) {
  if (!a || ret < ACCIO_OFFLOAD_RET_U64 || ret > ACCIO_OFFLOAD_RET_FLOAT) {
    report("accio_offload_args_set_ret: no args or unknown return type " + std::to_string(ret));
    return -1;
  }
  a->ret = ret == ACCIO_OFFLOAD_RET_DOUBLE ? kDouble : ret == ACCIO_OFFLOAD_RET_FLOAT ? kFloat : 0;
  return 0;
}

int veo_args_set_stack(struct veo_args* a, enum veo_args_intent intent, int n, char* buff, size_t len) {
  if (intent != VEO_INTENT_IN && intent != VEO_INTENT_INOUT && intent != VEO_INTENT_OUT) {
    report("veo_args_set_stack: unknown intent " + std::to_string(int(intent)));
    return -1;
  }
  if (!buff && len) {
    report("veo_args_set_stack: NULL buffer");
    return -1;
  }
  uint8_t t = intent == VEO_INTENT_IN ? kStackIn : intent == VEO_INTENT_INOUT ? kStackInOut : kStackOut;
  if (set_arg(a, n, t, uint64_t(0)) != 0) return -1;
  a->a[size_t(n)].buf = buff;
  a->a[size_t(n)].len = len;
  return 0;
}

int veo_call_sync(struct veo_proc_handle* h, uint64_t addr, struct veo_args* args, uint64_t* result) {
  if (!h || !addr) {
    report("veo_call_sync: no proc or function address 0");
    return -1;
  }
  Piece p;
  p.op = kCall;
  p.addr = addr;
  p.args = args;
  return P(h)->sync_op(p, result, nullptr) == VEO_COMMAND_OK ? 0 : -1;
}

uint64_t veo_call_async(struct veo_thr_ctxt* c, uint64_t addr, struct veo_args* args) {
  return call_async(c, addr, args, "veo_call_async");
}

uint64_t veo_call_async_by_name(struct veo_thr_ctxt* c, uint64_t libhandle, const char* symname,
                                struct veo_args* args) {
  if (!c) return VEO_REQUEST_ID_INVALID;
  uint64_t addr = veo_get_sym(reinterpret_cast<veo_proc_handle*>(c->proc), libhandle, symname);
  if (!addr) return VEO_REQUEST_ID_INVALID;
  return call_async(c, addr, args, "veo_call_async_by_name");
}

uint64_t veo_call_async_vh(struct veo_thr_ctxt* c, uint64_t (*func)(void*), void* arg) {
  if (!c || !func) return VEO_REQUEST_ID_INVALID;
  std::unique_lock<std::mutex> lk(c->mu);
  Piece p;
  p.op = kVhBarrier;
  p.vh = func;
  p.vh_arg = arg;
  uint64_t id = c->new_request();
  if (!c->put(lk, p, id, true)) {
    c->drop(id);
    return VEO_REQUEST_ID_INVALID;
  }
  return id;
}

int veo_call_peek_result(struct veo_thr_ctxt* c, uint64_t reqid, uint64_t* retp) {
  if (!c) return -1;
  return c->result(reqid, retp, false);
}

int veo_call_wait_result(struct veo_thr_ctxt* c, uint64_t reqid, uint64_t* retp) {
  if (!c) return -1;
  return c->result(reqid, retp, true);
}

}  // extern "C"
#pragma GCC visibility pop
