// accio offload: its options (transport, spin, timeout, slots, arena, worker program) are rows of
// libaccio's settings table, named offload_* with ACCIO_OFFLOAD_* environment variables, so that
// `accio info` lists them beside the I/O settings. This is the one place that declares and reads
// them; accio_offload_options_init (api.cpp) and the worker lookup (proc.cpp) ask it.
#pragma once
#include <string>

#include "accio/ve_offload.h"

namespace accio::offload {

// Adds the offload rows to libaccio's settings table (once per process; also done when the
// library is loaded). 0, or -errno (reported) when libaccio refuses a row.
int register_settings();
// Fills *o from the settings (defaults, then the environment): 0, or -EINVAL (reported) for a bad
// value. o->venode is -1 and o->worker NULL (create_proc asks configured_worker()).
int read_options(accio_offload_options* o);
// The worker program the settings name: offload_worker, else VEORUN_BIN (as in VEO), else "".
std::string configured_worker();
// Options a caller filled in itself, held to the rows' bounds: "" when good, else what is wrong
// ("spin_us -5 (microseconds >= 0, or ACCIO_OFFLOAD_SPIN_FOREVER)").
std::string invalid_option(const accio_offload_options& o);

}  // namespace accio::offload
