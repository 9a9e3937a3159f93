// accio planner: Planner, the plan for each request on one open file.
#include "planner/planner.hpp"

#include <algorithm>
#include <string_view>

#include "base/settings.hpp"
#include "io/odirect.hpp"
#include "mem/cuda.hpp"

namespace accio::planner {

Planner::Planner(std::shared_ptr<const Profile> profile, const io::FileRef& file, const base::Settings& handle)
    : profile_(std::move(profile)), file_(file), probe_(parse_probe(handle.cache_probe)), handle_(handle) {
  for (const PlanSpec& spec : profile_->plans) {
    Plan p{spec, io::find(spec.mechanism), spec.apply(handle), spec.label()};
    std::string why;
    if (p.mechanism && !p.mechanism->available(&why)) p.mechanism = nullptr;
    if (spec.needs_alignment() && !io::direct_usable(file, handle, nullptr)) p.mechanism = nullptr;
    plans_.push_back(std::move(p));
  }
  // Appended last: the last resort of every cell (Profile::last_resort), with the handle's settings.
  const PlanSpec resort{profile_->last_resort()};
  plans_.push_back(Plan{resort, io::find(resort.mechanism), resort.apply(handle), resort.label()});
  const int last_resort = static_cast<int>(plans_.size() - 1);
  auto first = [&](const std::vector<int>& ranked, bool aligned) {
    for (int i : ranked)
      if (plans_[i].mechanism && (aligned || !plans_[i].spec.needs_alignment())) return i;
    return last_resort;
  };
  for (int w = 0; w < 2; ++w)
    for (int c = 0; c < 2; ++c) {
      first_route_[w][c] = route_plan_.size();
      for (const Cell& cell : profile_->table[w][c]) {
        const std::vector<int>& cold = cell.cold.empty() ? cell.hot : cell.cold;
        const std::vector<int>& start = cell.cold_start.empty() ? cold : cell.cold_start;
        CellRoutes r{{{first(cell.hot, false), first(cell.hot, true)},
                      {first(cold, false), first(cold, true)},
                      {first(start, false), first(start, true)}},
                     false, false, false};
        for (int a = 0; a < 2; ++a) {
          r.cache_matters |= r.plan[kHot][a] != r.plan[kCold][a] || r.plan[kHot][a] != r.plan[kColdStart][a];
          r.stream_matters |= r.plan[kCold][a] != r.plan[kColdStart][a];
        }
        for (int st = 0; st < kStates; ++st) r.align_matters |= r.plan[st][0] != r.plan[st][1];
        cells_[w][c].push_back(r);
        for (int st = 0; st < kStates; ++st)
          for (int aligned = 0; aligned < 2; ++aligned) route_plan_.push_back(r.plan[st][aligned]);
      }
    }
  counters_ = std::make_unique<Counter[]>(route_plan_.size());
}

Planner::Planner(const io::Mechanism& set, const io::IoContext& ctx) : file_(ctx.file) {
  const io::Mechanism& runs = set.resolve(ctx);
  plans_.push_back(Plan{PlanSpec{set.name()}, &runs, ctx.settings, runs.name()});
  route_plan_.push_back(0);
  fixed_why_ = "mechanism=" + std::string(set.name()) + " is set";
  if (&runs != &set) fixed_why_ += " but cannot run here (see the warning): it runs as " + std::string(runs.name());
}

const Planner& Planner::device(int ordinal) const {
  const bool cached = ordinal >= 0 && ordinal < kDevices;
  if (cached)
    if (const Planner* p = device_[ordinal].load(std::memory_order_acquire)) return *p;
  std::lock_guard lk(device_mu_);
  for (const auto& [o, p] : device_owned_)
    if (o == ordinal) return *p;
  const auto table = profile_->device_table(mem::cuda::device_name(ordinal));
  const Planner* out = device_owned_.emplace_back(ordinal, std::make_unique<const Planner>(table, file_, handle_)).second.get();
  if (cached) device_[ordinal].store(out, std::memory_order_release);
  return *out;
}

uint64_t Planner::min_accelerated(bool write) const {
  if (!profile_) return std::string_view(plans_[0].mechanism->name()) == "posix" ? UINT64_MAX : 0;
  const std::vector<Cell>& cells = profile_->table[write][0];
  for (size_t i = 0; i < cells.size(); ++i)
    for (const auto& by_cache : cells_[write][0][i].plan)  // every state: hot, cold, cold_start
      for (int p : by_cache)
        if (std::string_view(plans_[p].mechanism->name()) != "posix") return i ? cells[i - 1].max_size + 1 : 0;
  return UINT64_MAX;
}

unsigned Planner::route_of(int w, int c, size_t cell, int state, int aligned) const {
  return static_cast<unsigned>(first_route_[w][c] + cell * kStates * 2 + static_cast<size_t>(state * 2 + aligned));
}

bool Planner::starts_stream(const Signals& r) const {
  // A request at the offset of the previous one is that request asked about again (the shim asks
  // what would run, then runs it; explain() asks too): it gets the same answer.
  constexpr auto relaxed = std::memory_order_relaxed;
  if (r.offset == last_off_.load(relaxed)) return last_starts_.load(relaxed);
  const bool starts = r.offset != next_off_.load(relaxed);
  if (r.peek) return starts;
  last_starts_.store(starts, relaxed);
  // A read that begins inside the file ends where its bytes end: at the end of the file if it asked
  // for more (the read after it, at the end of the file, continues it). One beyond the end the
  // handle knows (the file grew where this handle did not see it: the shim passes writes back)
  // ends where it asked to, so that the next one continues it.
  const bool inside = !r.write && r.offset < r.known_end;
  next_off_.store(inside ? std::min(r.offset + r.size, r.known_end) : r.offset + r.size, relaxed);
  last_off_.store(r.offset, relaxed);
  return starts;
}

bool Planner::cold(const Signals& r) const {
  if (r.offset >= r.known_end) return true;  // nothing there yet (writes that extend the file)
  const uint64_t since = since_probe_.load(std::memory_order_relaxed) + r.size;
  if (since < kReprobeBytes && !r.fresh_cache) {
    if (!r.peek) since_probe_.store(since, std::memory_order_relaxed);
    return last_cold_.load(std::memory_order_relaxed);
  }
  const uint64_t len = std::min<uint64_t>(r.size, r.known_end - r.offset);
  const bool c = !mostly_cached(file_.fd, r.offset, len, probe_);
  if (!r.peek) {
    since_probe_.store(0, std::memory_order_relaxed);
    last_cold_.store(c, std::memory_order_relaxed);
  }
  return c;
}

Choice Planner::choose(const Signals& r) const {
  if (!profile_) return Choice{&plans_[0], 0};  // a fixed mechanism: one plan, one route
  const int w = r.write, c = r.inflight > 1;
  const size_t cell = profile_->cell_index(r.write, c, r.size);
  const CellRoutes& routes = cells_[w][c][cell];
  // cold_start: a request that starts a stream (kept up to date hot or cold) and runs to the end of
  // the file, a whole file (or the rest of it) read in one request, which leaves the kernel's
  // readahead nothing to serve after it. The first request of a stream that goes on takes the cold
  // plan: run direct, it made the readahead start the rest of the stream from nothing (a cold 128 MiB
  // file read in 8 MiB requests: 1663 MiB/s against 2008 with the cold plan for every request,
  // results/tune/evaluate_intervals_model_ext4_vda.txt as of d49ba7c).
  // A read that begins at or beyond the end the handle knows is not one: the handle's size is stale
  // (the file grew), and what it reads may be in the page cache, dirty, where direct would write it
  // back first.
  const bool starts = routes.stream_matters && starts_stream(r) && r.offset < r.known_end &&
                      r.offset + r.size >= r.known_end;
  const int state = !(routes.cache_matters && cold(r)) ? kHot : starts ? kColdStart : kCold;
  // Only where the cell's plans differ by alignment is the request's alignment looked at (two
  // divisions); elsewhere the request takes the aligned route, whose plan is the same.
  const int aligned = !routes.align_matters || (r.offset % file_.off_align == 0 && io::is_aligned(r.buf, file_.mem_align));
  return Choice{&plans_[routes.plan[state][aligned]], route_of(w, c, cell, state, aligned)};
}

void Planner::record(const Choice& ch, uint64_t bytes, bool rerouted) const {
  if (rerouted || !profile_) return;
  counters_[ch.route].calls.fetch_add(1, std::memory_order_relaxed);
  counters_[ch.route].bytes.fetch_add(bytes, std::memory_order_relaxed);
}

std::string Planner::why(unsigned route) const {
  if (!profile_) return route == 0 ? fixed_why_ : "unknown";
  for (int w = 0; w < 2; ++w)
    for (int c = 0; c < 2; ++c) {
      const size_t b = first_route_[w][c], n = cells_[w][c].size() * kStates * 2;
      if (route < b || route >= b + n) continue;
      const size_t cell = (route - b) / (kStates * 2);
      const int state = static_cast<int>((route - b) % (kStates * 2)) / 2, aligned = static_cast<int>(route - b) % 2;
      const auto& cells = profile_->table[w][c];
      const uint64_t lo = cell ? cells[cell - 1].max_size + 1 : 0, hi = cells[cell].max_size;
      // Sizes as a person reads them, the cell's bounds as `accio tune --show` writes them: "< 64 KiB",
      // "16 MiB .. < 64 MiB", ">= 64 MiB" ("0 B..1536 KiB" read as if 1536 KiB were in it: new-user
      // audit, session 25).
      auto readable = [](uint64_t v) {
        std::string t = base::format_size(static_cast<size_t>(v));
        return t.insert(t.find_first_not_of("0123456789"), " ");
      };
      std::string range = hi == UINT64_MAX ? (lo ? ">= " + readable(lo) : std::string("any size"))
                                           : (lo ? readable(lo) + " .. < " : std::string("< ")) + readable(hi + 1);
      std::string out = profile_->name + ": " + (w ? "write" : "read") + ", " +
                        (c ? "several requests in flight" : "one request in flight") + ", " + range;
      const CellRoutes& routes = cells_[w][c][cell];
      out += routes.cache_matters ? (state != kHot ? ", range cold" : ", range cached") : "";
      if (routes.stream_matters && state != kHot)
        out += state == kColdStart ? ", starts a stream (does not continue the previous request) and reads to the end of the file"
                                   : ", continues the previous request or stops before the end of the file";
      const int best = routes.plan[state][1];
      // The rotational device's cold plan (posix where the hot plan splits), not direct's cold start.
      if (profile_->rotational && state != kHot && plans_[routes.plan[state][aligned]].spec.mechanism == "posix" &&
          routes.plan[state][aligned] != routes.plan[kHot][aligned])
        out += ", rotational device (a cold range is read in one stream)";
      if (!aligned && routes.plan[state][0] != best) out += ", unaligned buffer or offset (" + plans_[best].label + " needs alignment)";
      if (profile_->builtin)
        out += profile_->device ? "; run `accio tune` with this GPU to measure it" : "; run `accio tune` to measure this filesystem";
      return out;
    }
  return "unknown";
}

std::vector<PlanStat> Planner::stats(uint64_t handle_calls, uint64_t handle_bytes) const {
  if (!profile_) {
    if (!handle_calls) return {};
    return {{plans_[0].label, fixed_why_, handle_calls, handle_bytes}};
  }
  std::vector<PlanStat> out;
  for (size_t r = 0; r < route_plan_.size(); ++r) {
    const uint64_t calls = counters_[r].calls.load(std::memory_order_relaxed);
    if (!calls) continue;
    const auto route = static_cast<unsigned>(r);
    out.push_back({plans_[route_plan_[r]].label, why(route), calls, counters_[r].bytes.load(std::memory_order_relaxed)});
  }
  std::lock_guard lk(device_mu_);
  for (const auto& [ordinal, d] : device_owned_)
    for (PlanStat& s : d->stats(0, 0)) out.push_back(std::move(s));
  return out;
}

}  // namespace accio::planner
