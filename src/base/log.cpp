// accio base: warn_once implementation.
#include "base/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "base/fork.hpp"

namespace accio::base {
namespace {
struct Log {
  std::mutex mu;
  std::set<std::string> keys;
  std::vector<std::string> lines;
};
base::PerProcess<Log> g_log;  // a forked child starts a new log (the parent's lock may be held)
}  // namespace

bool warn_once(const std::string& key, const std::string& msg) {
  Log& l = g_log.get();
  std::lock_guard lk(l.mu);
  if (!l.keys.insert(key).second) return false;
  l.lines.push_back(msg);
  const char* q = std::getenv("ACCIO_QUIET");
  if (!(q && *q && std::strcmp(q, "0") != 0)) std::fprintf(stderr, "accio: warning: %s\n", msg.c_str());
  return true;
}

std::vector<std::string> warnings() {
  Log& l = g_log.get();
  std::lock_guard lk(l.mu);
  return l.lines;
}

}  // namespace accio::base
