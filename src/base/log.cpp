// accio base: warn_once and the log sink.
#include "base/log.hpp"
#include "base/quiet.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

namespace accio::base {
namespace {
struct Log {
  std::mutex mu;
  std::set<std::string> keys;
  std::vector<std::string> lines;
};
// A forked child is the same program: it keeps what its parent already said (a DataLoader's or a
// multiprocessing pool's workers do not say "no tuning profile" again, each). The lock is taken
// around fork (held for an insert at most), so that the child copies a whole log into a lock of its
// own and leaks the parent's, whose lock the forking thread holds there.
std::atomic<Log*> g_log{nullptr};

Log& the_log() {
  Log* p = g_log.load(std::memory_order_acquire);
  if (p) return *p;
  Log* fresh = new Log;
  if (g_log.compare_exchange_strong(p, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;  // another thread won the race
  return *p;
}
// Made here if it is not yet, so that no other thread makes (and fills) it while the process forks.
// A fork from a signal handler that interrupted warn_once on the same thread would wait here forever
// (fork is async-signal-safe, this lock is not): accio calls neither from a handler. glibc takes its
// malloc locks after the prepare handlers run, so a thread in malloc under this lock cannot block it.
void lock_before_fork() { the_log().mu.lock(); }
void unlock_in_parent() { g_log.load(std::memory_order_acquire)->mu.unlock(); }
void copy_in_child() {
  Log* parents = g_log.load(std::memory_order_acquire);
  Log* mine = new Log;
  mine->keys = parents->keys;
  mine->lines = parents->lines;
  g_log.store(mine, std::memory_order_release);  // the parent's stays locked, leaked
}
[[maybe_unused]] const int g_atfork = pthread_atfork(lock_before_fork, unlock_in_parent, copy_in_child);

// The sink and its argument, swapped as one pointer: no lock a fork could leave held. A replaced
// pair is kept, chained to its successor (a few bytes per accio_set_log_callback): another thread
// may still be calling through it.
struct SinkPair {
  Sink fn;
  void* user;
  const SinkPair* prev;
};
std::atomic<const SinkPair*> g_sink{nullptr};

void emit(Level level, const std::string& key, const std::string& msg) {
  const SinkPair* p = g_sink.load(std::memory_order_acquire);
  if (p && p->fn) {
    p->fn(static_cast<int>(level), key.c_str(), msg.c_str(), p->user);
    return;
  }
  if (accio_quiet()) return;
  const char* what = level == Level::error ? "error: " : level == Level::warning ? "warning: " : "";
  std::fprintf(stderr, "accio: %s%s\n", what, msg.c_str());
}
}  // namespace

int job_rank() {
  for (const char* name :
       {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "PALS_RANKID", "SLURM_PROCID"}) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;
    char* end;
    const long r = std::strtol(v, &end, 10);
    return *end == '\0' && r >= 0 ? static_cast<int>(std::min<long>(r, INT_MAX)) : 0;
  }
  return 0;
}

bool warn_once(const std::string& key, const std::string& msg, Scope scope) {
  {
    Log& l = the_log();
    std::lock_guard lk(l.mu);
    if (!l.keys.insert(key).second) return false;
    l.lines.push_back(msg);
  }
  if (scope == Scope::job && job_rank() != 0) return false;  // recorded; rank 0 says it for the job
  emit(Level::warning, key, msg);  // outside the log's lock: two messages never wait on each other
  return true;
}

void log(Level level, const std::string& key, const std::string& msg) { emit(level, key, msg); }

std::vector<std::string> warnings() {
  Log& l = the_log();
  std::lock_guard lk(l.mu);
  return l.lines;
}

void set_sink(Sink sink, void* user) {
  static std::mutex mu;  // setters only; emit() never takes it
  std::lock_guard lk(mu);
  g_sink.store(new SinkPair{sink, user, g_sink.load()}, std::memory_order_release);
}

}  // namespace accio::base
