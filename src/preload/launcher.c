/* accio-run: the native launcher of `accio run`. The `accio` command on PATH (front.c) runs it in its
 * own process for `accio run ...`; it is also installed as the command `accio-run`, and in the
 * package (accio/lib/accio-run), which `python -m accio run` execs. It checks the options
 * (src/preload/run_cli.h, shared with the Python CLI), puts libaccio_preload.so in LD_PRELOAD and
 * execs the program: no Python start-up, no process in between. Only with --stats/--stats-json does
 * it stay: it forks the program, waits for it (forwarding SIGTERM/SIGHUP/SIGQUIT), then has the
 * Python CLI of the same installation render the statistics (accio-py next to this program, or
 * ACCIO_RUN_PYTHON -m accio.cli: never a python3 found on PATH), and exits with the program's
 * status or dies of its signal.
 *
 * The shim is found next to this program (the package's lib/), else in the package beside the
 * scripts directory, wherever pip put it (venv, --prefix, --user, --target, Debian's
 * dist-packages), else by asking accio-py (`accio-py config --prefix`: slow, the last resort).
 *
 * Silence: unless --verbose (or ACCIO_QUIET is set by the user), the program runs with
 * ACCIO_QUIET=1, so the shim and the engine print nothing into its stderr; the one warning worth
 * giving (no tuning profile at all on this machine) is printed here, once, when stderr is a
 * terminal. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/quiet.h"
#include "base/variables.h"
#include "launcher.h"
#include "planner/model_floor.h"
#include "run_cli.h"

extern char** environ;

/* Set by the Python build (CMakeLists.txt): the package directory (platlib) relative to the scripts
 * directory in the build interpreter's own scheme, and the interpreter's library folder name. */
#ifndef ACCIO_RUN_SCRIPTS_TO_PLATLIB
#define ACCIO_RUN_SCRIPTS_TO_PLATLIB ""
#endif
#ifndef ACCIO_RUN_PYTHON_LIB
#define ACCIO_RUN_PYTHON_LIB "" /* e.g. python3.11 */
#endif

enum {
#define ID(id, l, s, m, h) OPT_##id,
  ACCIO_RUN_OPTIONS(ID)
#undef ID
  NOPTS
};
static const struct opt {
  const char *name, *letter, *metavar, *help;
} kOpts[NOPTS] = {
#define ROW(id, l, s, m, h) {l, s, m, h},
    ACCIO_RUN_OPTIONS(ROW)
#undef ROW
};

static void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char* fmt, ...) {
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "accio run: %s\n", msg);
}

const char* why(int e) {
  static char buf[256];
  snprintf(buf, sizeof buf, "%s", strerror(e));
  if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z')) buf[0] = (char)(buf[0] - 'A' + 'a');
  return buf;
}

static void usage(FILE* f) {
  fprintf(f, "usage: accio run [options] -- program [args...]\n\n"
             "Runs PROGRAM with accio's preload shim: reads and writes on regular files that the engine\n"
             "serves faster than the kernel go through it, everything else straight to libc. Returns the\n"
             "program's exit status; %d if it is not found, %d if it cannot be run, %d for accio's own errors.\n\n"
             "options:\n",
          ACCIO_RUN_NOT_FOUND, ACCIO_RUN_CANNOT_EXECUTE, ACCIO_RUN_OWN_ERROR);
  for (int i = 0; i < NOPTS; ++i) {
    char head[96];
    const struct opt* o = &kOpts[i];
    if (o->letter)
      snprintf(head, sizeof head, "%s%s%s, %s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "",
               o->letter, o->metavar ? " " : "", o->metavar ? o->metavar : "");
    else
      snprintf(head, sizeof head, "%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
    fprintf(f, "  %-28s %s\n", head, o->help);
  }
  fprintf(f, "\nexamples:\n  accio run -- dd if=big.bin of=/dev/null bs=64M\n  accio run --stats -- python train.py\n"
             "  accio run --threshold 256k --stats-json io.json -- tar cf out.tar data/\n");
}

/* This executable's real path. */
static int self_exe(char* out, size_t len) {
  ssize_t n = readlink("/proc/self/exe", out, len - 1);
  out[n > 0 ? n : 0] = '\0';
  return n > 0;
}

/* The directory of this executable (its real path), with a trailing '/'. */
static int self_dir(char* out, size_t len) {
  if (!self_exe(out, len)) return 0;
  char* slash = strrchr(out, '/');
  if (!slash) return 0;
  slash[1] = '\0';
  return 1;
}

static int is_file(const char* p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int accio_sibling(const char* name, char* out, size_t len) {
  char dir[PATH_MAX];
  out[0] = '\0';
  if (!self_dir(dir, sizeof dir)) return 0;
  int n = snprintf(out, len, "%s%s", dir, name);
  return n > 0 && (size_t)n < len && is_file(out) && access(out, X_OK) == 0;
}

static int wait_for(pid_t pid) {
  int st;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  return st;
}

/* p with every link and dot-dot resolved, when it is a regular file. */
static int resolved_file(const char* p, char* out, size_t len) {
  char real[PATH_MAX];
  return realpath(p, real) && is_file(real) && snprintf(out, len, "%s", real) < (int)len;
}

/* Where pip puts the package (platlib) relative to the scripts directory. (Outside a Python build
 * the first four are empty or absent: the launcher is then installed next to the shim.) */
static const char* const kPackageFromScripts[] = {
    ACCIO_RUN_SCRIPTS_TO_PLATLIB,                      /* the build interpreter's own scheme */
    "../lib/" ACCIO_RUN_PYTHON_LIB "/site-packages",   /* venv, --prefix, --user, pyenv, conda */
    "../lib/" ACCIO_RUN_PYTHON_LIB "/dist-packages",   /* Debian's python3: /usr/local, --prefix P (P/local/bin) */
    "../lib64/" ACCIO_RUN_PYTHON_LIB "/site-packages", /* Fedora's and SUSE's platlib */
    "..",                                              /* --target DIR: DIR/bin beside DIR/accio */
};

/* The last resort: the Python CLI of this installation says where its package is
 * (`accio-py config --prefix`: a Python start-up, tens of milliseconds). */
static int shim_from_python(char* out, size_t len) {
  char py[PATH_MAX], prefix[PATH_MAX + 64];
  int fd[2];
  if (!accio_sibling(ACCIO_PY, py, sizeof py) || pipe2(fd, O_CLOEXEC) != 0) return 0;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    const char* args[] = {py, "config", "--prefix", NULL};
    if (dup2(fd[1], 1) == 1) execv(py, (char* const*)args);
    _exit(127);
  }
  close(fd[1]);
  size_t got = 0;
  for (ssize_t n; pid > 0 && got < PATH_MAX;) {
    n = read(fd[0], prefix + got, PATH_MAX - got);
    if (n > 0) got += (size_t)n;
    else if (n == 0 || errno != EINTR) break;
  }
  close(fd[0]);
  if (pid < 0) return 0;
  const int st = wait_for(pid);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || got == 0 || got >= PATH_MAX) return 0;
  while (got && prefix[got - 1] == '\n') --got;
  snprintf(prefix + got, sizeof prefix - got, "/lib/libaccio_preload.so");
  return resolved_file(prefix, out, len);
}

