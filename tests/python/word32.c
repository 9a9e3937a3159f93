/* A 32-bit program that needs no 32-bit C library, only the 32-bit loader (/lib/ld-linux.so.2, which
 * runs LD_PRELOAD): test_preload.py's test_a_32_bit_program_runs_silently builds it with
 * gcc -m32 -nostdlib -pie. It writes one line and exits 0 through int 0x80. */
static long sys(long n, long a, long b, long c) {
  long r;
  __asm__ volatile("int $0x80" : "=a"(r) : "a"(n), "b"(a), "c"(b), "d"(c) : "memory");
  return r;
}

void _start(void) {
  static const char msg[] = "32-bit program ran\n";
  sys(4 /* write */, 1, (long)msg, sizeof msg - 1);
  sys(1 /* exit */, 0, 0, 0);
}
