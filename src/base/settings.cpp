// accio base: the settings table (the core rows, registration), parsing and printing by kind,
// and environment overrides. Every per-name decision is a row here, or in the file of the
// mechanism that reads it.
#include "base/settings.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <type_traits>

#include "accio/accio.h"  // ACCIO_MIN_EVEN_TASK
#include "base/error.hpp"
#include "base/size_text.h"

namespace accio::base {

// Sizes and integers are parsed with ASCII tests and std::from_chars, never the C library's
// locale-aware functions: a host program's setlocale(LC_ALL, "") must not change what "64k" means.
namespace {
char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
}  // namespace

size_t parse_size(const std::string& s) {
  // What a size looks like, in every refusal (new-user audit, session 25: "1.5k" was "unknown unit").
  static const char* const kGrammar = "whole bytes with an optional binary unit: 4096, 64k, 16MiB, 1g";
  unsigned long long v = 0;
  switch (accio_size_parse(s.c_str(), &v)) {  // the one grammar (base/size_text.h), the launcher's too
    case ACCIO_SIZE_OK: return static_cast<size_t>(v);
    case ACCIO_SIZE_NOT_A_SIZE: throw std::invalid_argument(std::string("not a size (") + kGrammar + ")");
    case ACCIO_SIZE_UNKNOWN_UNIT:
      if (s.find_first_of(".,") != std::string::npos)
        throw std::invalid_argument(std::string("not a whole number of bytes (") + kGrammar + "; 1536k, not 1.5m)");
      throw std::invalid_argument(std::string("unknown unit (") + kGrammar + ")");
    default: throw std::invalid_argument("too large");
  }
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
  for (char c : v) t += ascii_lower(c);
  if (t == "1" || t == "on" || t == "true" || t == "yes") return true;
  if (t == "0" || t == "off" || t == "false" || t == "no") return false;
  throw std::invalid_argument("not on/off");
}

int64_t parse_integer(const std::string& v) {
  const size_t digits = v.size() - (!v.empty() && v[0] == '-');
  if (digits == 0 || digits > 18 || !std::all_of(v.end() - static_cast<long>(digits), v.end(), [](char c) {
        return c >= '0' && c <= '9';
      }))
    throw std::invalid_argument("not an integer");
  int64_t n = 0;  // at most 18 digits: always in range
  std::from_chars(v.data(), v.data() + v.size(), n);
  return n;
}

std::vector<std::string> split_choices(const std::string& c) {
  std::vector<std::string> out;
  for (size_t at = 0;;) {
    const size_t bar = c.find('|', at);
    out.push_back(c.substr(at, bar == std::string::npos ? std::string::npos : bar - at));
    if (bar == std::string::npos) return out;
    at = bar + 1;
  }
}

std::string bound(const SettingSpec& s, int64_t v) {
  return s.kind == "size" ? format_size(static_cast<size_t>(v)) : std::to_string(v);
}

bool name_ok(const std::string& s, bool upper) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
    return c == '_' || (c >= '0' && c <= '9') || (upper ? (c >= 'A' && c <= 'Z') : (c >= 'a' && c <= 'z'));
  });
}

// A member of Settings bound to a row: T is the member's type (unsigned, size_t, bool, std::string).
template <class T>
void bind(SettingRow& r, T Settings::*m) {
  if constexpr (std::is_same_v<T, std::string>) {
    r.store = [m](Settings& s, const SettingValue& v) { s.*m = v.text; };
    r.load = [m](const Settings& s) { return SettingValue{0, s.*m}; };
  } else {
    r.store = [m](Settings& s, const SettingValue& v) { s.*m = static_cast<T>(v.num); };
    r.load = [m](const Settings& s) { return SettingValue{static_cast<int64_t>(s.*m), {}}; };
  }
}

// The table: rows are appended under a mutex and published by count (release), so readers never
// lock. A fixed capacity keeps row addresses stable without a lock on the read side.
constexpr size_t kMaxRows = 256;
struct Table {
  std::mutex mu;
  std::unique_ptr<SettingRow> rows[kMaxRows];
  std::atomic<size_t> count{0};