/* libaccio_preload.so: next to this program (accio/lib/accio-run), else in the package beside the
 * scripts directory that holds it (accio, accio-run), else where accio-py says. */
static int find_shim(char* out, size_t len) {
  char dir[PATH_MAX], p[2 * PATH_MAX];
  if (!self_dir(dir, sizeof dir)) return 0;
  snprintf(p, sizeof p, "%slibaccio_preload.so", dir);
  if (resolved_file(p, out, len)) return 1;
  for (size_t i = 0; i < sizeof kPackageFromScripts / sizeof *kPackageFromScripts; ++i) {
    snprintf(p, sizeof p, "%s%s/accio/lib/libaccio_preload.so", dir, kPackageFromScripts[i]);
    if (kPackageFromScripts[i][0] && resolved_file(p, out, len)) return 1;
  }
  return shim_from_python(out, len);
}

/* The engine the program's shim will load (accio_run_engine_path), or NULL (dlerror() says why).
 * Loaded only when it has something to check: --mechanism, or ACCIO_* settings in the environment. */
static void* engine_library(const char* shim) {
  char lib[PATH_MAX];
  accio_run_engine_path(shim, lib, sizeof lib);
  return dlopen(lib, RTLD_NOW | RTLD_LOCAL);
}

/* What --mechanism takes: auto and the engine's host mechanisms (the shim sees host buffers). Asks
 * the shim's engine (engine_library). Returns 1 when `m` is one. */
static int mechanism_ok(const char* shim, const char* m, char* choices, size_t len) {
  snprintf(choices, len, "auto");
  if (!strcmp(m, "auto")) return 1;
  void* h = engine_library(shim);
  if (!h) return 0;
  int (*count)(void);
  const char* (*name)(int);
  int (*device)(int);
  *(void**)&count = dlsym(h, "accio_mechanism_count"); /* POSIX's way round ISO C's function pointers */
  *(void**)&name = dlsym(h, "accio_mechanism_name");
  *(void**)&device = dlsym(h, "accio_mechanism_device");
  int found = 0;
  for (int i = 0; count && name && device && i < count(); ++i) {
    if (device(i) != 0 || !name(i)) continue;
    size_t used = strlen(choices);
    snprintf(choices + used, len - used, ", %s", name(i));
    found |= !strcmp(name(i), m);
  }
  return found;
}

static int is_size(const char* v) {
  int ok;
  accio_run_parse_size(v, &ok);
  return ok;
}

/* The shim's own variables (ACCIO_PRELOAD_*), checked before the program starts with the shim's
 * own rules (preload.c's shim_init): the shim would take a bad one for its default, silently under
 * ACCIO_QUIET, and a bad ACCIO_PRELOAD_ENGINE would pass every call to libc. Returns 1 when good. */
static int preload_settings_ok(const char* shim) {
  const char* v = getenv("ACCIO_PRELOAD_THRESHOLD");
  if (v && *v && !is_size(v)) {
    say("ACCIO_PRELOAD_THRESHOLD='%s' is not a size (examples: 4096, 64k, 16MiB, 1g); correct the variable or "
        "unset it", v);
    return 0;
  }
  v = getenv("ACCIO_PRELOAD_PREFETCH");
  if (v && *v && strcmp(v, "profile") != 0 && !is_size(v)) {
    say("ACCIO_PRELOAD_PREFETCH='%s' is neither a size (the read-ahead window: 0, 8m, ...) nor 'profile'; correct "
        "the variable or unset it", v);
    return 0;
  }
  v = getenv("ACCIO_PRELOAD_STATS_FILES");
  if (v && *v && !accio_run_parse_stats_files(v)) {
    say("ACCIO_PRELOAD_STATS_FILES='%s' is not a count from 1 to %u; correct the variable or unset it", v,
        ACCIO_RUN_MAX_STATS_FILES);
    return 0;
  }
  v = getenv("ACCIO_PRELOAD_ENGINE");
  if (v && *v) {
    void* h = engine_library(shim);
    if (!h || !dlsym(h, "accio_settings_new")) {
      say("ACCIO_PRELOAD_ENGINE='%s' is not accio's engine (%s); correct the variable or unset it", v,
          h ? "no accio_settings_new in it" : dlerror());
      return 0;
    }
  }
  return 1;
}

/* The edit distance of two names (short ones: longer than 63 characters counts as far). */
static int distance(const char* a, const char* b) {
  const size_t n = strlen(a), m = strlen(b);
  if (n > 63 || m > 63) return 99;
  int prev[64], cur[64];
  for (size_t j = 0; j <= m; ++j) prev[j] = (int)j;
  for (size_t i = 1; i <= n; ++i) {
    cur[0] = (int)i;
    for (size_t j = 1; j <= m; ++j) {
      int c = prev[j - 1] + (a[i - 1] != b[j - 1]);
      if (prev[j] + 1 < c) c = prev[j] + 1;
      if (cur[j - 1] + 1 < c) c = cur[j - 1] + 1;
      cur[j] = c;
    }
    memcpy(prev, cur, sizeof(int) * (m + 1));
  }
  return prev[m];
}

/* The length of the name of environment entry e when it is an ACCIO_* variable the checks below
 * look at (not the offload runtime's, whose rows the launcher does not load), else 0. */
static size_t accio_name(const char* e) {
  return strncmp(e, "ACCIO_", 6) || !strncmp(e, ACCIO_OFFLOAD_PREFIX, strlen(ACCIO_OFFLOAD_PREFIX)) ? 0 : strcspn(e, "=");
}

/* One warning for each ACCIO_* variable set that accio does not read, with the nearest name it reads
 * (within two edits): a typo such as ACCIO_THREAD was ignored without a word, and the program ran
 * with the default the user meant to change (new-user audit, session 25). Said once, here, before
 * the program starts (its processes run quiet), unless ACCIO_QUIET; as `accio info` says it. */
