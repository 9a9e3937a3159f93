// accio base: the one exception type every layer throws. It names the operation, the path,
// the offset and errno (DESIGN: "Every error names the operation, the path, the offset and errno").
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace accio::base {

inline constexpr int64_t kNoOffset = -1;

class Error : public std::runtime_error {
 public:
  Error(int errnum, std::string op, std::string path, int64_t offset, std::string detail = {});
  int errnum() const noexcept { return errnum_; }
  const std::string& op() const noexcept { return op_; }
  const std::string& path() const noexcept { return path_; }
  int64_t offset() const noexcept { return offset_; }
  const std::string& detail() const noexcept { return detail_; }  // the detail given, else strerror

 private:
  int errnum_;
  std::string op_, path_, detail_;
  int64_t offset_;
};

// Formats "pread '/p' at offset 4096: No space left on device (errno 28)".
std::string format_error(int errnum, const std::string& op, const std::string& path, int64_t offset,
                         const std::string& detail);

}  // namespace accio::base
