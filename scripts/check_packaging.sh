#!/usr/bin/env bash
# Proves a packaging flavour end to end from a clean build of its own (docs: README "Use wtx
# from your own C++ program", docs/architecture.md "Packaging").
#
#   scripts/check_packaging.sh [static|shared] [CMAKE_ARGS...]      (default: shared)
#
#  1. configures a separate build folder, build-packaging-<flavour> (WTX_PACKAGING_BUILD
#     overrides it), with BUILD_SHARED_LIBS=OFF/ON, the libraries and the CLI only
#     (WTX_BUILD_TESTS=OFF, WTX_BUILD_BENCH=OFF, WTX_PYTHON=OFF), ccache when installed, plus
#     CMAKE_ARGS (e.g. -DWTX_ENABLE_CUDA=OFF);
#  2. builds it (WTX_JOBS parallel jobs, default 2);
#  3. checks that the libraries are of the flavour asked for (libwtx_*.a or libwtx_*.so);
#  4. runs scripts/check_embed.sh on it: cmake --install into a temporary prefix, the installed
#     CLI runs from the prefix (shared: its RPATH finds the prefix's libraries, not the build
#     folder's), every public header compiles alone, examples/embed builds with
#     find_package(wtx) and with pkg-config (wtx.pc) and runs a full transaction.
#
# Not part of CTest or .ci/run (a second full build of wtx); CTest embed.installed_package runs
# step 4 on the regular (static) build. Exits non-zero, naming the step, on any failure.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
flavour=${1:-shared}
[ $# -gt 0 ] && shift
case "$flavour" in
  static) shared=OFF ;;
  shared) shared=ON ;;
  *)
    echo "usage: $0 [static|shared] [CMAKE_ARGS...]" >&2
    exit 2
    ;;
esac
build=${WTX_PACKAGING_BUILD:-$src/build-packaging-$flavour}
jobs=${WTX_JOBS:-2}
step() { echo "== check_packaging ($flavour): $*"; }
fail() { echo "check_packaging ($flavour): FAILED: $*" >&2; exit 1; }

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi

mkdir -p "$build"
log="$build/check_packaging"
step "configure $build"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS="$shared" \
      -DWTX_BUILD_TESTS=OFF -DWTX_BUILD_BENCH=OFF -DWTX_PYTHON=OFF "${launcher[@]}" "$@" \
  >"$log.configure.log" 2>&1 || { cat "$log.configure.log"; fail "configure"; }

step "build (-j$jobs)"
cmake --build "$build" -j"$jobs" >"$log.build.log" 2>&1 \
  || { tail -n 60 "$log.build.log"; fail "build (full log: $log.build.log)"; }

step "library flavour"
if [ "$shared" = ON ]; then want=so; other=a; else want=a; other=so; fi
for lib in wtx_core wtx_kernels wtx_net; do
  [ -n "$(find "$build" -maxdepth 2 -name "lib$lib.$want" -print -quit)" ] \
    || fail "lib$lib.$want not built"
  [ -z "$(find "$build" -maxdepth 2 -name "lib$lib.$other" -print -quit)" ] \
    || fail "lib$lib.$other built in a $flavour build"
done

"$src/scripts/check_embed.sh" "$build"
step "ok"