static void unknown_variables(void* engine) {
  if (accio_quiet()) return;
  int (*count)(void) = NULL;
  const char* (*env)(int) = NULL;
  *(void**)&count = dlsym(engine, "accio_setting_count");
  *(void**)&env = dlsym(engine, "accio_setting_env");
  if (!count || !env) return;
  for (char** e = environ; *e; ++e) {
    const size_t len = accio_name(*e);
    char name[128];
    if (!len || len >= sizeof name) continue;
    memcpy(name, *e, len);
    name[len] = 0;
    const char* near = NULL;
    int best = 3, known = 0;
    for (int i = -(int)ACCIO_OTHER_VARIABLES; i < count() && !known; ++i) {
      const char* k = i < 0 ? accio_other_variables[-i - 1] : env(i);
      if (!k || !*k) continue;
      const int d = distance(name, k);
      known = d == 0;
      if (d < best) best = d, near = k;
    }
    if (known) continue;
    if (near)
      say("warning: %s is not a variable accio reads (did you mean %s?)", name, near);
    else
      say("warning: %s is not a variable accio reads", name);
  }
}

/* The ACCIO_* settings the program's engine will read, checked before it starts by the engine's own
 * check (accio_settings_new: each row's kind and bounds, a registered mechanism, a profile file that
 * loads). A bad one would make every process's engine refuse to start, and its shim pass every call
 * to libc without a word (ACCIO_QUIET): so it is refused here, once, naming the variable, as a bad
 * --mechanism is. libaccio is loaded for it (about a millisecond) only when an ACCIO_* variable is
 * set other than those that are not settings (base/variables.h: the launcher's and the shim's own,
 * the profile directory, ACCIO_QUIET) and the offload runtime's (ACCIO_OFFLOAD_*): a setting, or a
 * name accio does not read, which unknown_variables then names. Returns 1 when they are good. */
static int settings_ok(const char* shim) {
  int any = 0;
  for (char** e = environ; *e && !any; ++e) {
    const size_t len = accio_name(*e);
    any = len > 0;
    for (size_t i = 0; i < ACCIO_OTHER_VARIABLES && any; ++i)
      any = strlen(accio_other_variables[i]) != len || strncmp(*e, accio_other_variables[i], len) != 0;
  }
  if (!any) return 1;
  void* h = engine_library(shim);
  void* (*settings_new)(void) = NULL;
  void (*settings_free)(void*) = NULL;
  const char* (*last_error)(void) = NULL;
  if (h) {
    *(void**)&settings_new = dlsym(h, "accio_settings_new");
    *(void**)&settings_free = dlsym(h, "accio_settings_free");
    *(void**)&last_error = dlsym(h, "accio_last_error");
  }
  if (!settings_new || !settings_free || !last_error) {
    say("cannot load the engine of %s to check the ACCIO_* settings (%s); reinstall accio, or correct "
        "ACCIO_PRELOAD_ENGINE", shim, dlerror());
    return 0;
  }
  void* s = settings_new();
  if (!s) {
    say("%s; correct the variable or unset it (`accio info` shows every setting)", last_error());
    return 0;
  }
  settings_free(s);
  /* The shim serves host buffers: a device mechanism is refused here as --mechanism refuses it
   * (ACCIO_MECHANISM=staged ran, while -m staged was refused: new-user audit, session 25). */
  const char* m = getenv("ACCIO_MECHANISM");
  char choices[1024];
  if (m && *m && !mechanism_ok(shim, m, choices, sizeof choices)) {
    say("ACCIO_MECHANISM='%s': not one of %s (accio run serves the host memory programs read into); "
        "correct the variable or unset it", m, choices);
    return 0;
  }
  unknown_variables(h);
  return 1;
}

/* Checked before the program runs (a report that cannot be written is 125 before, not after). */
static int output_ok(const char* path) {
  if (!path || !strcmp(path, "-")) return 1;
  struct stat st;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
    say("--stats-json %s: %s (errno %d)", path, why(EISDIR), EISDIR);
    return 0;
  }
  char parent[PATH_MAX];
  int len;
  if (path[0] == '/') {
    len = snprintf(parent, sizeof parent, "%s", path);
  } else {
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) cwd[0] = '\0';
    len = snprintf(parent, sizeof parent, "%s/%s", cwd, path);
  }
  if (len < 0 || (size_t)len >= sizeof parent) {
    say("--stats-json %s: %s (errno %d)", path, why(ENAMETOOLONG), ENAMETOOLONG);
    return 0;
  }
  char* slash = strrchr(parent, '/');
  if (slash == parent) slash[1] = '\0';
  else *slash = '\0';
  if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode)) {
    say("--stats-json %s: %s: %s (errno %d)", path, parent, why(ENOENT), ENOENT);
    return 0;
  }
  if (access(parent, W_OK) != 0 && access(path, W_OK) != 0) {
    say("--stats-json %s: %s (errno %d)", path, why(EACCES), EACCES);
    return 0;
  }
  return 1;
}

/* The program as execve needs it: a name with '/' as given, else the first executable file of that
 * name in PATH (as the shell). Returns 0 (and the exit status in *status) when it cannot be run. */
static int locate(const char* name, char* out, size_t len, int* status) {
  if (strchr(name, '/')) {
    snprintf(out, len, "%s", name);
  } else {
    const char* path = getenv("PATH");
    if (!path) path = "/bin:/usr/bin";
    int found = 0;
    for (const char* p = path; !found;) {
      const char* colon = strchrnul(p, ':');
      if (colon == p) snprintf(out, len, "./%s", name); /* an empty entry is the current directory */
      else snprintf(out, len, "%.*s/%s", (int)(colon - p), p, name);
      found = is_file(out) && access(out, X_OK) == 0;
      if (!*colon) break;
      p = colon + 1;
    }
    if (!found) {
      say("%s: command not found", name);
      *status = ACCIO_RUN_NOT_FOUND;
      return 0;
    }
  }
  struct stat st;
  if (stat(out, &st) != 0) {
    say("%s: command not found", name);
    *status = ACCIO_RUN_NOT_FOUND;
    return 0;
  }
  if (S_ISDIR(st.st_mode)) {
    say("%s: is a directory", name);
    *status = ACCIO_RUN_CANNOT_EXECUTE;
    return 0;
  }
  if (access(out, X_OK) != 0) {
    say("%s: permission denied", name);
    *status = ACCIO_RUN_CANNOT_EXECUTE;
    return 0;
  }
  return 1;
}

