// accio offload: the worker side (the counterpart of AVEO's aveorun), in libaccio_offload beside
// the host side. The worker program is `int main(argc, argv) { return
// accio_offload_worker_main(argc, argv); }`; a static worker links its kernels into the same
// program and exports them (-Wl,--dynamic-list, or -rdynamic) so that veo_get_sym(proc, 0, name)
// finds them. Kernels are called through libffi (linked into libaccio_offload, hidden).
//
// The main thread reads control messages from the socketpair the host gave it (fd --fd N): each
// opens a channel (a memfd to map, or a socket) served by a thread of its own. When the host
// process goes away the socket reads EOF and the worker exits at once, so a worker never outlives
// its host. Fatal signals in a kernel are recorded in the running request (VEO_COMMAND_EXCEPTION
// with the signal number) before the worker dies of them; a fault inside veo_read_mem/write_mem's
// copy is an EFAULT error for that request only.
#include <dlfcn.h>
#include <link.h>
#include <fcntl.h>
#include <ffi.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "offload/channel.hpp"

namespace accio::offload {
namespace {

struct WorkerChannel {
  char* base = nullptr;
  ChannelHeader* h = nullptr;
  Slot* slots = nullptr;
  char* arena = nullptr;
  int sock = -1;          // socket transport
  uint64_t received = 0;  // socket transport: requests read so far
  std::atomic<Slot*> running{nullptr};
  // The last call's signature and its prepared libffi description: a kernel called again with
  // the same argument and result types (the usual case) skips ffi_prep_cif.
  struct CallSig {
    int n = -1;  // no signature prepared
    ffi_type* rtype = nullptr;
    uint8_t types[kMaxArgs];
    ffi_type* atypes[kMaxArgs];
    ffi_cif cif;
  } sig;
  // Results of the requests this channel executed, for the kernel-side veo_prev_req_result.
  static constexpr uint64_t kRecent = 64;
  uint64_t nrecent = 0;
  uint64_t recent[kRecent] = {};
  // The staging area of a call whose stack arguments do not fit the arena (kStageAlloc..kStageFree).
  char* stage = nullptr;
  uint64_t stage_len = 0;
  size_t map_len = 0;
  int entry = -1;  // its index in g_channels
};

// The channels being served (a closed one's entry is cleared and reused: kMaxChannels bounds the
// contexts open at once, not those opened in the worker's life). Entries are set by the main thread
// (open_channel) and cleared by a channel's own thread when it ends (close_channel); the
// fatal-signal handler reads them, counted in g_in_fatal, and a channel is freed only while no
// handler runs (a handler ends in the worker's death, so a closing thread that finds one waits for it).
constexpr int kMaxChannels = 1024;
std::atomic<WorkerChannel*> g_channels[kMaxChannels];
std::atomic<int> g_nchannels{0};  // entries in use or used once (the handler looks at these)
std::atomic<int> g_in_fatal{0};

thread_local WorkerChannel* t_channel = nullptr;
thread_local sigjmp_buf* t_copy_jmp = nullptr;  // set while copying for read/write_mem
thread_local sigjmp_buf* t_flush_jmp = nullptr;  // set while the fatal handler flushes stdio

void send_response(WorkerChannel* c, uint64_t index, const Slot& s) {
  SocketResponse r{index, s.status, s.err, s.result};
  send_all(c->sock, &r, sizeof r);
  if (s.flags & kDataBack) send_all(c->sock, c->arena + s.data_off, s.data_len);
}

// Socket transport: reads one frame. Requests go to their slot (and their data to the arena);
// a release frame (op kVhRelease) ends the wait at barrier `released`. False at EOF.
bool recv_request(WorkerChannel* c, uint64_t* released = nullptr) {
  SocketRequest rq;
  if (!recv_all(c->sock, &rq, sizeof rq)) return false;
  if (rq.slot.op == kVhRelease) {
    if (!released) return false;  // out of protocol
    *released = rq.index;
    return true;
  }
  Slot& s = c->slots[rq.index % c->h->nslots];
  s = rq.slot;
  if ((s.flags & kDataIn) && !recv_all(c->sock, c->arena + s.data_off, s.data_len)) return false;
  c->received = rq.index + 1;
  return true;
}

// The requests the host sent after a barrier arrive before its release: they are queued.
bool wait_release(WorkerChannel* c, uint64_t index) {
  for (;;) {
    uint64_t rel = UINT64_MAX;
    if (!recv_request(c, &rel)) return false;
    if (rel == index) return true;
  }
}

// Writes out what kernels left in the stdout and stderr buffers (a printf without fflush is
// lost at _exit otherwise when the host's stdout is a file or a pipe). A stream another thread
// holds locked (a kernel in the middle of a printf) is waited for up to 100 ms, then skipped: a
// worker whose host is gone must still exit. Also called from the fatal-signal handler, where the
// stream may be in any state: the crash is recorded before, so a second fault loses only output.
void flush_kernel_output() {
  for (FILE* f : {stdout, stderr}) {
    for (int tries = 0; tries < 100; ++tries) {
      if (ftrylockfile(f) == 0) {
        fflush_unlocked(f);
        funlockfile(f);
        break;
      }
      usleep(1000);
    }
  }
}

[[noreturn]] void exit_worker() {
  flush_kernel_output();
  _exit(0);
}

void install_fatal_handlers();

// Fatal signals: a fault in a memory copy returns to it; anything else marks the running
// requests as exceptions, flushes the kernels' output, wakes the host and dies of the signal
// (SA_RESETHAND re-raises it).
void on_fatal(int sig, siginfo_t* si, void*) {
  if (t_copy_jmp) siglongjmp(*t_copy_jmp, sig);
  if (t_flush_jmp) siglongjmp(*t_flush_jmp, sig);  // the flush below faulted: give up the output
  g_in_fatal.fetch_add(1, std::memory_order_seq_cst);  // before reading the entries: none is freed now
  const int n = g_nchannels.load(std::memory_order_acquire);
  WorkerChannel* chans[kMaxChannels] = {};
  Slot* marked[kMaxChannels] = {};
  for (int i = 0; i < n; ++i) {
    WorkerChannel* c = chans[i] = g_channels[i].load(std::memory_order_seq_cst);
    if (!c) continue;
    Slot* s = c->running.load(std::memory_order_acquire);
    // The faulting thread's own request; a thread that is no channel's (an OpenMP worker) marks
    // every request that is running, since one of them started it.
    if (s && (t_channel == c || t_channel == nullptr)) {
      s->status = kException;
      s->err = sig;
      s->result = uint64_t(sig);  // VEO's exception value; the host reports the signal by name
      marked[i] = s;
    }
    c->h->crash_signal.store(sig, std::memory_order_release);
  }
  // Before the host hears of the crash, so the output comes first. A kernel that crashed inside
  // stdio holds its stream's (recursive) lock, so the flush may fault on a half-updated stream: the
  // handlers are put back for the flush (SA_RESETHAND took this one) and such a fault comes back
  // here, losing only the output; the host is told either way.
  sigjmp_buf jb;
  if (sigsetjmp(jb, 1) == 0) {
    install_fatal_handlers();
    t_flush_jmp = &jb;
    flush_kernel_output();
  }
  t_flush_jmp = nullptr;
  struct sigaction dfl{};  // as SA_RESETHAND left it: returning re-runs the fault, which now kills
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, nullptr);
  for (int i = 0; i < n; ++i) {
    WorkerChannel* c = chans[i];  // the entry may name a channel opened since
    if (!c) continue;
    if (marked[i] && c->sock >= 0) send_response(c, 0, *marked[i]);  // in order: the index is ignored
    futex_wake_all(low_word(c->h->done));
  }
  // Done with the channels: a worker that lives on (an int3's SIGTRAP, a seccomp SIGSYS resume after
  // the handler) would otherwise hold every later close_channel in its wait (review, session 27).
  g_in_fatal.fetch_sub(1, std::memory_order_seq_cst);
  if (si && si->si_code <= 0) raise(sig);  // sent by kill/raise: re-raise with the default action
}

void install_fatal_handlers() {
  struct sigaction sa{};
  sa.sa_sigaction = on_fatal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS}) sigaction(sig, &sa, nullptr);
}

