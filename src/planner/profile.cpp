// accio planner: profile keys, lookup, parsing and the built-in model.
#include "planner/profile.hpp"

#include <sched.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string_view>

#include "base/error.hpp"
#include "base/fork.hpp"
#include "base/json.hpp"
#include "base/log.hpp"
#include "base/settings.hpp"
#include "base/sys.hpp"
#include "io/mechanism.hpp"

namespace accio::planner {
using base::Error;
using base::json::Value;

bool PlanSpec::needs_alignment() const {
  // direct only where the mechanism reads it (uring, staged): posix and parallel ignore it and do
  // buffered I/O, which a plan {posix, direct: true} was said to need aligned (and accio bench
  // labelled its posix+direct column O_DIRECT).
  const io::Mechanism* m = io::find(mechanism);
  return m && (m->always_direct() || (direct && m->reads("direct")));
}

// Only the parameters the mechanism reads (its registration names them) appear; sizes as 4MiB,
// queue_depth as qd.
namespace {
// A size knob's value as text ("1048576" -> "1MiB"); from_chars, as the C library's parsers follow
// the host program's locale. Text that is not a plain number is shown as it is.
std::string size_label(const std::string& value) {
  unsigned long long v = 0;
  const auto r = std::from_chars(value.data(), value.data() + value.size(), v);
  if (r.ec != std::errc() || r.ptr != value.data() + value.size()) return value;
  return base::format_size(static_cast<size_t>(v));
}
}  // namespace

std::string PlanSpec::label() const {
  const io::Mechanism* m = io::find(mechanism);
  auto reads = [&](const char* k) { return m && m->reads(k); };
  std::string out = direct && reads("direct") ? mechanism + "+direct" : mechanism;
  std::string args;
  auto add = [&](const std::string& a) { args += (args.empty() ? "" : ", ") + a; };
  if (reads("task_size")) add(task_size ? "task=" + base::format_size(task_size) : std::string("even"));
  if (threads && reads("threads")) add("threads=" + std::to_string(threads));
  for (const auto& [name, value] : knobs) {
    const base::SettingRow* row = base::find_setting(name);
    const bool size = row && row->spec.kind == "size";
    add((name == "queue_depth" ? std::string("qd") : name) + "=" +
        (size ? size_label(value) : value));
  }
  return args.empty() ? out : out + "(" + args + ")";
}

base::Settings PlanSpec::apply(const base::Settings& handle) const {
  base::Settings s = handle;
  s.mechanism = mechanism;
  s.task_size = task_size;
  if (threads) s.threads = std::min(threads, handle.threads);
  for (const auto& [name, value] : knobs) s.set(name, value);
  s.direct = direct;
  return s;
}

namespace {
std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    out += ok ? c : '-';
  }
  const size_t b = out.find_first_not_of('-');
  return b == std::string::npos ? "none" : out.substr(b);
}
}  // namespace

std::string FsKey::file_name() const {
  return sanitize(filesystem) + "_" + sanitize(device) + "_" + sanitize(kernel) + "_" + sanitize(version) + ".json";
}
std::string FsKey::describe() const { return filesystem + " on " + device; }

// ---- keys ----
namespace {
std::string kernel_release() {
  utsname u{};
  return uname(&u) == 0 ? u.release : "unknown";
}

// The fields of a line, split at spaces (mountinfo's separator).
std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  for (size_t at = 0; at < line.size();) {
    const size_t sp = std::min(line.find(' ', at), line.size());
    if (sp > at) out.push_back(line.substr(at, sp - at));
    at = sp + 1;
  }
  return out;
}

// Whether the block device dev says it is rotational: its queue/rotational in sysfs, else (a
// partition, which has no queue of its own) its disk's, one directory up. False where there is none.
bool block_rotational(dev_t dev) {
  const std::string sys = "/sys/dev/block/" + std::to_string(major(dev)) + ":" + std::to_string(minor(dev));
  std::string rot;
  if (major(dev) == 0 || !(base::sys::read_file((sys + "/queue/rotational").c_str(), rot) ||
                           base::sys::read_file((sys + "/../queue/rotational").c_str(), rot)))
    return false;
  return !rot.empty() && rot[0] == '1';
}