/* What the launcher needs to know of the program, from its ELF headers, read once per launch.
 * kind: what the shim can do for exe. A 64-bit ELF program without a program interpreter (PT_INTERP)
 * is statically linked, so the dynamic loader that honours LD_PRELOAD never runs in it; a 32-bit one
 * has a loader of its own word size, which loads the empty 32-bit shim at most (lib/accio-platform/).
 * Either runs as without accio. A script, a dynamic 64-bit program or a file that cannot be read:
 * SERVED.
 * asan: whether a dynamic 64-bit program is linked with the AddressSanitizer runtime (a DT_NEEDED of
 * libasan.so.N or libclang_rt.asan-*.so). ASan refuses to start unless its runtime comes first in the
 * list of loaded libraries ("ASan runtime does not come first in initial library list"), and the
 * shim comes first: such a program gets verify_asan_link_order=0 (shim audit, session 24). The
 * check guards ASan's malloc interception, which the shim does not touch; its read and write
 * interceptors still run, after the shim's (its calls to libc find them next). Preloading the
 * runtime before the shim instead made every child the program starts an ASan process (its leak
 * check at exit changed uninstrumented programs' exit status).
 * Every length and offset read from the file is checked. (Two functions read the same headers, each
 * opening the file, until the twenty-fifth session.) */
enum { SERVED, STATIC, WORD32 };
struct elf_facts {
  int kind;
  int asan;
};
static struct elf_facts elf_facts(const char* exe) {
  struct elf_facts f = {SERVED, 0}; /* unknown counts as served: say nothing */
  const int fd = open(exe, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return f;
  Elf64_Ehdr eh;
  Elf64_Phdr* ph = NULL;
  Elf64_Dyn* dyn = NULL;
  char* str = NULL;
  const ssize_t got = pread(fd, &eh, sizeof eh, 0);
  const int elf = got >= EI_NIDENT && memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0;
  if (elf && eh.e_ident[EI_CLASS] == ELFCLASS32) f.kind = WORD32;
  if (!elf || got != (ssize_t)sizeof eh || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_phentsize != sizeof(Elf64_Phdr) || !eh.e_phnum || eh.e_phnum >= 4096)
    goto out;
  ph = malloc(eh.e_phnum * sizeof *ph);
  if (!ph || pread(fd, ph, eh.e_phnum * sizeof *ph, (off_t)eh.e_phoff) != (ssize_t)(eh.e_phnum * sizeof *ph)) goto out;
  const Elf64_Phdr* dp = NULL;
  int interp = 0;
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    interp |= ph[i].p_type == PT_INTERP;
    if (ph[i].p_type == PT_DYNAMIC) dp = &ph[i];
  }
  if (!interp && (eh.e_type == ET_EXEC || eh.e_type == ET_DYN)) f.kind = STATIC;
  if (!dp || !dp->p_filesz || dp->p_filesz > (1u << 20)) goto out;
  const size_t ndyn = dp->p_filesz / sizeof *dyn;
  dyn = malloc(ndyn * sizeof *dyn);
  if (!dyn || pread(fd, dyn, ndyn * sizeof *dyn, (off_t)dp->p_offset) != (ssize_t)(ndyn * sizeof *dyn)) goto out;
  uint64_t strtab = 0, strsz = 0;
  for (size_t i = 0; i < ndyn && dyn[i].d_tag != DT_NULL; ++i) {
    if (dyn[i].d_tag == DT_STRTAB) strtab = dyn[i].d_un.d_ptr;
    if (dyn[i].d_tag == DT_STRSZ) strsz = dyn[i].d_un.d_val;
  }
  if (!strsz || strsz > (1u << 24)) goto out;
  uint64_t at = 0; /* the string table's file offset: through the PT_LOAD segment that maps it */
  for (unsigned i = 0; i < eh.e_phnum && !at; ++i)
    if (ph[i].p_type == PT_LOAD && strtab >= ph[i].p_vaddr && strtab - ph[i].p_vaddr <= ph[i].p_filesz &&
        strsz <= ph[i].p_filesz - (strtab - ph[i].p_vaddr))
      at = strtab - ph[i].p_vaddr + ph[i].p_offset;
  if (!at || !(str = malloc(strsz + 1)) || pread(fd, str, strsz, (off_t)at) != (ssize_t)strsz) goto out;
  str[strsz] = 0;
  for (size_t i = 0; i < ndyn && dyn[i].d_tag != DT_NULL; ++i) {
    if (dyn[i].d_tag != DT_NEEDED || dyn[i].d_un.d_val >= strsz) continue;
    const char* name = str + dyn[i].d_un.d_val;
    if (!strncmp(name, "libasan.so", 10) || !strncmp(name, "libclang_rt.asan", 16)) f.asan = 1;
  }
out:
  free(str);
  free(dyn);
  free(ph);
  close(fd);
  return f;
}

/* ASAN_OPTIONS with verify_asan_link_order=0 added (elf_facts: asan). */
static int allow_asan_after_shim(void) {
  const char* old = getenv("ASAN_OPTIONS");
  char v[4096];
  if (snprintf(v, sizeof v, "%s%sverify_asan_link_order=0", old ? old : "", old && *old ? ":" : "") >= (int)sizeof v)
    return 0;
  return setenv("ASAN_OPTIONS", v, 1);
}

/* execve of the program, with execvp's fallback for a file the kernel cannot run (ENOEXEC): a text
 * file, a shell script without "#!", runs under /bin/sh, as env(1) runs it; a binary one (a NUL in
 * its first bytes, the shells' test) fails with ENOEXEC. Returns only on failure, errno set. */
static void exec_program(const char* exe, char** prog) {
  execve(exe, prog, environ);
  if (errno != ENOEXEC) return;
  char head[256];
  const int fd = open(exe, O_RDONLY | O_CLOEXEC);
  const ssize_t n = fd >= 0 ? read(fd, head, sizeof head) : -1;
  if (fd >= 0) close(fd);
  if (n < 0 || memchr(head, 0, (size_t)n)) {
    errno = ENOEXEC;
    return;
  }
  size_t argc = 0;
  while (prog[argc]) ++argc;
  char** argv = calloc(argc + 2, sizeof *argv);
  if (!argv) {
    errno = ENOEXEC;
    return;
  }
  argv[0] = (char*)"/bin/sh";
  argv[1] = (char*)exe;
  for (size_t i = 1; i < argc; ++i) argv[i + 1] = prog[i];
  execve("/bin/sh", argv, environ);
  free(argv);
}

