// accio-offload-bench: AVEO's call-latency tests and the memory-transfer tests, timed in C so that
// the numbers are the runtime's, not an interpreter's. `accio offload-bench` runs it and turns its
// raw JSON (every repetition) into tables, medians and the summary.
//
//   accio-offload-bench --transport shm|socket [--spin US|forever] [--ns 1,10,...] [--reps R]
//                       [--max-bytes B] [--idle-seconds S]
//
// Test 1: submit N calls, then wait for N results.   Test 2: submit one and wait for it, N times.
// Test 3: submit N calls, wait for the last only.     Test 4: N synchronous calls (veo_call_sync).
// The kernel is accio_offload_echo(x) in the worker program: the cost measured is the runtime's.
#include <accio/ve_offload.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void die(const char* what) {
  fprintf(stderr, "accio-offload-bench: %s: %s\n", what, accio_offload_last_error());
  exit(1);
}

double cpu_seconds(int pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  unsigned long ut = 0, st = 0;
  int r = fscanf(f, "%*d %*s %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
  fclose(f);
  return r == 2 ? double(ut + st) / double(sysconf(_SC_CLK_TCK)) : -1;
}

std::vector<long> parse_list(const char* s) {
  std::vector<long> v;
  for (const char* p = s; *p;) {
    v.push_back(strtol(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
  }
  return v;
}

void print_list(const std::vector<double>& v) {
  printf("[");
  for (size_t i = 0; i < v.size(); ++i) printf("%s%.6g", i ? ", " : "", v[i]);
  printf("]");
}

}  // namespace

int main(int argc, char** argv) {
  accio_offload_options o;
  if (accio_offload_options_init(&o) != 0) die("options");
  std::vector<long> ns = {1, 5, 10, 50, 100, 500, 1000, 5000, 10000, 50000, 100000};
  int reps = 5;
  size_t max_bytes = size_t(1) << 30;
  double idle_s = 1.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--transport") o.transport = !strcmp(v, "socket") ? ACCIO_OFFLOAD_SOCKET : ACCIO_OFFLOAD_SHM;
    else if (k == "--spin") o.spin_us = !strcmp(v, "forever") ? ACCIO_OFFLOAD_SPIN_FOREVER : atoll(v);
    else if (k == "--ns") ns = parse_list(v);
    else if (k == "--reps") reps = atoi(v);
    else if (k == "--max-bytes") max_bytes = size_t(atoll(v));
    else if (k == "--idle-seconds") idle_s = atof(v);
    else {
      fprintf(stderr, "accio-offload-bench: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  veo_proc_handle* p = accio_offload_proc_create(&o);
  if (!p) die("veo_proc_create");
  veo_thr_ctxt* c = veo_context_open(p);
  if (!c) die("veo_context_open");
  uint64_t fn = veo_get_sym(p, 0, "accio_offload_echo");
  if (!fn) die("veo_get_sym");
  veo_args* a = veo_args_alloc();
  veo_args_set_u64(a, 0, 1);
  long nmax = *std::max_element(ns.begin(), ns.end());
  std::vector<uint64_t> ids(size_t(nmax) + 1);
  uint64_t r;
  for (int i = 0; i < 2000; ++i) veo_call_wait_result(c, veo_call_async(c, fn, a), &r);  // warm up

  printf("{\"transport\": \"%s\", \"spin_us\": %lld, \"reps\": %d, \"latency\": [\n",
         o.transport == ACCIO_OFFLOAD_SOCKET ? "socket" : "shm", static_cast<long long>(o.spin_us), reps);
  bool first = true;
  for (long n : ns) {
    for (int test = 1; test <= 4; ++test) {
      std::vector<double> us;
      for (int rep = 0; rep < reps; ++rep) {
        double t0 = now();
        switch (test) {
          case 1:
            for (long i = 0; i < n; ++i) ids[size_t(i)] = veo_call_async(c, fn, a);
            for (long i = 0; i < n; ++i)
              if (veo_call_wait_result(c, ids[size_t(i)], &r) != VEO_COMMAND_OK) die("test 1");
            break;
          case 2:
            for (long i = 0; i < n; ++i)
              if (veo_call_wait_result(c, veo_call_async(c, fn, a), &r) != VEO_COMMAND_OK) die("test 2");
            break;
          case 3:
            for (long i = 0; i < n; ++i) ids[size_t(i)] = veo_call_async(c, fn, a);
            if (veo_call_wait_result(c, ids[size_t(n - 1)], &r) != VEO_COMMAND_OK) die("test 3");
            break;
          case 4:
            for (long i = 0; i < n; ++i)
              if (veo_call_sync(p, fn, a, &r) != 0) die("test 4");
            break;
        }
        us.push_back((now() - t0) * 1e6 / double(n));
        if (test == 3)  // collect the results test 3 left behind (untimed)
          for (long i = 0; i + 1 < n; ++i) veo_call_wait_result(c, ids[size_t(i)], &r);
      }
      printf("%s  {\"test\": \"test%d\", \"n\": %ld, \"us_per_call\": ", first ? "" : ",\n", test, n);
      print_list(us);
      printf("}");
      first = false;
    }
    fflush(stdout);
  }
  printf("\n], \"memory_latency\": [\n");
  uint64_t dev = 0;
  size_t alloc = std::max<size_t>(max_bytes, 4096);
  if (veo_alloc_mem(p, &dev, alloc) != 0) die("veo_alloc_mem");
  std::vector<char> host(alloc, 1);
  if (veo_write_mem(p, dev, host.data(), alloc) != 0) die("veo_write_mem");  // fault the pages in, untimed
  const int lat_n = 30000;
  for (int op = 0; op < 2; ++op) {
    std::vector<double> us;
    for (int rep = 0; rep < reps; ++rep) {
      double t0 = now();
      for (int i = 0; i < lat_n; ++i) {
        int rc = op == 0 ? veo_read_mem(p, host.data(), dev, 1) : veo_write_mem(p, dev, host.data(), 1);
        if (rc != 0) die("1-byte transfer");
      }
      us.push_back((now() - t0) * 1e6 / lat_n);
    }
    printf("%s  {\"op\": \"%s_1b\", \"count\": %d, \"us\": ", op ? ",\n" : "", op == 0 ? "read" : "write", lat_n);
    print_list(us);
    printf("}");
  }
  printf("\n], \"bandwidth\": [\n");
  first = true;
  for (size_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
    for (int op = 0; op < 2; ++op) {
      std::vector<double> gbps;
      for (int rep = 0; rep < reps; ++rep) {
        // repeat small transfers until ~20 ms have passed, so the clock resolves them
        long iters = 0;
        double t0 = now(), t;
        do {
          int rc = op == 0 ? veo_read_mem(p, host.data(), dev, bytes) : veo_write_mem(p, dev, host.data(), bytes);
          if (rc != 0) die("transfer");
          ++iters;
          t = now();
        } while (t - t0 < 0.02);
        gbps.push_back(double(bytes) * double(iters) / (t - t0) / 1e9);
      }
      printf("%s  {\"op\": \"%s\", \"bytes\": %zu, \"gbps\": ", first ? "" : ",\n", op == 0 ? "read" : "write", bytes);
      print_list(gbps);
      printf("}");
      first = false;
    }
    fflush(stdout);
  }
  veo_free_mem(p, dev);
  // Idle: the worker's CPU use while nothing is asked of it (after a burst of calls).
  for (int i = 0; i < 1000; ++i) veo_call_wait_result(c, veo_call_async(c, fn, a), &r);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  int pid = accio_offload_worker_pid(p);
  double c0 = cpu_seconds(pid), t0 = now();
  std::this_thread::sleep_for(std::chrono::duration<double>(idle_s));
  double idle = (cpu_seconds(pid) - c0) / (now() - t0) * 100.0;
  printf("\n], \"idle_worker_cpu_percent\": %.3f}\n", idle);
  veo_args_free(a);
  veo_proc_destroy(p);
  return 0;
}
