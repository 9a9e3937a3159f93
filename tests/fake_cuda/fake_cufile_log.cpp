// The part of the fake cuFile that is C++ inside, as the real libcufile is: a library linked against
// the system's shared libstdc++ whose first calls (cuFileDriverOpen, cuFileHandleRegister) format
// and parse numbers with iostreams (its logger, its cufile.json reader). The fake library links the
// shared libstdc++ as libcufile does (LINKER_LANGUAGE C + -lstdc++ in tests/cpp/CMakeLists.txt, so
// -static-libstdc++ in the build's flags does not reach it).
//
// Why (issue 17): a libaccio built with -static-libstdc++ and no export list exported its copy of
// the C++ runtime. In a program linked with libaccio, libcufile's references to the runtime then
// bound partly to that copy and partly to the shared one, and crashed in iostream number parsing.
// Whether such a mix crashes depends on how far the two copies' versions differ (on a machine whose
// static and shared libstdc++ are of one GCC it runs), so the fake also checks where its runtime
// calls bound and fails when they left the shared libstdc++: the split itself is the bug.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <locale>
#include <sstream>
#include <string>

namespace {

template <class F>
const void* address_of(F f) {  // a function, or a non-virtual member function (Itanium ABI: its code address first)
  const void* p;
  std::memcpy(&p, &f, sizeof p);
  return p;
}

// The C++ runtime definitions the code below uses, each with the object it bound to; true when all
// are in the shared libstdc++, else says which were not on stderr.
bool runtime_is_whole() {
  using istream_long = std::istream& (std::istream::*)(long&);
  using ostream_long = std::ostream& (std::ostream::*)(long);
  const struct {
    const char* name;
    const void* addr;
  } used[] = {
      {"std::locale::classic()", address_of(&std::locale::classic)},
      {"std::num_get<char>::id", &std::num_get<char>::id},
      {"std::num_put<char>::id", &std::num_put<char>::id},
      {"std::istream::operator>>(long&)", address_of(static_cast<istream_long>(&std::istream::operator>>))},
      {"std::ostream::operator<<(long)", address_of(static_cast<ostream_long>(&std::ostream::operator<<))},
  };
  bool whole = true;
  for (const auto& u : used) {
    Dl_info info{};
    const char* object = dladdr(u.addr, &info) && info.dli_fname ? info.dli_fname : "(unknown)";
    if (!std::strstr(object, "libstdc++")) {
      std::fprintf(stderr, "fake cuFile: %s bound to %s, not to the shared libstdc++: two C++ runtimes in one process\n",
                   u.name, object);
      whole = false;
    }
  }
  return whole;
}

}  // namespace

// 0 when the runtime is whole and the numbers come back as written; -1 otherwise (the caller,
// cuFileDriverOpen or cuFileHandleRegister, then fails with CU_FILE_INTERNAL_ERROR).
extern "C" int fake_cufile_log(const char* what, long value) {
  if (!runtime_is_whole()) return -1;
  std::ostringstream os;
  os << "cufile " << what << " value= " << value << " hex= " << std::hex << value << std::dec
     << " ratio= " << std::fixed << std::setprecision(3) << static_cast<double>(value) / 8.0;
  std::istringstream is(os.str());
  std::string word, tag;
  long back = -1, hex = -1;
  double ratio = -1;
  while (is >> word && word != "value=") {
  }
  is >> back >> tag >> std::hex >> hex >> std::dec >> tag >> ratio;
  if (!is || back != value || hex != value || ratio != static_cast<double>(value) / 8.0) return -1;
  // As the huge-page probe did: a number read from a kernel file with ifstream >> long.
  std::ifstream stat("/proc/self/stat");
  long pid = -1;
  if (!(stat >> pid) || pid != static_cast<long>(getpid())) return -1;
  return 0;
}
