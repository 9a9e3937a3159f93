"""accio run is transparent: a program sees what it sees without the shim (output, exit status,
errno, file offsets, signals, record locks, the bytes of its buffers), in every configuration. Each
case below reproduces a finding of the audits of the shim in the twenty-fourth and twenty-seventh
sessions (/work/shim_audit_session24.md, /work/shim_audit_session27.md), where the program behaved
differently under `accio run`: it is run plainly, then under the shim with the default settings and
with the threshold lowered to 4 KiB under each host mechanism, and every output must equal the
plain one.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ACCIO = [sys.executable, "-m", "accio.cli"]
CONFIGS = {"default": [], "4k": ["--threshold", "4k"], "parallel": ["-m", "parallel", "--threshold", "4k"],
           "direct": ["-m", "direct", "--threshold", "4k"], "uring": ["-m", "uring", "--threshold", "4k"]}

PROGRAM = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1u << 20)
static char* buf;

/* A large read makes the engine start its threads; then the program blocks SIGTERM to read it from
 * a signalfd. The engine's threads took the signal, and the default action killed the process. */
static int signal_case(void) {
  int fd = open("data.bin", O_RDONLY);
  if (read(fd, buf, 2 * MiB) != 2 * MiB) return 1;
  close(fd);
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGTERM);
  sigprocmask(SIG_BLOCK, &s, NULL);
  int sfd = signalfd(-1, &s, 0);
  kill(getpid(), SIGTERM);
  struct signalfd_siginfo si;
  if (read(sfd, &si, sizeof si) != sizeof si) return 1;
  printf("signal %u through the signalfd\n", si.ssi_signo);
  return 0;
}

/* A write lock on f0, then reads of 70 more files kept open: the shim evicted f0's engine handle,
 * whose close released the program's lock. */
static void seen_by_another(const char* p) {
  if (fork() == 0) {
    int fd = open(p, O_RDWR);
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    fcntl(fd, F_GETLK, &fl);
    printf("%s locked as another process sees it: %s\n", p, fl.l_type == F_UNLCK ? "no" : "yes");
    fflush(stdout);
    _exit(0);
  }
  wait(NULL);
}
static int locks_case(int use_lockf) {
  int fd = open("f0", O_RDWR);
  if (use_lockf) {
    if (lockf(fd, F_LOCK, 0) != 0) return 1;
  } else {
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(fd, F_SETLK, &fl) != 0) return 1;
  }
  if (pread(fd, buf, 64 * 1024, 0) != 64 * 1024) return 1;
  for (int i = 1; i <= 70; ++i) {
    char p[32];
    snprintf(p, sizeof p, "f%d", i);
    int g = open(p, O_RDONLY);
    if (pread(g, buf, 64 * 1024, 0) != 64 * 1024) return 1;
  }
  seen_by_another("f0");
  return 0;
}

/* A locked file whose descriptor a failed dup2 names, or whose O_PATH descriptor is closed: neither
 * releases the lock in the kernel, and neither may close the engine's handle of the file (whose
 * close would). Review, session 24. */
static int locks_kept_case(void) {
  int fd = open("f0", O_RDWR);
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  if (fcntl(fd, F_SETLK, &fl) != 0 || pread(fd, buf, 64 * 1024, 0) != 64 * 1024) return 1;
  errno = 0;
  const int r = dup2(1000, fd), e = errno;
  printf("dup2 from a closed descriptor: %d errno %d\n", r, e);
  fflush(stdout);
  seen_by_another("f0");
  int path = open("f0", O_PATH);
  close(path);
  seen_by_another("f0");
  return 0;
}

/* read(fd, buf, SIZE_MAX): the kernel refuses the range (EFAULT) before it looks at the count. The
 * shim cut the count to 2 GiB first, and the file was copied over the heap. */
static int huge_count_case(void) {
  struct { char b[MiB]; char canary[64]; }* s = calloc(1, sizeof *s);
  memset(s->canary, 'C', sizeof s->canary);
  int fd = open("data.bin", O_RDONLY);
  errno = 0;
  ssize_t r = read(fd, s->b, SIZE_MAX);
  printf("read(SIZE_MAX) %zd errno %d offset %ld canary %s\n", r, errno, (long)lseek(fd, 0, SEEK_CUR),
         s->canary[0] == 'C' ? "intact" : "overwritten");
  return 0;
}

/* An iovec array at an address nothing is mapped at: EFAULT, not a SIGSEGV in the shim. */
static int bad_iovec_case(void) {
  int fd = open("data.bin", O_RDONLY);
  errno = 0;
  ssize_t r = readv(fd, (struct iovec*)16, 2);
  printf("readv(16) %zd errno %d\n", r, errno);
  errno = 0;
  r = preadv(fd, (struct iovec*)16, 2, 0);
  printf("preadv(16) %zd errno %d\n", r, errno);
  return 0;
}

/* A call that succeeds leaves errno alone. */
static int errno_case(void) {
  int fd = open("data.bin", O_RDONLY);
  errno = 12345;
  ssize_t r = read(fd, buf, 2 * MiB);
  printf("read %zd errno %d\n", r, errno);
  errno = 12345;
  r = pread(fd, buf, 3 * MiB, MiB);
  printf("pread %zd errno %d\n", r, errno);
  int w = open("errno.out", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  errno = 12345;
  r = write(w, buf, 2 * MiB);
  printf("write %zd errno %d\n", r, errno);
  return 0;
}

/* A write across RLIMIT_FSIZE: the kernel writes up to the limit and returns the count, no signal. */
static int fsize_case(void) {
  struct rlimit rl = {3 * MiB, RLIM_INFINITY};
  setrlimit(RLIMIT_FSIZE, &rl);
  int fd = open("fsize.out", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ssize_t r = write(fd, buf, 4 * MiB);
  printf("write %zd\n", r);
  r = pwrite(fd, buf, 2 * MiB, 2 * MiB);
  printf("pwrite %zd\n", r);
  return 0;
}

/* Raises RLIMIT_NOFILE to its hard limit for descriptor 5000; 0 (said as skipped) where it is lower. */
static int descriptor_5000_allowed(void) {
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_max < 5001) {
    printf("skipped: RLIMIT_NOFILE\n");
    return 0;
  }
  rl.rlim_cur = rl.rlim_max;
  return setrlimit(RLIMIT_NOFILE, &rl) == 0;
}

/* Threads reading one descriptor to its end: the offset ends at the end of the file. `high`: eight
 * threads, 64 KiB reads, through descriptor 5000 (the shim's count of reads in flight covered only
 * descriptors below 4096: review, session 27: 2 rounds in 400 ended past the end there). */
static int shared;
static size_t piece = MiB;
static void* reader(void* arg) {
  char* b = malloc(piece);
  while (read(shared, b, piece) > 0) {
  }
  free(b);
  return arg;
}
static int eof_threads_case(int high) {
  int bad = 0, threads = high ? 8 : 4, rounds = high ? 400 : 40;
  if (high) {
    if (!descriptor_5000_allowed()) return 0;
    piece = 64 << 10;
  }
  for (int round = 0; round < rounds; ++round) {
    shared = open("part.bin", O_RDONLY);
    if (high) {
      if (dup2(shared, 5000) != 5000) return 1;
      close(shared);
      shared = 5000;
    }
    pthread_t t[8];
    for (int i = 0; i < threads; ++i) pthread_create(&t[i], NULL, reader, NULL);
    for (int i = 0; i < threads; ++i) pthread_join(t[i], NULL);
    bad += lseek(shared, 0, SEEK_CUR) != lseek(shared, 0, SEEK_END);
    close(shared);
  }
  printf("rounds whose offset ended past the end of the file: %d\n", bad);
  return 0;
}

/* The daemon's loop over every descriptor, up to the limit as daemons take it (sysconf): the shim's
 * own (uring's ring, at 1024 and above since the twenty-fifth session) go too, and the next request
 * must not wait for ever on a ring that is gone. */
static int close_loop_case(void) {
  int a = open("data.bin", O_RDONLY);
  if (pread(a, buf, 2 * MiB, 0) != 2 * MiB) return 1;
  const long top = sysconf(_SC_OPEN_MAX) < 65536 ? sysconf(_SC_OPEN_MAX) : 65536;
  for (int fd = 3; fd < top; ++fd)
    if (fd != a) close(fd);
  int b = open("loop.out", O_RDWR | O_CREAT | O_TRUNC, 0644);
  memset(buf, 'b', 2 * MiB);
  printf("write %zd\n", pwrite(b, buf, 2 * MiB, 0));
  printf("read %zd first byte %d\n", pread(a, buf, 2 * MiB, 0), buf[0]);
  return 0;
}

/* A file read through descriptor 5000, closed with close_range and deleted: no descriptor of the
 * process holds it any more (the shim's engine handle kept it, and its space, until exit). */
static int close_range_high_case(void) {
  if (!descriptor_5000_allowed()) return 0;
  int fd = open("high.bin", O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (pwrite(fd, buf, 2 * MiB, 0) != 2 * MiB || dup2(fd, 5000) != 5000) return 1;
  close(fd);
  if (pread(5000, buf, 2 * MiB, 0) != 2 * MiB) return 1;
  close_range(4096, ~0U, 0);
  unlink("high.bin");
  int held = 0;
  char link[64], to[4096];
  for (int i = 0; i < 1 << 16; ++i) {
    snprintf(link, sizeof link, "/proc/self/fd/%d", i);
    ssize_t n = readlink(link, to, sizeof to - 1);
    if (n > 0) to[n] = 0, held += strstr(to, "high.bin") != NULL;
  }
  printf("descriptors on the deleted file: %d\n", held);
  return 0;
}

/* A program that closed its standard input and output, then reads a file open for writing: its
 * writes to fd 1 fail, and its next open() gets 0, as without the shim. The engine's descriptors
 * of the file took 0 and 1, and the write to the closed stdout went into the data file. */
static int stdio_closed_case(void) {
  const int out = dup(1);
  const int a = open("rw.bin", O_RDWR);
  close(0);
  close(1);
  if (pread(a, buf, 2 * MiB, 0) != 2 * MiB) return 1;
  const unsigned char first = (unsigned char)buf[0];
  errno = 0;
  const ssize_t w = write(1, "x", 1);
  const int e = errno;
  const int next = open("data.bin", O_RDONLY);
  unsigned char now = 0;
  if (pread(a, &now, 1, 0) != 1) return 1;
  dprintf(out, "write to the closed stdout %zd errno %d, next open %d, first byte %s\n", w, e, next,
          now == first ? "kept" : "overwritten");
  return 0;
}

/* A read where the program put the offset past the end of the file returns 0 and leaves the offset
 * there, so the next write leaves a hole. The shim set the offset back to the end of the file: the
 * write landed there, and the file was 1 byte longer than the hole's end instead (session 27). */
static int past_end_case(void) {
  int fd = open("past.out", O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (pwrite(fd, buf, MiB, 0) != MiB) return 1;
  lseek(fd, 3 * MiB, SEEK_SET);
  ssize_t r = read(fd, buf, 2 * MiB);
  printf("read past the end %zd offset %ld\n", r, (long)lseek(fd, 0, SEEK_CUR));
  struct iovec v[2] = {{buf, MiB}, {buf + MiB, MiB}};
  lseek(fd, 5 * MiB, SEEK_SET);
  r = readv(fd, v, 2);
  printf("readv past the end %zd offset %ld\n", r, (long)lseek(fd, 0, SEEK_CUR));
  if (write(fd, "z", 1) != 1) return 1;
  printf("size after the write %ld\n", (long)lseek(fd, 0, SEEK_END));
  return 0;
}

/* /proc files have a size of 0 and text of any length. A large read() loop over one ends: the shim
 * set the offset back to the size, 0, after each short read, and the loop read the text for ever. */
static int proc_case(void) {
  const char* files[] = {"/proc/self/cmdline", "/proc/version"};
  char* big = malloc(16 * MiB);
  for (int i = 0; i < 2; ++i) {
    int fd = open(files[i], O_RDONLY);
    long total = 0, calls = 0;
    ssize_t r;
    while ((r = read(fd, big, 16 * MiB)) > 0 && calls < 10) total += r, ++calls;
    printf("%s: %ld reads, %ld bytes, then %zd, offset %ld\n", files[i], calls, total, r, (long)lseek(fd, 0, SEEK_CUR));
    close(fd);
  }
  free(big);
  return 0;
}

/* A read across the end of the file changes only the bytes it returns: the rest of the buffer keeps
 * what the program had there. The file is written as a program writes one (a part, then another
 * after a hole, at an offset that is not a multiple of 4 KiB), then read across its end into an
 * aligned buffer: the engine's O_DIRECT reads zeroed it past the count, up to the end of their 4 MiB
 * task. */
static int beyond_end_case(void) {
  char* big = aligned_alloc(4096, 16 * MiB); /* the engine reads into it directly */
  int fd = open("beyond.out", O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (write(fd, buf, 3 * MiB) != 3 * MiB || pwrite(fd, buf, 2 * MiB, 6 * MiB + 100) != 2 * MiB) return 1;
  for (int round = 0; round < 3; ++round) {
    memset(big, 'x', 16 * MiB);
    ssize_t r;
    if (round == 0) r = pread(fd, big, 16 * MiB, 0);
    else if (round == 1) {
      lseek(fd, MiB / 2, SEEK_SET);
      r = read(fd, big, 16 * MiB);
    } else {
      struct iovec v[3] = {{big, 3 * MiB}, {big + 3 * MiB, 5 * MiB}, {big + 8 * MiB, 8 * MiB}};
      lseek(fd, 1000, SEEK_SET);
      r = readv(fd, v, 3);
    }
    long changed = 0;
    for (long i = r > 0 ? r : 0; i < 16 * MiB; ++i) changed += big[i] != 'x';
    printf("round %d: %zd bytes, %ld bytes after them changed, offset %ld\n", round, r, changed, (long)lseek(fd, 0, SEEK_CUR));
  }
  free(big);
  return 0;
}

int main(int argc, char** argv) {
  buf = malloc(4 * MiB);
  const char* c = argv[1];
  if (!strcmp(c, "signal")) return signal_case();
  if (!strcmp(c, "locks")) return locks_case(0);
  if (!strcmp(c, "lockf")) return locks_case(1);
  if (!strcmp(c, "locks-kept")) return locks_kept_case();
  if (!strcmp(c, "huge-count")) return huge_count_case();
  if (!strcmp(c, "bad-iovec")) return bad_iovec_case();
  if (!strcmp(c, "errno")) return errno_case();
  if (!strcmp(c, "fsize")) return fsize_case();
  if (!strcmp(c, "eof-threads")) return eof_threads_case(0);
  if (!strcmp(c, "eof-threads-high")) return eof_threads_case(1);
  if (!strcmp(c, "close-loop")) return close_loop_case();
  if (!strcmp(c, "close-range-high")) return close_range_high_case();
  if (!strcmp(c, "stdio-closed")) return stdio_closed_case();
  if (!strcmp(c, "past-end")) return past_end_case();
  if (!strcmp(c, "proc")) return proc_case();
  if (!strcmp(c, "beyond-end")) return beyond_end_case();
  return 2;
}
"""


