/* A "static" worker: the worker program with a kernel linked in (veo_proc_create_static). */
#include <accio/ve_offload.h>
#include <stdint.h>

uint64_t static_kernel(int32_t x) { return (uint64_t)(int64_t)(x * 10); }

/* The kernel-side helpers, resolved in libaccio_offload by a kernel linked into the worker. */
uint64_t static_prev(int offs) {
  uint64_t r = 0;
  return veo_prev_req_result(offs, &r) == 0 ? r : ~(uint64_t)0;
}
uint64_t static_hmem_addr(void* hmem) { return veo_is_ve_addr(hmem) ? (uint64_t)veo_get_hmem_addr(hmem) : 0; }

int main(int argc, char** argv) { return accio_offload_worker_main(argc, argv); }
