// accio memory: pinned host memory for callers that stage themselves (accio_host_alloc,
// accio.pinned_empty). A staging-buffer mapping (huge pages where possible, faulted in) that is
// registered with the CUDA driver when libcuda loads, else mlock'ed; how it was pinned is reported.
#pragma once
#include <cstddef>

namespace accio::mem {

enum class Pin { pageable = 0, mlock = 1, cuda = 2 };  // accio_host_pin's values

// size bytes; *how says how they are pinned. Throws base::Error (EINVAL for 0 bytes, ENOMEM).
void* host_alloc(size_t size, Pin* how);
// false when p is not a live host_alloc allocation (nothing is freed then).
bool host_free(void* p);

}  // namespace accio::mem
