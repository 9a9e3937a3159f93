// accio base: Error formatting.
#include "base/error.hpp"

#include <cstring>

namespace accio::base {

std::string format_error(int errnum, const std::string& op, const std::string& path, int64_t offset,
                         const std::string& detail) {
  std::string s = op;
  if (!path.empty()) s += " '" + path + "'";
  if (offset >= 0) s += " at offset " + std::to_string(offset);
  s += ": ";
  s += detail.empty() ? std::strerror(errnum) : detail;
  s += " (errno " + std::to_string(errnum) + ")";
  return s;
}

Error::Error(int errnum, std::string op, std::string path, int64_t offset, std::string detail)
    : std::runtime_error(format_error(errnum, op, path, offset, detail)),
      errnum_(errnum),
      op_(std::move(op)),
      path_(std::move(path)),
      detail_(detail.empty() ? std::strerror(errnum) : std::move(detail)),
      offset_(offset) {}

}  // namespace accio::base
