// accio base: every knob, settable by ACCIO_<NAME> environment variables and by the API under the
// same lower-case name (KvikIO's convention). Settings::from_env() is what a handle starts from.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace accio::base {

struct Settings {
  std::string mechanism = "auto";     // auto | posix | parallel | direct | uring | naive | staged | gds
  unsigned threads = 0;               // 0 = one per online CPU (resolved by defaults())
  size_t task_size = 4u << 20;        // bytes per task of a split request; 0 = split evenly
  size_t buffer_size = 4u << 20;      // bytes per staging buffer
  unsigned buffer_count = 8;          // staging buffers in the pool
  unsigned queue_depth = 16;          // io_uring requests in flight per request
  unsigned ring_depth = 3;            // staging buffers per worker ring (staged)
  bool huge_pages = true;             // back staging buffers with huge pages
  bool direct = false;                // uring, staged: open the file side with O_DIRECT
  std::string profile = "auto";       // auto: accio tune's profile for the filesystem | off | FILE
  std::string cache_probe = "auto";   // auto | cachestat | nowait | mincore | off (planner signal)

  static Settings defaults();   // built-in values, threads resolved
  static Settings from_env();   // defaults() overridden by ACCIO_* (throws Error(EINVAL) on bad values)

  void set(const std::string& name, const std::string& value);  // throws Error(EINVAL)
  std::string get(const std::string& name) const;              // throws Error(EINVAL)

  struct Knob {
    const char* name;
    const char* env;
    const char* doc;
  };
  static const std::vector<Knob>& knobs();
};

// "4096", "4k", "4KiB", "1m", "2G" -> bytes. Throws std::invalid_argument.
size_t parse_size(const std::string& s);
std::string format_size(size_t bytes);  // 4194304 -> "4MiB"

}  // namespace accio::base
