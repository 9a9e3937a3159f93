/* accio: the command on PATH, a small native front end. `accio run ...` is the launcher of
 * launcher.c, run in this process: no Python starts in front of the program. Every other command
 * (`accio`, --help, --version, info, config, bench, tune, offload-bench) becomes, by exec, accio-py:
 * the Python CLI that pip installs next to this program with its own interpreter in the first line.
 * The exec keeps the arguments byte for byte, the environment, the descriptors and the process, so
 * the exit status and the signals are the Python CLI's own.
 *
 * Without accio-py beside it, it says so and exits 1 (`accio run` needs it only to render --stats,
 * and says so there with 125). */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "launcher.h"

extern char** environ;

int main(int argc, char** argv) {
  if (argc > 1 && !strcmp(argv[1], "run")) return accio_run_main(argc - 1, argv + 1);
  char py[PATH_MAX];
  if (!accio_sibling(ACCIO_PY, py, sizeof py)) {
    fprintf(stderr, "accio: " ACCIO_PY ", the Python part of accio, is missing or not executable (%s); "
                    "reinstall accio (pip install accio-io), or run python -m accio\n", py);
    return 1;
  }
  char* none[] = {"accio", NULL}; /* a caller may exec us with no argv[0] */
  execve(py, argc > 0 ? argv : none, environ);
  const int e = errno;
  fprintf(stderr, "accio: cannot run %s: %s (errno %d)%s\n", py, why(e), e,
          e == ENOENT ? ": the Python named in its first line is gone; reinstall accio" : "");
  return 1;
}
