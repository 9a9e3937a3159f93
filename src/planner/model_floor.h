/* accio planner: the numbers of the built-in model that decide where it starts to run anything but
 * posix, in C. MachineFacts and Profile::builtin_model (profile.hpp) are built from them, and the
 * launcher of `accio run` (src/preload/launcher.c) computes the same floor without loading the
 * engine, so that the shim can pass a request below it straight to libc: loading the engine to learn
 * that it would run posix costs a process about 1.5 ms on the 2-vCPU VM (dlopen of libaccio and
 * libstdc++, the handle, the thread pool: results/run/engine_load_cost_s9.json), and a hot 2 GiB
 * `dd bs=1M` ran at 0.97x of plain under `accio run` before the floor. test_planner checks that
 * accio_model_read_floor() is the built-in model's Profile::engine_from(false) for 1..1024 CPUs. */
#ifndef ACCIO_PLANNER_MODEL_FLOOR_H
#define ACCIO_PLANNER_MODEL_FLOOR_H

#include <stdint.h>

/* MachineFacts::handoff_bytes, cold_direct_from and the parallel mechanism's default task size. */
#define ACCIO_MODEL_HANDOFF_BYTES ((uint64_t)768 << 10)
#define ACCIO_MODEL_COLD_DIRECT_FROM ((uint64_t)8 << 20)
#define ACCIO_MODEL_TASK_BYTES ((uint64_t)4 << 20)

/* The smallest request an even split over cpus serves faster than one call (MachineFacts::split_from):
 * ceil(handoff x cpus / (cpus - 1)) rounded up to a page; UINT64_MAX on one CPU. */
static inline uint64_t accio_model_split_from(unsigned cpus, uint64_t handoff) {
  if (cpus <= 1) return UINT64_MAX;
  const uint64_t n = (handoff * cpus + cpus - 2) / (cpus - 1);
  return (n + 4095) & ~(uint64_t)4095;
}

/* The smallest read (one request in flight) the built-in model for cpus runs with anything but
 * posix in any cache state: the even split from accio_model_split_from (where it comes before the
 * 4 MiB tasks), else direct for a cold read that starts a stream from ACCIO_MODEL_COLD_DIRECT_FROM.
 * The model writes posix at every size: its write floor is UINT64_MAX. */
static inline uint64_t accio_model_read_floor(unsigned cpus) {
  const uint64_t split = accio_model_split_from(cpus, ACCIO_MODEL_HANDOFF_BYTES);
  const uint64_t even_up_to = (uint64_t)(cpus ? cpus : 1) * ACCIO_MODEL_TASK_BYTES;
  const uint64_t hot = split < even_up_to ? split : UINT64_MAX;
  return hot < ACCIO_MODEL_COLD_DIRECT_FROM ? hot : ACCIO_MODEL_COLD_DIRECT_FROM;
}

#endif