ffi_type* ffi_of(uint8_t t) {
  switch (t) {
    case kI64: return &ffi_type_sint64;
    case kU64: return &ffi_type_uint64;
    case kI32: return &ffi_type_sint32;
    case kU32: return &ffi_type_uint32;
    case kI16: return &ffi_type_sint16;
    case kU16: return &ffi_type_uint16;
    case kI8: return &ffi_type_sint8;
    case kU8: return &ffi_type_uint8;
    case kDouble: return &ffi_type_double;
    case kFloat: return &ffi_type_float;
    case kStackIn: case kStackInOut: case kStackOut: case kStageRef: return &ffi_type_pointer;
    default: return nullptr;
  }
}

void fail(Slot& s, int err) {
  s.status = kError;
  s.err = err;
  s.result = 0;
}

// The last bytes of a request's data hold the worker's message on failure (dlerror()).
void put_message(Slot& s, char* data, size_t start, const char* msg) {
  if (!msg || s.data_len <= start + 1) return;
  snprintf(data + start, s.data_len - start, "%s", msg);
}

void do_call(WorkerChannel* c, Slot& s) {
  const int n = s.nargs;
  const uint8_t* types = s.types;
  uint64_t* vals = s.vals;
  char* data = c->arena + s.data_off;
  if (s.flags & kArgsInArena) {
    types = reinterpret_cast<const uint8_t*>(data);
    vals = reinterpret_cast<uint64_t*>(data + ((size_t(n) + 7) & ~size_t(7)));
  }
  ffi_type* rtype = s.size == kDouble ? &ffi_type_double : s.size == kFloat ? &ffi_type_float : &ffi_type_uint64;
  WorkerChannel::CallSig& sig = c->sig;
  if (n != sig.n || rtype != sig.rtype || std::memcmp(types, sig.types, size_t(n)) != 0) {
    sig.n = -1;
    for (int i = 0; i < n; ++i) {
      sig.atypes[i] = ffi_of(types[i]);
      if (!sig.atypes[i]) return fail(s, EINVAL);
    }
    if (ffi_prep_cif(&sig.cif, FFI_DEFAULT_ABI, unsigned(n), rtype, sig.atypes) != FFI_OK) return fail(s, EINVAL);
    std::memcpy(sig.types, types, size_t(n));
    sig.rtype = rtype;
    sig.n = n;
  }
  void* avalues[kMaxArgs];
  void* ptrs[kMaxArgs];
  for (int i = 0; i < n; ++i) {
    if (types[i] >= kStackIn) {  // one test for the by-value arguments, as before kStageRef
      if (types[i] == kStageRef) [[unlikely]] {
        if (!c->stage || vals[i] > c->stage_len) return fail(s, ENOMEM);  // the staging allocation failed
        ptrs[i] = c->stage + vals[i];
      } else {
        ptrs[i] = data + vals[i];
      }
      avalues[i] = &ptrs[i];
    } else {
      avalues[i] = &vals[i];  // little-endian: the low bytes hold the narrower types
    }
  }
  union {
    ffi_arg i;
    double d;
    float f;
  } ret{};
  ffi_call(&sig.cif, reinterpret_cast<void (*)()>(s.addr), &ret, avalues);
  s.status = kOk;
  s.err = 0;
  s.result = 0;
  if (s.size == kFloat) std::memcpy(&s.result, &ret.f, sizeof ret.f);
  else if (s.size == kDouble) std::memcpy(&s.result, &ret.d, sizeof ret.d);
  else s.result = ret.i;
}