static int exec_failed(const char* name, int e) {
  say("exec %s: %s (errno %d)", name, why(e), e);
  return e == ENOENT || e == ENOTDIR ? ACCIO_RUN_NOT_FOUND : ACCIO_RUN_CANNOT_EXECUTE;
}

/* The LD_PRELOAD entry that loads the shim (into out): its path, or on a machine with a 32-bit
 * loader (its ABI path, /lib/ld-linux.so.2), the copy in lib/accio-platform/$PLATFORM/ beside it,
 * which the loader of each word size expands to its own kind of library (CMakeLists.txt). Taken only when
 * this process's loader finds a copy there: a dlopen that loads nothing (RTLD_NOLOAD) and fails only
 * if the expanded path is missing (it returns a handle where this launcher runs under accio run). */
static void preload_entry(const char* shim, char* out, size_t len) {
  snprintf(out, len, "%s", shim);
  const char* slash = strrchr(shim, '/');
  if (!slash || access("/lib/ld-linux.so.2", F_OK) != 0) return;
  char tree[PATH_MAX];
  if (snprintf(tree, sizeof tree, "%.*s/accio-platform/$PLATFORM/libaccio_preload.so", (int)(slash - shim), shim) >=
      (int)sizeof tree)
    return;
  dlerror();
  void* h = dlopen(tree, RTLD_LAZY | RTLD_NOLOAD); /* a handle: loaded here already (a nested accio run) */
  if (h) dlclose(h);
  if (h || !dlerror()) snprintf(out, len, "%s", tree);
}

/* LD_PRELOAD with the shim first (entry, once), the user's own preloads after it, less any other
 * libaccio_preload.so (this one by another name, another installation's): two shims would each
 * serve the program's calls. *asan: whether one of the user's preloads is an ASan runtime. */
static int set_preload(const char* entry, int* asan) {
  const char* old = getenv("LD_PRELOAD");
  size_t cap = strlen(entry) + (old ? strlen(old) : 0) + 2;
  char* v = malloc(cap);
  char* rest = old ? strdup(old) : NULL;
  if (!v || (old && !rest)) return -1;
  snprintf(v, cap, "%s", entry);
  for (char *save = NULL, *tok = rest ? strtok_r(rest, ": ", &save) : NULL; tok; tok = strtok_r(NULL, ": ", &save)) {
    const char* base = strrchr(tok, '/');
    if (!strcmp(base ? base + 1 : tok, "libaccio_preload.so")) continue;
    if (strstr(base ? base + 1 : tok, "asan")) *asan = 1;
    strcat(v, ":");
    strcat(v, tok);
  }
  int r = setenv("LD_PRELOAD", v, 1);
  free(v);
  free(rest);
  return r;
}

/* Whether a profile document's text has a non-zero prefetch window ("window": N, which `accio tune`
 * writes only in its prefetch section): a cheap gate, the engine decides per device. */
static int has_window(const char* text) {
  for (const char* p = text; (p = strstr(p, "\"window\":"));) {
    p += strlen("\"window\":");
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') ++p;
    if (*p >= '1' && *p <= '9') return 1;
  }
  return 0;
}

/* The value of `key` in the profile document's top-level object (past the colon and blanks), or NULL:
 * a key of the same name inside a nested object or in a string is not it (review N-4, session 26). */
static const char* top_level_value(const char* text, const char* key) {
  const size_t key_len = strlen(key);
  int depth = 0, key_position = 0;
  for (const char* p = text; *p; ++p) {
    if (*p == '"') {
      const char* start = ++p;
      while (*p && *p != '"') p += p[0] == '\\' && p[1] ? 2 : 1;
      if (!*p) return NULL;
      if (depth == 1 && key_position && (size_t)(p - start) == key_len && !memcmp(start, key, key_len)) {
        const char* v = p + 1;
        while (*v == ' ' || *v == '\n' || *v == '\t' || *v == '\r') ++v;
        if (*v != ':') return NULL;
        for (++v; *v == ' ' || *v == '\n' || *v == '\t' || *v == '\r'; ++v) {}
        return v;
      }
      key_position = 0;
    } else if (*p == '{' || *p == '[') {
      ++depth, key_position = *p == '{';
    } else if (*p == '}' || *p == ']') {
      if (--depth <= 0) return NULL;
      key_position = 0;
    } else if (*p == ',') {
      key_position = 1;
    } else if (*p == ':') {
      key_position = 0;
    }
  }
  return NULL;
}

/* The online CPUs of the machine that measured the profile ("cpus": N, which `accio tune` writes at
 * the top level; 0 where it is not there). */
static uint64_t profile_cpus(const char* text) {
  const char* p = top_level_value(text, "cpus");
  uint64_t v;
  return p && accio_run_parse_u64(p, &v) ? v : 0;
}

/* other (when still empty): the profile `name` if it was measured on a machine with another number
 * of online CPUs, as "NAME measured on N CPUs, this machine has M". */
static void note_other(char* other, size_t len, const char* name, const char* text) {
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const uint64_t measured = other[0] || online <= 0 ? 0 : profile_cpus(text);
  if (measured && measured != (uint64_t)online)
    snprintf(other, len, "%s measured on %llu CPUs, this machine has %ld", name, (unsigned long long)measured, online);
}

/* floor[w] = min(floor[w], the profile's "engine_from" of that direction): {"read": N|null, "write":
 * N|null}, which `accio tune` writes (null: posix at every size). A profile without it (written by
 * an older accio) or with anything else there gives 0: the shim then asks the engine from the
 * threshold up, as it always did. */
static void lower_floor(const char* text, uint64_t floor[2]) {
  const char* object = top_level_value(text, "engine_from");
  for (int w = 0; w < 2; ++w) {
    /* the object's own keys: top_level_value scans from its brace and stops at the matching one */
    const char* k = object && *object == '{' ? top_level_value(object, w ? "write" : "read") : NULL;
    if (k) {
      if (!strncmp(k, "null", 4)) continue;
      uint64_t v;
      if (accio_run_parse_u64(k, &v)) {
        if (v < floor[w]) floor[w] = v;
        continue;
      }
    }
    floor[w] = 0;
  }
}

