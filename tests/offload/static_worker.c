/* A "static" worker: the worker program with a kernel linked in (veo_proc_create_static). */
#include <accio/ve_offload.h>
#include <stdint.h>

uint64_t static_kernel(int32_t x) { return (uint64_t)(int64_t)(x * 10); }

int main(int argc, char** argv) { return accio_offload_worker_main(argc, argv); }
