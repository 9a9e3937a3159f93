/* accio-offload-worker: the program veo_proc_create() starts (AVEO's aveorun). All of it is in
 * libaccio_offload; a "static" worker with kernels linked in is this same file plus the kernels,
 * linked with -laccio_offload and -Wl,--dynamic-list naming the kernels (or -rdynamic), and started
 * with veo_proc_create_static(). It exports nothing itself: dlopened kernels find the API in
 * libaccio_offload. */
#include <accio/ve_offload.h>

int main(int argc, char** argv) { return accio_offload_worker_main(argc, argv); }
