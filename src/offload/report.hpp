// accio offload: errors. Every failure of the VEO API records a message as the calling thread's
// last error (accio_offload_last_error: VEO's return codes say little) and sends it to libaccio's
// log channel (accio_log, key "offload": the accio_set_log_callback sink, or stderr unless
// ACCIO_QUIET=1), as VEO prints its errors. Also the helpers that spell errno values and signals.
#pragma once
#include <string>

namespace accio::offload {

void report(std::string msg);       // sets the last error and logs it
void set_last_error(std::string msg);  // sets it only (a message the caller reports later)
const std::string& last_error();
std::string errstr(int e);          // "No such file or directory (errno 2)"
std::string signame(int sig);       // "signal 11 (Segmentation fault)"

}  // namespace accio::offload
