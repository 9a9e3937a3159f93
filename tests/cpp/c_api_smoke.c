/* C API smoke test, compiled as C: open, open by descriptor, write, read back, async, batch, stats,
 * plans, errors, and the deprecated names (accio_plan, accio_plan_at, accio_stats' fixed arrays). */
#define _GNU_SOURCE /* CPU_COUNT */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accio/accio.h"

#define CHECK(c)                                                              \
  do {                                                                        \
    if (!(c)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: %s\n", __FILE__, __LINE__, #c, \
              accio_last_error());                                            \
      return 1;                                                               \
    }                                                                         \
  } while (0)

int main(void) {
  char path[] = "/tmp/accio-c-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  close(fd);
  accio_settings* s = accio_settings_new();
  CHECK(s != NULL);
  CHECK(accio_settings_set(s, "mechanism", "parallel") == 0);
  CHECK(accio_settings_set(s, "task_size", "64k") == 0);
  CHECK(accio_settings_set(s, "threads", "lots") == -EINVAL);
  CHECK(strstr(accio_last_error(), "threads") != NULL);
  char val[64];
  CHECK(accio_settings_get(s, "task_size", val, sizeof val) > 0 && strcmp(val, "65536") == 0);
  CHECK(accio_parse_size("16MiB") == 16 << 20 && accio_parse_size("4096") == 4096);
  CHECK(accio_parse_size("1g") == (int64_t)1 << 30);
  CHECK(accio_parse_size("12q") == -EINVAL && strstr(accio_last_error(), "not a size") != NULL);
  CHECK(accio_parse_size("99999999999t") == -EINVAL);
  /* A library's own knob: a row of the table from then on, through the shared library's exports. */
  accio_setting_spec knob = {"smoke_transport", "ACCIO_SMOKE_TRANSPORT", "a test knob", "choice", "shm", 0, 0, "shm|socket"};
  CHECK(accio_setting_register(&knob) == 0 && accio_setting_register(&knob) == 0);
  CHECK(strcmp(accio_setting_name(accio_setting_count() - 1), "smoke_transport") == 0);
  CHECK(accio_settings_set(s, "smoke_transport", "socket") == 0);
  CHECK(accio_settings_get(s, "smoke_transport", val, sizeof val) == 6 && strcmp(val, "socket") == 0);
  CHECK(accio_settings_set(s, "smoke_transport", "pigeon") == -EINVAL);
  knob.default_value = "socket";
  CHECK(accio_setting_register(&knob) == -EEXIST);

  accio_file* f;
  CHECK(accio_open(&f, path, "w+", s) == 0);
  size_t n = 1000003;
  char* src = malloc(n);
  char* dst = malloc(n);
  for (size_t i = 0; i < n; ++i) src[i] = (char)(i * 31 + 7);
  CHECK(accio_pwrite(f, src, n, 0) == (int64_t)n);
  CHECK(accio_fsync(f) == 0);
  CHECK(accio_size(f) == (int64_t)n);
  CHECK(accio_pread(f, dst, n, 0) == (int64_t)n && memcmp(src, dst, n) == 0);
  CHECK(accio_pread(f, dst, 100, (int64_t)n - 10) == 10); /* short read at EOF is a count */
  CHECK(strcmp(accio_mechanism_for(f, n, ACCIO_OP_READ), "parallel") == 0);

  accio_future* fut;
  memset(dst, 0, n);
  CHECK(accio_pread_async(f, dst, n, 0, &fut) == 0);
  CHECK(accio_future_wait(fut) == (int64_t)n && memcmp(src, dst, n) == 0);
  accio_future_free(fut);

  accio_request reqs[2] = {{dst, 10, 0}, {dst + 10, 10, 500000}};
  accio_future* futs[2];
  CHECK(accio_submit(f, ACCIO_OP_READ, reqs, 2, futs) == 0);
  CHECK(accio_future_wait(futs[0]) == 10 && accio_future_wait(futs[1]) == 10);
  CHECK(memcmp(dst + 10, src + 500000, 10) == 0);
  accio_future_free(futs[0]);
  accio_future_free(futs[1]);

  /* accio_stats keeps its layout (older binaries read the same fields at the same places). */
  _Static_assert(sizeof(accio_stats) == 9 * 8 + 2 * ACCIO_MAX_MECHANISMS * 8 + 8, "accio_stats layout");
  accio_stats st;
  CHECK(accio_file_stats(f, &st) == 0 && st.writes == 1 && st.bytes_written == n);
  CHECK(st.last_mechanism >= 0 && strcmp(accio_mechanism_name(st.last_mechanism), "parallel") == 0);
  /* Per mechanism, by id: every id answers, beyond the last one is -EINVAL; the deprecated arrays
   * hold the same numbers for the ids they have room for. */
  CHECK(accio_mechanism_count() > 0);
  uint64_t total_calls = 0;
  for (int id = 0; id < accio_mechanism_count(); ++id) {
    uint64_t calls = 99, bytes = 99;
    CHECK(accio_file_mechanism_stats(f, id, &calls, &bytes) == 0);
    CHECK(id != st.last_mechanism ? calls == 0 && bytes == 0 : calls == st.reads + st.writes);
    CHECK(id >= ACCIO_MAX_MECHANISMS || (st.mechanism_calls[id] == calls && st.mechanism_bytes[id] == bytes));
    total_calls += calls;
    CHECK(accio_global_mechanism_stats(id, &calls, NULL) == 0 && calls >= (id == st.last_mechanism));
  }
  CHECK(total_calls == st.reads + st.writes);
  CHECK(accio_file_mechanism_stats(f, accio_mechanism_count(), NULL, NULL) == -EINVAL);
  CHECK(strstr(accio_last_error(), "no mechanism with id") != NULL);
  /* Every last error has the documented form "op 'path' at offset N: detail (errno E)", once. */
  CHECK(accio_probe("o_direct", "/nonexistent/accio", NULL, 0) == -ENOENT);
  CHECK(strcmp(accio_last_error(), "stat '/nonexistent/accio': No such file or directory (errno 2)") == 0);
  CHECK(strcmp(accio_last_error_op(), "stat") == 0 && accio_last_errno() == ENOENT);
  CHECK(accio_settings_get(s, NULL, NULL, 0) == -EINVAL);
  CHECK(strcmp(accio_last_error(), "accio_settings_get: null argument (errno 22)") == 0);
  CHECK(accio_settings_get(NULL, "mechanism", NULL, 0) == 4); /* NULL: defaults + environment ("auto") */
  CHECK(accio_pread(f, NULL, 0, -4) == -EINVAL);
  CHECK(strstr(accio_last_error(), ": negative offset (errno 22)") != NULL);
  CHECK(accio_file_mechanism_stats(f, -1, NULL, NULL) == -EINVAL);
  CHECK(accio_global_mechanism_stats(accio_mechanism_count(), NULL, NULL) == -EINVAL);
  CHECK(accio_file_mechanism_stats(NULL, 0, NULL, NULL) == -EINVAL);
  CHECK(accio_pread(f, dst, 10, -1) == -EINVAL);

  /* Which plan ran and why; the plan a request would run. */
  accio_plan_stat ps[4];
  int np = accio_file_plans(f, ps, 4);
  CHECK(np == 1 && strcmp(ps[0].plan, "parallel") == 0 && strstr(ps[0].why, "mechanism=parallel") != NULL);
  CHECK(ps[0].calls >= 4);
  char plan[128], why[512];
  CHECK(accio_explain(f, NULL, n, 0, ACCIO_OP_READ, plan, sizeof plan, why, sizeof why) == 0);
  CHECK(strcmp(plan, "parallel") == 0 && strstr(why, "is set") != NULL);
  CHECK(strcmp(accio_mechanism_for_at(f, dst, n, 0, ACCIO_OP_READ), "parallel") == 0);
  CHECK(accio_mechanism_for_at(f, dst, n, -1, ACCIO_OP_READ) == NULL && accio_last_errno() == EINVAL);
  CHECK(accio_mechanism_for_at(f, dst, n, 0, 7) == NULL && accio_last_errno() == EINVAL); /* not an op */
  CHECK(accio_mechanism_for_at(f, dst, n, 0, ACCIO_OP_WRITE | 0x200) == NULL && accio_last_errno() == EINVAL);
  CHECK(accio_mechanism_for_at(f, dst, n, 0, ACCIO_OP_READ | ACCIO_OP_FRESH_CACHE) != NULL);
  CHECK(accio_mechanism_for_at(f, dst, n, -1, ACCIO_OP_READ) == NULL && accio_last_errno() == EINVAL);
  CHECK(accio_mechanism_for(NULL, n, ACCIO_OP_READ) == NULL && accio_last_errno() == EINVAL); /* not the last one's */
  CHECK(strstr(accio_last_error(), "null argument") != NULL);
  {
    char plan[256], why[1024];
    CHECK(accio_explain(f, NULL, n, 0, 99, plan, sizeof plan, why, sizeof why) == -EINVAL); /* was a read */
    /* A size pread refuses has no plan either (SIZE_MAX was "parallel"); an op that is neither is
     * refused by accio_min_accelerated too (99 was answered as a read). */
    CHECK(accio_mechanism_for(f, (size_t)-1, ACCIO_OP_READ) == NULL && accio_last_errno() == EINVAL);
    CHECK(strstr(accio_last_error(), "above the largest request") != NULL);
    CHECK(accio_explain(f, NULL, (size_t)-1, 0, ACCIO_OP_READ, plan, sizeof plan, why, sizeof why) == -EINVAL);
    CHECK(accio_min_accelerated(f, 99) == -EINVAL && strstr(accio_last_error(), "op must be") != NULL);
    CHECK(accio_min_accelerated(f, ACCIO_OP_READ | ACCIO_OP_FRESH_CACHE) == accio_min_accelerated(f, ACCIO_OP_READ));
    /* A text is cut to its buffer, NUL-terminated: one that fills it (len - 1 characters) may have
     * been cut, which is how the C++ and Fortran wrappers know to call again with more room. */
    CHECK(accio_explain(f, NULL, n, 0, ACCIO_OP_READ, plan, 4, why, 2) == 0);
    CHECK(strlen(plan) == 3 && strncmp(plan, "par", 3) == 0 && strlen(why) == 1);
  }
  {
    /* accio_open_fd keeps the descriptor's O_DSYNC (it was dropped: the program had asked for
     * durable writes), and not its O_APPEND (a write at an offset lands there, as in mode "a"). */
    const int sfd = open(path, O_RDWR | O_DSYNC | O_APPEND);
    accio_file* g;
    CHECK(sfd >= 0 && accio_open_fd(&g, sfd, NULL) == 0);
    const int fl = fcntl(accio_file_fd(g), F_GETFL);
    CHECK((fl & O_DSYNC) == O_DSYNC && !(fl & O_APPEND));
    CHECK(accio_pwrite(g, src + 5, 10, 5) == 10 && accio_size(g) == (int64_t)n); /* the same bytes */
    CHECK(accio_close(g) == 0 && close(sfd) == 0);
  }
  {
    /* Out-pointers are NULL after any failure, a NULL argument's too (they were left as they were,
     * so a caller that closes or frees *out on failure acted on garbage). */
    accio_file* g = (accio_file*)1;
    CHECK(accio_open(&g, NULL, "r", NULL) == -EINVAL && g == NULL);
    g = (accio_file*)1;
    CHECK(accio_open(&g, "/nonexistent/accio", "r", NULL) == -ENOENT && g == NULL);
    g = (accio_file*)1;
    CHECK(accio_open_fd(&g, -1, NULL) == -EBADF && g == NULL);
    accio_future* fu = (accio_future*)1;
    CHECK(accio_pread_async(NULL, dst, 1, 0, &fu) == -EINVAL && fu == NULL);
    accio_future* fs[2] = {(accio_future*)1, (accio_future*)1};
    accio_request rq[2] = {{dst, 1, 0}, {dst, 1, -1}};
    CHECK(accio_submit(f, ACCIO_OP_READ, rq, 2, fs) == -EINVAL && fs[0] == NULL && fs[1] == NULL);
    if (!accio_cuda_available(NULL, 0)) {
      /* No driver: no pointer is device memory, so a free is refused, not taken (the Fortran wrapper
       * nulls the caller's pointer on 0), and a failed allocation leaves no stale pointer behind. */
      void* d = (void*)1;
      CHECK(accio_device_alloc(0, 10, 0, &d) == -ENODEV && d == NULL);
      CHECK(accio_device_free(dst) == -EINVAL && strstr(accio_last_error(), "not memory from accio_device_alloc"));
      CHECK(accio_device_free(NULL) == 0);
    }
  }
  /* The deprecated names still answer, the same way. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  CHECK(strcmp(accio_plan(f, n, ACCIO_OP_READ), "parallel") == 0);
  CHECK(strcmp(accio_plan_at(f, dst, n, 0, ACCIO_OP_READ), "parallel") == 0);
  CHECK(accio_plan_at(f, dst, n, -1, ACCIO_OP_READ) == NULL && accio_last_errno() == EINVAL);
#pragma GCC diagnostic pop
  CHECK(accio_close(f) == 0);

  /* auto with the built-in model: posix for small requests, parallel for large ones (with two CPUs
   * or more: on one CPU the model runs posix at every size). */
  cpu_set_t cpus;
  const int one_cpu = sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) == 1;
  accio_settings* a = accio_settings_new();
  CHECK(accio_settings_set(a, "profile", "off") == 0);
  CHECK(accio_open(&f, path, "r", a) == 0);
  CHECK(strcmp(accio_mechanism_for_at(f, NULL, 4096, 0, ACCIO_OP_READ), "posix") == 0);
  CHECK(strcmp(accio_mechanism_for_at(f, NULL, 4 << 20, 0, ACCIO_OP_READ), one_cpu ? "posix" : "parallel") == 0);
  CHECK(accio_explain(f, NULL, 4 << 20, 0, ACCIO_OP_READ, plan, sizeof plan, why, sizeof why) == 0);
  CHECK(strcmp(plan, one_cpu ? "posix" : "parallel(even)") == 0 && strstr(why, "built-in model") != NULL);
  const int64_t from = accio_min_accelerated(f, ACCIO_OP_READ);
  if (one_cpu) {
    CHECK(from == INT64_MAX);
  } else { /* posix below the split's crossing point: 1.5 MiB on 2 CPUs, less with more */
    CHECK(from > 4096 && from <= (3 << 19));
    CHECK(strcmp(accio_mechanism_for_at(f, NULL, (size_t)from - 1, 0, ACCIO_OP_READ), "posix") == 0);
    CHECK(strcmp(accio_mechanism_for_at(f, NULL, (size_t)from, 0, ACCIO_OP_READ), "parallel") == 0);
  }
  CHECK(accio_close(f) == 0);

  /* A handle on a descriptor we hold: same file and access mode, our offset untouched. */
  int rfd = open(path, O_RDONLY);
  CHECK(rfd >= 0 && lseek(rfd, 123, SEEK_SET) == 123);
  CHECK(accio_open_fd(&f, rfd, a) == 0);
  CHECK(accio_pread(f, dst, n, 0) == (int64_t)n && memcmp(src, dst, n) == 0);
  CHECK(accio_pwrite(f, src, 10, 0) == -EBADF); /* read-only, like rfd */
  CHECK(lseek(rfd, 0, SEEK_CUR) == 123);
  CHECK(accio_close(f) == 0);
  CHECK(close(rfd) == 0);
  CHECK(accio_open_fd(&f, rfd, a) == -EBADF && f == NULL);
  CHECK(accio_open_fd(&f, -1, a) == -EBADF);
  accio_settings* fixed = accio_settings_new();
  CHECK(accio_settings_set(fixed, "mechanism", "posix") == 0);
  CHECK(accio_open(&f, path, "r", fixed) == 0);
  CHECK(accio_min_accelerated(f, ACCIO_OP_READ) == INT64_MAX);
  CHECK(accio_close(f) == 0);
  accio_settings_free(fixed);
  accio_settings_free(a);
  accio_profile_key key;
  CHECK(accio_profile_key_of("/tmp", &key) == 0 && key.filesystem[0] && strstr(key.file, ".json") != NULL);
  CHECK(accio_profile_key_of("/nonexistent/x", &key) == -ENOENT);
  /* The prefetch window of the profile auto uses for a descriptor: a profile file (ACCIO_PROFILE's
   * setting), off (0), a malformed profile (-EINVAL naming it), a bad descriptor. */
  {
    char prof[] = "/tmp/accio-c-prof-XXXXXX";
    int pfd = mkstemp(prof);
    CHECK(pfd >= 0);
#define PROFILE(window)                                                                                   \
  "{\"schema\": \"accio.profile/1\", \"prefetch\": {\"window\": " window "}, \"plans\": [{\"mechanism\": \"posix\"}], " \
  "\"decisions\": {\"read\": {\"1\": {\"hot\": [{\"max_size\": null, \"plans\": [0]}]}, "                       \
  "\"N\": {\"hot\": [{\"max_size\": null, \"plans\": [0]}]}}, \"write\": {\"1\": {\"hot\": [{\"max_size\": null, " \
  "\"plans\": [0]}]}, \"N\": {\"hot\": [{\"max_size\": null, \"plans\": [0]}]}}}}"
    const char* doc = PROFILE("33554432");
    CHECK(write(pfd, doc, strlen(doc)) == (ssize_t)strlen(doc));
    close(pfd);
    accio_settings* ps = accio_settings_new();
    CHECK(ps && accio_settings_set(ps, "profile", prof) == 0);
    int rfd = open(path, O_RDONLY);
    CHECK(rfd >= 0);
    CHECK(accio_prefetch_window(rfd, ps) == 32 << 20);
    CHECK(accio_prefetch_window(-1, NULL) == -EBADF);
    pfd = open(prof, O_WRONLY | O_TRUNC);
    const char* bad = PROFILE("-4096");
#undef PROFILE
    CHECK(pfd >= 0 && write(pfd, bad, strlen(bad)) == (ssize_t)strlen(bad));
    close(pfd);
    /* The profile went bad after it was set: refused where it is read, and when it is set again. */
    CHECK(accio_prefetch_window(rfd, ps) == -EINVAL && strstr(accio_last_error(), prof) != NULL);
    CHECK(strstr(accio_last_error(), "prefetch.window") != NULL);
    CHECK(accio_settings_set(ps, "profile", prof) == -EINVAL && strstr(accio_last_error(), "prefetch.window") != NULL);
    CHECK(accio_settings_set(ps, "profile", "off") == 0 && accio_prefetch_window(rfd, ps) == 0);
    close(rfd);
    unlink(prof);
    accio_settings_free(ps);
  }

  CHECK(accio_open(&f, "/nonexistent/x", "r", NULL) == -ENOENT);
  CHECK(accio_last_errno() == ENOENT && strcmp(accio_last_error_op(), "open") == 0);
  CHECK(strcmp(accio_last_error_path(), "/nonexistent/x") == 0);
  /* fopen's "b" is taken (accio is binary); the descriptor is the file's; pinned host memory. */
  CHECK(accio_open(&f, path, "rb", NULL) == 0);
  int ffd = accio_file_fd(f);
  CHECK(ffd >= 0 && (fcntl(ffd, F_GETFL) & O_ACCMODE) == O_RDONLY);
  CHECK(accio_close(f) == 0);
  CHECK(accio_open(&f, path, "r+b", NULL) == 0 && (fcntl(accio_file_fd(f), F_GETFL) & O_ACCMODE) == O_RDWR);
  CHECK(accio_close(f) == 0);
  CHECK(accio_open(&f, path, "rb+", NULL) == 0 && accio_close(f) == 0);
  CHECK(accio_open(&f, path, "bad", NULL) == -EINVAL && strstr(accio_last_error(), "invalid mode 'bad'") != NULL);
  CHECK(accio_open(&f, path, "br", NULL) == -EINVAL && accio_open(&f, path, "rbb", NULL) == -EINVAL);
  {
    /* "x": a new file, or -EEXIST with the one there untouched (a symlink too, dangling or not) */
    struct stat before, after;
    CHECK(stat(path, &before) == 0 && before.st_size > 0);
    CHECK(accio_open(&f, path, "x", NULL) == -EEXIST && f == NULL && accio_open(&f, path, "xb+", NULL) == -EEXIST);
    CHECK(stat(path, &after) == 0 && after.st_size == before.st_size);
    char fresh[4200], link_[4200];
    snprintf(fresh, sizeof fresh, "%s.x", path);
    snprintf(link_, sizeof link_, "%s.link", path);
    unlink(fresh);
    unlink(link_);
    CHECK(symlink(fresh, link_) == 0);
    CHECK(accio_open(&f, link_, "x", NULL) == -EEXIST && access(fresh, F_OK) != 0);
    CHECK(accio_open(&f, fresh, "x+b", NULL) == 0 && (fcntl(accio_file_fd(f), F_GETFL) & O_ACCMODE) == O_RDWR);
    CHECK(accio_pwrite(f, "new", 3, 0) == 3 && accio_close(f) == 0);
    CHECK(accio_open(&f, fresh, "x", NULL) == -EEXIST && strstr(accio_last_error(), fresh) != NULL);
    CHECK(unlink(fresh) == 0 && unlink(link_) == 0);
  }
  CHECK(accio_file_fd(NULL) == -EINVAL);
  void* pinned = NULL;
  int how = -1;
  CHECK(accio_host_alloc(3 << 20, &pinned, &how) == 0 && pinned != NULL && ((uintptr_t)pinned & 4095) == 0);
  CHECK(how == ACCIO_HOST_PAGEABLE || how == ACCIO_HOST_MLOCK || how == ACCIO_HOST_CUDA);
  CHECK(((char*)pinned)[0] == 0 && ((char*)pinned)[(3 << 20) - 1] == 0); /* zeroed */
  memset(pinned, 0x5a, 3 << 20);
  CHECK(accio_host_free((char*)pinned + 4096) == -EINVAL); /* not an allocation: nothing freed */
  CHECK(((char*)pinned)[4096] == 0x5a);
  CHECK(accio_host_free(pinned) == 0 && accio_host_free(pinned) == -EINVAL && accio_host_free(NULL) == 0);
  CHECK(accio_host_alloc(0, &pinned, &how) == -EINVAL && pinned == NULL);
  CHECK(accio_host_alloc(4096, NULL, NULL) == -EINVAL);
  /* Rounded up to a huge page, SIZE_MAX wrapped to 0 and "succeeded" with a pointer to nothing. */
  CHECK(accio_host_alloc(SIZE_MAX, &pinned, &how) == -ENOMEM && pinned == NULL);
  CHECK(accio_host_alloc(SIZE_MAX - (2u << 20), &pinned, &how) == -ENOMEM && pinned == NULL);
  /* a binding's own refusal, recorded as accio's errors are */
  CHECK(accio_set_last_error(EINVAL, "pread", "/p", "the buffer is not contiguous") == -EINVAL);
  CHECK(strcmp(accio_last_error(), "pread '/p': the buffer is not contiguous (errno 22)") == 0);
  CHECK(accio_last_errno() == EINVAL && strcmp(accio_last_error_op(), "pread") == 0 &&
        accio_last_error_offset() == -1);
  CHECK(accio_set_last_error(EIO, "fsync", NULL, NULL) == -EIO && strstr(accio_last_error(), "fsync") != NULL &&
        strcmp(accio_last_error_path(), "") == 0);
  CHECK(accio_set_last_error(0, "x", NULL, NULL) == -EINVAL && accio_last_errno() == EIO); /* nothing recorded */
  CHECK(accio_set_last_error(EIO, NULL, NULL, NULL) == -EINVAL);
  accio_settings_free(s);
  free(src);
  free(dst);
  unlink(path);
  printf("c_api_smoke: ok (accio %s)\n", accio_version());
  return 0;
}
