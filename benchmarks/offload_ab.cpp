// offload_ab: two builds of libaccio_offload in one process, timed in turns a few milliseconds
// apart, for benchmarks/offload_vs_base.py.
//
// Why one process: on a VM the latency of a shared-memory round trip depends on where the
// hypervisor runs the two vCPUs at the moment, and that changes 2-5x from one second to the next
// (identical builds, run as separate processes in alternation, came out 8% apart with a "significant"
// interval). Here each build has its own proc (its own worker program, found next to its library)
// and the two take turns per metric, so a pair of samples shares the machine's state.
//
//   offload_ab LIB_A LIB_B ROUNDS N LAT_N TRANSPORT SPIN_US
//
// Each library is loaded RTLD_LOCAL | RTLD_DEEPBIND: its API calls and its own internal calls bind
// to itself. Per round and metric, A and B run one after the other (the order alternating by
// round), each after 1 ms of quiet (the other's worker stops polling after SPIN_US, which must be
// below 500) and 200 untimed round trips through the path the metric times (the context's queue for
// tests 1-3, the proc's for test 4 and the 1-byte transfers) that wake its own worker. Prints JSON:
// per build, per metric (AVEO's tests 1-4 at N calls; 1-byte read and write at LAT_N), microseconds
// per call.
//
// Each proc runs the worker program next to its library (accio-offload-worker, named explicitly so
// that ACCIO_OFFLOAD_WORKER or VEORUN_BIN cannot make both builds run one worker). The two builds
// share what is outside libaccio_offload: libaccio's settings (ACCIO_* variables) and this file's
// view of the header's ABI (accio_offload_options, the veo_* signatures), so they must agree on it.
#include <dlfcn.h>

#include <accio/ve_offload.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Build {
  const char* path = nullptr;
  int (*options_init)(accio_offload_options*) = nullptr;
  veo_proc_handle* (*proc_create)(const accio_offload_options*) = nullptr;
  veo_thr_ctxt* (*context_open)(veo_proc_handle*) = nullptr;
  uint64_t (*get_sym)(veo_proc_handle*, uint64_t, const char*) = nullptr;
  veo_args* (*args_alloc)() = nullptr;
  int (*args_set_u64)(veo_args*, int, uint64_t) = nullptr;
  uint64_t (*call_async)(veo_thr_ctxt*, uint64_t, veo_args*) = nullptr;
  int (*call_wait_result)(veo_thr_ctxt*, uint64_t, uint64_t*) = nullptr;
  int (*call_sync)(veo_proc_handle*, uint64_t, veo_args*, uint64_t*) = nullptr;
  int (*alloc_mem)(veo_proc_handle*, uint64_t*, size_t) = nullptr;
  int (*read_mem)(veo_proc_handle*, void*, uint64_t, size_t) = nullptr;
  int (*write_mem)(veo_proc_handle*, uint64_t, const void*, size_t) = nullptr;
  int (*proc_destroy)(veo_proc_handle*) = nullptr;
  const char* (*last_error)() = nullptr;
  veo_proc_handle* p = nullptr;
  veo_thr_ctxt* c = nullptr;
  uint64_t fn = 0, dev = 0;
  veo_args* a = nullptr;
  std::string worker;
};

[[noreturn]] void die(const Build* b, const char* what) {
  const char* why = b && b->last_error ? b->last_error() : dlerror();
  fprintf(stderr, "offload_ab: %s: %s: %s\n", b ? b->path : "", what, why ? why : "(no error text)");
  exit(1);
}

template <typename F>
void bind(Build& b, void* h, F*& f, const char* name) {
  f = reinterpret_cast<F*>(dlsym(h, name));
  if (!f) die(&b, name);
}

void load(Build& b, const char* path, int transport, long long spin_us) {
  b.path = path;
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!h) die(&b, "dlopen");
  bind(b, h, b.options_init, "accio_offload_options_init");
  bind(b, h, b.proc_create, "accio_offload_proc_create");
  bind(b, h, b.context_open, "veo_context_open");
  bind(b, h, b.get_sym, "veo_get_sym");
  bind(b, h, b.args_alloc, "veo_args_alloc");
  bind(b, h, b.args_set_u64, "veo_args_set_u64");
  bind(b, h, b.call_async, "veo_call_async");
  bind(b, h, b.call_wait_result, "veo_call_wait_result");
  bind(b, h, b.call_sync, "veo_call_sync");
  bind(b, h, b.alloc_mem, "veo_alloc_mem");
  bind(b, h, b.read_mem, "veo_read_mem");
  bind(b, h, b.write_mem, "veo_write_mem");
  bind(b, h, b.proc_destroy, "veo_proc_destroy");
  bind(b, h, b.last_error, "accio_offload_last_error");
  accio_offload_options o;
  if (b.options_init(&o) != 0) die(&b, "options");
  const std::string p = path, worker = p.substr(0, p.rfind('/') + 1) + "accio-offload-worker";
  b.worker = worker;
  o.worker = b.worker.c_str();
  o.transport = transport;
  o.spin_us = spin_us;
  if (!(b.p = b.proc_create(&o))) die(&b, "veo_proc_create");
  if (!(b.c = b.context_open(b.p))) die(&b, "veo_context_open");
  if (!(b.fn = b.get_sym(b.p, 0, "accio_offload_echo"))) die(&b, "veo_get_sym");
  if (!(b.a = b.args_alloc())) die(&b, "veo_args_alloc");
  if (b.args_set_u64(b.a, 0, 1) != 0) die(&b, "veo_args_set_u64");
  if (b.alloc_mem(b.p, &b.dev, 4096) != 0) die(&b, "veo_alloc_mem");
  char page[4096] = {1};
  if (b.write_mem(b.p, b.dev, page, sizeof page) != 0) die(&b, "veo_write_mem");
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

