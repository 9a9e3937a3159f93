// accio offload: the worker process behind a proc (its lifecycle). Starting it (posix_spawn of
// the worker program, found next to libaccio_offload or named by the offload_worker setting),
// binding it to a NUMA node's CPUs, the control socket (opening queues in it, asking it to exit),
// the watchdog that sees it die and fails what is pending, destroying it, and fork handling (a
// forked child drops its parent's workers). The requests themselves travel on queues (queue.hpp).
#pragma once
#include <sys/types.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "accio/ve_offload.h"
#include "offload/queue.hpp"

// A context: a queue of its own, served by its own worker thread. The proc's own queue is one
// too: the main context, which the first veo_context_open returns (as in AVEO).
struct veo_thr_ctxt : accio::offload::Channel {
  bool main = false;  // the proc's own queue: lives until the proc is destroyed
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
  // veo_proc_destroy ran: the handle is a tombstone (its resources are freed, its memory is kept,
  // as AVEO never frees a ProcHandle), so a second destroy or any call with it is refused, not a
  // use after free.
  std::atomic<bool> destroyed{false};
  Proc* next_tombstone = nullptr;
  std::string death;  // why the worker is gone (under mu)
  std::mutex mu;      // contexts, symbols, allocations, the control socket, death
  // The proc's own queue, the main context: the synchronous calls run on it, in order with the
  // requests queued on it before them. contexts[0] once a context has been opened.
  veo_thr_ctxt* chan = nullptr;
  std::vector<veo_thr_ctxt*> contexts;
  std::map<std::pair<uint64_t, std::string>, uint64_t> syms;
  std::unordered_map<uint64_t, size_t> allocs;
  uint32_t next_channel = 0;
  std::thread watchdog;

  std::string why_dead() {
    std::lock_guard<std::mutex> g(mu);
    return death.empty() ? "the worker is gone" : death;
  }
  void watch();  // the watchdog thread's body
};

// Starts a worker with these options and opens its own queue; nullptr (reported) on failure.
// A venode >= 0 binds the worker to NUMA node venode's CPUs where that node exists; elsewhere it
// is only a name (veo_get_venum_from_hmem reports it).
Proc* create_proc(const accio_offload_options& o);
// The live proc with this veo_proc_identifier, or nullptr.
Proc* proc_by_ident(int ident);
// Closes the contexts, asks the worker to exit (killing it after a second) and frees what the proc
// holds. keep_handle: the Proc stays as a tombstone (destroyed set) that the API's entry points
// check; otherwise (a proc never returned to the caller) it is deleted.
void destroy_proc(Proc* p, bool keep_handle = true);
// Opens a context (a queue and its worker thread); stack: the thread's stack size, 0 the default.
veo_thr_ctxt* open_context(Proc* p, size_t stack);
// Ends a context's worker thread and frees it. p->mu is not held.
void destroy_context(Proc* p, veo_thr_ctxt* c);

}  // namespace accio::offload
