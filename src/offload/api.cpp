// accio offload: the VEO API surface, every function ve_offload.h declares (libaccio_offload's
// exports): argument lists, the C handles, and VEO's return conventions over the queues
// (queue.hpp), the worker processes (proc.hpp) and the options (options.hpp).
#include <atomic>
#include <cstdarg>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "accio/ve_offload.h"
#include "offload/options.hpp"
#include "offload/proc.hpp"
#include "offload/queue.hpp"
#include "offload/report.hpp"

struct veo_thr_ctxt_attr {
  size_t stacksize = 0;
};

namespace accio::offload {
namespace {

Proc* P(veo_proc_handle* h) { return reinterpret_cast<Proc*>(h); }

// A handle veo_proc_destroy has destroyed: a tombstone (proc.hpp), refused by every entry point
// with its failure value, errno ESRCH and a message (AVEO keeps its ProcHandle too; a second
// veo_proc_destroy returns 0 there and here).
[[gnu::noinline, gnu::cold]] bool refuse_destroyed(const char* who) {
  report(std::string(who) + ": the proc was destroyed (veo_proc_destroy); its handle is no longer valid");
  errno = ESRCH;
  return true;
}
inline bool destroyed(veo_proc_handle* h, const char* who) {
  if (!h || !P(h)->destroyed.load(std::memory_order_acquire)) [[likely]] return false;
  return refuse_destroyed(who);
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

// veo_register_hook: a function of the API -> (hook, payload). The API functions that call hooks
// (AVEO's set) look only when one is registered.
std::mutex g_hooks_mu;
std::map<void*, std::pair<void (*)(void*, ...), void*>> g_hooks;
std::atomic<int> g_nhooks{0};

bool find_hook(void* fn, void (**hook)(void*, ...), void** payload) {
  if (g_nhooks.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> g(g_hooks_mu);
  auto it = g_hooks.find(fn);
  if (it == g_hooks.end()) return false;
  if (hook) *hook = it->second.first;
  if (payload) *payload = it->second.second;
  return true;
}

// Calls the hook registered for fn, if any, with its payload and these arguments.
template <class... A>
void fire_hook(void* fn, A... args) {
  void (*hook)(void*, ...);
  void* payload;
  if (find_hook(fn, &hook, &payload)) hook(payload, args...);
}

std::string hex(uint64_t v) {
  char b[32];
  snprintf(b, sizeof b, "%#llx", static_cast<unsigned long long>(v));
  return b;
}

// veo_free_mem's check: only an address the proc allocated, once. The record is taken before
// the free is sent (so two racing frees of one address cannot both pass) and put back with
// restore_alloc when the free is not carried out, so a failed free can be retried.
bool take_alloc(Proc* p, uint64_t addr, const char* who, size_t* size) {
  std::lock_guard<std::mutex> g(p->mu);
  auto it = p->allocs.find(addr);
  if (it != p->allocs.end()) {
    *size = it->second;
    p->allocs.erase(it);
    return true;
  }
  report(std::string(who) + ": " + hex(addr) + " was not allocated by veo_alloc_mem (or was freed)");
  return false;
}

void restore_alloc(Proc* p, uint64_t addr, size_t size) {
  std::lock_guard<std::mutex> g(p->mu);
  p->allocs.emplace(addr, size);
}

// veo_alloc_mem_async/veo_free_mem_async with a hook registered: as in AVEO, a host function
// queued after the request waits for its result, calls the hook and returns the result; its
// request id is the one the caller gets.
struct AsyncHook {
  veo_thr_ctxt* ctx;
  uint64_t req;
  uint64_t arg;  // the size (alloc) or the address (free)
  uint64_t (*run)(AsyncHook*);
};

uint64_t run_async_hook(void* p) {
  auto* a = static_cast<AsyncHook*>(p);
  const uint64_t v = a->run(a);
  delete a;
  return v;
}

uint64_t submit_async_hook(veo_thr_ctxt* c, AsyncHook* a) {
  const uint64_t id = veo_call_async_vh(c, run_async_hook, a);
  if (id == VEO_REQUEST_ID_INVALID) {
    std::lock_guard<std::mutex> g(c->mu);
    c->drop(a->req);
    delete a;
  }
  return id;
}

uint64_t alloc_async_hook(AsyncHook* a) {
  uint64_t addr = 0;
  if (a->ctx->result(a->req, &addr, true) != VEO_COMMAND_OK) return 0;
  fire_hook(reinterpret_cast<void*>(&veo_alloc_mem_async), a->ctx, addr, size_t(a->arg));
  return addr;
}

uint64_t free_async_hook(AsyncHook* a) {
  if (a->ctx->result(a->req, nullptr, true) != VEO_COMMAND_OK) return ~0ull;
  fire_hook(reinterpret_cast<void*>(&veo_free_mem_async), a->ctx, a->arg);
  return 0;
}

// hmem: a worker address tagged with bit 63 and the proc's identifier in bits 62:59 (AVEO's layout).
constexpr uint64_t kHmemFlag = 1ull << 63;
constexpr int kHmemIdentShift = 59;
constexpr uint64_t kHmemIdentMask = 0xfull << kHmemIdentShift;
constexpr int kMaxHmemProcs = 16;

void* hmem_tag(uint64_t addr, int ident) {
  if (ident < 0 || ident >= kMaxHmemProcs) return nullptr;
  return reinterpret_cast<void*>(addr | kHmemFlag | uint64_t(ident) << kHmemIdentShift);
}

// veo_register_hmem_hook_functions: hooks on the four allocation functions that tell the
// registered functions the hmem address (tagged) of what was allocated or freed.
std::atomic<void (*)(void*, size_t)> g_hmem_alloc{nullptr};
std::atomic<void (*)(uint64_t)> g_hmem_free{nullptr};

// A proc whose identifier does not fit the tag's four bits (the 17th proc and later) has no hmem
// address: its allocations do not reach these functions (no error, no null address).
void hmem_alloc(int ident, uint64_t addr, size_t size) {
  auto f = g_hmem_alloc.load();
  if (void* tagged = f ? hmem_tag(addr, ident) : nullptr) f(tagged, size);
}
void hmem_free(int ident, uint64_t addr) {
  auto f = g_hmem_free.load();
  if (void* tagged = f ? hmem_tag(addr, ident) : nullptr) f(reinterpret_cast<uint64_t>(tagged));
}
void hmem_alloc_hook(void* payload, ...) {  // (proc, uint64_t* addr, size)
  va_list ap;
  va_start(ap, payload);
  auto* h = va_arg(ap, veo_proc_handle*);
  const uint64_t* addr = va_arg(ap, uint64_t*);
  const size_t size = va_arg(ap, size_t);
  va_end(ap);
  hmem_alloc(veo_proc_identifier(h), *addr, size);
}
void hmem_free_hook(void* payload, ...) {  // (proc, addr)
  va_list ap;
  va_start(ap, payload);
  auto* h = va_arg(ap, veo_proc_handle*);
  const uint64_t addr = va_arg(ap, uint64_t);
  va_end(ap);
  hmem_free(veo_proc_identifier(h), addr);
}
void hmem_alloc_async_hook(void* payload, ...) {  // (context, addr, size)
  va_list ap;
  va_start(ap, payload);
  auto* c = va_arg(ap, veo_thr_ctxt*);
  const uint64_t addr = va_arg(ap, uint64_t);
  const size_t size = va_arg(ap, size_t);
  va_end(ap);
  hmem_alloc(c->proc->ident, addr, size);
}
void hmem_free_async_hook(void* payload, ...) {  // (context, addr)
  va_list ap;
  va_start(ap, payload);
  auto* c = va_arg(ap, veo_thr_ctxt*);
  const uint64_t addr = va_arg(ap, uint64_t);
  va_end(ap);
  hmem_free(c->proc->ident, addr);
}

Proc* hmem_proc(const void* addr) {
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  return (a & kHmemFlag) ? proc_by_ident(int((a & kHmemIdentMask) >> kHmemIdentShift)) : nullptr;
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
  Piece p;
  p.op = kCall;
  p.addr = addr;
  p.args = args;
  return c->submit(p);
}

}  // namespace
}  // namespace accio::offload

using namespace accio::offload;

#pragma GCC visibility push(default)
extern "C" {

#define ACCIO_STR2(x) #x
#define ACCIO_STR(x) ACCIO_STR2(x)
int veo_api_version(void) { return VEO_API_VERSION; }
const char* veo_version_string(void) { return "accio " ACCIO_VERSION_STRING " (VEO API " ACCIO_STR(VEO_API_VERSION) ")"; }
const char* accio_offload_last_error(void) { return last_error().c_str(); }

int accio_offload_options_init(accio_offload_options* o) {
  if (!o) return -EINVAL;
  return read_options(o);
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

int accio_offload_worker_pid(struct veo_proc_handle* h) {
  if (destroyed(h, "accio_offload_worker_pid")) return -1;
  return h ? int(P(h)->pid) : -1;
}
int veo_proc_identifier(struct veo_proc_handle* h) {
  if (h && P(h)->destroyed.load(std::memory_order_acquire)) return -1;  // as AVEO: not in the list of procs
  return h ? P(h)->ident : -1;
}

int veo_proc_destroy(struct veo_proc_handle* h) {
  if (!h) return -1;
  if (P(h)->destroyed.load(std::memory_order_acquire)) return 0;  // AVEO: a second destroy returns 0
  {
    std::lock_guard<std::mutex> g(P(h)->mu);
    for (const veo_thr_ctxt* c : P(h)->contexts)
      if (c->on_vh_runner()) {  // destroying it would wait for the host function calling it
        report("veo_proc_destroy: called by a host function of one of its contexts (veo_call_async_vh): destroy "
               "the proc from another thread");
        return -1;
      }
  }
  destroy_proc(P(h));
  return 0;
}

// AVEO refuses names longer than VEO_SYMNAME_LEN_MAX with ENAMETOOLONG before sending them.
bool name_fits(const char* who, const char* name) {
  if (strnlen(name, VEO_SYMNAME_LEN_MAX + 1) <= VEO_SYMNAME_LEN_MAX) return true;
  report(std::string(who) + ": the name is longer than " + std::to_string(VEO_SYMNAME_LEN_MAX) +
         " characters (VEO_SYMNAME_LEN_MAX)");
  errno = ENAMETOOLONG;
  return false;
}

uint64_t veo_load_library(struct veo_proc_handle* h, const char* libname) {
  if (destroyed(h, "veo_load_library")) return 0;
  if (!h || !libname) {
    report("veo_load_library: no proc or no library name");
    return 0;
  }
  if (!name_fits("veo_load_library", libname)) return 0;
  Piece p;
  p.op = kLoadLib;
  p.in = libname;
  p.in_len = strlen(libname) + 1;
  p.data_len = p.in_len + 512;
  uint64_t handle = 0;
  std::string msg;
  int st = P(h)->chan->call(p, &handle, &msg);
  if (st != VEO_COMMAND_OK || !handle) {
    report(std::string("veo_load_library: ") + (msg.empty() ? libname : msg));
    return 0;
  }
  return handle;
}

int veo_unload_library(struct veo_proc_handle* h, const uint64_t libhandle) {
  if (destroyed(h, "veo_unload_library")) return -1;
  if (!h || !libhandle) {
    report("veo_unload_library: no proc or library handle 0");
    return -1;
  }
  Proc* pr = P(h);
  Piece p;
  p.op = kUnloadLib;
  p.addr = libhandle;
  std::string msg;
  int st = pr->chan->call(p, nullptr, &msg);
  std::lock_guard<std::mutex> g(pr->mu);
  // That library's symbols, and handle 0's (RTLD_DEFAULT finds the functions of every library loaded
  // RTLD_GLOBAL: a cached one may lie in the library unloaded now).
  for (auto it = pr->syms.begin(); it != pr->syms.end();)
    it = it->first.first == libhandle || it->first.first == 0 ? pr->syms.erase(it) : std::next(it);
  if (st != VEO_COMMAND_OK) {
    report("veo_unload_library: " + (msg.empty() ? std::string("failed") : msg));
    return -1;
  }
  return 0;
}

uint64_t veo_get_sym(struct veo_proc_handle* h, uint64_t libhandle, const char* symname) {
  if (destroyed(h, "veo_get_sym")) return 0;
  if (!h || !symname) {
    report("veo_get_sym: no proc or no symbol name");
    return 0;
  }
  if (!name_fits("veo_get_sym", symname)) return 0;
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
  int st = pr->chan->call(p, &addr, &msg);
  if (st != VEO_COMMAND_OK || !addr) {
    report(std::string("veo_get_sym: ") + (msg.empty() ? symname : msg));
    return 0;
  }
  std::lock_guard<std::mutex> g(pr->mu);
  pr->syms[key] = addr;
  return addr;
}

int veo_alloc_mem(struct veo_proc_handle* h, uint64_t* addr, const size_t size) {
  if (destroyed(h, "veo_alloc_mem")) {
    if (addr) *addr = 0;
    return -2;
  }
  if (!h || !addr) {
    report("veo_alloc_mem: no proc or no address pointer");
    return -2;
  }
  Piece p;
  p.op = kAlloc;
  p.size = size;
  std::string msg;
  int st = P(h)->chan->call(p, addr, &msg);  // a success is recorded in the proc's allocations
  if (st != VEO_COMMAND_OK) {
    report("veo_alloc_mem: " + std::to_string(size) + " bytes: " + msg);
    *addr = 0;
    return st == VEO_COMMAND_ERROR && msg.find("errno 12") != std::string::npos ? -1 : -2;
  }
  fire_hook(reinterpret_cast<void*>(&veo_alloc_mem), h, addr, size);
  return 0;
}

int veo_free_mem(struct veo_proc_handle* h, uint64_t addr) {
  if (destroyed(h, "veo_free_mem")) return -1;
  if (!h) return -1;
  if (addr == 0) return 0;  // as free(NULL), which AVEO calls: cleanup code frees handles never set
  size_t size = 0;
  if (!take_alloc(P(h), addr, "veo_free_mem", &size)) return -1;
  Piece p;
  p.op = kFree;
  p.addr = addr;
  if (P(h)->chan->call(p, nullptr, nullptr) != VEO_COMMAND_OK) {
    restore_alloc(P(h), addr, size);
    return -1;
  }
  fire_hook(reinterpret_cast<void*>(&veo_free_mem), h, addr);
  return 0;
}

uint64_t veo_alloc_mem_async(struct veo_thr_ctxt* c, const size_t size) {
  if (!c) {
    report("veo_alloc_mem_async: no context");
    return VEO_REQUEST_ID_INVALID;
  }
  Piece p;
  p.op = kAlloc;
  p.size = size;
  const uint64_t req = c->submit(p);
  if (req == VEO_REQUEST_ID_INVALID || !find_hook(reinterpret_cast<void*>(&veo_alloc_mem_async), nullptr, nullptr))
    return req;
  return submit_async_hook(c, new AsyncHook{c, req, size, &alloc_async_hook});
}

uint64_t veo_free_mem_async(struct veo_thr_ctxt* c, uint64_t addr) {
  if (!c) {
    report("veo_free_mem_async: no context");
    return VEO_REQUEST_ID_INVALID;
  }
  size_t size = 0;
  if (!take_alloc(c->proc, addr, "veo_free_mem_async", &size)) return VEO_REQUEST_ID_INVALID;
  Piece p;
  p.op = kFree;
  p.addr = addr;
  const uint64_t req = c->submit(p);
  // Only a free that was never sent is put back. Once sent, the worker's kFree cannot fail (free()
  // reports nothing); a failed result means the worker died or the wait passed its deadline, and
  // then the free may have been carried out: a record put back there would let the address be
  // freed twice. (veo_free_mem's restore after a failed call has the same window; it is kept for
  // a call refused before it was sent.)
  if (req == VEO_REQUEST_ID_INVALID) restore_alloc(c->proc, addr, size);
  if (req == VEO_REQUEST_ID_INVALID || !find_hook(reinterpret_cast<void*>(&veo_free_mem_async), nullptr, nullptr))
    return req;
  return submit_async_hook(c, new AsyncHook{c, req, addr, &free_async_hook});
}

void veo_req_block_begin(struct veo_thr_ctxt* c) {
  if (!c) return report("veo_req_block_begin: no context");
  c->block_begin();
}

void veo_req_block_end(struct veo_thr_ctxt* c) {
  if (!c) return report("veo_req_block_end: no context");
  if (!c->block_end()) report("veo_req_block_end: " + c->name() + " has no request block of this thread");
}

void veo_register_hook(void* func, void (*hook)(void*, ...), void* payload) {
  if (!func || !hook) return report("veo_register_hook: no function or no hook");
  std::lock_guard<std::mutex> g(g_hooks_mu);
  g_hooks[func] = {hook, payload};
  g_nhooks.store(int(g_hooks.size()), std::memory_order_release);
}

void* veo_get_hook(void* func) {
  void (*hook)(void*, ...) = nullptr;
  void* payload;
  find_hook(func, &hook, &payload);
  return reinterpret_cast<void*>(hook);
}

void veo_unregister_hook(void* func) {
  std::lock_guard<std::mutex> g(g_hooks_mu);
  g_hooks.erase(func);
  g_nhooks.store(int(g_hooks.size()), std::memory_order_release);
}

// ---- hmem (AVEO's tag layout: bit 63, the proc identifier in bits 62:59) ----

int veo_is_ve_addr(const void* addr) { return (reinterpret_cast<uint64_t>(addr) & kHmemFlag) ? 1 : 0; }

void* veo_get_hmem_addr(void* addr) {
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  return (a & kHmemFlag) ? reinterpret_cast<void*>(a & ~(kHmemFlag | kHmemIdentMask)) : addr;
}

int veo_get_max_proc_identifier(void) { return kMaxHmemProcs; }

int veo_get_proc_identifier_from_hmem(const void* addr) {
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  return (a & kHmemFlag) ? int((a & kHmemIdentMask) >> kHmemIdentShift) : -1;
}

void* veo_set_proc_identifier(void* addr, int ident) {
  if (ident < 0 || ident >= kMaxHmemProcs) {
    report("veo_set_proc_identifier: proc identifier " + std::to_string(ident) + " is not in 0.." +
           std::to_string(kMaxHmemProcs - 1));
    return nullptr;
  }
  return hmem_tag(reinterpret_cast<uint64_t>(addr), ident);
}

struct veo_proc_handle* veo_get_proc_handle_from_hmem(const void* addr) {
  return reinterpret_cast<veo_proc_handle*>(hmem_proc(addr));
}

pid_t veo_get_pid_from_hmem(const void* addr) {
  Proc* p = hmem_proc(addr);
  return p ? p->pid : -1;
}

int veo_get_venum_from_hmem(const void* addr) {
  Proc* p = hmem_proc(addr);
  return p ? (p->opts.venode < 0 ? 0 : p->opts.venode) : -1;  // -1 (anywhere) is AVEO's default node 0
}

int veo_alloc_hmem(struct veo_proc_handle* h, void** addr, const size_t size) {
  if (destroyed(h, "veo_alloc_hmem")) {
    if (addr) *addr = nullptr;
    return -1;
  }
  if (!addr) {
    report("veo_alloc_hmem: no address pointer");
    return -1;
  }
  *addr = nullptr;
  if (!h) {  // host memory, untagged
    *addr = malloc(size);
    return *addr ? 0 : -1;
  }
  const int ident = P(h)->ident;
  if (ident < 0 || ident >= kMaxHmemProcs) {
    report("veo_alloc_hmem: proc identifier " + std::to_string(ident) + ": hmem addresses name only procs 0.." +
           std::to_string(kMaxHmemProcs - 1) + " (VEO_MAX_HMEM_PROCS)");
    return -1;
  }
  uint64_t a = 0;
  if (int rc = veo_alloc_mem(h, &a, size); rc != 0) return rc;
  if (a & (kHmemFlag | kHmemIdentMask)) {  // not on x86-64 Linux (47-bit user space), but never a wrong tag
    veo_free_mem(h, a);
    report("veo_alloc_hmem: worker address " + hex(a) + " uses the tag bits 63:59");
    return -1;
  }
  *addr = veo_set_proc_identifier(reinterpret_cast<void*>(a), ident);
  fire_hook(reinterpret_cast<void*>(&veo_alloc_hmem), h, *addr, size);
  return 0;
}

int veo_free_hmem(void* addr) {
  if (!veo_is_ve_addr(addr)) {
    free(addr);
    return 0;
  }
  Proc* p = hmem_proc(addr);
  if (!p) {
    report("veo_free_hmem: " + hex(reinterpret_cast<uint64_t>(addr)) + " names proc " +
           std::to_string(veo_get_proc_identifier_from_hmem(addr)) + ", which does not exist");
    return -1;
  }
  auto* h = reinterpret_cast<veo_proc_handle*>(p);
  const int rc = veo_free_mem(h, reinterpret_cast<uint64_t>(veo_get_hmem_addr(addr)));
  if (rc == 0) fire_hook(reinterpret_cast<void*>(&veo_free_hmem), h, addr);
  return rc;
}

int veo_hmemcpy(void* dst, const void* src, size_t size) {
  const bool to_worker = veo_is_ve_addr(dst), from_worker = veo_is_ve_addr(src);
  Proc* pd = hmem_proc(dst);
  Proc* ps = hmem_proc(src);
  if ((to_worker && !pd) || (from_worker && !ps)) {
    report("veo_hmemcpy: " + hex(reinterpret_cast<uint64_t>(to_worker && !pd ? dst : src)) +
           " names a proc that does not exist");
    return -1;
  }
  const uint64_t d = reinterpret_cast<uint64_t>(veo_get_hmem_addr(dst));
  const uint64_t s = reinterpret_cast<uint64_t>(veo_get_hmem_addr(const_cast<void*>(src)));
  if (to_worker && !from_worker) return veo_write_mem(reinterpret_cast<veo_proc_handle*>(pd), d, src, size);
  if (from_worker && !to_worker) return veo_read_mem(reinterpret_cast<veo_proc_handle*>(ps), dst, s, size);
  if (!to_worker) {
    if (size) memmove(dst, src, size);
    return 0;
  }
  if (pd != ps) {
    report("veo_hmemcpy: the source and the destination are in different procs");
    return -1;
  }
  Piece p;  // within one worker, on its main context as the other synchronous calls
  p.op = kCopyMem;
  p.addr = d;
  p.size = size;
  p.src = s;
  return pd->chan->call(p, nullptr, nullptr) == VEO_COMMAND_OK ? 0 : -1;
}

int veo_args_set_hmem(struct veo_args* a, int n, void* val) {  // the tagged value, as AVEO passes it
  return veo_args_set_u64(a, n, reinterpret_cast<uint64_t>(val));
}

void veo_register_hmem_hook_functions(void (*alloc)(void*, size_t), void (*free_fn)(uint64_t)) {
  if (!alloc || !free_fn) return report("veo_register_hmem_hook_functions: no alloc or no free function");
  g_hmem_alloc.store(alloc);
  g_hmem_free.store(free_fn);
  veo_register_hook(reinterpret_cast<void*>(&veo_alloc_mem), &hmem_alloc_hook, nullptr);
  veo_register_hook(reinterpret_cast<void*>(&veo_free_mem), &hmem_free_hook, nullptr);
  veo_register_hook(reinterpret_cast<void*>(&veo_alloc_mem_async), &hmem_alloc_async_hook, nullptr);
  veo_register_hook(reinterpret_cast<void*>(&veo_free_mem_async), &hmem_free_async_hook, nullptr);
}

void veo_unregister_hmem_hook_functions(void) {
  veo_unregister_hook(reinterpret_cast<void*>(&veo_alloc_mem));
  veo_unregister_hook(reinterpret_cast<void*>(&veo_free_mem));
  veo_unregister_hook(reinterpret_cast<void*>(&veo_alloc_mem_async));
  veo_unregister_hook(reinterpret_cast<void*>(&veo_free_mem_async));
}

int veo_read_mem(struct veo_proc_handle* h, void* dst, uint64_t src, size_t size) {
  if (destroyed(h, "veo_read_mem")) return -1;
  if (!h || (!dst && size)) return -1;
  uint64_t id;
  Proc* pr = P(h);
  if (pr->chan->transfer(false, src, dst, size, &id) != 0) return -1;
  if (pr->chan->result(id, nullptr, true) == VEO_COMMAND_OK) return 0;
  pr->chan->abandon(id);  // a wait that timed out: nothing is copied into dst after we return
  return -1;
}

int veo_write_mem(struct veo_proc_handle* h, uint64_t dst, const void* src, size_t size) {
  if (destroyed(h, "veo_write_mem")) return -1;
  if (!h || (!src && size)) return -1;
  uint64_t id;
  Proc* pr = P(h);
  if (pr->chan->transfer(true, dst, const_cast<void*>(src), size, &id) != 0) return -1;
  if (pr->chan->result(id, nullptr, true) == VEO_COMMAND_OK) return 0;
  pr->chan->abandon(id);  // a wait that timed out: src is not read after we return
  return -1;
}

uint64_t veo_async_read_mem(struct veo_thr_ctxt* c, void* dst, uint64_t src, size_t size) {
  if (!c || (!dst && size)) return VEO_REQUEST_ID_INVALID;
  uint64_t id;
  if (c->transfer(false, src, dst, size, &id) != 0) return VEO_REQUEST_ID_INVALID;
  return id;
}

uint64_t veo_async_write_mem(struct veo_thr_ctxt* c, uint64_t dst, const void* src, size_t size) {
  if (!c || (!src && size)) return VEO_REQUEST_ID_INVALID;
  uint64_t id;
  if (c->transfer(true, dst, const_cast<void*>(src), size, &id, true) != 0) return VEO_REQUEST_ID_INVALID;
  return id;
}

int veo_num_contexts(struct veo_proc_handle* h) {
  if (destroyed(h, "veo_num_contexts")) return -1;
  if (!h) {
    errno = EINVAL;
    return -1;
  }
  std::lock_guard<std::mutex> g(P(h)->mu);
  return int(P(h)->contexts.size());
}

struct veo_thr_ctxt* veo_get_context(struct veo_proc_handle* h, int idx) {
  if (destroyed(h, "veo_get_context")) return nullptr;
  if (!h) return nullptr;
  std::lock_guard<std::mutex> g(P(h)->mu);
  if (idx < 0 || size_t(idx) >= P(h)->contexts.size()) {
    report("veo_get_context: no context " + std::to_string(idx));
    return nullptr;
  }
  return P(h)->contexts[size_t(idx)];
}

struct veo_thr_ctxt* veo_context_open(struct veo_proc_handle* h) {
  if (destroyed(h, "veo_context_open")) return nullptr;
  return open_context(P(h), 0);
}

struct veo_thr_ctxt* veo_context_open_with_attr(struct veo_proc_handle* h, struct veo_thr_ctxt_attr* a) {
  if (destroyed(h, "veo_context_open_with_attr")) return nullptr;
  if (!a) {
    errno = EINVAL;
    return nullptr;
  }
  return open_context(P(h), a->stacksize);
}

struct veo_thr_ctxt_attr* veo_alloc_thr_ctxt_attr(void) { return new (std::nothrow) veo_thr_ctxt_attr; }
// NULL arguments: -1 with EINVAL, as AVEO.
int veo_free_thr_ctxt_attr(struct veo_thr_ctxt_attr* a) {
  if (!a) return errno = EINVAL, -1;
  delete a;
  return 0;
}
int veo_set_thr_ctxt_stacksize(struct veo_thr_ctxt_attr* a, size_t s) {
  if (!a) return errno = EINVAL, -1;
  a->stacksize = s;
  return 0;
}
int veo_get_thr_ctxt_stacksize(struct veo_thr_ctxt_attr* a, size_t* s) {
  if (!a || !s) return errno = EINVAL, -1;
  *s = a->stacksize;
  return 0;
}

// The main context (the first opened) lives until the proc is destroyed, as in AVEO.
int veo_context_close(struct veo_thr_ctxt* c) {
  if (!c) return -1;
  if (c->main) return 0;
  if (c->on_vh_runner()) {  // it would wait for the host function calling it
    report("veo_context_close: called by a host function of that context (veo_call_async_vh), which runs until "
           "it returns: close the context from another thread");
    return -1;
  }
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
  if (destroyed(h, "veo_call_sync")) return -1;
  if (!h || !addr) {
    report("veo_call_sync: no proc or function address 0");
    return -1;
  }
  Piece p;
  p.op = kCall;
  p.addr = addr;
  p.args = args;
  return P(h)->chan->call(p, result, nullptr) == VEO_COMMAND_OK ? 0 : -1;
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
  Piece p;
  p.op = kVhBarrier;
  p.vh = func;
  p.vh_arg = arg;
  return c->submit(p);
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