const char* const kMetrics[] = {"test1", "test2", "test3", "test4", "read_1b", "write_1b"};

// Microseconds per call of metric m.
double run(Build& b, int m, long n, long lat_n, std::vector<uint64_t>& ids) {
  uint64_t r;
  char byte = 0;
  for (int i = 0; i < 200; ++i) {  // wake the worker, through the queue the metric uses
    const bool ok = m <= 2   ? b.call_wait_result(b.c, b.call_async(b.c, b.fn, b.a), &r) == VEO_COMMAND_OK
                    : m == 3 ? b.call_sync(b.p, b.fn, b.a, &r) == 0
                    : m == 4 ? b.read_mem(b.p, &byte, b.dev, 1) == 0
                             : b.write_mem(b.p, b.dev, &byte, 1) == 0;
    if (!ok) die(&b, "warm-up");
  }
  const long count = m >= 4 ? lat_n : n;
  const double t0 = now();
  switch (m) {
    case 0:
      for (long i = 0; i < n; ++i) ids[size_t(i)] = b.call_async(b.c, b.fn, b.a);
      for (long i = 0; i < n; ++i)
        if (b.call_wait_result(b.c, ids[size_t(i)], &r) != VEO_COMMAND_OK) die(&b, "test 1");
      break;
    case 1:
      for (long i = 0; i < n; ++i)
        if (b.call_wait_result(b.c, b.call_async(b.c, b.fn, b.a), &r) != VEO_COMMAND_OK) die(&b, "test 2");
      break;
    case 2:
      for (long i = 0; i < n; ++i) ids[size_t(i)] = b.call_async(b.c, b.fn, b.a);
      if (b.call_wait_result(b.c, ids[size_t(n - 1)], &r) != VEO_COMMAND_OK) die(&b, "test 3");
      break;
    case 3:
      for (long i = 0; i < n; ++i)
        if (b.call_sync(b.p, b.fn, b.a, &r) != 0) die(&b, "test 4");
      break;
    case 4:
      for (long i = 0; i < lat_n; ++i)
        if (b.read_mem(b.p, &byte, b.dev, 1) != 0) die(&b, "1-byte read");
      break;
    default:
      for (long i = 0; i < lat_n; ++i)
        if (b.write_mem(b.p, b.dev, &byte, 1) != 0) die(&b, "1-byte write");
  }
  const double us = (now() - t0) * 1e6 / double(count);
  if (m == 2)  // the results test 3 left behind (untimed)
    for (long i = 0; i + 1 < n; ++i) b.call_wait_result(b.c, ids[size_t(i)], &r);
  return us;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    fprintf(stderr, "usage: offload_ab LIB_A LIB_B ROUNDS N LAT_N shm|socket SPIN_US\n");
    return 2;
  }
  const int rounds = atoi(argv[3]);
  const long n = atol(argv[4]), lat_n = atol(argv[5]);
  const int transport = strcmp(argv[6], "socket") == 0 ? ACCIO_OFFLOAD_SOCKET : ACCIO_OFFLOAD_SHM;
  const long long spin = atoll(argv[7]);
  if (rounds < 1 || n < 1 || lat_n < 1 || spin < 0 || spin >= 500) {
    fprintf(stderr, "offload_ab: ROUNDS, N and LAT_N must be >= 1 and SPIN_US in 0..499 (an idle worker\n"
                    "that polls longer would take the CPU from the other build's)\n");
    return 2;
  }
  Build b[2];
  load(b[0], argv[1], transport, spin);
  load(b[1], argv[2], transport, spin);
  std::vector<uint64_t> ids(static_cast<size_t>(n));
  std::vector<double> us[2][6];
  for (int round = 0; round < rounds; ++round)
    for (int m = 0; m < 6; ++m)
      for (int k = 0; k < 2; ++k) {
        const int x = (round + k) % 2;  // A first in even rounds, B first in odd ones
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        us[x][m].push_back(run(b[x], m, n, lat_n, ids));
      }
  printf("{\"transport\": \"%s\", \"spin_us\": %lld, \"n\": %ld, \"lat_n\": %ld", argv[6], spin, n, lat_n);
  for (int x = 0; x < 2; ++x) {
    printf(", \"%s\": {", x ? "b" : "a");
    for (int m = 0; m < 6; ++m) {
      printf("%s\"%s\": [", m ? ", " : "", kMetrics[m]);
      for (size_t i = 0; i < us[x][m].size(); ++i) printf("%s%.6g", i ? ", " : "", us[x][m][i]);
      printf("]");
    }
    printf("}");
  }
  printf("}\n");
  for (Build& x : b)
    if (x.proc_destroy(x.p) != 0) die(&x, "veo_proc_destroy");
  return 0;
}
