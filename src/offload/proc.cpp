// accio offload: the worker process behind a proc (proc.hpp): spawn, NUMA affinity, the control
// socket, the watchdog, destruction, and the fork handler that makes a forked child drop its
// parent's workers. libaccio_offload reaches libaccio only through its C API, so this registry is
// its own rather than libaccio's PerProcess: the child must close the sockets, not only forget.
#include "offload/proc.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/sys.hpp"
#include "offload/options.hpp"
#include "offload/report.hpp"

extern char** environ;

namespace accio::offload {
namespace {

// Fork handling: every live proc, so that a forked child can drop them.
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

// The worker's environment: the host's, with OMP_NUM_THREADS taken from VE_OMP_NUM_THREADS
// when that is set (AVEO's variable for the kernel side's OpenMP threads). A value OpenMP would
// not take is refused (a number, or a comma-separated list of numbers for nested levels).
bool worker_environment(std::vector<std::string>* env) {
  const char* ve = getenv("VE_OMP_NUM_THREADS");
  if (ve) {
    bool ok = *ve != 0;
    for (const char* c = ve; *c && ok; ++c)
      ok = (*c >= '0' && *c <= '9') || (*c == ',' && c != ve && c[1] && c[1] != ',');
    if (!ok || atoi(ve) <= 0) {
      report(std::string("veo_proc_create: VE_OMP_NUM_THREADS='") + ve +
             "' is not valid (a positive number of threads, or a comma-separated list of them)");
      return false;
    }
  }
  for (char** e = environ; *e; ++e)
    if (!ve || strncmp(*e, "OMP_NUM_THREADS=", 16) != 0) env->push_back(*e);
  if (ve) env->push_back(std::string("OMP_NUM_THREADS=") + ve);
  return true;
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

// Creates a queue and hands it to the worker, which starts a thread for it. Under p->mu.
Channel* open_queue(Proc* p, uint32_t id, size_t stack) {
  Channel* c = new veo_thr_ctxt;
  c->proc = p;
  c->id = id;
  int fd = -1;
  if (!c->map(uint32_t(p->opts.transport), p->opts.slots, p->opts.arena_bytes, p->opts.spin_us, &fd)) {
    delete c;
    return nullptr;
  }
  ControlMsg m{kCtlOpenChannel, c->transport, id, uint32_t(stack / 1024), c->map_len};
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

// The worker program: the offload_worker setting (or VEORUN_BIN), else the one installed next to
// this library.
std::string default_worker() {
  if (std::string w = configured_worker(); !w.empty()) return w;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&default_worker), &info) && info.dli_fname) {
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

bool numa_node_exists(int node) {
  return access(("/sys/devices/system/node/node" + std::to_string(node)).c_str(), F_OK) == 0;
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

}  // namespace

Proc* proc_by_ident(int ident) {
  return ident >= 0 && ident < kMaxProcs ? g_procs[ident].load(std::memory_order_acquire) : nullptr;
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
      if (!crash && c != chan) crash = c->h->crash_signal.load();
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
  if (chan) chan->wake_all();
  for (auto* c : contexts)
    if (c != chan) c->wake_all();
}

Proc* create_proc(const accio_offload_options& o) {
  if (o.venode < -1) {
    report("veo_proc_create: venode " + std::to_string(o.venode) + " is invalid (-1, or a venode number >= 0)");
    return nullptr;
  }
  // Options a caller filled in itself, held to the bounds of the offload_* settings (options.cpp).
  if (const std::string bad = invalid_option(o); !bad.empty()) {
    report("veo_proc_create: invalid option " + bad);
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
  std::vector<std::string> env;
  if (!worker_environment(&env)) {
    close(sv[0]);
    close(sv[1]);
    delete p;
    return nullptr;
  }
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 3);  // dup2 clears close-on-exec on fd 3
  char arg0[] = "accio-offload-worker", arg1[] = "--fd", arg2[] = "3";
  char* argv[] = {arg0, arg1, arg2, nullptr};
  pid_t pid;
  int rc = posix_spawn(&pid, p->worker.c_str(), &fa, nullptr, argv, envp.data());
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
  if (o.venode >= 0 && numa_node_exists(o.venode)) {
    int e = set_node_affinity(pid, o.venode);
    if (e < 0 && e != -ENODEV) {  // ENODEV: a node without CPUs (memory only) binds nothing
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
    p->chan = static_cast<veo_thr_ctxt*>(open_queue(p, p->next_channel++, 0));
    if (p->chan) p->chan->main = true;
  }
  p->watchdog = base::sys::quiet_thread([p] { p->watch(); });
  if (!p->chan) {
    destroy_proc(p, false);
    return nullptr;
  }
  p->ident = register_proc(p);
  return p;
}

veo_thr_ctxt* open_context(Proc* p, size_t stack) {
  if (!p) {
    report("veo_context_open: no proc");
    return nullptr;
  }
  if (p->dead) {
    report("veo_context_open: " + p->why_dead());
    return nullptr;
  }
  // As AVEO's, after what is queued on the main context (before p->mu: harvesting takes it). Where
  // ACCIO_OFFLOAD_TIMEOUT_MS ran out first, the open fails (sync said why): it returned a context
  // while its error said the wait had failed (review, session 27).
  if (!p->chan->sync()) return nullptr;
  std::lock_guard<std::mutex> g(p->mu);
  if (p->contexts.empty()) {  // the main context: the proc's own queue (its stack size stays)
    p->contexts.push_back(p->chan);
    return p->chan;
  }
  auto* c = static_cast<veo_thr_ctxt*>(open_queue(p, p->next_channel++, stack));
  if (!c) return nullptr;
  p->contexts.push_back(c);
  return c;
}

// Ends a context's worker thread and frees it. p->mu is not held.
void destroy_context(Proc* p, veo_thr_ctxt* c) {
  if (!p->dead) {
    // Past a sync that ran out of time (ACCIO_OFFLOAD_TIMEOUT_MS) the exit is queued without a
    // second wait for it: the thread ends when the running kernel does (a close took twice the
    // timeout: review, session 27).
    const bool synced = c->sync();
    std::unique_lock<std::mutex> lk = c->lock_to_submit();
    uint64_t id = c->new_request();
    Piece ex;
    ex.op = kExit;
    bool ok = c->put(lk, ex, id, true);
    lk.unlock();
    if (ok && synced) c->result(id, nullptr, true);
  }
  c->stop_vh_runner();  // before p->mu: the runner takes it (recording an allocation) under c->mu
  std::lock_guard<std::mutex> g(p->mu);
  p->contexts.erase(std::remove(p->contexts.begin(), p->contexts.end(), c), p->contexts.end());
  delete c;
}

void destroy_proc(Proc* p, bool keep_handle) {
  if (!p || p->destroyed.exchange(true)) return;
  std::vector<veo_thr_ctxt*> ctxs;
  {
    std::lock_guard<std::mutex> g(p->mu);
    ctxs = p->contexts;
  }
  for (auto* c : ctxs)
    if (!c->main) destroy_context(p, c);
  if (!p->dead && p->chan) p->chan->sync();  // what is queued on the main context runs first
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
  p->chan = nullptr;
  if (p->ctl >= 0) close(p->ctl);
  p->ctl = -1;
  for (int& fd : p->stop_pipe)
    if (fd >= 0) close(fd), fd = -1;
  if (!keep_handle) {
    delete p;
    return;
  }
  // The tombstone: what the proc held is freed, the few hundred bytes of the Proc stay (listed, so
  // they are reachable and no leak checker reports them).
  std::vector<veo_thr_ctxt*>().swap(p->contexts);
  decltype(p->syms)().swap(p->syms);
  decltype(p->allocs)().swap(p->allocs);
  std::string().swap(p->worker);
  std::string().swap(p->death);
  static std::mutex tomb_mu;
  static Proc* tombstones = nullptr;
  std::lock_guard<std::mutex> g(tomb_mu);
  p->next_tombstone = tombstones;
  tombstones = p;
}

}  // namespace accio::offload
