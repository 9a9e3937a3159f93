// accio base: the settings table. Every knob is one row (name, environment variable, doc, kind,
// default, bounds, choices), settable by ACCIO_<NAME> and by the API under the same lower-case name
// (KvikIO's convention). The core rows live in settings.cpp; a mechanism registers its own knobs
// beside its registration (a static base::Knob in its file), and a library may add rows at run
// time (accio_setting_register). Settings::set/get/from_env, the C API, Python, `accio info` and
// docs/api.md all read the table. Settings::from_env() is what a handle starts from.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace accio::base {

// What one row says (accio_setting_spec). kind: "count" (an integer in [min, max]), "size" (bytes
// written 4096, 4k, 16MiB, 1g, in [min, max]), "bool" (on/off, true/false, 1/0, yes/no), "choice"
// (one of choices, '|'-separated), "text" (any non-empty value). default_value is parsed like a value.
struct SettingSpec {
  std::string name, env, doc, kind, default_value;
  int64_t min = 0, max = INT64_MAX;
  std::string choices;

  SettingSpec() = default;
  SettingSpec(std::string name_, std::string env_, std::string doc_, std::string kind_, std::string default_,
              int64_t min_ = 0, int64_t max_ = INT64_MAX, std::string choices_ = {})
      : name(std::move(name_)), env(std::move(env_)), doc(std::move(doc_)), kind(std::move(kind_)),
        default_value(std::move(default_)), min(min_), max(max_), choices(std::move(choices_)) {}
  bool operator==(const SettingSpec&) const = default;
};

// A parsed value: num for count, size and bool (0 or 1), text for choice and text.
struct SettingValue {
  int64_t num = 0;
  std::string text;
};

struct Settings;

// One row of the table. Rows are never removed or moved: pointers to them live for the process.
struct SettingRow {
  SettingSpec spec;
  size_t index = 0;
  // Optional: checks and adjusts a parsed value beyond its kind's rules (threads: 0 means the
  // online CPUs); throws std::invalid_argument with the reason.
  std::function<void(SettingValue&)> adjust;
  // Core rows keep their value in a typed member of Settings; without these the value lives in
  // Settings::values[index].
  std::function<void(Settings&, const SettingValue&)> store;
  std::function<SettingValue(const Settings&)> load;
  // A row of another library (accio_setting_register: the offload runtime). A bad value of its
  // environment variable is that library's error, reported when the row is read (get), so that a
  // bad ACCIO_OFFLOAD_* never stops file I/O in a process that also loaded the offload library.
  bool foreign = false;
  // Optional: the check of a core row's values that a layer above base owns (set_setting_check):
  // the mechanism registry's for `mechanism`, the planner's for `profile`. Run by parse() after the
  // kind's rules, so set(), from_env() and every front end refuse the same values with one reason.
  std::atomic<void (*)(const std::string&)> check{nullptr};

  SettingValue parse(const std::string& text) const;  // throws std::invalid_argument (the reason)
  std::string print(const SettingValue& v) const;     // count, size: decimal; bool: on/off
};

// The rows, in registration order (core rows first). Safe to call from any thread, also while
// another thread registers.
size_t setting_count();
const SettingRow& setting_row(size_t i);
const SettingRow* find_setting(const std::string& name);  // nullptr if unknown
// Adds a row and returns its index; the same spec again returns the existing index. Throws
// Error(EEXIST) when the name or environment variable is taken by a different spec, Error(EINVAL)
// for a bad spec (the message says what is wrong).
size_t register_setting(const SettingSpec& spec, std::function<void(SettingValue&)> adjust = {},
                        bool foreign = false);

// Installs a row's check (SettingRow::check), once, at load time (a static initializer of the layer
// that knows the valid values). The check throws std::invalid_argument with the reason.
void set_setting_check(const std::string& name, void (*check)(const std::string& value));

// Made by defaults() or from_env() (a default-constructed Settings holds no values: the table's
// defaults are the only ones).
struct Settings {
  // The core rows' values, typed: the engine and mechanisms read them directly.
  std::string mechanism;    // auto | the name of a registered mechanism
  unsigned threads = 0;     // resolved: 0 in the table means one per online CPU
  size_t task_size = 0;     // bytes per task of a split request; 0 = split evenly
  size_t buffer_size = 0;   // bytes per staging buffer
  unsigned buffer_count = 0;
  bool huge_pages = false;
  bool direct = false;
  std::string profile;
  std::string cache_probe;
  // Every other row's value, by row index (entries of core rows are unused). A row registered
  // after this object was made reads as its default until set.
  std::vector<SettingValue> values;
  // Rows whose environment value from_env() could not parse: (row index, the error), thrown by get()
  // of that row until set() gives it a good value. Foreign rows always; accio's own only with
  // from_env(true) (what `accio info` shows: each row's value or its own error).
  std::vector<std::pair<size_t, std::string>> env_errors;

  static Settings defaults();   // every row's default
  // defaults() overridden by ACCIO_*: throws Error(EINVAL) on a bad value of accio's own rows
  // (see SettingRow::foreign for the others), unless keep_errors, which keeps every row's error
  // in env_errors instead (the row then holds its default).
  static Settings from_env(bool keep_errors = false);

  void set(const std::string& name, const std::string& value);  // throws Error(EINVAL)
  std::string get(const std::string& name) const;              // throws Error(EINVAL)
};

// A row's typed handle, for code that reads the value per request: a mechanism file declares
//   const base::Knob kQueueDepth{{"queue_depth", "ACCIO_QUEUE_DEPTH", "doc", "count", "16", 1, 4096}};
// at namespace scope (registered at load time) and reads kQueueDepth.num(settings): an index, no
// parsing.
class Knob {
 public:
  explicit Knob(const SettingSpec& spec, std::function<void(SettingValue&)> adjust = {});
  int64_t num(const Settings& s) const { return index_ < s.values.size() ? s.values[index_].num : default_.num; }
  const std::string& text(const Settings& s) const {
    return index_ < s.values.size() ? s.values[index_].text : default_.text;
  }
  size_t index() const { return index_; }
  const SettingRow& row() const { return setting_row(index_); }

 private:
  size_t index_;
  SettingValue default_;
};

// "4096", "4k", "4KiB", "1m", "2G" -> bytes. Throws std::invalid_argument.
size_t parse_size(const std::string& s);

// The CPUs this process may run on (its affinity mask: taskset, cgroups' cpusets), else the online
// ones. threads=0 and the planner's built-in model both count with it, so they agree.
unsigned usable_cpus();
std::string format_size(size_t bytes);  // 4194304 -> "4MiB"

}  // namespace accio::base
