/* `accio run`: the one definition of its options and exit statuses. The native launcher
 * (src/preload/launcher.c, installed as accio-run) parses with this table, the shim parses sizes
 * with accio_run_parse_size, and the Python extension exports both (accio._ext.RUN_OPTIONS and
 * RUN_*), from which the Python CLI builds `accio run`'s help and its exit statuses. */
#ifndef ACCIO_RUN_CLI_H
#define ACCIO_RUN_CLI_H

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/size_text.h" /* relative: the Python extension includes this file too */

/* Exit statuses, as env(1) and nohup(1): otherwise the program's own. */
#define ACCIO_RUN_OWN_ERROR 125      /* accio's own error, a usage error of `accio run` included */
#define ACCIO_RUN_CANNOT_EXECUTE 126 /* found but cannot be run */
#define ACCIO_RUN_NOT_FOUND 127      /* not found */

/* X(id, long name, short name or NULL, metavar or NULL when it takes no value, help) */
#define ACCIO_RUN_OPTIONS(X)                                                                              \
  X(MECHANISM, "--mechanism", "-m", "M",                                                                  \
    "mechanism for the requests the shim takes: auto or a host mechanism (default: ACCIO_MECHANISM or auto)") \
  X(THRESHOLD, "--threshold", "-l", "BYTES",                                                              \
    "smallest request the shim considers, e.g. 64k (default: ACCIO_PRELOAD_THRESHOLD, else 1MiB raised "  \
    "to where the planner's model of this machine says the engine beats the kernel)")                     \
  X(STATS, "--stats", NULL, NULL, "print per-file counters to stderr when the program ends")             \
  X(STATS_JSON, "--stats-json", NULL, "FILE",                                                            \
    "write the per-file counters as JSON when the program ends ('-': stdout, after the program's own output)") \
  X(VERBOSE, "--verbose", "-v", NULL,                                                                     \
    "let the shim and the engine print their notes and warnings (silent otherwise)")                      \
  X(HELP, "--help", "-h", NULL, "show this help and exit")

/* Decimal digits at s (no sign, no space, no locale) into *v: the first character after them, or
 * NULL where s has no digit or the value overflows 64 bits. The floor's numbers
 * (ACCIO_PRELOAD_FLOOR, a profile's engine_from) are read with it by the launcher and the shim. */
static inline const char* accio_run_parse_u64(const char* s, uint64_t* v) {
  if (*s < '0' || *s > '9') return NULL;
  uint64_t x = 0;
  for (; *s >= '0' && *s <= '9'; ++s) {
    const uint64_t d = (uint64_t)(*s - '0');
    if (x > (UINT64_MAX - d) / 10) return NULL;
    x = x * 10 + d;
  }
  *v = x;
  return s;
}

/* A size as the shim and the launcher read it: 4096, 64k, 16MiB, 1g (powers of 1024). *ok is 0 for
 * anything else, a sign or an overflow included. Plain C: the shim reads it before libaccio is loaded. */
static inline size_t accio_run_parse_size(const char* s, int* ok) {
  unsigned long long v = 0;
  *ok = accio_size_parse(s, &v) == ACCIO_SIZE_OK; /* the engine's grammar (base/size_text.h) */
  return *ok ? (size_t)v : 0;
}

/* The most files whose statistics one process keeps (ACCIO_PRELOAD_STATS_FILES: 1 to this). */
#define ACCIO_RUN_MAX_STATS_FILES (1u << 16)

/* ACCIO_PRELOAD_STATS_FILES as a count from 1 to ACCIO_RUN_MAX_STATS_FILES, or 0 when v is not one:
 * one rule for the shim, which takes it, and the launcher, which refuses a bad one first. */
static inline unsigned accio_run_parse_stats_files(const char* v) {
  char* end;
  errno = 0;
  const unsigned long n = strtoul(v, &end, 10);
  return !errno && !*end && *v != '-' && n >= 1 && n <= ACCIO_RUN_MAX_STATS_FILES ? (unsigned)n : 0;
}

/* Where libaccio.so lies from the shim's directory: the same one, or two up for the copies of the
 * shim in lib/accio-platform/NAME/ (CMakeLists.txt). */
#ifndef ACCIO_RUN_ENGINE_UP
#define ACCIO_RUN_ENGINE_UP ""
#endif

/* The engine the shim loads into the program (into out): ACCIO_PRELOAD_ENGINE, else libaccio.so in
 * the shim's directory (shim: the shim's path; NULL or a bare name: libaccio.so by the library search
 * path). One definition for the shim, which loads it, and the launcher, which checks the ACCIO_*
 * settings with the same engine before the program starts. */
static inline void accio_run_engine_path(const char* shim, char* out, size_t len) {
  const char* env = getenv("ACCIO_PRELOAD_ENGINE");
  const char* slash = shim ? strrchr(shim, '/') : NULL;
  if (env && *env) snprintf(out, len, "%s", env);
  else if (slash) snprintf(out, len, "%.*s" ACCIO_RUN_ENGINE_UP "/libaccio.so", (int)(slash - shim), shim);
  else snprintf(out, len, "libaccio.so");
}

#endif
