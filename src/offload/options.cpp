// accio offload: the offload rows of the settings table and reading them (options.hpp). Each row
// is declared once, in kRows, in the shape of libaccio's accio_setting_spec; values are parsed
// here the same way whatever their source.
//
// STATE: libaccio's accio_setting_register (helper B, branch i18-settings) has not landed yet, so
// lookup() reads the environment itself and register_settings() has nothing to call. The switch
// to libaccio's table is confined to those two functions.
#include "offload/options.hpp"

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "offload/report.hpp"

namespace accio::offload {
namespace {

struct Row {  // the fields of accio_setting_spec
  const char* name;
  const char* env;
  const char* doc;
  const char* kind;  // "count" | "size" | "choice" | "text"
  const char* default_value;
  int64_t min, max;
  const char* choices;
};

constexpr int64_t kNoBound = 0;
const Row kRows[] = {
    {"offload_transport", "ACCIO_OFFLOAD_TRANSPORT",
     "offload: shm (shared memory, polled then futex) or socket (every request through a socketpair)",
     "choice", "shm", kNoBound, kNoBound, "shm|socket"},
    {"offload_spin_us", "ACCIO_OFFLOAD_SPIN_US",
     "offload: microseconds both sides poll before they sleep; forever: never sleep", "text", "100", kNoBound,
     kNoBound, nullptr},
    {"offload_timeout_ms", "ACCIO_OFFLOAD_TIMEOUT_MS", "offload: longest wait for a request in ms; 0: none",
     "count", "0", 0, INT64_C(1) << 40, nullptr},
    {"offload_slots", "ACCIO_OFFLOAD_SLOTS", "offload: requests in flight per queue", "count", "256", 2,
     INT64_C(1) << 20, nullptr},
    {"offload_arena", "ACCIO_OFFLOAD_ARENA",
     "offload: payload arena per queue (stack arguments, transfer pieces)", "size", "16MiB", INT64_C(64) << 10,
     INT64_C(1) << 40, nullptr},
    {"offload_worker", "ACCIO_OFFLOAD_WORKER",
     "offload: the worker program (else VEORUN_BIN, else accio-offload-worker next to libaccio_offload)", "text",
     "", kNoBound, kNoBound, nullptr},
};
enum RowIndex { kTransport, kSpin, kTimeout, kSlots, kArena, kWorker };

// The value of a row: its environment variable when set and not empty, else its default.
std::string lookup(const Row& r) {
  const char* v = std::getenv(r.env);
  return v && *v ? v : r.default_value;
}

// "4096", "64k", "16m", "16MiB", "1G" -> bytes (the units libaccio's sizes take).
bool parse_size(const std::string& s, int64_t* out) {
  std::string t;
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t.empty() || !std::isdigit(static_cast<unsigned char>(t[0]))) return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(t.c_str(), &end, 10);
  if (errno) return false;
  std::string unit = end;
  if (unit.size() > 1 && unit.back() == 'b') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'i') unit.pop_back();
  unsigned shift = 0;
  if (unit == "k") shift = 10;
  else if (unit == "m") shift = 20;
  else if (unit == "g") shift = 30;
  else if (unit == "t") shift = 40;
  else if (!unit.empty() && unit != "b") return false;
  if (v > (uint64_t(INT64_MAX) >> shift)) return false;
  *out = int64_t(v << shift);
  return true;
}

bool parse_count(const std::string& s, int64_t* out) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}

// A row's value parsed: its environment value, or its default when that is not set. A bad value
// is reported and the default used instead (the caller returns -EINVAL).
bool parse(const Row& r, const std::string& v, int64_t* out, std::string* why) {
  if (!strcmp(r.kind, "choice")) {
    const std::string choices = std::string("|") + r.choices + "|";
    for (int64_t i = 0, start = 1; start < int64_t(choices.size()); ++i) {
      const size_t bar = choices.find('|', size_t(start));
      if (choices.compare(size_t(start), bar - size_t(start), v) == 0 && !v.empty()) {
        *out = i;
        return true;
      }
      start = int64_t(bar) + 1;
    }
    *why = "is not " + std::string(r.choices);
    return false;
  }
  if (!strcmp(r.kind, "text")) {  // offload_spin_us: a count, or forever
    if (v == "forever") {
      *out = ACCIO_OFFLOAD_SPIN_FOREVER;
      return true;
    }
    if (parse_count(v, out)) return true;
    *why = "is not a non-negative integer or forever";
    return false;
  }
  const bool size = !strcmp(r.kind, "size");
  if (!(size ? parse_size(v, out) : parse_count(v, out))) {
    *why = size ? "is not a size (bytes, or with a unit: 64k, 16m, 1g)" : "is not a non-negative integer";
    return false;
  }
  if (*out < r.min || *out > r.max) {
    *why = "is out of range (" + std::to_string(r.min) + ".." + std::to_string(r.max) + ")";
    return false;
  }
  return true;
}

bool value(const Row& r, int64_t* out) {
  const std::string v = lookup(r);
  std::string why;
  if (parse(r, v, out, &why)) return true;
  report(std::string(r.env) + "=" + v + " " + why);
  std::string ignored;
  parse(r, r.default_value, out, &ignored);
  return false;
}

}  // namespace

int register_settings() { return 0; }

int read_options(accio_offload_options* o) {
  *o = accio_offload_options{};
  o->venode = -1;
  o->worker = nullptr;
  int64_t transport = 0, spin = 0, timeout = 0, slots = 0, arena = 0;
  bool ok = value(kRows[kTransport], &transport);
  ok = value(kRows[kSpin], &spin) && ok;
  ok = value(kRows[kTimeout], &timeout) && ok;
  ok = value(kRows[kSlots], &slots) && ok;
  ok = value(kRows[kArena], &arena) && ok;
  o->transport = transport == 0 ? ACCIO_OFFLOAD_SHM : ACCIO_OFFLOAD_SOCKET;  // the order of "shm|socket"
  o->spin_us = spin;
  o->timeout_ms = timeout;
  o->slots = uint32_t(slots);
  o->arena_bytes = size_t(arena);
  return ok ? 0 : -EINVAL;
}

std::string configured_worker() {
  if (std::string w = lookup(kRows[kWorker]); !w.empty()) return w;
  const char* v = std::getenv("VEORUN_BIN");
  return v && *v ? v : "";
}

}  // namespace accio::offload