/* A profile's text (NULL where it cannot be read; the caller frees it). */
static char* read_profile(int dirfd, const char* name) {
  /* O_NONBLOCK: a FIFO in the directory would hang every launch in open (tune audit, session 26) */
  int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return NULL;
  struct stat st;
  char* text = NULL;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < (64 << 20) &&
      (text = malloc((size_t)st.st_size + 1))) {
    ssize_t n = read(fd, text, (size_t)st.st_size);
    text[n > 0 ? n : 0] = 0;
  }
  close(fd);
  return text;
}

/* What the profiles the program's engine would use hold: *any, whether there is one at all (the
 * profile directory has a file, or ACCIO_PROFILE names one or says off); *window, whether one has a
 * non-zero prefetch window (off: none); and floor[read, write], the smallest request the engine
 * could run with anything but posix: the built-in model's for this process's CPUs
 * (src/planner/model_floor.h; a program that widens its affinity beyond the launcher's would get
 * the narrower machine's floor) and every profile's "engine_from". dir gets the directory. */
static void look_at_profiles(char* dir, size_t len, int* any, int* window, uint64_t floor[2], char* other,
                             size_t other_len) {
  const char* chosen = getenv("ACCIO_PROFILE");
  const char *d = getenv("ACCIO_PROFILE_DIR"), *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (d && *d) snprintf(dir, len, "%s", d);
  else if (x && *x) snprintf(dir, len, "%s/accio/profiles", x);
  else snprintf(dir, len, "%s/.cache/accio/profiles", home && *home ? home : "/tmp");
  *any = *window = 0;
  cpu_set_t set;
  const unsigned cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? (unsigned)CPU_COUNT(&set) : 0;
  floor[0] = cpus ? accio_model_read_floor(cpus) : 0;
  floor[1] = UINT64_MAX;
  other[0] = 0;
  char* text;
  if (chosen && *chosen && strcmp(chosen, "auto") != 0) { /* off, or a profile file: the user chose */
    *any = 1;
    if (!strcmp(chosen, "off")) return;
    floor[0] = floor[1] = UINT64_MAX; /* that profile alone (the engine refuses to run without it) */
    if ((text = read_profile(AT_FDCWD, chosen))) {
      note_other(other, other_len, chosen, text);
      *window = has_window(text);
      lower_floor(text, floor);
      free(text);
    } else { /* gone since settings_ok() found it loadable: the shim asks from the threshold up */
      floor[0] = floor[1] = 0;
    }
    return;
  }
  DIR* dp = opendir(dir);
  for (struct dirent* e; dp && (e = readdir(dp));) {
    if (e->d_name[0] == '.') continue;
    *any = 1;
    if (!(text = read_profile(dirfd(dp), e->d_name))) { /* the engine would warn and use the model */
      continue;
    }
    note_other(other, other_len, e->d_name, text);
    *window |= has_window(text);
    lower_floor(text, floor);
    free(text);
  }
  if (dp) closedir(dp);
}

/* The one warning worth giving, once per `accio run` and only to a person at a terminal: no
 * tuning profile for any filesystem, so auto decides from the built-in model. The prefetch: unless
 * ACCIO_PRELOAD_PREFETCH is set, the shim asks each device's profile for its window where a
 * profile has one (elsewhere it never looks). And the floor below which the shim passes every
 * request to libc without loading the engine (ACCIO_PRELOAD_FLOOR, read by the shim only where no
 * threshold and no mechanism were given). */
static int use_profiles(int verbose) {
  const char* pf = getenv("ACCIO_PRELOAD_PREFETCH");
  const int want_window = !(pf && *pf), warn = !verbose && isatty(2);
  char dir[PATH_MAX], num[64], other[PATH_MAX + 96];
  int any, window;
  uint64_t floor[2];
  look_at_profiles(dir, sizeof dir, &any, &window, floor, other, sizeof other);
  snprintf(num, sizeof num, "%llu,%llu", (unsigned long long)floor[0], (unsigned long long)floor[1]);
  if (setenv("ACCIO_PRELOAD_FLOOR", num, 1) != 0) return -1;
  if (want_window && window && setenv("ACCIO_PRELOAD_PREFETCH", "profile", 1) != 0) return -1;
  if (!any && warn)
    fprintf(stderr, "accio run: note: no tuning profile in %s: the shim decides from the built-in model; "
                    "`accio tune DIR` measures this machine (--verbose for the engine's own notes)\n", dir);
  if (other[0] && warn)  /* a profile directory that machines of other sizes share (a home on NFS) */
    fprintf(stderr, "accio run: note: a tuning profile of another machine: %s; `accio tune DIR` measures this one "
                    "(with ACCIO_PROFILE_DIR set per machine)\n", other);
  return 0;
}

static void remove_dir(const char* dir) {
  DIR* dp = opendir(dir);
  if (dp) {
    for (struct dirent* e; (e = readdir(dp));) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      unlinkat(dirfd(dp), e->d_name, 0);
    }
    closedir(dp);
  }
  rmdir(dir);
}

static volatile sig_atomic_t g_child;
static void forward(int sig) {
  if (g_child > 0) kill((pid_t)g_child, sig);
}

/* The Python CLI of this installation, which renders the statistics: ACCIO_RUN_PYTHON -m accio.cli
 * (`python -m accio run` sets it to its sys.executable when it execs the launcher), else accio-py
 * next to this program (the scripts directory). Never a python3 from PATH: it may be another
 * interpreter, without accio; so ACCIO_RUN_PYTHON counts only as an absolute path, and the command
 * is run with execv. Puts the command's first words in argv and returns how many; 0 when there is
 * none. */
static int report_command(const char** argv, char* buf, size_t len) {
  const char* p = getenv("ACCIO_RUN_PYTHON");
  if (p && *p && *p != '/') say("ACCIO_RUN_PYTHON=%s is not an absolute path: ignored", p);
  if (p && *p == '/') {
    if (snprintf(buf, len, "%s", p) >= (int)len) return 0;
    argv[0] = buf;
    argv[1] = "-m";
    argv[2] = "accio.cli";
    return 3;
  }
  argv[0] = buf;
  return accio_sibling(ACCIO_PY, buf, len) ? 1 : 0;
}

