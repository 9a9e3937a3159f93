/* What the `accio` front end (front.c) shares with the launcher of `accio run` (launcher.c). */
#ifndef ACCIO_LAUNCHER_H
#define ACCIO_LAUNCHER_H

#include <stddef.h>

/* The Python CLI (accio.cli:main) as pip installs it, in the scripts directory beside `accio` and
 * `accio-run` (pyproject.toml's [project.scripts]). */
#define ACCIO_PY "accio-py"

/* `accio run`: argv[0] is the command's name, argv[1..] its options, `--`, the program. Returns the
 * exit status, or does not return (the program replaced this process). */
int accio_run_main(int argc, char** argv);

/* out = NAME in this executable's directory (its real path, so a link to it on PATH still finds its
 * installation); 1 when that is an executable file. out is filled either way, for messages. */
int accio_sibling(const char* name, char* out, size_t len);

/* strerror with a lower-case first letter, as the Python CLI writes it. */
const char* why(int e);

#endif
