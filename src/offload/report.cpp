// accio offload: the calling thread's last error and the log channel (see report.hpp). The log is
// libaccio's, reached through its C API (accio_log): libaccio_offload links no copy of the core.
#include "offload/report.hpp"

#include <cstring>

#include "accio/accio.h"

namespace accio::offload {
namespace {
thread_local std::string t_error;
}

void set_last_error(std::string msg) { t_error = std::move(msg); }

void report(std::string msg) {
  t_error = std::move(msg);
  accio_log(ACCIO_LOG_ERROR, "offload", ("offload: " + t_error).c_str());
}

const std::string& last_error() { return t_error; }

std::string errstr(int e) { return std::string(strerror(e)) + " (errno " + std::to_string(e) + ")"; }

std::string signame(int sig) {
  const char* d = strsignal(sig);
  return "signal " + std::to_string(sig) + " (" + (d ? d : "?") + ")";
}

}  // namespace accio::offload