int accio_run_main(int argc, char** argv) {
  const char* val[NOPTS] = {0};
  int i = 1;
  for (; i < argc; ++i) {
    const char* a = argv[i];
    if (!strcmp(a, "--")) {
      ++i;
      break;
    }
    if (a[0] != '-' || !a[1]) break;
    int k = NOPTS;
    const char* v = NULL;
    if (a[1] == '-') { /* --name, --name=value, or a unique prefix of a name (as getopt_long and argparse) */
      const size_t alen = strcspn(a, "=");
      int matches = 0;
      for (int j = 0; j < NOPTS && k == NOPTS; ++j)
        if (!strncmp(a, kOpts[j].name, alen) && kOpts[j].name[alen] == '\0') k = j; /* exact: wins */
      for (int j = 0; j < NOPTS && k == NOPTS; ++j) matches += !strncmp(a, kOpts[j].name, alen);
      if (k == NOPTS && matches > 1) {
        char names[256] = "";
        for (int j = 0; j < NOPTS; ++j)
          if (!strncmp(a, kOpts[j].name, alen))
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", *names ? ", " : "", kOpts[j].name);
        say("ambiguous option '%.*s' (could be %s)", (int)alen, a, names);
        return ACCIO_RUN_OWN_ERROR;
      }
      for (int j = 0; j < NOPTS && k == NOPTS && matches == 1; ++j)
        if (!strncmp(a, kOpts[j].name, alen)) k = j;
      if (k < NOPTS && a[alen] == '=') {
        if (!kOpts[k].metavar) {
          say("option '%s' takes no value", kOpts[k].name);
          return ACCIO_RUN_OWN_ERROR;
        }
        v = a + alen + 1; /* --threshold=64k */
      }
    } else {
      for (k = 0; k < NOPTS; ++k) {
        const struct opt* o = &kOpts[k];
        if (o->letter && !strcmp(a, o->letter)) break;
        if (o->metavar && o->letter && a[1] == o->letter[1] && a[2]) {
          v = a + 2; /* -l64k */
          break;
        }
      }
    }
    if (k == NOPTS) {
      if (!strcmp(a, "-t"))
        say("-t is not an option of run (in `accio bench` it is the thread count); the threshold is --threshold or -l");
      else
        say("unrecognized option '%s' (accio run --help lists them)", a);
      return ACCIO_RUN_OWN_ERROR;
    }
    if (kOpts[k].metavar && !v) {
      if (i + 1 >= argc) {
        say("%s needs a value (%s)", a, kOpts[k].metavar);
        return ACCIO_RUN_OWN_ERROR;
      }
      v = argv[++i];
    }
    val[k] = kOpts[k].metavar ? v : a;
  }
  if (val[OPT_HELP]) {
    usage(stdout);
    if (fflush(stdout) != 0 || ferror(stdout)) { /* --help >/dev/full: the help was lost, as coreutils say */
      const int e = errno;
      say("write error on stdout: %s (errno %d)", why(e), e);
      return ACCIO_RUN_OWN_ERROR;
    }
    return 0;
  }
  char** prog = argv + i;
  if (i >= argc) {
    say("no program given (usage: accio run [options] -- program [args...])");
    return ACCIO_RUN_OWN_ERROR;
  }

  char shim[PATH_MAX];
  if (!find_shim(shim, sizeof shim)) {
    char self[PATH_MAX];
    self_exe(self, sizeof self);
    say("the preload library libaccio_preload.so is not in this installation of accio (looked beside %s, in "
        "the package beside it, and asked " ACCIO_PY "); reinstall accio", self);
    return ACCIO_RUN_OWN_ERROR;
  }
  if (!preload_settings_ok(shim)) return ACCIO_RUN_OWN_ERROR;
  char num[32];
  const char* env_threshold = getenv("ACCIO_PRELOAD_THRESHOLD");
  if (!val[OPT_THRESHOLD] && env_threshold && *env_threshold)
    val[OPT_THRESHOLD] = env_threshold; /* as --threshold: the report shows the value the shim takes */
  if (val[OPT_THRESHOLD]) {
    int ok;
    size_t t = accio_run_parse_size(val[OPT_THRESHOLD], &ok);
    if (!ok) {
      say("--threshold '%s': not a size (examples: 4096, 64k, 16MiB, 1g)", val[OPT_THRESHOLD]);
      return ACCIO_RUN_OWN_ERROR;
    }
    snprintf(num, sizeof num, "%zu", t ? t : 1);
  }
  if (val[OPT_MECHANISM]) {
    char choices[1024];
    if (!mechanism_ok(shim, val[OPT_MECHANISM], choices, sizeof choices)) {
      say("--mechanism '%s': not one of %s", val[OPT_MECHANISM], choices);
      return ACCIO_RUN_OWN_ERROR;
    }
    if (setenv("ACCIO_MECHANISM", val[OPT_MECHANISM], 1) != 0) {
      say("cannot set the environment: %s (errno %d)", why(errno), errno);
      return ACCIO_RUN_OWN_ERROR;
    }
  }
  if (!settings_ok(shim)) return ACCIO_RUN_OWN_ERROR;
  const int stats = val[OPT_STATS] || val[OPT_STATS_JSON];
  if (!output_ok(val[OPT_STATS_JSON])) return ACCIO_RUN_OWN_ERROR;
  /* The report's command, found before the program runs (and before our environment changes). */
  const char* rargv[32 + 1024];
  char pybuf[PATH_MAX];
  int n = stats ? report_command(rargv, pybuf, sizeof pybuf) : 0;
  if (stats && !n) {
    say("%s: the statistics are rendered by " ACCIO_PY ", the Python part of accio, which is missing (%s); "
        "reinstall accio, or use python -m accio run", val[OPT_STATS] ? "--stats" : "--stats-json", pybuf);
    return ACCIO_RUN_OWN_ERROR;
  }
  char exe[PATH_MAX];
  int status;
  if (!locate(prog[0], exe, sizeof exe, &status)) return status;
  /* A static program: the preload cannot enter it, and it runs as without accio. Said to a person at
   * a terminal (unless they set ACCIO_QUIET, as the engine reads it), or with --verbose or --stats
   * (whose report would otherwise be empty without a word). */
  const int user_quiet = accio_quiet();
  const struct elf_facts facts = elf_facts(exe);
  const int kind = (isatty(2) && !user_quiet) || val[OPT_VERBOSE] || stats ? facts.kind : SERVED;
  if (kind == STATIC)
    say("note: %s is statically linked: the shim cannot be preloaded into it, so it runs as it would "
        "without accio (its own child processes that are dynamic are served)", exe);
  else if (kind == WORD32)
    say("note: %s is a 32-bit program: the shim serves 64-bit programs, so it runs as it would without "
        "accio (its own child processes that are 64-bit are served)", exe);

  char entry[PATH_MAX];
  preload_entry(shim, entry, sizeof entry);
  int asan = facts.asan;
  if (set_preload(entry, &asan) != 0 || (asan && allow_asan_after_shim() != 0) || (val[OPT_THRESHOLD] && setenv("ACCIO_PRELOAD_THRESHOLD", num, 1) != 0) ||
      (!val[OPT_VERBOSE] && !getenv("ACCIO_QUIET") && setenv("ACCIO_QUIET", "1", 1) != 0) ||
      use_profiles(val[OPT_VERBOSE] != NULL) != 0) {
    say("cannot set the environment: %s (errno %d)", why(errno), errno);
    return ACCIO_RUN_OWN_ERROR;
  }
  unsetenv("ACCIO_RUN_PYTHON");

  if (!stats) { /* nothing to do afterwards: become the program (its signals and status are its own) */
    unsetenv("ACCIO_PRELOAD_STATS_DIR");
    fflush(NULL);
    exec_program(exe, prog);
    return exec_failed(prog[0], errno);
  }

  const char* tmp = getenv("TMPDIR");
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s/accio-run.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir) || setenv("ACCIO_PRELOAD_STATS_DIR", dir, 1) != 0) {
    say("cannot make a directory for the statistics (%s): %s (errno %d)", dir, why(errno), errno);
    return ACCIO_RUN_OWN_ERROR;
  }
  int pipefd[2]; /* the child's exec errno, if exec fails (closed on a successful exec) */
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    say("pipe: %s (errno %d)", why(errno), errno);
    remove_dir(dir);
    return ACCIO_RUN_OWN_ERROR;
  }
  fflush(NULL);
  /* The signals the launcher forwards are blocked from before the fork until the handlers are in
   * place, so a Ctrl-C or SIGTERM in between neither kills the launcher (orphaning the program and
   * leaving the statistics directory) nor is lost; the program gets the mask it was given. */
  sigset_t fwd, was;
  sigemptyset(&fwd);
  sigaddset(&fwd, SIGTERM);
  sigaddset(&fwd, SIGHUP);
  sigaddset(&fwd, SIGQUIT);
  sigaddset(&fwd, SIGINT);
  sigprocmask(SIG_BLOCK, &fwd, &was);
  pid_t pid = fork();
  if (pid == 0) {
    sigprocmask(SIG_SETMASK, &was, NULL);
    close(pipefd[0]);
    exec_program(exe, prog);
    int e = errno;
    ssize_t unused = write(pipefd[1], &e, sizeof e);
    (void)unused;
    _exit(ACCIO_RUN_CANNOT_EXECUTE);
  }
  close(pipefd[1]);
  if (pid < 0) {
    sigprocmask(SIG_SETMASK, &was, NULL);
    say("fork: %s (errno %d)", why(errno), errno);
    remove_dir(dir);
    return ACCIO_RUN_OWN_ERROR;
  }
  g_child = pid;
  struct sigaction fw = {0}, ign = {0}, old_int;
  fw.sa_handler = forward;
  ign.sa_handler = SIG_IGN;
  sigaction(SIGTERM, &fw, NULL);
  sigaction(SIGHUP, &fw, NULL);
  sigaction(SIGQUIT, &fw, NULL);
  sigaction(SIGINT, &ign, &old_int); /* the terminal sends it to the program too */
  sigprocmask(SIG_SETMASK, &was, NULL);
  int e = 0;
  ssize_t got;
  while ((got = read(pipefd[0], &e, sizeof e)) < 0 && errno == EINTR) {}
  close(pipefd[0]);
  const int ws = wait_for(pid);
  g_child = 0; /* reaped: nothing to forward to until the report runs */
  if (got == (ssize_t)sizeof e) {
    remove_dir(dir);
    return exec_failed(prog[0], e);
  }
  status = WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : WEXITSTATUS(ws);

  /* The report, rendered by the Python CLI without the shim. */
  unsetenv("LD_PRELOAD");
  unsetenv("ACCIO_PRELOAD_STATS_DIR");
  char st_arg[16];
  snprintf(st_arg, sizeof st_arg, "%d", status);
  rargv[n++] = "--run-report";
  rargv[n++] = dir;
  rargv[n++] = "--status";
  rargv[n++] = st_arg;
  if (val[OPT_STATS]) rargv[n++] = "--stats";
  if (val[OPT_STATS_JSON]) {
    rargv[n++] = "--stats-json";
    rargv[n++] = val[OPT_STATS_JSON];
  }
  if (val[OPT_THRESHOLD]) {
    rargv[n++] = "--threshold";
    rargv[n++] = num;
  }
  if (val[OPT_MECHANISM]) {
    rargv[n++] = "--mechanism";
    rargv[n++] = val[OPT_MECHANISM];
  }
  rargv[n++] = "--";
  for (char** p = prog; *p && n < (int)(sizeof rargv / sizeof *rargv) - 1; ++p) rargv[n++] = *p;
  rargv[n] = NULL;
  int rc = ACCIO_RUN_OWN_ERROR;
  pid_t rp = fork();
  if (rp == 0) {
    sigaction(SIGINT, &old_int, NULL); /* Ctrl-C stops the report as it would the program */
    execv(rargv[0], (char* const*)rargv); /* an absolute path (report_command): no PATH lookup */
    say("cannot start %s to render the statistics: %s (errno %d); the program's exit status was %d", rargv[0],
        why(errno), errno, status);
    _exit(ACCIO_RUN_OWN_ERROR);
  }
  if (rp > 0) {
    g_child = rp;
    const int rs = wait_for(rp);
    /* 128 + SIGPIPE (accio-py's quiet exit) or SIGPIPE itself: the reader of stdout went away while
     * the report was written (`accio run --stats-json - -- prog | head`), not an error: the
     * program's status stands, as it does after a complete report. */
    const int reader_gone = (WIFEXITED(rs) && WEXITSTATUS(rs) == 128 + SIGPIPE) ||
                            (WIFSIGNALED(rs) && WTERMSIG(rs) == SIGPIPE);
    rc = (WIFEXITED(rs) && WEXITSTATUS(rs) == 0) || reader_gone ? 0 : ACCIO_RUN_OWN_ERROR;
  }
  remove_dir(dir);
  if (rc) return rc;
  if (WIFSIGNALED(ws)) { /* die of the program's signal, as the exec'd program would have */
    signal(WTERMSIG(ws), SIG_DFL);
    fflush(NULL);
    kill(getpid(), WTERMSIG(ws));
  }
  return status;
}

#ifndef ACCIO_RUN_NO_MAIN
int main(int argc, char** argv) { return accio_run_main(argc, argv); }
#endif