FsKey key_for_dev(dev_t dev) {
  struct Cache {
    std::mutex mu;
    std::map<dev_t, FsKey> map;
  };
  static base::PerProcess<Cache> keys;
  Cache& c = keys.get();
  std::lock_guard lk(c.mu);
  auto& cache = c.map;
  if (auto it = cache.find(dev); it != cache.end()) return it->second;
  FsKey k{"unknown", "dev-" + std::to_string(major(dev)) + "-" + std::to_string(minor(dev)), kernel_release(),
          ACCIO_VERSION_STRING};
  // mountinfo lines: "id parent major:minor root mountpoint options... - fstype source superopts"
  // (fields split by single spaces; spaces inside names are escaped as \040).
  const std::string want = std::to_string(major(dev)) + ":" + std::to_string(minor(dev));
  std::string text;
  if (!base::sys::read_file("/proc/self/mountinfo", text)) text.clear();
  for (size_t at = 0; at < text.size();) {
    const size_t eol = std::min(text.find('\n', at), text.size());
    const std::string_view line(text.data() + at, eol - at);
    at = eol + 1;
    const std::vector<std::string_view> f = words(line);
    const size_t dash = line.find(" - ");
    if (f.size() < 3 || f[2] != want || dash == std::string_view::npos) continue;
    const std::vector<std::string_view> rest = words(line.substr(dash + 3));
    if (rest.size() >= 1) k.filesystem = std::string(rest[0]);
    if (rest.size() >= 2) k.device = std::string(rest[1]);
    break;
  }
  // The device's own flag; a filesystem whose st_dev is anonymous (btrfs) names its block device as
  // the mount's source. Read once per process, as the rest of the key.
  struct stat src;
  k.rotational = major(dev) != 0 ? block_rotational(dev)
                                 : k.device.rfind("/dev/", 0) == 0 && stat(k.device.c_str(), &src) == 0 &&
                                       S_ISBLK(src.st_mode) && block_rotational(src.st_rdev);
  cache.emplace(dev, k);
  return k;
}
}  // namespace

FsKey fs_key(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) throw Error(errno, "fstat", "", base::kNoOffset);
  return key_for_dev(st.st_dev);
}

FsKey fs_key(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) throw Error(errno, "stat", path, base::kNoOffset);
  return key_for_dev(st.st_dev);
}

