#!/usr/bin/env bash
# Proves that wtx can be embedded from its INSTALLED package (CTest embed.installed_package;
# docs: README "Use wtx from your own C++ program").
#
#   scripts/check_embed.sh [BUILD_DIR [CXX]]      (default: build, c++)
#
#  1. installs the already-built BUILD_DIR into a temporary prefix (no second build of wtx);
#  2. checks the installed tree: the CLI runs, no private header (src/, journal/, kernels/) is
#     installed or included by a public header, no public header includes RocksDB or all of
#     nlohmann/json (json_fwd.hpp only), and every public header compiles on its own against
#     the prefix alone;
#  3. builds examples/embed (a separate CMake project: find_package(wtx CONFIG REQUIRED)) and
#     runs it: two ranks over engine-owned buffers, an in-process coordinator, one full
#     transaction from tests/conformance/models/tiny-llama/config.json, committed;
#  4. builds the same program with pkg-config (wtx.pc) alone, and runs it.
# With shared libraries (a -DBUILD_SHARED_LIBS=ON build; scripts/check_packaging.sh shared), the
# installed CLI and both programs must load libwtx_* from the prefix, never from BUILD_DIR: the
# CLI through its RPATH ($ORIGIN/../lib), the pkg-config build through -Wl,-rpath of wtx.pc's
# libdir (as a user of a non-system prefix links it).
# Exits non-zero, naming the step, on any failure. The prefix is removed afterwards.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
cxx=${2:-c++}
config="$src/tests/conformance/models/tiny-llama/config.json"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wtx-embed.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
step() { echo "== check_embed: $*"; }
fail() { echo "check_embed: FAILED: $*" >&2; exit 1; }

step "install $build into a temporary prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }

# The libwtx_* shared libraries `binary` loads must all come from the prefix.
check_loads_from_prefix() {
  local binary=$1 libs
  libs=$(ldd "$binary" | grep -E 'libwtx_[a-z]+\.so' || true)
  [ -n "$libs" ] || fail "$binary loads no libwtx_*.so although wtx was built shared"
  if echo "$libs" | grep -v -F "$prefix/" >&2; then
    fail "$binary loads the libwtx_* above from outside the prefix $prefix"
  fi
}

step "installed tree"
[ -x "$prefix/bin/wtx" ] || fail "bin/wtx not installed"
"$prefix/bin/wtx" --help >/dev/null || fail "installed bin/wtx --help"
step "installed bin/wtx bench finds the installed models from outside any checkout"
(cd "$tmp" && env -u WTX_CONFORMANCE_DIR "$prefix/bin/wtx" bench --quick --only coverage) \
  >"$tmp/bench.out" 2>"$tmp/bench.err" || { cat "$tmp/bench.err"; fail "installed wtx bench --quick"; }
grep -q -F "models from $prefix/share/wtx (installed)" "$tmp/bench.err" ||
  { cat "$tmp/bench.err"; fail "installed wtx bench did not name its installed models"; }
shared=0
if [ -n "$(find "$prefix" -name 'libwtx_core.so*' -print -quit)" ]; then
  shared=1
  step "shared libraries: the installed CLI loads them from the prefix"
  check_loads_from_prefix "$prefix/bin/wtx"
fi
cfg=$(find "$prefix" -name wtxConfig.cmake | head -n1)
[ -n "$cfg" ] || fail "wtxConfig.cmake not installed"
[ -f "$(dirname "$cfg")/wtxConfigVersion.cmake" ] || fail "wtxConfigVersion.cmake not installed"
pc=$(find "$prefix" -name wtx.pc | head -n1)
[ -n "$pc" ] || fail "wtx.pc not installed"
[ -d "$prefix/include/wtx" ] || fail "include/wtx not installed"
if [ -n "$(find "$prefix/include" -mindepth 1 -maxdepth 1 ! -name wtx)" ]; then
  fail "headers installed outside include/wtx: $(find "$prefix/include" -mindepth 1 -maxdepth 1 ! -name wtx)"
fi
if grep -nE '#include[[:space:]]+"(src|journal|kernels|tools|tests)/' "$prefix"/include/wtx/*.h; then
  fail "a public header includes a private one (above)"
fi
# Heavy dependencies stay out of the public headers: RocksDB never, nlohmann/json only as
# json_fwd.hpp (the full header is the implementation's business).
if grep -nE '#include[[:space:]]+[<"](rocksdb/|nlohmann/json\.hpp)' "$prefix"/include/wtx/*.h; then
  fail "a public header includes RocksDB or all of nlohmann/json (above; use json_fwd.hpp)"
fi
for h in "$prefix"/include/wtx/*.h; do
  echo "#include \"wtx/$(basename "$h")\"" >"$tmp/header.cc"
  "$cxx" -std=c++20 -fsyntax-only -I"$prefix/include" "$tmp/header.cc" \
    || fail "public header wtx/$(basename "$h") does not compile on its own against the prefix"
done

step "build examples/embed with find_package(wtx)"
cmake -S "$src/examples/embed" -B "$tmp/embed" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/configure.log" \
  || { cat "$tmp/configure.log"; fail "configure examples/embed"; }
cmake --build "$tmp/embed" >"$tmp/build.log" || { cat "$tmp/build.log"; fail "build examples/embed"; }
step "run it"
"$tmp/embed/wtx_embed" "$config" "$tmp/work-cmake" || fail "examples/embed (CMake build)"
if [ "$shared" = 1 ]; then check_loads_from_prefix "$tmp/embed/wtx_embed"; fi

command -v pkg-config >/dev/null || fail "pkg-config not found (scripts/setup.sh installs it)"
step "build the same program with pkg-config (wtx.pc)"
flags=$(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs wtx) || fail "pkg-config wtx"
if [ "$shared" = 1 ]; then
  flags="$flags -Wl,-rpath,$(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --variable=libdir wtx)"
fi
# shellcheck disable=SC2086
"$cxx" -std=c++20 -O1 "$src/examples/embed/main.cc" -o "$tmp/wtx_embed_pc" $flags \
  || fail "build examples/embed with pkg-config flags: $flags"
"$tmp/wtx_embed_pc" "$config" "$tmp/work-pc" || fail "examples/embed (pkg-config build)"
if [ "$shared" = 1 ]; then check_loads_from_prefix "$tmp/wtx_embed_pc"; fi
step "ok"