void do_copy(Slot& s, void* dst, const void* src, size_t n) {
  sigjmp_buf jb;
  // The signal mask is not saved (no sigprocmask system call per transfer): the handlers run with
  // SA_NODEFER and an empty sa_mask, so jumping out of one leaves the mask as it was here.
  if (sigsetjmp(jb, 0) != 0) {
    t_copy_jmp = nullptr;
    install_fatal_handlers();  // SA_RESETHAND reset the one that fired
    return fail(s, EFAULT);
  }
  t_copy_jmp = &jb;
  std::atomic_signal_fence(std::memory_order_seq_cst);  // keep the stores around the copy
  std::memmove(dst, src, n);  // veo_hmemcpy within one worker may overlap, as memmove allows
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_copy_jmp = nullptr;
  s.status = kOk;
  s.result = 0;
}

std::vector<std::string> loaded_objects() {
  std::vector<std::string> names;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* v) {
        if (info->dlpi_name && *info->dlpi_name) static_cast<std::vector<std::string>*>(v)->push_back(info->dlpi_name);
        return 0;
      },
      &names);
  return names;
}

// A kernel library's dependencies stay loaded for good (RTLD_NODELETE); only the library itself
// goes with veo_unload_library. Unloading a runtime such as libgomp would pull the code from under
// its pool threads, which outlive the kernel that started them, and crash the worker.
void pin_new_dependencies(void* handle, const std::vector<std::string>& before) {
  link_map* self = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &self) != 0) self = nullptr;
  for (const std::string& name : loaded_objects()) {
    if (std::find(before.begin(), before.end(), name) != before.end()) continue;
    if (self && self->l_name && name == self->l_name) continue;
    if (void* dep = dlopen(name.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE)) dlclose(dep);
  }
}

