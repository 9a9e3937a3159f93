// accio planner: the `auto` mechanism for one open file. At open, the profile's plans are compiled
// against the file (mechanism resolved, settings applied, direct plans dropped where the file
// takes no O_DIRECT) and every table cell gets its first eligible plan for aligned and unaligned
// requests. Per request, choose() looks up the cell by size and concurrency and, only where the
// hot and cold plans differ, probes the page-cache residency of the range. Counts which plan ran
// in which cell, so statistics can say which plan ran and why.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/settings.hpp"
#include "io/mechanism.hpp"
#include "planner/profile.hpp"
#include "planner/residency.hpp"

namespace accio::planner {

// What a request looks like to the planner.
struct Request {
  const void* buf;
  uint64_t size;
  uint64_t offset;
  bool write;
  unsigned inflight;   // engine requests in flight in the process, this one included
  uint64_t known_end;  // the file size as the handle knows it (writes beyond it are cold)
};

struct Plan {
  PlanSpec spec;
  const io::Mechanism* mechanism = nullptr;  // nullptr: not eligible for this file
  base::Settings settings;
};

struct Choice {
  const Plan* plan;
  unsigned slot;  // which cell, cache state and alignment chose it (for statistics)
};

struct PlanStat {
  std::string plan, why;
  uint64_t calls, bytes;
};

class Planner {
 public:
  Planner(std::shared_ptr<const Profile> profile, const io::FileRef& file, const base::Settings& handle);
  Choice choose(const Request& r) const;
  void record(const Choice& c, uint64_t bytes) const;
  std::vector<PlanStat> stats() const;  // slots that served at least one request
  std::string why(unsigned slot) const;
  // The smallest request size at which a plan other than posix may run with one request in flight
  // (hot or cold, aligned or not); UINT64_MAX if posix serves every size.
  uint64_t min_accelerated(bool write) const;

 private:
  struct Route {
    int plan[2][2];     // [cold][aligned] -> index into plans_
    bool cache_matters; // hot and cold routes differ: probe the residency
  };
  bool cold(const Request& r) const;
  unsigned slot_of(int w, int c, size_t cell, int cold, int aligned) const;

  std::shared_ptr<const Profile> profile_;
  const io::FileRef& file_;
  Probe probe_;
  std::vector<Plan> plans_;
  std::vector<Route> routes_[2][2];
  size_t base_[2][2] = {};  // first slot of each table
  size_t nslots_ = 0;
  struct Counter {
    std::atomic<uint64_t> calls{0}, bytes{0};
  };
  std::unique_ptr<Counter[]> counters_;
  // The residency probe is amortized: one verdict serves at most kReprobeBytes of requests (a probe
  // costs about a microsecond, a 1 MiB hot read about 70); requests of 1 MiB or more always probe.
  static constexpr uint64_t kReprobeBytes = 1 << 20;
  mutable std::atomic<uint64_t> since_probe_{kReprobeBytes};
  mutable std::atomic<bool> last_cold_{false};
};

}  // namespace accio::planner
