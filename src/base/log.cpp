// accio base: warn_once implementation.
#include "base/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

namespace accio::base {
namespace {
std::mutex g_mu;
std::set<std::string>& keys() {
  static std::set<std::string> k;
  return k;
}
std::vector<std::string>& log() {
  static std::vector<std::string> l;
  return l;
}
}  // namespace

bool warn_once(const std::string& key, const std::string& msg) {
  std::lock_guard lk(g_mu);
  if (!keys().insert(key).second) return false;
  log().push_back(msg);
  const char* q = std::getenv("ACCIO_QUIET");
  if (!(q && *q && std::strcmp(q, "0") != 0)) std::fprintf(stderr, "accio: warning: %s\n", msg.c_str());
  return true;
}

std::vector<std::string> warnings() {
  std::lock_guard lk(g_mu);
  return log();
}

}  // namespace accio::base