// Executes one request in place. Returns false for kExit.
// Worker memory of n bytes (veo_alloc_mem, a staged call's stack arguments): 64-byte aligned, or
// 2 MiB aligned with transparent huge pages from 2 MiB on; nullptr when there is none.
void* worker_alloc(uint64_t n) {
  void* p = nullptr;
  const size_t align = n >= (2u << 20) ? (2u << 20) : 64;
  if (posix_memalign(&p, align, n ? n : 1) != 0) return nullptr;
  if (align > 64) madvise(p, n, MADV_HUGEPAGE);
  return p;
}

bool execute(WorkerChannel* c, Slot& s, uint64_t index) {
  char* data = (s.flags & kDataInSlot) ? slot_data(s) : c->arena + s.data_off;
  s.err = 0;
  switch (s.op) {
    case kCall:
      do_call(c, s);
      break;
    case kLoadLib: {
      dlerror();
      const std::vector<std::string> before = loaded_objects();
      // RTLD_GLOBAL as AVEO's loadlib handler: a library may use the functions of one loaded before
      // it without being linked to it, and handle 0 (RTLD_DEFAULT) finds them all.
      void* h = dlopen(data, RTLD_NOW | RTLD_GLOBAL);
      if (h) {
        pin_new_dependencies(h, before);
        s.status = kOk;
        s.result = reinterpret_cast<uint64_t>(h);
      } else {
        fail(s, ENOENT);
        put_message(s, data, strlen(data) + 1, dlerror());
      }
      break;
    }
    case kUnloadLib:
      if (dlclose(reinterpret_cast<void*>(s.addr)) == 0) {
        s.status = kOk;
        s.result = 0;
      } else {
        fail(s, EINVAL);
      }
      break;
    case kGetSym: {
      dlerror();
      void* h = s.addr ? reinterpret_cast<void*>(s.addr) : RTLD_DEFAULT;
      void* p = dlsym(h, data);
      s.status = kOk;
      s.result = reinterpret_cast<uint64_t>(p);
      if (!p) {
        fail(s, ENOENT);
        put_message(s, data, strlen(data) + 1, dlerror());
      }
      break;
    }
    case kAlloc: {
      void* p = worker_alloc(s.size);
      if (!p) {
        fail(s, ENOMEM);
      } else {
        s.status = kOk;
        s.result = reinterpret_cast<uint64_t>(p);
      }
      break;
    }
    case kFree:
      free(reinterpret_cast<void*>(s.addr));
      s.status = kOk;
      s.result = 0;
      break;
    case kWriteMem:
    case kReadMem: {
      char* mem = reinterpret_cast<char*>(s.addr);
      if (s.flags & kStageRel) [[unlikely]] {  // a piece of a staged call's stack arguments
        if (!c->stage || s.addr > c->stage_len || s.data_len > c->stage_len - s.addr) {
          fail(s, c->stage ? EFAULT : ENOMEM);
          break;
        }
        mem = c->stage + s.addr;
      }
      if (s.op == kWriteMem) do_copy(s, mem, data, s.data_len);
      else do_copy(s, data, mem, s.data_len);
      break;
    }
    case kStageAlloc: {
      free(c->stage);
      c->stage = nullptr;
      c->stage_len = 0;
      void* p = worker_alloc(s.size);
      if (!p) {
        fail(s, ENOMEM);
      } else {
        c->stage = static_cast<char*>(p);
        c->stage_len = s.size;
        s.status = kOk;
        s.result = 0;
      }
      break;
    }
    case kStageFree:
      free(c->stage);
      c->stage = nullptr;
      c->stage_len = 0;
      s.status = kOk;
      s.result = 0;
      break;
    case kCopyMem:
      do_copy(s, reinterpret_cast<void*>(s.addr), reinterpret_cast<const void*>(s.vals[0]), s.size);
      break;
    case kNop:
      s.status = kOk;
      s.result = 0;
      break;
    case kVhBarrier:
      if (c->sock >= 0) {
        if (!wait_release(c, index)) exit_worker();
      } else {
        wait_above(c->h->vh_released, index, c->h->worker_vh_sleeping, uint64_t(c->h->spin_us) * 1000,
                   -1, [] { return false; });
      }
      s.status = kOk;
      s.result = 0;
      break;
    case kExit:
      s.status = kOk;
      s.result = 0;
      return false;
    default:
      fail(s, ENOSYS);
  }
  return true;
}