  Table();
  SettingRow* find(const std::string& name) const {
    const size_t n = count.load(std::memory_order_acquire);
    for (size_t i = 0; i < n; ++i)
      if (rows[i]->spec.name == name) return rows[i].get();
    return nullptr;
  }
  // With mu held.
  size_t add(const SettingSpec& spec, std::function<void(SettingValue&)> adjust, bool foreign = false);
  template <class T>
  void core(const SettingSpec& spec, T Settings::*m, std::function<void(SettingValue&)> adjust = {}) {
    SettingRow& r = *rows[add(spec, std::move(adjust))];
    bind(r, m);
  }
};

Table& table() {
  static Table* t = new Table;  // never destroyed: rows are referenced by static handles and C callers
  return *t;
}

size_t Table::add(const SettingSpec& spec, std::function<void(SettingValue&)> adjust, bool foreign) {
  const std::string what = "setting '" + spec.name + "': ";
  if (!name_ok(spec.name, false))
    throw Error(EINVAL, "register setting", "", kNoOffset, what + "the name must be lower-case letters, digits and _");
  if (!name_ok(spec.env, true))
    throw Error(EINVAL, "register setting", "", kNoOffset, what + "the environment variable must be upper-case letters, digits and _");
  if (spec.doc.empty()) throw Error(EINVAL, "register setting", "", kNoOffset, what + "the doc is empty");
  const std::string& k = spec.kind;
  if (k != "count" && k != "size" && k != "bool" && k != "choice" && k != "text")
    throw Error(EINVAL, "register setting", "", kNoOffset, what + "kind '" + k + "' is not count, size, bool, choice or text");
  if ((k == "count" || k == "size") && (spec.min > spec.max || (k == "size" && spec.min < 0)))
    throw Error(EINVAL, "register setting", "", kNoOffset, what + "min must not exceed max (and not be negative for a size)");
  if (k == "choice") {
    for (const std::string& c : split_choices(spec.choices))
      if (c.empty())
        throw Error(EINVAL, "register setting", "", kNoOffset, what + "choices must be values separated by '|' ('" + spec.choices + "')");
  }
  const size_t n = count.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    const SettingSpec& o = rows[i]->spec;
    if (o.name == spec.name && o == spec && rows[i]->foreign == foreign) return i;
    if (o.name == spec.name)
      throw Error(EEXIST, "register setting", "", kNoOffset,
                  "setting '" + spec.name + "' is already registered with a different spec");
    if (o.env == spec.env)
      throw Error(EEXIST, "register setting", "", kNoOffset,
                  what + "the environment variable " + spec.env + " belongs to setting '" + o.name + "'");
  }
  if (n == kMaxRows) throw Error(ENOSPC, "register setting", "", kNoOffset, what + "the table is full");
  auto row = std::make_unique<SettingRow>();
  row->spec = spec;
  row->index = n;
  row->adjust = std::move(adjust);
  row->foreign = foreign;
  try {
    (void)row->parse(spec.default_value);
  } catch (const std::exception& e) {
    throw Error(EINVAL, "register setting", "", kNoOffset,
                what + "the default '" + spec.default_value + "' is not a valid value (" + e.what() + ")");
  }
  rows[n] = std::move(row);
  count.store(n + 1, std::memory_order_release);
  return n;
}

