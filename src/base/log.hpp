// accio base: warnings. Resource shortages degrade to a slower path with ONE warning per cause
// that says what to change. ACCIO_QUIET=1 silences stderr; warnings are still recorded.
#pragma once
#include <string>
#include <vector>

namespace accio::base {

// Prints "accio: warning: <msg>" to stderr the first time `key` is seen. Returns true if printed.
bool warn_once(const std::string& key, const std::string& msg);
// Every warning issued so far (for `accio info` and tests).
std::vector<std::string> warnings();

}  // namespace accio::base
