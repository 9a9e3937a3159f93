/* AVEO's kernel-side <veo_ve.h> (veo_prev_req_result): accio declares it in ve_offload.h, which
 * this includes, so that AVEO kernels compile unchanged with the offload flags. */
#include "ve_offload.h"
