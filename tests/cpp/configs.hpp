// Parameterized tests over mechanisms: a named set of settings (a mechanism and its knobs), the
// settings it makes, and a file's whole contents read plainly for comparison.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "base/settings.hpp"

namespace testing_accio {

struct Config {
  const char* name;
  std::vector<std::pair<const char*, const char*>> settings;
};

inline void PrintTo(const Config& c, std::ostream* os) { *os << c.name; }

inline accio::base::Settings make_settings(const Config& c) {
  auto s = accio::base::Settings::defaults();
  for (auto& [k, v] : c.settings) s.set(k, v);
  return s;
}

// The file's bytes by plain pread (empty if it cannot be opened).
inline std::vector<char> file_bytes(const std::string& path) {
  std::vector<char> all;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return all;
  struct stat st;
  if (::fstat(fd, &st) == 0) {
    all.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    for (ssize_t r; done < all.size() && (r = ::pread(fd, all.data() + done, all.size() - done, static_cast<off_t>(done))) > 0;)
      done += static_cast<size_t>(r);
    all.resize(done);
  }
  ::close(fd);
  return all;
}

}  // namespace testing_accio
