/* A kernel library that uses a function of another one (kernels.c's k_shared_helper) without being
 * linked to it: it loads only where that library was loaded before it with RTLD_GLOBAL, as AVEO's
 * veo_load_library loads every library. */
#include <stdint.h>
uint64_t k_shared_helper(uint64_t a);
uint64_t k_calls_helper(uint64_t a) { return k_shared_helper(a) + 2; }
