// accio base: Settings parsing, printing and environment overrides.
#include "base/settings.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>

#include "base/error.hpp"

namespace accio::base {

const std::vector<Settings::Knob>& Settings::knobs() {
  static const std::vector<Knob> k = {
      {"mechanism", "ACCIO_MECHANISM", "auto, posix, parallel, direct, uring; for GPU buffers naive, staged or gds"},
      {"threads", "ACCIO_THREADS", "worker threads per request (parallel, direct); 0 = online CPUs"},
      {"task_size", "ACCIO_TASK_SIZE", "bytes per task when a request is split; 0 = evenly over the threads"},
      {"buffer_size", "ACCIO_BUFFER_SIZE", "bytes per staging buffer"},
      {"buffer_count", "ACCIO_BUFFER_COUNT", "staging buffers in the shared pool"},
      {"queue_depth", "ACCIO_QUEUE_DEPTH", "io_uring requests in flight (uring)"},
      {"ring_depth", "ACCIO_RING_DEPTH", "staging buffers per worker ring for GPU buffers (staged)"},
      {"huge_pages", "ACCIO_HUGE_PAGES", "back staging buffers with huge pages (on/off)"},
      {"direct", "ACCIO_DIRECT", "open the file side with O_DIRECT (uring, staged) (on/off)"},
      {"profile", "ACCIO_PROFILE", "auto: the accio tune profile of the file's filesystem; off: built-in model; or a file"},
      {"cache_probe", "ACCIO_CACHE_PROBE", "how auto sees page-cache residency: auto, cachestat, nowait, mincore or off"},
  };
  return k;
}

size_t parse_size(const std::string& s) {
  std::string t;
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) t += static_cast<char>(std::tolower(c));
  if (t.empty() || !std::isdigit(static_cast<unsigned char>(t[0]))) throw std::invalid_argument("not a size");
  size_t pos = 0;
  unsigned long long v = std::stoull(t, &pos);
  std::string unit = t.substr(pos);
  if (unit.size() > 1 && unit.back() == 'b') unit.pop_back();  // "kb", "kib" -> "k", "ki"
  if (unit.size() > 1 && unit.back() == 'i') unit.pop_back();
  unsigned shift = 0;
  if (unit.empty()) shift = 0;
  else if (unit == "k") shift = 10;
  else if (unit == "m") shift = 20;
  else if (unit == "g") shift = 30;
  else if (unit == "t") shift = 40;
  else throw std::invalid_argument("unknown unit");
  if (shift && v > (~0ULL >> shift)) throw std::invalid_argument("too large");
  return static_cast<size_t>(v << shift);
}

std::string format_size(size_t b) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && b >= 1024 && b % 1024 == 0) {
    b /= 1024;
    ++u;
  }
  return std::to_string(b) + units[u];
}

namespace {
bool parse_bool(const std::string& v) {
  std::string t;
  for (char c : v) t += static_cast<char>(std::tolower(c));
  if (t == "1" || t == "on" || t == "true" || t == "yes") return true;
  if (t == "0" || t == "off" || t == "false" || t == "no") return false;
  throw std::invalid_argument("not on/off");
}
unsigned parse_count(const std::string& v, unsigned lo, unsigned hi) {
  size_t pos = 0;
  unsigned long x = std::stoul(v, &pos);
  if (pos != v.size() || x < lo || x > hi) throw std::invalid_argument("out of range");
  return static_cast<unsigned>(x);
}
unsigned online_cpus() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<unsigned>(n) : 1u;
}
}  // namespace

Settings Settings::defaults() {
  Settings s;
  s.threads = online_cpus();
  return s;
}

void Settings::set(const std::string& name, const std::string& value) {
  try {
    if (name == "mechanism") {
      if (value.empty()) throw std::invalid_argument("empty");
      mechanism = value;
    } else if (name == "threads") {
      threads = parse_count(value, 0, 1024);
      if (threads == 0) threads = online_cpus();
    } else if (name == "task_size") {
      task_size = parse_size(value);
      if (task_size && task_size < 4096) throw std::invalid_argument("below 4KiB (0 splits evenly)");
    } else if (name == "buffer_size") {
      buffer_size = parse_size(value);
      if (buffer_size < 4096 || buffer_size > (size_t{1} << 30)) throw std::invalid_argument("not in 4KiB..1GiB");
      buffer_size = (buffer_size + 4095) & ~size_t{4095};
    } else if (name == "buffer_count") {
      buffer_count = parse_count(value, 1, 4096);
    } else if (name == "queue_depth") {
      queue_depth = parse_count(value, 1, 4096);
    } else if (name == "ring_depth") {
      ring_depth = parse_count(value, 1, 64);
    } else if (name == "huge_pages") {
      huge_pages = parse_bool(value);
    } else if (name == "direct") {
      direct = parse_bool(value);
    } else if (name == "profile") {
      if (value.empty()) throw std::invalid_argument("empty");
      profile = value;
    } else if (name == "cache_probe") {
      if (value != "auto" && value != "cachestat" && value != "nowait" && value != "mincore" && value != "off")
        throw std::invalid_argument("not auto, cachestat, nowait, mincore or off");
      cache_probe = value;
    } else {
      throw Error(EINVAL, "set setting", "", kNoOffset, "unknown setting '" + name + "'");
    }
  } catch (const std::invalid_argument& e) {
    throw Error(EINVAL, "set setting", "", kNoOffset,
                "invalid value '" + value + "' for setting '" + name + "' (" + e.what() + ")");
  } catch (const std::out_of_range&) {
    throw Error(EINVAL, "set setting", "", kNoOffset, "value '" + value + "' out of range for '" + name + "'");
  }
}

std::string Settings::get(const std::string& name) const {
  if (name == "mechanism") return mechanism;
  if (name == "threads") return std::to_string(threads);
  if (name == "task_size") return std::to_string(task_size);
  if (name == "buffer_size") return std::to_string(buffer_size);
  if (name == "buffer_count") return std::to_string(buffer_count);
  if (name == "queue_depth") return std::to_string(queue_depth);
  if (name == "ring_depth") return std::to_string(ring_depth);
  if (name == "huge_pages") return huge_pages ? "on" : "off";
  if (name == "direct") return direct ? "on" : "off";
  if (name == "profile") return profile;
  if (name == "cache_probe") return cache_probe;
  throw Error(EINVAL, "get setting", "", kNoOffset, "unknown setting '" + name + "'");
}

Settings Settings::from_env() {
  Settings s = defaults();
  for (const Knob& k : knobs()) {
    const char* v = std::getenv(k.env);
    if (!v || !*v) continue;
    try {
      s.set(k.name, v);
    } catch (const Error& e) {
      throw Error(EINVAL, "read environment", "", kNoOffset,
                  std::string(k.env) + "='" + v + "' is not valid: " + e.what());
    }
  }
  return s;
}

}  // namespace accio::base
