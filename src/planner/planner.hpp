// accio planner: the plan for each request on one open file. A fixed `mechanism` setting is a
// planner with one plan (the mechanism resolve()d for the file, the handle's settings) and one route.
// Under `auto`, the profile's plans are compiled against the file at open (mechanism resolved,
// settings applied, direct plans dropped where the file takes no O_DIRECT) and every table cell gets
// its first eligible plan for aligned and unaligned requests, hot and cold: a route. Per request,
// choose() looks up the cell by size and concurrency and, only where the hot and cold plans differ,
// probes the page-cache residency of the range, and only where a cold range's plan depends on it,
// whether the request continues the previous one and reaches the end of the file (cold_start). Counts the requests each route served, so
// statistics can say which plan ran and why.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/settings.hpp"
#include "io/mechanism.hpp"
#include "planner/profile.hpp"
#include "planner/residency.hpp"

namespace accio::planner {

// What the planner looks at to plan one request.
struct Signals {
  const void* buf;
  uint64_t size;
  uint64_t offset;
  bool write;
  unsigned inflight;   // engine requests in flight in the process, this one included
  uint64_t known_end;  // the file size as the handle knows it (writes beyond it are cold)
  bool fresh_cache = false;  // probe the residency of this range, whatever the last probe (ACCIO_OP_FRESH_CACHE)
  // A question, not a request (explain): the stream and residency state are read, not moved, so
  // that asking does not change what the next request runs (tune audit, session 26: one explain()
  // at another offset moved the next read from posix to direct).
  bool peek = false;
};

struct Plan {
  PlanSpec spec;
  const io::Mechanism* mechanism = nullptr;  // nullptr: not eligible for this file
  base::Settings settings;
  std::string label;  // as statistics and explain show it: "parallel(even)"; a fixed mechanism's name
};

struct Choice {
  const Plan* plan;
  unsigned route;  // which route chose it: cell, cache state and alignment (for statistics)
};

struct PlanStat {
  std::string plan, why;
  uint64_t calls, bytes;
};

class Planner {
 public:
  // `auto`: the profile's plans for `file`, with the handle's settings.
  Planner(std::shared_ptr<const Profile> profile, const io::FileRef& file, const base::Settings& handle);
  // A fixed mechanism `set`: one plan, set.resolve(ctx) with ctx's settings, and one route.
  Planner(const io::Mechanism& set, const io::IoContext& ctx);

  Choice choose(const Signals& r) const;
  // Counts a request the route's choice served (bytes moved); `rerouted`: another mechanism ran it
  // (a buffer the plan's mechanism cannot address), which auto does not count. A fixed mechanism's
  // one route counts nothing itself, keeping atomics off the hot path: its counts are the handle's
  // (every request, rerouted or batched ones too), which stats() is given.
  void record(const Choice& c, uint64_t bytes, bool rerouted = false) const;
  // Routes that served at least one request. handle_calls/handle_bytes: the handle's requests and
  // bytes, the counts of a fixed mechanism's one route (auto ignores them).
  std::vector<PlanStat> stats(uint64_t handle_calls, uint64_t handle_bytes) const;
  std::string why(unsigned route) const;
  // The smallest request size at which a plan other than posix may run with one request in flight
  // (hot or cold, aligned or not); UINT64_MAX if posix serves every size; 0 for a fixed mechanism
  // other than posix.
  uint64_t min_accelerated(bool write) const;
  // `auto` for a buffer in GPU memory on device `ordinal`: the planner of the profile's device table
  // for that GPU's model (Profile::device_table: measured by `accio tune`, else the built-in device
  // rule), compiled for this file on the first such request and kept. Its choose() and record() work
  // as this planner's; stats() lists its routes after this one's. Only under auto.
  const Planner& device(int ordinal) const;
  // Whether a fixed mechanism is set (not `auto`).
  bool fixed() const { return !profile_; }
  // The plan every request gets (a fixed mechanism), or nullptr when it depends on the request.
  const Plan* only_plan() const { return profile_ ? nullptr : &plans_[0]; }

 private:
  // The cache state of a request's range, as the routes tell them apart.
  enum State { kHot = 0, kCold = 1, kColdStart = 2, kStates = 3 };
  struct CellRoutes {
    int plan[kStates][2]; // [state][aligned] -> index into plans_
    bool cache_matters;   // hot and cold plans differ: probe the residency
    bool stream_matters;  // cold and cold_start plans differ: look at whether the request continues the last
    bool align_matters;   // aligned and unaligned plans differ: check the request's alignment
  };
  bool cold(const Signals& r) const;
  // Whether r does not continue the previous request of a stream_matters cell on this handle (and
  // remembers where r ends); the same request asked again (same offset) gets the same answer.
  // Racing threads may see each other's ends: a heuristic, as the probe's.
  bool starts_stream(const Signals& r) const;
  unsigned route_of(int w, int c, size_t cell, int state, int aligned) const;

  std::shared_ptr<const Profile> profile_;  // nullptr for a fixed mechanism
  const io::FileRef& file_;
  Probe probe_{};
  std::vector<Plan> plans_;
  std::vector<CellRoutes> cells_[2][2];  // [write][concurrent], one per profile cell
  size_t first_route_[2][2] = {};       // route index of each table's first cell
  std::vector<int> route_plan_;         // route -> index into plans_
  std::string fixed_why_;               // why a fixed mechanism's plan ran
  struct Counter {
    std::atomic<uint64_t> calls{0}, bytes{0};
  };
  std::unique_ptr<Counter[]> counters_;  // one per route (auto)
  // device(): the planners of device tables by ordinal, built under device_mu_, then read lock-free.
  static constexpr int kDevices = 64;
  mutable std::atomic<const Planner*> device_[kDevices] = {};
  mutable std::mutex device_mu_;
  mutable std::vector<std::pair<int, std::unique_ptr<const Planner>>> device_owned_;  // by ordinal
  base::Settings handle_;  // the handle's settings (device tables are compiled with them)
  // The residency probe is amortized: one verdict serves at most kReprobeBytes of requests, so that
  // the probe (two cachestat calls, under a microsecond on a VM) stays well under 1% of the time of
  // the bytes it decides for at every request size (4 MiB take about 200 us from the page cache);
  // requests of 4 MiB or more always probe. The price: after the cache state changes, up to 4 MiB
  // of a handle's requests run the plan of the old state. The count is kept without a locked
  // read-modify-write: requests racing on it probe a little more or less often, never wrongly.
  static constexpr uint64_t kReprobeBytes = 4 << 20;
  mutable std::atomic<uint64_t> since_probe_{kReprobeBytes};
  mutable std::atomic<bool> last_cold_{false};
  // The last stream_matters request on this handle: where it began and ended, and whether it started a stream.
  // Threads sharing the handle update them without a lock: each is atomic (no data race), and two
  // racing requests can at worst mix their fields, which misjudges one request's stream (a plan
  // choice, never a wrong transfer). Only one-in-flight cells look at them (the built-in model's
  // cold_start), where such races are rare.
  mutable std::atomic<uint64_t> last_off_{UINT64_MAX}, next_off_{UINT64_MAX};
  mutable std::atomic<bool> last_starts_{false};
};

}  // namespace accio::planner
