// accio planner: Planner, the per-file `auto` decision.
#include "planner/planner.hpp"

#include <string_view>

#include "base/settings.hpp"

namespace accio::planner {

Planner::Planner(std::shared_ptr<const Profile> profile, const io::FileRef& file, const base::Settings& handle)
    : profile_(std::move(profile)), file_(file), probe_(parse_probe(handle.cache_probe)) {
  for (const PlanSpec& spec : profile_->plans) {
    Plan p{spec, io::find(spec.mechanism), spec.apply(handle)};
    std::string why;
    if (p.mechanism && !p.mechanism->available(&why)) p.mechanism = nullptr;
    if (spec.needs_alignment() && (file.direct_fd < 0 || handle.buffer_size < file.off_align)) p.mechanism = nullptr;
    plans_.push_back(std::move(p));
  }
  // Appended last: the last resort of every cell, posix with the handle's settings.
  plans_.push_back(Plan{PlanSpec{"posix"}, io::find("posix"), PlanSpec{"posix"}.apply(handle)});
  const int last_resort = static_cast<int>(plans_.size() - 1);
  auto first = [&](const std::vector<int>& ranked, bool aligned) {
    for (int i : ranked)
      if (plans_[i].mechanism && (aligned || !plans_[i].spec.needs_alignment())) return i;
    return last_resort;
  };
  for (int w = 0; w < 2; ++w)
    for (int c = 0; c < 2; ++c) {
      base_[w][c] = nslots_;
      for (const Cell& cell : profile_->table[w][c]) {
        const std::vector<int>& cold = cell.cold.empty() ? cell.hot : cell.cold;
        Route r{{{first(cell.hot, false), first(cell.hot, true)}, {first(cold, false), first(cold, true)}}, false};
        r.cache_matters = r.plan[0][0] != r.plan[1][0] || r.plan[0][1] != r.plan[1][1];
        routes_[w][c].push_back(r);
        nslots_ += 4;
      }
    }
  counters_ = std::make_unique<Counter[]>(nslots_);
}

uint64_t Planner::min_accelerated(bool write) const {
  const std::vector<Cell>& cells = profile_->table[write][0];
  for (size_t i = 0; i < cells.size(); ++i)
    for (const auto& by_cache : routes_[write][0][i].plan)
      for (int p : by_cache)
        if (std::string_view(plans_[p].mechanism->name()) != "posix") return i ? cells[i - 1].max_size + 1 : 0;
  return UINT64_MAX;
}

unsigned Planner::slot_of(int w, int c, size_t cell, int cold, int aligned) const {
  return static_cast<unsigned>(base_[w][c] + cell * 4 + static_cast<size_t>(cold * 2 + aligned));
}

bool Planner::cold(const Request& r) const {
  if (r.offset >= r.known_end) return true;  // nothing there yet (writes that extend the file)
  if (since_probe_.fetch_add(r.size, std::memory_order_relaxed) + r.size < kReprobeBytes)
    return last_cold_.load(std::memory_order_relaxed);
  since_probe_.store(0, std::memory_order_relaxed);
  const uint64_t len = std::min<uint64_t>(r.size, r.known_end - r.offset);
  const bool c = !mostly_cached(file_.fd, r.offset, len, probe_);
  last_cold_.store(c, std::memory_order_relaxed);
  return c;
}

Choice Planner::choose(const Request& r) const {
  const int w = r.write, c = r.inflight > 1;
  const size_t cell = profile_->cell_index(r.write, c, r.size);
  const Route& route = routes_[w][c][cell];
  const int is_cold = route.cache_matters && cold(r);
  const int aligned = r.offset % file_.off_align == 0 && io::is_aligned(r.buf, file_.mem_align);
  return Choice{&plans_[route.plan[is_cold][aligned]], slot_of(w, c, cell, is_cold, aligned)};
}

void Planner::record(const Choice& ch, uint64_t bytes) const {
  counters_[ch.slot].calls.fetch_add(1, std::memory_order_relaxed);
  counters_[ch.slot].bytes.fetch_add(bytes, std::memory_order_relaxed);
}

std::string Planner::why(unsigned slot) const {
  for (int w = 0; w < 2; ++w)
    for (int c = 0; c < 2; ++c) {
      const size_t b = base_[w][c], n = routes_[w][c].size() * 4;
      if (slot < b || slot >= b + n) continue;
      const size_t cell = (slot - b) / 4;
      const int cold = static_cast<int>((slot - b) % 4) / 2, aligned = static_cast<int>(slot - b) % 2;
      const auto& cells = profile_->table[w][c];
      const uint64_t lo = cell ? cells[cell - 1].max_size + 1 : 0, hi = cells[cell].max_size;
      std::string range = hi == UINT64_MAX ? ">= " + base::format_size(lo)
                                           : base::format_size(lo) + ".." + base::format_size(hi);
      std::string out = profile_->name + ": " + (w ? "write" : "read") + ", " +
                        (c ? "several requests in flight" : "one request in flight") + ", " + range + " bytes";
      const Route& route = routes_[w][c][cell];
      out += route.cache_matters ? (cold ? ", range cold" : ", range cached") : "";
      const int best = route.plan[cold][1];
      if (!aligned && route.plan[cold][0] != best) out += ", unaligned buffer or offset (" + plans_[best].spec.label() + " needs alignment)";
      if (profile_->builtin) out += "; run `accio tune` to measure this filesystem";
      return out;
    }
  return "unknown";
}

std::vector<PlanStat> Planner::stats() const {
  std::vector<PlanStat> out;
  for (int w = 0; w < 2; ++w)
    for (int c = 0; c < 2; ++c)
      for (size_t cell = 0; cell < routes_[w][c].size(); ++cell)
        for (int cold = 0; cold < 2; ++cold)
          for (int aligned = 0; aligned < 2; ++aligned) {
            const unsigned s = slot_of(w, c, cell, cold, aligned);
            const uint64_t calls = counters_[s].calls.load(std::memory_order_relaxed);
            if (!calls) continue;
            const Plan& p = plans_[routes_[w][c][cell].plan[cold][aligned]];
            out.push_back({p.spec.label(), why(s), calls, counters_[s].bytes.load(std::memory_order_relaxed)});
          }
  return out;
}

}  // namespace accio::planner
