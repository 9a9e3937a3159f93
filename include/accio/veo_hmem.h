/* AVEO's <veo_hmem.h> (veo_is_ve_addr, veo_get_hmem_addr, veo_alloc_hmem, ...): accio declares them
 * in ve_offload.h, which this includes, so that AVEO programs compile unchanged with the offload
 * flags (`accio config --cflags --offload`, pkg-config accio-offload, CMake accio::offload put this
 * directory on the include path). */
#include "ve_offload.h"