std::string profile_dir() {
  if (const char* d = std::getenv("ACCIO_PROFILE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/accio/profiles";
  const char* h = std::getenv("HOME");
  return std::string(h && *h ? h : "/tmp") + "/.cache/accio/profiles";
}

// ---- the table ----
const Cell& Profile::cell(bool write, bool concurrent, uint64_t n) const {
  return table[write][concurrent][cell_index(write, concurrent, n)];
}

size_t Profile::cell_index(bool write, bool concurrent, uint64_t n) const {
  const auto& t = table[write][concurrent];
  size_t i = 0;
  while (i + 1 < t.size() && n > t[i].max_size) ++i;
  return i;
}

MachineFacts MachineFacts::detect() {
  MachineFacts f;
  f.cpus = base::usable_cpus();
  return f;
}

uint64_t MachineFacts::split_from() const { return accio_model_split_from(cpus, handoff_bytes); }

uint64_t Profile::engine_from(bool write) const {
  const std::vector<Cell>& cells = table[write][0];
  auto runs_other = [&](const std::vector<int>& ranked) { return !ranked.empty() && plans[ranked[0]].mechanism != last_resort(); };
  for (size_t i = 0; i < cells.size(); ++i)
    if (runs_other(cells[i].hot) || runs_other(cells[i].cold) || runs_other(cells[i].cold_start))
      return i ? cells[i - 1].max_size + 1 : 0;
  return UINT64_MAX;
}

std::shared_ptr<const Profile> Profile::builtin_model(const MachineFacts& facts) {
  auto m = std::make_shared<Profile>();
  m->source = m->name = "built-in model";
  m->builtin = true;
  m->rotational = facts.rotational;
  constexpr uint64_t kTask = ACCIO_MODEL_TASK_BYTES;  // the parallel mechanism's default task_size
  m->plans = {PlanSpec{"posix"}, PlanSpec{"parallel"}, PlanSpec{"parallel", kTask}, PlanSpec{"direct"}};
  constexpr int kDirect = 3;
  const uint64_t even_up_to = std::max<uint64_t>(facts.cpus, 1) * kTask;
  for (int w = 0; w < 2; ++w)
    for (int c = 0; c < 2; ++c) {
      const uint64_t split_from = c ? std::max<uint64_t>(4u << 20, facts.split_from()) : facts.split_from();
      // Writes: posix at every size. A buffered write holds the file's inode lock exclusively
      // (ext4, xfs, btrfs, tmpfs, NFS: generic_file_write_iter and their own write_iter), so the
      // tasks of a split write run one after another and the split only adds hand-offs: on the
      // 2-vCPU VM parallel wrote a hot 128 MiB file in 8 MiB requests at 7649 MiB/s against
      // posix's 8704, a cold 8 MiB file at 2008 against 4552
      // (results/tune/evaluate_intervals_model_ext4_vda.txt as of d49ba7c).
      // Several requests in flight on two CPUs: both CPUs already copy, so a split only adds
      // hand-offs. Two threads reading a hot 128 MiB file in 8 MiB requests ran parallel(task=4MiB)
      // at 0.929 [95% interval below 1] and 0.883 [0.858-0.939] of posix in two sessions
      // (results/tune/evaluate_intervals_model_ext4_vda_s13.json and _s16.json); cold 0.87 and 0.94 by
      // the medians. On more CPUs idle ones remain for the tasks (16 threads on 16 CPUs: the split
      // ran at 1.14x posix, results/gpu/2026-11-27-nvidia-h100-80gb-hbm3/host-evaluate-2g.json).
      const bool busy = c && facts.cpus <= 2;
      if (w || busy || split_from >= even_up_to) m->table[w][c] = {Cell{UINT64_MAX, {0}, {}, {}}};  // one CPU (or a slow hand-off)
      else  // from even_up_to on, 4 MiB tasks are the even split's tasks or smaller
        m->table[w][c] = {Cell{split_from - 1, {0}, {}, {}}, Cell{even_up_to - 1, {1, 0}, {}, {}}, Cell{UINT64_MAX, {2, 0}, {}, {}}};
      // Reads of cold_direct_from or more that start a stream on a cold range: direct first (a
      // file that takes no O_DIRECT, or an unaligned request, falls through to the hot plans). The
      // planner takes this group only for such a read that also runs to the end of the file
      // (Planner::choose: nothing after it for the kernel's readahead to serve).
      // Only with one request in flight: with several (threads sharing a file, async reads) the
      // streams interleave, so most requests would look like new streams and run direct, where
      // the kernel's readahead serves each stream (measured: direct 885 vs posix 1596 MiB/s,
      // results/tune/evaluate_intervals_model_ext4_vda.txt as of e36ed12, cold, 2 threads, 8 MiB).
      if (w) continue;
      std::vector<Cell>& t = m->table[w][c];
      if (facts.rotational)  // a cold range in one stream, wherever the hot plan splits
        for (Cell& cell : t)
          if (cell.hot[0] != 0) cell.cold = {0};
      if (c) continue;
      const uint64_t from = std::max<uint64_t>(facts.cold_direct_from, 1);
      for (size_t i = 0; i < t.size(); ++i) {
        const uint64_t lo = i ? t[i - 1].max_size + 1 : 0;
        if (lo < from && t[i].max_size >= from) {  // split the cell at from
          t.insert(t.begin() + static_cast<std::ptrdiff_t>(i), Cell{from - 1, t[i].hot, t[i].cold, {}});
          continue;
        }
        if (lo >= from) {  // direct, else the plans of a cold range that continues a stream
          const std::vector<int>& then = t[i].cold.empty() ? t[i].hot : t[i].cold;
          t[i].cold_start = {kDirect};
          t[i].cold_start.insert(t[i].cold_start.end(), then.begin(), then.end());
        }
      }
    }
  return m;
}

std::shared_ptr<const Profile> Profile::builtin_model(bool rotational) {
  static const MachineFacts here = MachineFacts::detect();
  static const std::shared_ptr<const Profile> models[2] = {builtin_model(here), builtin_model([] {
                                                             MachineFacts f = here;
                                                             f.rotational = true;
                                                             return f;
                                                           }())};
  return models[rotational];
}

namespace {
[[noreturn]] void bad(const std::string& source, const std::string& what) {
  throw Error(EINVAL, "load profile", source, base::kNoOffset, what);
}

uint64_t to_u64(const Value& v, const std::string& source, const char* what) {
  if (!v.is(Value::number) || v.num < 0 || v.num > 1.8e19 || std::floor(v.num) != v.num)
    bad(source, std::string(what) + " must be a non-negative integer");
  return static_cast<uint64_t>(v.num);
}

PlanSpec parse_plan(const Value& v, const std::string& source) {
  if (!v.is(Value::object)) bad(source, "every plan must be an object");
  PlanSpec p;
  const Value* m = v.get("mechanism");
  if (!m || !m->is(Value::string) || !io::find(m->str) || m->str == "auto")
    bad(source, "plan mechanism must name a mechanism (" + (m && m->is(Value::string) ? m->str : std::string("?")) + ")");
  p.mechanism = m->str;
  if (const Value* x = v.get("task_size")) p.task_size = to_u64(*x, source, "task_size");
  if (const Value* x = v.get("threads")) p.threads = static_cast<unsigned>(std::min<uint64_t>(to_u64(*x, source, "threads"), 1024));
  // The mechanism's own knobs: any member naming a setting the mechanism reads, other than the
  // parameters above, checked as the settings table checks it. "label" and "needs_alignment" are
  // annotations for readers. Anything else is refused: a profile is input, and a misspelt or
  // misplaced knob silently ignored would tune nothing (0, "the handle's setting", is accepted).
  const io::Mechanism* mech = io::find(p.mechanism);
  for (const auto& [name, x] : v.members) {
    if (name == "mechanism" || name == "task_size" || name == "threads" || name == "direct" || name == "label" ||
        name == "needs_alignment")
      continue;
    const base::SettingRow* row = base::find_setting(name);
    if (!row) bad(source, "plan member '" + name + "' is not a setting");
    if (!mech->reads(name)) {
      if (x.is(Value::number) && x.num == 0) continue;
      bad(source, "plan " + name + ": mechanism " + p.mechanism + " does not read it");
    }
    std::string text;
    if (x.is(Value::boolean)) text = x.b ? "on" : "off";
    else if (x.is(Value::string)) text = x.str;
    else if (x.is(Value::number) && x.num == 0) continue;  // 0: the handle's setting
    else if (x.is(Value::number) && x.num > 0 && x.num < 9.2e18 && std::floor(x.num) == x.num)
      text = std::to_string(static_cast<uint64_t>(x.num));
    else bad(source, "plan " + name + " must be a non-negative integer, true/false or a string");
    try {
      p.knobs.emplace_back(name, row->print(row->parse(text)));
    } catch (const std::exception& e) {
      bad(source, "plan " + name + " '" + text + "' is not valid (" + e.what() + ")");
    }
  }
  auto order = [&](const auto& k) { return std::find(mech->knobs.begin(), mech->knobs.end(), k.first); };
  std::stable_sort(p.knobs.begin(), p.knobs.end(), [&](const auto& a, const auto& b) { return order(a) < order(b); });
  if (const Value* x = v.get("direct")) {
    if (!x->is(Value::boolean)) bad(source, "plan direct must be true or false");
    p.direct = x->b;
  }
  if (p.task_size && p.task_size < 4096) bad(source, "task_size must be 0 (even split) or at least 4096");
  return p;
}

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      static const char hex[] = "0123456789abcdef";
      out += "\\u00";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

// One group ("hot" or "cold" of one operation and concurrency): [{"max_size": n|null, "plans": [i...]}]
std::vector<std::pair<uint64_t, std::vector<int>>> parse_group(const Value& v, size_t nplans, const std::string& source) {
  if (!v.is(Value::array) || v.items.empty()) bad(source, "every decision group must be a non-empty array");
  std::vector<std::pair<uint64_t, std::vector<int>>> out;
  for (const Value& c : v.items) {
    const Value* ms = c.get("max_size");
    const Value* pl = c.get("plans");
    if (!ms || !pl || !pl->is(Value::array) || pl->items.empty()) bad(source, "every cell needs max_size and plans");
    const uint64_t max = ms->is(Value::null) ? UINT64_MAX : to_u64(*ms, source, "max_size");
    if (!out.empty() && max <= out.back().first) bad(source, "cells must be in increasing max_size order");
    std::vector<int> idx;
    for (const Value& i : pl->items) {
      const uint64_t k = to_u64(i, source, "plan index");
      if (k >= nplans) bad(source, "plan index " + std::to_string(k) + " out of range");
      idx.push_back(static_cast<int>(k));
    }
    out.emplace_back(max, std::move(idx));
  }
  if (out.back().first != UINT64_MAX) bad(source, "the last cell must have max_size null");
  return out;
}

using Group = std::vector<std::pair<uint64_t, std::vector<int>>>;

// Merges the hot, cold and cold_start groups into cells over the union of their boundaries.
std::vector<Cell> merge(const Group& hot, const Group& cold, const Group& cold_start) {
  std::vector<uint64_t> bounds;
  for (const Group* g : {&hot, &cold, &cold_start})
    for (auto& c : *g) bounds.push_back(c.first);
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  auto covering = [](const auto& g, uint64_t b) -> std::vector<int> {
    for (auto& c : g)
      if (b <= c.first) return c.second;
    return {};
  };
  std::vector<Cell> out;
  for (uint64_t b : bounds) {
    Cell c{b, covering(hot, b), covering(cold, b), covering(cold_start, b)};
    if (!out.empty() && out.back().hot == c.hot && out.back().cold == c.cold && out.back().cold_start == c.cold_start)
      out.back().max_size = b;
    else out.push_back(std::move(c));
  }
  return out;
}
}  // namespace

PlanSpec PlanSpec::parse(const std::string& json, const std::string& source) {
  Value v;
  try {
    v = base::json::parse(json);
  } catch (const std::exception& e) {
    bad(source, e.what());
  }
  return parse_plan(v, source);
}

namespace {
// A table's "plans" and "decisions" members (without braces): the form parse_table() reads.
// A size, or JSON null for UINT64_MAX (unbounded, none).
std::string size_or_null(uint64_t n) { return n == UINT64_MAX ? "null" : std::to_string(n); }

std::string table_json(const Profile& t) {
  std::string o = "\"plans\": [";
  for (size_t i = 0; i < t.plans.size(); ++i) {
    const PlanSpec& p = t.plans[i];
    o += i ? ", {\"mechanism\": " : "{\"mechanism\": ";
    json_string(o, p.mechanism);
    if (p.task_size) o += ", \"task_size\": " + std::to_string(p.task_size);
    if (p.threads) o += ", \"threads\": " + std::to_string(p.threads);
    for (const auto& [knob, value] : p.knobs) {
      const base::SettingRow* row = base::find_setting(knob);
      const std::string kind = row ? row->spec.kind : std::string();
      o += ", ";
      json_string(o, knob);
      o += ": ";
      if (kind == "count" || kind == "size") o += value;
      else if (kind == "bool") o += value == "on" ? "true" : "false";
      else json_string(o, value);
    }
    if (p.direct) o += ", \"direct\": true";
    o += ", \"label\": ";
    json_string(o, p.label());
    o += std::string(", \"needs_alignment\": ") + (p.needs_alignment() ? "true" : "false") + "}";
  }
  o += "], \"decisions\": {";
  for (int w = 0; w < 2; ++w) {
    o += w ? ", \"write\": {" : "\"read\": {";
    for (int c = 0; c < 2; ++c) {
      const std::vector<Cell>& cells = t.table[w][c];
      o += c ? ", \"N\": {" : "\"1\": {";
      bool any_cold = false, any_start = false;
      for (const Cell& cell : cells) any_cold |= !cell.cold.empty(), any_start |= !cell.cold_start.empty();
      for (int cold = 0; cold < 3; ++cold) {
        if (cold == 2 && !any_start) break;  // cold_start is written only where the profile has it
        o += cold == 2 ? ", \"cold_start\": " : cold ? ", \"cold\": " : "\"hot\": ";
        if (cold == 1 && !any_cold) {
          o += "null";
          continue;
        }
        // Consecutive cells that decide the same for this cache state are one cell here. A cell
        // whose cold_start is empty (cold applies) is written with its cold (or hot) plans.
        std::vector<std::pair<uint64_t, const std::vector<int>*>> out;
        for (const Cell& cell : cells) {
          const std::vector<int>* pl = &cell.hot;
          if (cold >= 1 && !cell.cold.empty()) pl = &cell.cold;
          if (cold == 2 && !cell.cold_start.empty()) pl = &cell.cold_start;
          if (!out.empty() && *out.back().second == *pl) out.back().first = cell.max_size;
          else out.emplace_back(cell.max_size, pl);
        }
        o += "[";
        for (size_t k = 0; k < out.size(); ++k) {
          o += k ? ", {\"max_size\": " : "{\"max_size\": ";
          o += size_or_null(out[k].first);
          o += ", \"plans\": [";
          for (size_t j = 0; j < out[k].second->size(); ++j) o += (j ? ", " : "") + std::to_string((*out[k].second)[j]);
          o += "]}";
        }
        o += "]";
      }
      o += "}";
    }
    o += "}";
  }
  return o + "}";
}

// Reads a table's "plans" and "decisions" members of `v` into p; `where` prefixes the members'
// names in errors ("devices[0]."). A device table takes device mechanisms only.
void parse_table(const Value& v, Profile& p, const std::string& source, const std::string& where) {
  const Value* plans = v.get("plans");
  if (!plans || !plans->is(Value::array) || plans->items.empty()) bad(source, where + "plans must be a non-empty array");
  for (const Value& x : plans->items) {
    p.plans.push_back(parse_plan(x, source));
    if (p.device && !io::find(p.plans.back().mechanism)->device())
      bad(source, where + "plans: " + p.plans.back().mechanism + " does not serve GPU memory (device tables take "
                          "device mechanisms)");
  }
  const Value* dec = v.get("decisions");
  if (!dec || !dec->is(Value::object)) bad(source, where + "decisions must be an object");
  for (int w = 0; w < 2; ++w) {
    const std::string op = where + "decisions." + (w ? "write" : "read");
    const Value* ops = dec->get(w ? "write" : "read");
    if (!ops) bad(source, op + " is missing");
    for (int c = 0; c < 2; ++c) {
      const Value* g = ops->get(c ? "N" : "1");
      if (!g) bad(source, op + "." + (c ? "N" : "1") + " is missing");
      const Value* hot = g->get("hot");
      if (!hot) bad(source, where + "every decision group needs hot cells");
      auto optional = [&](const char* name) {
        const Value* x = g->get(name);
        return x && !x->is(Value::null) ? parse_group(*x, p.plans.size(), source) : Group{};
      };
      p.table[w][c] = merge(parse_group(*hot, p.plans.size(), source), optional("cold"), optional("cold_start"));
    }
  }
}
}  // namespace

std::string Profile::to_json() const {
  std::string o = "{\"schema\": \"accio.profile/1\", \"source\": ";
  json_string(o, source);
  o += ", \"name\": ";
  json_string(o, name);
  o += std::string(", \"builtin\": ") + (builtin ? "true" : "false") + (rotational ? ", \"rotational\": true" : "") +
       ", \"prefetch\": {\"window\": " +
       std::to_string(prefetch_window) + "}, \"engine_from\": {\"read\": " + size_or_null(engine_from(false)) +
       ", \"write\": " + size_or_null(engine_from(true)) + "}, " + table_json(*this) + ", \"devices\": [";
  for (size_t i = 0; i < devices.size(); ++i) {
    o += i ? ", {\"model\": " : "{\"model\": ";
    json_string(o, devices[i].first);
    o += ", " + table_json(*devices[i].second) + "}";
  }
  // The rule a GPU without a measured table gets (the tuner's guard measures against it).
  return o + "], \"builtin_device\": {" + table_json(*builtin_device_model()) + "}}";
}

std::shared_ptr<const Profile> Profile::builtin_device_model() {
  static const std::shared_ptr<const Profile> p = [] {
    auto m = std::make_shared<Profile>();
    m->source = m->name = "built-in device rule";
    m->builtin = m->device = true;
    // staged everywhere. Reads ran pagecache until the first measured table (H200, results/gpu/
    // 2026-11-26-nvidia-h200.json): hot reads of 8-64 MiB ran pagecache at 0.42-0.64x staged.
    m->plans = {PlanSpec{"staged"}};
    for (int w = 0; w < 2; ++w)
      for (int c = 0; c < 2; ++c) m->table[w][c] = {Cell{UINT64_MAX, {0}, {}, {}}};
    return m;
  }();
  return p;
}

std::shared_ptr<const Profile> Profile::device_table(const std::string& model) const {
  for (const auto& [m, t] : devices)
    if (m == model) return t;
  return builtin_device_model();
}

std::shared_ptr<const Profile> Profile::parse(const std::string& text, const std::string& source) {
  Value doc;
  try {
    doc = base::json::parse(text, {"measurements"});  // every sample tune took: for re-analysis, not planning
  } catch (const std::exception& e) {
    bad(source, e.what());
  }
  const Value* schema = doc.get("schema");
  if (!schema || !schema->is(Value::string) || schema->str != "accio.profile/1")
    bad(source, "not an accio profile (schema must be \"accio.profile/1\")");
  auto p = std::make_shared<Profile>();
  p->source = source;
  p->name = source;
  if (const Value* k = doc.get("key")) {
    const Value* fs = k->get("filesystem");
    const Value* dev = k->get("device");
    if (fs && dev && fs->is(Value::string) && dev->is(Value::string)) p->name = fs->str + " on " + dev->str;
  }
  parse_table(doc, *p, source, "");
  // "engine_from" is derived (accio tune writes it for the launcher of `accio run`, which cannot
  // parse the table): one that no longer matches the table (edited by hand) would keep the shim
  // from asking the engine where the table now accelerates. Said once; the table rules here.
  if (const Value* ef = doc.get("engine_from"); ef && ef->is(Value::object))
    for (int w = 0; w < 2; ++w) {
      const Value* x = ef->get(w ? "write" : "read");
      const uint64_t want = p->engine_from(w == 1);
      const bool same = x && (x->is(Value::null) ? want == UINT64_MAX
                                                 : x->is(Value::number) && x->num >= 0 && static_cast<uint64_t>(x->num) == want);
      if (!same)
        base::warn_once("profile-engine-from:" + source,
                        source + ": engine_from does not match the profile's decisions (edited by hand?); `accio run` "
                                 "passes requests below it to libc without asking the planner: run `accio tune` again "
                                 "or remove the field",
                        base::Scope::job);
    }
  // A profile found by its key (filesystem, device, kernel, accio) in a home directory that machines
  // of other sizes share (a cluster's login and compute nodes) plans for the machine that measured
  // it: said once, where the number of online CPUs differs (not the process's affinity: an MPI rank
  // bound to a few of them runs on the same machine). Tune audit, session 26.
  if (const Value* c = doc.get("cpus"); c && !c->is(Value::null)) {
    p->cpus = to_u64(*c, source, "cpus");
    const long here = sysconf(_SC_NPROCESSORS_ONLN);
    if (p->cpus && here > 0 && p->cpus != static_cast<uint64_t>(here))
      base::warn_once("profile-cpus:" + source,
                      source + " was measured on a machine with " + std::to_string(p->cpus) + " CPUs, and this one has " +
                          std::to_string(here) + ": its plans may not fit here (a profile directory shared by machines "
                          "of other sizes?); run `accio tune` on this machine, with ACCIO_PROFILE_DIR set per machine",
                      base::Scope::job);
  }
  if (const Value* pf = doc.get("prefetch"); pf && !pf->is(Value::null)) {
    if (!pf->is(Value::object)) bad(source, "prefetch must be an object");
    if (const Value* w = pf->get("window")) p->prefetch_window = to_u64(*w, source, "prefetch.window");
  }
  // The optional device section (profiles written before it existed have none: every GPU then
  // gets the built-in device rule): [{"model": "...", "plans": [...], "decisions": {...}}, ...].
  if (const Value* devs = doc.get("devices"); devs && !devs->is(Value::null)) {
    if (!devs->is(Value::array)) bad(source, "devices must be an array");
    for (size_t i = 0; i < devs->items.size(); ++i) {
      const Value& d = devs->items[i];
      const std::string where = "devices[" + std::to_string(i) + "].";
      const Value* model = d.is(Value::object) ? d.get("model") : nullptr;
      if (!model || !model->is(Value::string) || model->str.empty())
        bad(source, where + "model must be the GPU's name (a non-empty string)");
      for (const auto& [m, t] : p->devices)
        if (m == model->str) bad(source, where + "model '" + m + "' appears twice");
      auto t = std::make_shared<Profile>();
      t->source = source;
      t->name = model->str + " (" + p->name + ")";
      t->device = true;
      parse_table(d, *t, source, where);
      p->devices.emplace_back(model->str, std::move(t));
    }
  }
  return p;
}

// ---- lookup ----
namespace {
struct Loaded {
  int64_t mtime_ns = -1;
  off_t size = -1;
  std::shared_ptr<const Profile> profile;
  std::exception_ptr refused;  // the same file again is refused again, not read and parsed again
};

// The profile at path, parsed once per modification; nullptr if the file does not exist.
std::shared_ptr<const Profile> load(const std::string& path) {
  struct Cache {
    std::mutex mu;
    std::map<std::string, Loaded> map;
  };
  static base::PerProcess<Cache> loaded;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return nullptr;
    throw Error(errno, "load profile", path, base::kNoOffset);
  }
  const int64_t mt = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  Cache& c = loaded.get();
  std::lock_guard lk(c.mu);
  Loaded& l = c.map[path];
  if (l.mtime_ns == mt && l.size == st.st_size) {
    if (l.profile) return l.profile;
    if (l.refused) std::rethrow_exception(l.refused);
  }
  // Only what the file's kind and content refuse is kept: a read that failed (EMFILE, ENOMEM, EIO;
  // EACCES, which a chmod mends without a new mtime) is tried again at the next open.
  if (!S_ISREG(st.st_mode)) {
    l = Loaded{mt, st.st_size, nullptr,
               std::make_exception_ptr(Error(EINVAL, "load profile", path, base::kNoOffset,
                                             "not a regular file (a FIFO, a device or a directory)"))};
    std::rethrow_exception(l.refused);
  }
  std::string text;
  if (!base::sys::read_file(path.c_str(), text)) throw Error(errno ? errno : EIO, "load profile", path, base::kNoOffset);
  try {
    l = Loaded{mt, st.st_size, Profile::parse(text, path), nullptr};
  } catch (const Error&) {
    l = Loaded{mt, st.st_size, nullptr, std::current_exception()};
    throw;
  }
  return l.profile;
}

// The `profile` setting names auto, off or a profile file that loads: a file that is missing,
// unreadable or malformed is refused when it is set or read from ACCIO_PROFILE (the error names the
// variable), as the engine would refuse every open with it. (The open loads it again, from the
// cache: a file changed since is refused there.)
void check_profile(const std::string& v) {
  if (v == "auto" || v == "off") return;
  const char* instead = " (auto, off, or a profile file that `accio tune` wrote)";
  try {
    if (!load(v)) throw std::invalid_argument(std::string("no such file") + instead);
  } catch (const Error& e) {
    throw std::invalid_argument((e.errnum() == EINVAL ? "not a profile: " : "cannot read it: ") + e.detail() + instead);
  }
}
[[maybe_unused]] const bool kProfileChecked = (base::set_setting_check("profile", check_profile), true);
}  // namespace

namespace {
bool rotational(const struct stat& st) {
  return S_ISBLK(st.st_mode) ? block_rotational(st.st_rdev) : key_for_dev(st.st_dev).rotational;
}
}  // namespace

bool rotational(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) throw Error(errno, "stat", path, base::kNoOffset);
  return rotational(st);
}

