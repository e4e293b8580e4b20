#!/usr/bin/env bash
# GPU check for the wtx kernels (docs/gpu.md), for a machine with an NVIDIA GPU (target: H200,
# sm_90): configures and builds the CUDA targets in build-gpu, runs the GPU tests (which must
# pass, not skip), every scenario with the ranks' live bytes in GPU memory (`wtx sim --memory
# device`, output identical to host memory), the CPU references, and the GPU benchmark, and
# prints the figures.
#
#   tools/gpu-check.sh [HASH_MiB [SCATTER_INDICES]]     (defaults: 4096 MiB, 1000000)
#
# Exit status: 0 all tests passed and the bandwidth goals (>= 50% of peak HBM for hashing and
# for scattering 10^6 indices) were met; 1 a build or test failure; 2 tests passed but a goal
# was missed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${WTX_GPU_BUILD_DIR:-$ROOT/build-gpu}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
HASH_MIB="${1:-4096}"
SCATTER_N="${2:-1000000}"

echo "== nvidia-smi"
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "nvidia-smi not found: this script needs an NVIDIA GPU and driver" >&2
  exit 1
fi
nvidia-smi
nvidia-smi --query-gpu=name,memory.total,clocks.max.memory,driver_version --format=csv || true

NVCC="$(command -v nvcc || true)"
if [[ -z "$NVCC" && -x /usr/local/cuda/bin/nvcc ]]; then NVCC=/usr/local/cuda/bin/nvcc; fi
if [[ -z "$NVCC" ]]; then
  echo "nvcc not found (install the CUDA toolkit or put it on PATH)" >&2
  exit 1
fi
echo "== nvcc: $NVCC"
"$NVCC" --version | tail -n 2

echo "== configure ($BUILD)"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DWTX_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}"
if ! grep -q '^CMAKE_CUDA_COMPILER:.*nvcc' "$BUILD/CMakeCache.txt"; then
  echo "CUDA was not enabled by the configure step" >&2
  exit 1
fi

echo "== build"
cmake --build "$BUILD" -j"$JOBS" --target wtx gpu_test gpu_ref_test wtx_gpu_bench

echo "== GPU tests"
set +e
"$BUILD/bin/gpu_test" --durations yes
rc=$?
set -e
if [[ $rc -eq 77 ]]; then
  echo "gpu_test SKIPPED: no usable CUDA device seen by the runtime" >&2
  exit 1
elif [[ $rc -ne 0 ]]; then
  echo "gpu_test FAILED ($rc)" >&2
  exit 1
fi

echo "== every scenario with device live memory: output identical to host memory"
n=0
for s in "$ROOT"/tests/conformance/scenarios/*.json "$ROOT"/tests/scenarios/*.json "$ROOT"/examples/*.json; do
  [[ "$s" == *.expect.json || ! -f "${s%.json}.expect.json" ]] && continue
  if ! cmake -DWTX="$BUILD/bin/wtx" -DSCENARIO="$s" -DEXPECT="${s%.json}.expect.json" \
       "-DVARIANT=--memory;device" -P "$ROOT/tests/net/compare_transports.cmake" \
       >"$BUILD/device-scenario.log" 2>&1; then
    echo "FAILED on device memory: $s" >&2
    cat "$BUILD/device-scenario.log" >&2
    exit 1
  fi
  n=$((n + 1))
done
echo "$n scenarios: identical on device memory"

echo "== CPU references and live verification"
"$BUILD/bin/gpu_ref_test"

echo "== benchmark (hash ${HASH_MIB} MiB, scatter ${SCATTER_N} indices)"
set +e
"$BUILD/bin/wtx_gpu_bench" "$HASH_MIB" "$SCATTER_N"
rc=$?
set -e
case $rc in
  0) echo "== OK: tests passed, bandwidth goals met" ;;
  2) echo "== tests passed; a bandwidth goal was NOT met (see above)"; exit 2 ;;
  *) echo "== benchmark failed ($rc)" >&2; exit 1 ;;
esac
