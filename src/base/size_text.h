/* One grammar for a size in text, for the engine (settings, accio_parse_size, the CLI's options) and
 * for `accio run`'s launcher and shim (run_cli.h): blanks, digits, blanks, an optional unit, blanks.
 * The unit is k, m, g or t (powers of 1024, any case), each optionally followed by i and then b (k, kb,
 * ki, kib), or b alone (bytes). Nothing else: "1 0m", "1,5m", "1.5m" and "-1" are not sizes. No
 * locale is consulted. (Until the nineteenth session the engine deleted blanks anywhere, so "1 0m"
 * was 10 MiB, and refused "4096B"; the launcher refused leading blanks.) */
#ifndef ACCIO_BASE_SIZE_TEXT_H
#define ACCIO_BASE_SIZE_TEXT_H
#include <limits.h>
#include <stdint.h>

enum { ACCIO_SIZE_OK = 0, ACCIO_SIZE_NOT_A_SIZE, ACCIO_SIZE_UNKNOWN_UNIT, ACCIO_SIZE_TOO_LARGE };

static inline int accio_size_blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
static inline char accio_size_lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c; }

/* ACCIO_SIZE_OK and *out, or why not. */
static inline int accio_size_parse(const char* s, unsigned long long* out) {
  while (accio_size_blank(*s)) ++s;
  if (*s < '0' || *s > '9') return ACCIO_SIZE_NOT_A_SIZE;
  unsigned long long v = 0;
  for (; *s >= '0' && *s <= '9'; ++s) {
    const unsigned long long d = (unsigned long long)(*s - '0');
    if (v > (ULLONG_MAX - d) / 10) return ACCIO_SIZE_TOO_LARGE;
    v = v * 10 + d;
  }
  while (accio_size_blank(*s)) ++s;
  unsigned shift = 0;
  switch (accio_size_lower(*s)) {
    case 'k': shift = 10; break;
    case 'm': shift = 20; break;
    case 'g': shift = 30; break;
    case 't': shift = 40; break;
    default: break;
  }
  if (shift) {
    ++s;
    if (accio_size_lower(*s) == 'i') ++s;
  }
  if (accio_size_lower(*s) == 'b') ++s;
  while (accio_size_blank(*s)) ++s;
  if (*s) return ACCIO_SIZE_UNKNOWN_UNIT;
  if (shift && v > (ULLONG_MAX >> shift)) return ACCIO_SIZE_TOO_LARGE;
  v <<= shift;
  if (v > (unsigned long long)SIZE_MAX) return ACCIO_SIZE_TOO_LARGE;
  *out = v;
  return ACCIO_SIZE_OK;
}
#endif
