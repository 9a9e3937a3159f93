// accio planner: the built-in rule behind `auto` until profiles exist.
#include "tune/auto_rule.hpp"

namespace accio::tune {

const char* choose(const base::Settings& s, const Request& r) {
  if (r.size <= s.task_size || s.threads <= 1) return "posix";
  return "parallel";
}

}  // namespace accio::tune
