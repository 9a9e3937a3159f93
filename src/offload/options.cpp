// accio offload: the offload rows of libaccio's settings table and reading them (options.hpp).
// The rows are declared once, in kRows, and registered with accio_setting_register when the
// library is loaded (and again, harmlessly, before they are read); their values come from
// accio_settings_new (defaults, then the ACCIO_* environment, validated by kind and bounds by
// libaccio, which names a bad variable) through accio_settings_get. Only offload_spin_us is checked
// here: it is a number of microseconds or "forever", which no kind of the table expresses.
#include "offload/options.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "accio/accio.hpp"
#include "offload/report.hpp"

namespace accio::offload {
namespace {

constexpr const char* kAuto = "auto";  // offload_worker's default: VEORUN_BIN, else the installed one
const accio_setting_spec kRows[] = {
    {"offload_transport", "ACCIO_OFFLOAD_TRANSPORT",
     "shm (shared memory, polled then futex) or socket (every request through a socketpair)", "choice",
     "shm", 0, 0, "shm|socket"},
    {"offload_spin_us", "ACCIO_OFFLOAD_SPIN_US",
     "microseconds both sides poll before they sleep; forever: never sleep", "text", "100", 0, 0, nullptr},
    {"offload_timeout_ms", "ACCIO_OFFLOAD_TIMEOUT_MS", "longest wait for a request in ms; 0: none", "count",
     "0", 0, INT64_C(1) << 40, nullptr},
    {"offload_slots", "ACCIO_OFFLOAD_SLOTS", "requests in flight per queue", "count", "256", 2,
     INT64_C(1) << 20, nullptr},
    {"offload_arena", "ACCIO_OFFLOAD_ARENA", "payload arena per queue (stack arguments, transfer pieces)",
     "size", "16MiB", INT64_C(64) << 10, INT64_C(1) << 40, nullptr},
    {"offload_worker", "ACCIO_OFFLOAD_WORKER",
     "the worker program; auto: VEORUN_BIN, else accio-offload-worker next to libaccio_offload", "text",
     kAuto, 0, 0, nullptr},
};
enum RowIndex { kTransport, kSpin, kTimeout, kSlots, kArena, kWorker };

using SettingsPtr = std::unique_ptr<accio_settings, void (*)(accio_settings*)>;

// The settings now: libaccio's defaults and environment, or null (reported) for a bad value.
SettingsPtr current() {
  if (register_settings() != 0) return SettingsPtr(nullptr, accio_settings_free);
  SettingsPtr s(accio_settings_new(), accio_settings_free);
  if (!s) report(std::string("reading the settings: ") + accio_last_error());
  return s;
}

// A row's value, or nullopt (reported) when its ACCIO_OFFLOAD_* value is bad: libaccio keeps that
// error for the row's reader (us), so a bad offload variable never stops a process's file I/O.
std::optional<std::string> get(const accio_settings* s, const accio_setting_spec& row) {
  try {  // whole, however long (a worker path)
    return accio::detail::read_string([&](char* out, size_t len) { return accio_settings_get(s, row.name, out, len); });
  } catch (const accio::Error& e) {
    report(std::string("reading the settings: ") + e.what());
    return std::nullopt;
  }
}

// Count and size rows read back as decimal integers.
int64_t number(const std::string& v) { return std::strtoll(v.c_str(), nullptr, 10); }

// Registers the rows when the library is loaded, so that a listing of the table has them.
__attribute__((constructor)) void register_at_load() { register_settings(); }

}  // namespace

int register_settings() {
  static const int rc = [] {
    for (const accio_setting_spec& row : kRows) {
      if (int e = accio_setting_register(&row); e != 0) {
        report(std::string("registering the offload settings: ") + accio_last_error());
        return e;
      }
    }
    return 0;
  }();
  return rc;
}

int read_options(accio_offload_options* o) {
  *o = accio_offload_options{};
  o->venode = -1;
  o->worker = nullptr;
  SettingsPtr s = current();
  if (!s) return -EINVAL;
  const auto transport = get(s.get(), kRows[kTransport]), timeout = get(s.get(), kRows[kTimeout]),
             slots = get(s.get(), kRows[kSlots]), arena = get(s.get(), kRows[kArena]),
             spin_text = get(s.get(), kRows[kSpin]);
  if (!transport || !timeout || !slots || !arena || !spin_text) return -EINVAL;
  o->transport = *transport == "socket" ? ACCIO_OFFLOAD_SOCKET : ACCIO_OFFLOAD_SHM;
  o->timeout_ms = number(*timeout);
  o->slots = uint32_t(number(*slots));
  o->arena_bytes = size_t(number(*arena));
  const std::string& spin = *spin_text;
  char* end = nullptr;
  errno = 0;
  const long long us = std::strtoll(spin.c_str(), &end, 10);
  if (spin == "forever") {
    o->spin_us = ACCIO_OFFLOAD_SPIN_FOREVER;
  } else if (!spin.empty() && spin[0] >= '0' && spin[0] <= '9' && !*end && errno == 0) {
    o->spin_us = us;
  } else {
    o->spin_us = std::strtoll(kRows[kSpin].default_value, nullptr, 10);
    report(std::string("reading the settings: ") + kRows[kSpin].env + "='" + spin +
           "' is not valid for setting 'offload_spin_us' (a number of microseconds, or forever)");
    return -EINVAL;
  }
  return 0;
}

std::string invalid_option(const accio_offload_options& o) {
  auto outside = [](const accio_setting_spec& row, int64_t v) { return v < row.min || v > row.max; };
  auto range = [](const accio_setting_spec& row) {
    return " (" + std::to_string(row.min) + " to " + std::to_string(row.max) + ", as " + row.env + ")";
  };
  if (o.transport != ACCIO_OFFLOAD_SHM && o.transport != ACCIO_OFFLOAD_SOCKET)
    return "transport " + std::to_string(o.transport) + " (ACCIO_OFFLOAD_SHM or ACCIO_OFFLOAD_SOCKET)";
  if (o.spin_us < ACCIO_OFFLOAD_SPIN_FOREVER)
    return "spin_us " + std::to_string(o.spin_us) + " (microseconds >= 0, or ACCIO_OFFLOAD_SPIN_FOREVER)";
  if (outside(kRows[kTimeout], o.timeout_ms)) return "timeout_ms " + std::to_string(o.timeout_ms) + range(kRows[kTimeout]);
  if (outside(kRows[kSlots], o.slots)) return "slots " + std::to_string(o.slots) + range(kRows[kSlots]);
  if (o.arena_bytes < uint64_t(kRows[kArena].min) || o.arena_bytes > uint64_t(kRows[kArena].max))
    return "arena_bytes " + std::to_string(o.arena_bytes) + range(kRows[kArena]);
  return "";
}

std::string configured_worker() {
  if (register_settings() == 0) {
    SettingsPtr s(accio_settings_new(), accio_settings_free);  // a bad value: read_options said so
    if (s)
      if (auto w = get(s.get(), kRows[kWorker]); w && *w != kAuto) return *w;
  }
  const char* v = std::getenv("VEORUN_BIN");
  return v && *v ? v : "";
}

}  // namespace accio::offload