// The core rows: the engine's, the staging pool's and the planner's knobs. A mechanism's own knobs
// are registered in its file (queue_depth in uring.cpp, ring_depth in staged.cpp).
Table::Table() {
  std::lock_guard lk(mu);
  core({"mechanism", "ACCIO_MECHANISM",
        "auto (a plan per request from the tuning profile) or one mechanism by name; `accio info` lists them and "
        "the memory each serves",
        "text",
        "auto"},
       &Settings::mechanism);
  core({"threads", "ACCIO_THREADS",
        "tasks of one split request that run at once (the shared thread pool grows to the largest); 0 = one per "
        "online CPU",
        "count", "0",
        0, 1024},
       &Settings::threads, [](SettingValue& v) {
         if (v.num == 0) v.num = usable_cpus();
       });
  core({"task_size", "ACCIO_TASK_SIZE",
        "bytes per task when a request is split, also the io_uring piece size; 0 = split evenly over threads "
        "(io_uring: over queue_depth), at least " + format_size(ACCIO_MIN_EVEN_TASK) + " per task",
        "size", "4MiB", 0, INT64_MAX},
       &Settings::task_size, [](SettingValue& v) {
         if (v.num && v.num < 4096) throw std::invalid_argument("below 4KiB (0 splits evenly)");
       });
  core({"buffer_size", "ACCIO_BUFFER_SIZE", "bytes per staging buffer (rounded up to 4KiB)", "size", "4MiB", 4096,
        int64_t{1} << 30},
       &Settings::buffer_size, [](SettingValue& v) { v.num = (v.num + 4095) & ~int64_t{4095}; });
  core({"buffer_count", "ACCIO_BUFFER_COUNT", "staging buffers in the shared pool", "count", "8", 1, 4096},
       &Settings::buffer_count);
  core({"huge_pages", "ACCIO_HUGE_PAGES", "back staging buffers with huge pages", "bool", "on"}, &Settings::huge_pages);
  core({"direct", "ACCIO_DIRECT", "open the file side with O_DIRECT", "bool", "off"},
       &Settings::direct);
  core({"profile", "ACCIO_PROFILE",
        "auto: the `accio tune` profile of the file's filesystem (else the built-in model); off: the built-in "
        "model (of the file's device kind: rotational or not); or a profile file",
        "text",
        "auto"},
       &Settings::profile);
  core({"cache_probe", "ACCIO_CACHE_PROBE",
        "how auto sees page-cache residency: auto (cachestat, else RWF_NOWAIT), cachestat, nowait, mincore, off "
        "(ranges count as cached)",
        "choice", "auto", 0, 0,
        "auto|cachestat|nowait|mincore|off"},
       &Settings::cache_probe);
}
}  // namespace

SettingValue SettingRow::parse(const std::string& text) const {
  SettingValue v;
  const std::string& k = spec.kind;
  if (k == "count" || k == "size") {
    if (k == "count") {
      v.num = parse_integer(text);
    } else {
      const size_t b = parse_size(text);
      if (b > size_t(INT64_MAX)) throw std::invalid_argument("too large");
      v.num = static_cast<int64_t>(b);
    }
    if (v.num < spec.min || v.num > spec.max)
      throw std::invalid_argument("not in " + bound(spec, spec.min) + ".." + bound(spec, spec.max));
  } else if (k == "bool") {
    v.num = parse_bool(text);
  } else if (k == "choice") {
    const std::vector<std::string> c = split_choices(spec.choices);
    if (std::find(c.begin(), c.end(), text) == c.end()) {
      std::string list;
      for (size_t i = 0; i < c.size(); ++i) list += (i ? (i + 1 == c.size() ? " or " : ", ") : "") + c[i];
      throw std::invalid_argument("not " + list);
    }
    v.text = text;
  } else {
    if (text.empty()) throw std::invalid_argument("empty");
    v.text = text;
  }
  if (adjust) adjust(v);
  if (auto c = check.load(std::memory_order_acquire)) c(v.text);
  return v;
}

std::string SettingRow::print(const SettingValue& v) const {
  if (spec.kind == "bool") return v.num ? "on" : "off";
  if (spec.kind == "count" || spec.kind == "size") return std::to_string(v.num);
  return v.text;
}

size_t setting_count() { return table().count.load(std::memory_order_acquire); }

const SettingRow& setting_row(size_t i) { return *table().rows[i]; }

const SettingRow* find_setting(const std::string& name) { return table().find(name); }

size_t register_setting(const SettingSpec& spec, std::function<void(SettingValue&)> adjust, bool foreign) {
  Table& t = table();
  std::lock_guard lk(t.mu);
  return t.add(spec, std::move(adjust), foreign);
}