std::shared_ptr<const Profile> profile_for(int fd, const std::string& setting) {
  if (setting != "auto" && setting != "off") {
    auto p = load(setting);
    if (!p) throw Error(ENOENT, "load profile", setting, base::kNoOffset);
    return p;
  }
  struct stat st;  // one fstat for the device's model and the filesystem's key
  if (fstat(fd, &st) != 0) {
    if (setting == "off") return Profile::builtin_model(false);  // a handle without a file
    throw Error(errno, "fstat", "", base::kNoOffset);
  }
  const bool rot = rotational(st);
  if (setting == "off") return Profile::builtin_model(rot);
  const FsKey key = key_for_dev(st.st_dev);
  const std::string path = profile_dir() + "/" + key.file_name();
  try {
    if (auto p = load(path)) return p;
  } catch (const Error& e) {
    base::warn_once("profile-bad:" + path, std::string(e.what()) + "; auto uses the built-in model until `accio tune` rewrites it",
                    base::Scope::job);
    return Profile::builtin_model(rot);
  }
  base::warn_once("profile-none:" + path, "no tuning profile for " + key.describe() + " (kernel " + key.kernel +
                                              ", accio " + key.version + "): auto uses the built-in model; run "
                                              "`accio tune DIR` on this filesystem to measure it",
                  base::Scope::job);
  return Profile::builtin_model(rot);
}

}  // namespace accio::planner
