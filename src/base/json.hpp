// accio base: a small JSON reader, enough for tuning profiles (objects, arrays, strings, numbers,
// true/false/null; UTF-8 passed through, \u escapes of the BMP decoded). No writer: profiles are
// written by the Python front end.
#pragma once
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace accio::base::json {

struct Value {
  enum Kind { null, boolean, number, string, array, object };
  Kind kind = null;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Value> items;                            // array
  std::vector<std::pair<std::string, Value>> members;  // object, in document order

  const Value* get(std::string_view key) const;  // nullptr when absent or not an object
  bool is(Kind k) const { return kind == k; }
};

// Throws std::runtime_error("... at byte N") on malformed input. Members of the top-level object
// named in `skip` are read and checked as the rest, but left out of the result (nothing of them is
// built): a profile's "measurements", which the engine never reads, are most of its text.
Value parse(std::string_view text, std::initializer_list<std::string_view> skip = {});

}  // namespace accio::base::json