void set_setting_check(const std::string& name, void (*check)(const std::string&)) {
  Table& t = table();
  std::lock_guard lk(t.mu);
  SettingRow* r = t.find(name);
  if (!r) throw Error(EINVAL, "register setting", "", kNoOffset, "no setting '" + name + "' to check");
  r->check.store(check, std::memory_order_release);
}

Knob::Knob(const SettingSpec& spec, std::function<void(SettingValue&)> adjust)
    : index_(register_setting(spec, std::move(adjust))), default_(row().parse(spec.default_value)) {}

Settings Settings::defaults() {
  Settings s;
  const size_t n = setting_count();
  s.values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const SettingRow& r = setting_row(i);
    const SettingValue v = r.parse(r.spec.default_value);
    if (r.store) r.store(s, v);
    else s.values[i] = v;
  }
  return s;
}

namespace {
// A row's parse with out_of_range folded in: the reason alone ("not an integer"), so that the one
// error message built from it says the setting, the value and why once.
SettingValue parse_value(const SettingRow& r, const std::string& value) {
  try {
    return r.parse(value);
  } catch (const std::out_of_range&) {
    throw std::invalid_argument("out of range");
  }
}

void put(Settings& s, const SettingRow& r, SettingValue v) {
  if (r.store) {
    r.store(s, v);
    return;
  }
  if (s.values.size() <= r.index) {  // a row registered after this object was made
    const size_t from = s.values.size();
    s.values.resize(r.index + 1);
    for (size_t i = from; i < s.values.size(); ++i) {
      const SettingRow& o = setting_row(i);
      if (!o.store) s.values[i] = o.parse(o.spec.default_value);
    }
  }
  s.values[r.index] = std::move(v);
}
}  // namespace

// "unknown setting 'bogus'" with the names there are: the caller may be a script's --set, a
// C program's accio_settings_set, or a typo (`accio info` lists them with their meaning too).
static std::string unknown_setting(const std::string& name) {
  std::string names;
  for (size_t i = 0, n = setting_count(); i < n; ++i) names += (i ? ", " : "") + setting_row(i).spec.name;
  return "unknown setting '" + name + "' (one of " + names + ")";
}

void Settings::set(const std::string& name, const std::string& value) {
  const SettingRow* r = find_setting(name);
  if (!r) throw Error(EINVAL, "set setting", "", kNoOffset, unknown_setting(name));
  try {
    put(*this, *r, parse_value(*r, value));
  } catch (const std::invalid_argument& e) {
    throw Error(EINVAL, "set setting", "", kNoOffset, name + "='" + value + "' is not valid: " + e.what());
  }
  std::erase_if(env_errors, [&](const auto& e) { return e.first == r->index; });
}

std::string Settings::get(const std::string& name) const {
  const SettingRow* r = find_setting(name);
  if (!r) throw Error(EINVAL, "get setting", "", kNoOffset, unknown_setting(name));
  for (const auto& [index, message] : env_errors)
    if (index == r->index) throw Error(EINVAL, "read environment", "", kNoOffset, message);
  if (r->load) return r->print(r->load(*this));
  return r->print(r->index < values.size() ? values[r->index] : r->parse(r->spec.default_value));
}

Settings Settings::from_env(bool keep_errors) {
  Settings s = defaults();
  const size_t n = setting_count();
  for (size_t i = 0; i < n; ++i) {
    const SettingSpec& k = setting_row(i).spec;
    const char* v = std::getenv(k.env.c_str());
    if (!v || !*v) continue;
    try {
      put(s, setting_row(i), parse_value(setting_row(i), v));
    } catch (const std::invalid_argument& e) {
      std::string why = k.env + "='" + v + "' is not valid: " + e.what();
      if (!setting_row(i).foreign && !keep_errors) throw Error(EINVAL, "read environment", "", kNoOffset, why);
      s.env_errors.emplace_back(i, std::move(why));
    }
  }
  return s;
}

unsigned usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return static_cast<unsigned>(CPU_COUNT(&set));
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<unsigned>(n) : 1u;
}

}  // namespace accio::base
