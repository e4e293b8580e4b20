#!/usr/bin/env bash
# Runs the NCCL vote test on a GPU machine (CI only compiles and links it; without a GPU the
# test passes with a warning). Configures a build with CUDA's runtime and NCCL
# (nccl.h in /usr/local/cuda/include, libnccl.so in /usr/local/cuda/lib64), builds
# nccl_vote_test and runs it with one rank per visible GPU. Fails when no GPU is visible, when
# NCCL was not found, or when the collective path was not exercised.
#
#   tools/nccl-check.sh            # BUILD=build-nccl by default
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-nccl}
if ! nvidia-smi -L; then
  echo "nccl-check: no GPU visible" >&2
  exit 1
fi
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DWTX_ENABLE_CUDA=OFF -DWTX_ENABLE_NCCL=ON \
  | tee "$BUILD.configure.log" | grep -E "NCCL" || true
if ! grep -q "NCCL vote enabled" "$BUILD.configure.log"; then
  echo "nccl-check: CUDA runtime or NCCL not found" >&2
  exit 1
fi
cmake --build "$BUILD" -j"$(nproc)" --target nccl_vote_test
log=$(mktemp)
NCCL_DEBUG=${NCCL_DEBUG:-WARN} "$BUILD/bin/nccl_vote_test" --durations yes 2>&1 | tee "$log"
if grep -q "not exercised" "$log"; then
  echo "nccl-check: the NCCL collective path was not exercised" >&2
  exit 1
fi
echo "nccl-check: OK"
