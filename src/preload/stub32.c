/* The 32-bit libaccio_preload.so of lib/accio-platform/i386..i686 (CMakeLists.txt): an empty library, so
 * that a 32-bit program under `accio run` loads it without a word where the 64-bit shim would make
 * its loader print "wrong ELF class". It serves nothing: such programs run as without accio. Built
 * with -m32 -nostdlib, so it needs no 32-bit C library. */
typedef int accio_stub32_is_empty;
