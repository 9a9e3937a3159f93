// accio base: default system-call table.
#include "base/sys.hpp"

#include <unistd.h>

namespace accio::base::sys {
namespace {
const Ops kReal{&::pread, &::pwrite};
Ops g_ops = kReal;
}  // namespace
Ops& ops() { return g_ops; }
const Ops& real_ops() { return kReal; }
}  // namespace accio::base::sys
