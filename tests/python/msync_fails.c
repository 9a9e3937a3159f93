/* A preload library whose msync answers ENOMEM ("not mapped") for every range: what the preload
 * shim's mapping check sees for GPU memory that lies in no mapping of the process, as it may on a
 * real GPU (the fake driver's device memory is a PROT_NONE mapping, which msync accepts). Preloaded
 * after the shim, it is the msync the shim calls. */
#include <errno.h>
#include <stddef.h>

int msync(void* addr, size_t len, int flags) {
  (void)addr, (void)len, (void)flags;
  errno = ENOMEM;
  return -1;
}