// Executes a request and keeps its result for veo_prev_req_result: one per request (the last
// piece of a transfer), none for a host function's barrier, as AVEO sees only the requests that
// reach the VE.
bool run_request(WorkerChannel* c, Slot& s, uint64_t index) {
  c->running.store(&s, std::memory_order_release);
  const bool more = execute(c, s, index);
  c->running.store(nullptr, std::memory_order_release);
  if (s.op != kVhBarrier && !(s.flags & kMorePieces)) c->recent[c->nrecent++ % WorkerChannel::kRecent] = s.result;
  return more;
}

void close_channel(WorkerChannel* c);

void* serve(void* arg) {
  auto* c = static_cast<WorkerChannel*>(arg);
  t_channel = c;
  // An alternate stack, so a kernel's stack overflow still reaches the fatal-signal handler.
  // (Unless the thread has one already: a sanitizer runtime installs and later frees its own.)
  stack_t ss{}, old{};
  if (sigaltstack(nullptr, &old) == 0 && (old.ss_flags & SS_DISABLE)) {
    ss.ss_size = 64 * 1024;
    ss.ss_sp = malloc(ss.ss_size);
    if (ss.ss_sp) sigaltstack(&ss, nullptr);
  }
  ChannelHeader* h = c->h;
  const uint32_t n = h->nslots;
  if (c->sock < 0) {
    const uint64_t spin = h->spin_us == UINT32_MAX ? kSpinForever : uint64_t(h->spin_us) * 1000;
    uint64_t avail = 0;  // requests known to be published: head is re-read only past them
    for (uint64_t i = h->done.load(std::memory_order_relaxed);; ++i) {
      if (i >= avail) {
        wait_above(h->head, i, h->worker_sleeping, spin, -1, [] { return false; });
        avail = h->head.load(std::memory_order_acquire);
      }
      Slot& s = c->slots[i % n];
      const bool more = run_request(c, s, i);
      publish(h->done, i + 1, h->host_sleeping);
      if (!more) break;
    }
  } else {
    for (uint64_t i = 0;; ++i) {
      if (i == c->received && !recv_request(c)) exit_worker();
      Slot& s = c->slots[i % n];
      const bool more = run_request(c, s, i);
      send_response(c, i, s);
      if (!more) break;
    }
  }
  // kExit (veo_context_close): the channel's memory, socket and entry go with its thread, so that a
  // worker whose contexts are opened and closed for its whole life neither fills g_channels (the
  // 1023rd veo_context_open failed with EMFILE) nor keeps every closed queue's mapping.
  t_channel = nullptr;
  if (ss.ss_sp) {
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    sigaltstack(&off, nullptr);
    free(ss.ss_sp);
  }
  close_channel(c);
  return nullptr;
}

// Frees a channel and its entry in g_channels (its thread has ended, or never started).
void close_channel(WorkerChannel* c) {
  if (c->entry >= 0) {
    g_channels[c->entry].store(nullptr, std::memory_order_seq_cst);
    // A fatal-signal handler that counted itself before the entry was cleared may be reading the
    // channel: it ends in the worker's death, so this thread waits for that (Dekker with on_fatal).
    while (g_in_fatal.load(std::memory_order_seq_cst)) usleep(1000);
  }
  if (c->base) munmap(c->base, c->map_len);
  if (c->sock >= 0) close(c->sock);
  free(c->stage);
  delete c;
}

