/* accio-offload-worker: the program veo_proc_create() starts (AVEO's aveorun). All of it is in
 * libaccio; a "static" worker with kernels linked in is this same file plus the kernels, linked
 * with -rdynamic -laccio and started with veo_proc_create_static(). */
#include <accio/ve_offload.h>

int main(int argc, char** argv) { return accio_offload_worker_main(argc, argv); }
