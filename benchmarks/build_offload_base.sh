#!/bin/sh
# Builds a previous commit's offload runtime (libaccio_offload, its worker and accio-offload-bench)
# into OUT, for benchmarks/offload_vs_base.py. Only the offload runtime is compiled: it reaches
# libaccio through libaccio's C API alone, so it links against the libaccio of BUILD (this tree's
# CMake build dir), and the two contenders differ in the offload runtime only. Same compiler flags
# as the CMake build (-O2 -g -DNDEBUG, hidden visibility, the version script).
#
#   benchmarks/build_offload_base.sh [REV=main] [OUT=/tmp/offload-base] [BUILD=build/main]
set -eu
rev=${1:-main}
out=${2:-/tmp/offload-base}
build=$(realpath "${3:-build/main}")
ffi_inc=$(sed -n 's/^FFI_INCLUDE_DIR:PATH=//p' "$build/CMakeCache.txt")
ffi_lib=$(sed -n 's/^FFI_LIBRARY:FILEPATH=//p' "$build/CMakeCache.txt")
rm -rf "$out" && mkdir -p "$out/src" "$out/bin"
git archive "$rev" src/offload include cmake/libaccio_offload.map | tar -x -C "$out/src"
s=$out/src
flags="-O2 -g -DNDEBUG -fPIC -fvisibility=hidden -fvisibility-inlines-hidden -D_GNU_SOURCE"
${CXX:-c++} $flags -std=c++20 -DACCIO_VERSION_STRING=\"base\" -I"$s/src" -I"$s/include" -I"$ffi_inc" -shared \
  -o "$out/bin/libaccio_offload.so" "$s"/src/offload/*.cpp -L"$build" -laccio "$ffi_lib" -ldl -lpthread \
  -Wl,--no-undefined -Wl,--exclude-libs,ALL -Wl,--version-script="$s/cmake/libaccio_offload.map" \
  -Wl,-rpath,"$build"
rpath="-Wl,-rpath,$out/bin -Wl,-rpath,$build -Wl,-rpath-link,$build"
${CC:-cc} -O2 -g -DNDEBUG -I"$s/include" -o "$out/bin/accio-offload-worker" \
  "$s/src/offload/programs/accio_offload_worker.c" -L"$out/bin" -laccio_offload $rpath
${CXX:-c++} -O2 -g -DNDEBUG -std=c++20 -I"$s/include" -o "$out/bin/accio-offload-bench" \
  "$s/src/offload/programs/accio_offload_bench.cpp" -L"$out/bin" -laccio_offload $rpath
echo "$out/bin/accio-offload-bench"