// Maps a channel: the memfd (shm), or a private mapping of the same layout (socket) whose header
// the host sends first. Takes fd (closed, or kept as the channel's socket) either way.
int open_channel(int fd, const ControlMsg& m) {
  auto* c = new WorkerChannel;
  const bool shm = m.transport == kShm;
  auto failed = [c](int rc) {
    close_channel(c);
    return rc;
  };
  void* p = shm ? mmap(nullptr, m.map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : mmap(nullptr, m.map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  const int map_errno = errno;
  if (shm) close(fd);  // the mapping keeps the memory
  else c->sock = fd;
  if (p == MAP_FAILED) return failed(-map_errno);
  c->base = static_cast<char*>(p);
  c->map_len = m.map_len;
  c->h = reinterpret_cast<ChannelHeader*>(p);
  if (!shm && !recv_all(fd, c->h, kHeaderPrefix)) return failed(-EIO);
  if (c->h->magic != kMagic || c->h->protocol != kProtocol ||
      channel_bytes(c->h->nslots, c->h->arena_size) > m.map_len)
    return failed(-EPROTO);
  c->slots = reinterpret_cast<Slot*>(c->base + kSlotsOffset);
  c->arena = c->base + c->h->arena_off;
  // A free entry (a closed channel's), else a new one. Only this (the main) thread sets entries.
  const int used = g_nchannels.load(std::memory_order_relaxed);
  int idx = 0;
  while (idx < used && g_channels[idx].load(std::memory_order_relaxed)) ++idx;
  if (idx >= kMaxChannels) return failed(-EMFILE);
  c->entry = idx;
  g_channels[idx].store(c, std::memory_order_seq_cst);
  if (idx == used) g_nchannels.store(idx + 1, std::memory_order_release);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (m.stack_kib) pthread_attr_setstacksize(&attr, size_t(m.stack_kib) * 1024);
  pthread_t t;
  int rc = pthread_create(&t, &attr, serve, c);
  pthread_attr_destroy(&attr);
  if (rc) return failed(-rc);
  pthread_detach(t);
  return 0;
}

int recv_control(int sock, ControlMsg* m, int* fd) {
  char cbuf[CMSG_SPACE(sizeof(int))];
  iovec iov{m, sizeof *m};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  ssize_t r;
  do r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
  while (r < 0 && errno == EINTR);
  if (r != ssize_t(sizeof *m)) return -1;
  *fd = -1;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) std::memcpy(fd, CMSG_DATA(cm), sizeof(int));
  return 0;
}

}  // namespace
}  // namespace accio::offload

#pragma GCC visibility push(default)
extern "C" {

uint64_t accio_offload_echo(uint64_t x) { return x; }

// Kernel side: the result of a request this context executed before the running one (offs 0:
// the one just before). -1 outside a context's thread or beyond the 64 results kept.
int veo_prev_req_result(int offs, uint64_t* result) {
  using namespace accio::offload;
  WorkerChannel* c = t_channel;
  if (!c || !result || offs < 0 || uint64_t(offs) >= WorkerChannel::kRecent || uint64_t(offs) >= c->nrecent)
    return -1;
  *result = c->recent[(c->nrecent - 1 - uint64_t(offs)) % WorkerChannel::kRecent];
  return 0;
}

int accio_offload_worker_main(int argc, char** argv) {
  using namespace accio::offload;
  int sock = -1;
  for (int i = 1; i + 1 < argc; ++i)
    if (!strcmp(argv[i], "--fd")) sock = atoi(argv[i + 1]);
  if (sock < 0) {
    fprintf(stderr,
            "%s: the accio offload worker; veo_proc_create() starts it (usage: %s --fd N)\n",
            argv[0], argv[0]);
    return 2;
  }
  fcntl(sock, F_SETFD, FD_CLOEXEC);
  prctl(PR_SET_NAME, "accio-worker");
  signal(SIGPIPE, SIG_IGN);
  install_fatal_handlers();
  for (;;) {
    ControlMsg m;
    int fd = -1;
    if (recv_control(sock, &m, &fd) < 0) exit_worker();  // the host is gone
    ControlReply rep{0, 0, uint64_t(getpid())};
    if (m.kind == kCtlOpenChannel) {
      rep.status = fd < 0 ? -EBADF : open_channel(fd, m);
    } else if (m.kind == kCtlExit) {
      flush_kernel_output();  // before the reply: the host's veo_proc_destroy then finds it written
      send_all(sock, &rep, sizeof rep);
      _exit(0);
    } else {
      rep.status = -ENOSYS;
    }
    if (!send_all(sock, &rep, sizeof rep)) exit_worker();
  }
}

}  // extern "C"
#pragma GCC visibility pop
