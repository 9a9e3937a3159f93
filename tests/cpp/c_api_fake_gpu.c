/* The GPU paths from C through the shared libaccio, against the fake driver and fake cuFile
 * (tests/fake_cuda, loaded through ACCIO_LIBCUDA/ACCIO_LIBCUFILE), as a user's program runs them.
 *
 * test_gpu runs the same paths in depth but links the engine's objects into the test program; this
 * one goes through libaccio.so, so it sees what the library exports: built with -static-libstdc++
 * and no export list, libaccio leaked its C++ runtime, and the fake cuFile's C++ (linked to the
 * shared libstdc++, like the real one) crashed on the first cuFileDriverOpen (issue 17). It runs in
 * every build and in the static-runtime build (make cpp-test-static-runtime). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
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
      exit(1);                                                                \
    }                                                                         \
  } while (0)

/* Reads the whole file into device memory with `mechanism`, copies it back, compares. */
static void read_device(const char* path, const char* mechanism, void* dev, const char* want, size_t n) {
  accio_settings* s = accio_settings_new();
  CHECK(s && accio_settings_set(s, "mechanism", mechanism) == 0);
  accio_file* f;
  CHECK(accio_open(&f, path, "r", s) == 0);
  if (!strcmp(mechanism, "gds")) {
    char why[512];
    CHECK(accio_gds_mode(f, why, sizeof why) >= 0); /* registers the file with cuFile */
  }
  char* back = malloc(n);
  CHECK(back != NULL);
  memset(back, 0, n);
  CHECK(accio_device_copy(dev, back, n) == 0); /* clear the device buffer */
  CHECK(accio_pread(f, dev, n, 0) == (int64_t)n);
  CHECK(accio_device_copy(back, dev, n) == 0);
  if (memcmp(back, want, n) != 0) {
    fprintf(stderr, "%s: bytes read into device memory differ from the file\n", mechanism);
    exit(1);
  }
  accio_stats st;
  CHECK(accio_file_stats(f, &st) == 0 && st.last_mechanism >= 0);
  CHECK(accio_mechanism_device(st.last_mechanism) == 1);
  printf("c_api_fake_gpu: %s read ran %s\n", mechanism, accio_mechanism_name(st.last_mechanism));
  CHECK(accio_close(f) == 0);
  free(back);
  accio_settings_free(s);
}

/* Writes n bytes from device memory with `mechanism` into a new file, reads it back on the host. */
static void write_device(const char* path, const char* mechanism, const void* dev, const char* want, size_t n) {
  accio_settings* s = accio_settings_new();
  CHECK(s && accio_settings_set(s, "mechanism", mechanism) == 0);
  accio_file* f;
  CHECK(accio_open(&f, path, "w+", s) == 0);
  CHECK(accio_pwrite(f, dev, n, 0) == (int64_t)n);
  CHECK(accio_fsync(f) == 0);
  char* back = malloc(n);
  CHECK(back != NULL);
  int fd = open(path, O_RDONLY);
  CHECK(fd >= 0 && pread(fd, back, n, 0) == (ssize_t)n);
  close(fd);
  if (memcmp(back, want, n) != 0) {
    fprintf(stderr, "%s: bytes written from device memory differ\n", mechanism);
    exit(1);
  }
  CHECK(accio_close(f) == 0);
  free(back);
  accio_settings_free(s);
}

/* accio_cuda_current_device: the GPU of this thread's current context, as a CUDA runtime or a
 * framework made it current (the driver's own calls here), -1 with none; asking makes none. */