@pytest.fixture(scope="module")
def prog(tmp_path_factory) -> tuple[Path, Path]:
    """The compiled cases and a directory holding their files."""
    d = tmp_path_factory.mktemp("transparency")
    (d / "t.c").write_text(PROGRAM)
    r = subprocess.run(["cc", "-O1", "-pthread", "-o", str(d / "t"), str(d / "t.c")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    data = os.urandom(4 << 20)
    (d / "data.bin").write_bytes(data)
    (d / "rw.bin").write_bytes(data)
    (d / "part.bin").write_bytes(data[:(5 << 19)])  # 2.5 MiB: the threads' last reads are short
    for i in range(71):
        (d / f"f{i}").write_bytes(data[i * 4096:i * 4096 + (64 << 10)])
    return d / "t", d


def outcome(cmd, cwd, env=None) -> tuple[int, str, str]:
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120, env=env)
    return p.returncode, p.stdout, p.stderr


@pytest.mark.parametrize("case", ["signal", "locks", "lockf", "locks-kept", "huge-count", "bad-iovec", "errno", "fsize",
                                  "eof-threads", "eof-threads-high", "close-loop", "close-range-high", "stdio-closed", "past-end", "proc",
                                  "beyond-end"])
def test_a_program_sees_under_the_shim_what_it_sees_without_it(prog, case):
    exe, d = prog
    want = outcome([str(exe), case], d)
    assert want[0] == 0, want
    for name, opts in CONFIGS.items():
        got = outcome(ACCIO + ["run", *opts, "--", str(exe), case], d)
        assert got == want, (case, name, got, want)


def test_an_addresssanitizer_program_starts(prog, tmp_path):
    """ASan refuses to run unless its runtime is the first library loaded ("ASan runtime does not
    come first in initial library list"): the launcher preloads it before the shim."""
    _, d = prog
    src = tmp_path / "a.c"
    src.write_text('#include <fcntl.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <unistd.h>\n'
                   'int main(void) { char* b = malloc(2 << 20); int fd = open("data.bin", O_RDONLY);\n'
                   '  printf("read %zd\\n", read(fd, b, 2 << 20)); free(b); return 0; }\n')
    exe = tmp_path / "a"
    r = subprocess.run(["cc", "-fsanitize=address", "-o", str(exe), str(src)], capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"no AddressSanitizer here: {r.stderr.strip()[:200]}")
    want = outcome([str(exe)], d)
    assert want[0] == 0 and want[1] == "read 2097152\n", want
    for name, opts in CONFIGS.items():
        got = outcome(ACCIO + ["run", *opts, "--", str(exe)], d)
        assert got == want, (name, got, want)
