/* The ACCIO_* environment variables accio reads that are not rows of the settings table (those have
 * their variable in the table, `accio info` lists them): accio run's launcher and shim, the profile
 * lookup, the quiet switch, the drivers' library paths, and the test suite's. One list for the
 * checks that name a variable accio does not read (a typo such as ACCIO_THREAD is otherwise
 * ignored without a word): `accio info` (python/accio/info.py, through the extension) and the
 * launcher of `accio run` (launcher.c). The offload runtime's ACCIO_OFFLOAD_* are rows, registered
 * when libaccio_offload loads. */
#ifndef ACCIO_BASE_VARIABLES_H
#define ACCIO_BASE_VARIABLES_H

static const char* const accio_other_variables[] = {
    "ACCIO_QUIET", "ACCIO_PROFILE_DIR", "ACCIO_LIBCUDA", "ACCIO_LIBCUFILE",
    "ACCIO_PRELOAD_THRESHOLD", "ACCIO_PRELOAD_PREFETCH", "ACCIO_PRELOAD_STATS_FILES", "ACCIO_PRELOAD_STATS_DIR",
    "ACCIO_PRELOAD_FLOOR", "ACCIO_PRELOAD_ENGINE", "ACCIO_RUN_PYTHON",
    "ACCIO_TEST_DIR", "ACCIO_TEST_OPS", "ACCIO_TEST_FAKE_GPU", "ACCIO_TEST_WHEEL", "ACCIO_FUZZ_SCALE",
};
#define ACCIO_OTHER_VARIABLES (sizeof accio_other_variables / sizeof accio_other_variables[0])
/* Rows of a library that may not be loaded where the check runs (the launcher does not load the
 * offload runtime): names under this prefix are not called unknown there. */
#define ACCIO_OFFLOAD_PREFIX "ACCIO_OFFLOAD_"

#endif
