// accio base: the system calls that move bytes, behind a table of function pointers so tests can
// inject EINTR, short transfers and errors deterministically (liburing's tests do the same with
// their own wrappers). Production code never changes the table.
#pragma once
#include <sys/types.h>

#include <cstddef>

namespace accio::base::sys {

struct Ops {
  ssize_t (*pread)(int fd, void* buf, size_t n, off_t off);
  ssize_t (*pwrite)(int fd, const void* buf, size_t n, off_t off);
};

Ops& ops();            // the live table
const Ops& real_ops();  // the libc calls

}  // namespace accio::base::sys
