// accio planner: turns a request into a plan for the `auto` mechanism. For now a fixed, documented
// rule (docs/api.md#auto); `accio tune` profiles replace it.
#pragma once
#include <cstddef>
#include <string>

#include "base/settings.hpp"

namespace accio::tune {

struct Request {
  size_t size;
  bool write;
};

// Name of the mechanism `auto` runs for this request: `posix` when the request fits in one task
// (splitting would only add a pool hop), `parallel` otherwise.
const char* choose(const base::Settings& s, const Request& r);

}  // namespace accio::tune
