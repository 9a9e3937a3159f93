/* ACCIO_QUIET's one rule, for the engine (C++), the shim and the launcher (C); python/accio/_log.py
 * states it again. Set to anything but nothing, 0, false, off or no (any case, as the settings' on/off
 * values): stderr gets no notes, warnings or errors. (Until the nineteenth session "false", "off"
 * and "no" meant quiet too.) */
#ifndef ACCIO_BASE_QUIET_H
#define ACCIO_BASE_QUIET_H
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static inline int accio_quiet_value(const char* v) {
  return v && *v && strcmp(v, "0") != 0 && strcasecmp(v, "false") != 0 && strcasecmp(v, "off") != 0 &&
         strcasecmp(v, "no") != 0;
}

static inline int accio_quiet(void) { return accio_quiet_value(getenv("ACCIO_QUIET")); }
#endif