static void current_device_follows_the_thread_context(void) {
  CHECK(accio_cuda_current_device() == -1);
  CHECK(accio_cuda_current_device() == -1); /* the first call made no context current */
  void* h = dlopen(getenv("ACCIO_LIBCUDA"), RTLD_NOW | RTLD_NOLOAD); /* the driver accio loaded */
  CHECK(h != NULL);
  typedef int (*device_get_fn)(int*, int);
  typedef int (*retain_fn)(void**, int);
  typedef int (*push_fn)(void*);
  typedef int (*pop_fn)(void**);
  device_get_fn device_get;
  retain_fn retain;
  push_fn push;
  pop_fn pop;
  *(void**)&device_get = dlsym(h, "cuDeviceGet");
  *(void**)&retain = dlsym(h, "cuDevicePrimaryCtxRetain");
  *(void**)&push = dlsym(h, "cuCtxPushCurrent_v2");
  *(void**)&pop = dlsym(h, "cuCtxPopCurrent_v2");
  CHECK(device_get && retain && push && pop);
  const int last = accio_gpu_count() - 1; /* with several GPUs, not 0 */
  int dev = -1;
  void *ctx = NULL, *popped = NULL;
  CHECK(device_get(&dev, last) == 0 && retain(&ctx, dev) == 0 && push(ctx) == 0);
  CHECK(accio_cuda_current_device() == last);
  CHECK(pop(&popped) == 0 && popped == ctx);
  CHECK(accio_cuda_current_device() == -1);
  dlclose(h);
}

int main(void) {
  if (!getenv("ACCIO_LIBCUDA") || !getenv("ACCIO_LIBCUFILE")) {
    fprintf(stderr, "c_api_fake_gpu: set ACCIO_LIBCUDA and ACCIO_LIBCUFILE to the fake driver (ctest does)\n");
    return 2;
  }
  char why[512];
  CHECK(accio_cuda_available(why, sizeof why) == 1);
  CHECK(accio_gpu_count() >= 1);
  accio_gpu_info gi;
  CHECK(accio_gpu_info_get(0, &gi) == 0 && strstr(gi.name, "fake") != NULL);
  current_device_follows_the_thread_context();
  if (accio_gds_info(why, sizeof why) != 1) { /* loads the fake cuFile and opens its driver */
    fprintf(stderr, "c_api_fake_gpu: cuFile did not open: %s\n", why);
    return 1;
  }

  char path[] = "/tmp/accio-c-gpu-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  const size_t n = (8u << 20) + 4099; /* several staging buffers and a tail */
  char* src = malloc(n);
  CHECK(src != NULL);
  for (size_t i = 0; i < n; ++i) src[i] = (char)(i * 131 + 17);
  CHECK(pwrite(fd, src, n, 0) == (ssize_t)n);
  close(fd);

  void* dev;
  CHECK(accio_device_alloc(0, n, 0, &dev) == 0);
  int device = -2;
  CHECK(accio_mem_kind(dev, &device) == ACCIO_MEM_DEVICE && device == 0);
  const char* mechanisms[] = {"naive", "staged", "gds", "auto"};
  for (size_t i = 0; i < sizeof mechanisms / sizeof *mechanisms; ++i) read_device(path, mechanisms[i], dev, src, n);

  char out[] = "/tmp/accio-c-gpu-out-XXXXXX";
  fd = mkstemp(out);
  CHECK(fd >= 0);
  close(fd);
  write_device(out, "staged", dev, src, n);
  write_device(out, "gds", dev, src, n);

  CHECK(accio_device_free(dev) == 0);
  /* Memory accio_device_alloc did not give: the driver's CUDA_ERROR_INVALID_VALUE is -EINVAL, not
   * 0 (the Fortran wrapper nulls the caller's pointer on 0), and so is a pointer freed already. */
  char host[64];
  CHECK(accio_device_free(host) == -EINVAL && strstr(accio_last_error(), "not memory from accio_device_alloc"));
  CHECK(accio_device_free(dev) == -EINVAL);
  CHECK(accio_device_free(NULL) == 0);

  /* Pinned host memory with a driver: registered with it (the driver then calls it pinned). */
  void* pinned = NULL;
  int how = -1;
  CHECK(accio_host_alloc(n, &pinned, &how) == 0 && how == ACCIO_HOST_CUDA);
  CHECK(accio_mem_kind(pinned, &device) == ACCIO_MEM_PINNED);
  CHECK(accio_host_free(pinned) == 0 && accio_mem_kind(pinned, &device) == ACCIO_MEM_HOST);
  unlink(path);
  unlink(out);
  free(src);
  printf("c_api_fake_gpu: ok (accio %s)\n", accio_version());
  return 0;
}
