#!/usr/bin/env bash
# The sanitizer and fuzzing pass of CI (.ci/run calls it after the README's test command).
#
#  1. build-asan: clang, AddressSanitizer + UndefinedBehaviorSanitizer (any report fails), with
#     the libFuzzer targets (-DWTX_FUZZ=ON). Builds only the test targets that exercise the
#     core (not the benchmarks), then runs their CTests, the scenario tests and a short
#     torture under the sanitizers, and each fuzz target: WTX_FUZZ_RUNS inputs from a fixed
#     seed (deterministic, the default: 60000, about 15 s each), or with WTX_FUZZ_RUNS=0,
#     WTX_FUZZ_SECONDS of random search.
#  2. build-tsan: clang, ThreadSanitizer; builds only the threaded tests and runs them: the
#     concurrency test (participants and coordinator driven from several threads) and the TCP
#     transport test (coordinator, Asio rank agents and misbehaving clients in one process).
#
# Environment: JOBS (default nproc), WTX_FUZZ_RUNS (default 60000), WTX_FUZZ_SECONDS (default
# 20, used when WTX_FUZZ_RUNS=0), SANITIZE_SKIP_TSAN=1,
# SANITIZE_SKIP_ASAN=1. Prints the time of each phase.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc)}
FUZZ_SECONDS=${WTX_FUZZ_SECONDS:-20}
FUZZ_RUNS=${WTX_FUZZ_RUNS:-60000}
export CC=${SANITIZE_CC:-clang} CXX=${SANITIZE_CXX:-clang++}

phase_start=$SECONDS
phase() {
  echo "== sanitize: $1 (+$((SECONDS - phase_start)) s)"
}

# Builds the given targets that exist in build dir $1 (others may come and go).
build_existing() {
  local dir=$1
  shift
  local have
  have=$(cmake --build "$dir" --target help | sed -n 's/^\.\.\. \([^ ]*\).*/\1/p')
  local targets=()
  for t in "$@"; do
    if grep -qx "$t" <<<"$have"; then targets+=("$t"); fi
  done
  cmake --build "$dir" -j"$JOBS" --target "${targets[@]}"
}

# Sanitized builds: -O0 (half the compile time of -O1: compile time is the budget), no debug
# info, no CUDA.
# The Python module is left out: a sanitized extension cannot load into Debian's python3.
common=(-DCMAKE_BUILD_TYPE=Sanitize "-DCMAKE_CXX_FLAGS=-O0 -g0" "-DCMAKE_C_FLAGS=-O0 -g0"
        -DWTX_ENABLE_CUDA=OFF -DWTX_PYTHON=OFF)

if [ "${SANITIZE_SKIP_ASAN:-0}" != 1 ]; then
  phase "configure build-asan (ASan + UBSan + libFuzzer)"
  cmake -S . -B build-asan "${common[@]}" -DWTX_SANITIZE=address,undefined -DWTX_FUZZ=ON \
        -DWTX_FUZZ_SECONDS="$FUZZ_SECONDS" -DWTX_FUZZ_RUNS="$FUZZ_RUNS" >/dev/null
  phase "build build-asan"
  build_existing build-asan wtx manifest_test hf_manifest_test content_hash_test participant_test \
      recovery_test coverage_test crash_safety_test journal_corruption_test journal_record_test \
      journal_reader_test landing_test checkpoint_test input_limits_test protocol_bounds_test \
      participant_concurrency_test fuzz_regression_test gpu_ref_test source_file_test host_arena_test \
      storage_identity_test two_digests_test \
      fuzz_scenario fuzz_manifest fuzz_record fuzz_safetensors
  phase "test build-asan"
  # RocksDB keeps some allocations in static storage until exit: no leak checking; any
  # address or undefined-behaviour report aborts the test.
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # Test executables that were not built appear as *_NOT_BUILT; benchmarks and the TCP
  # transport's tests, and the same scenarios over TCP on etcd, are not part of this pass (the
  # release suite runs them). The tests that generate full-size manifests (DeepSeek-V3, Kimi-K2
  # at tp 8, every tp/ep of the full-size MoE models: 10^5 shards, about a minute each at -O0
  # under ASan) run in the release suite only; smaller models of the same families cover the
  # same code here. So do etcd's failover and torture (processes killed and etcd members
  # stopped for minutes: what they check is recovery, which the release suite covers; the
  # sanitizers see the same code in torture.short and the coordinator's etcd tests). The
  # layering checks of the built binaries (the installed CLI, not built here) run in the
  # release suite.
  ctest --test-dir build-asan -j"$JOBS" --output-on-failure -LE fuzz \
        -E '_NOT_BUILT|^bench\.|^scenario\.tcp\.|^etcd\.(scenarios_tcp|failover|torture)$|^layering\.(production|installed)|^DeepseekV3_Fp8Tp8_SourcesAndScalesCoveredExactlyOnce$|^KimiK2_|^KimiSized|^FullSizeMoe_'
  if [ "$FUZZ_RUNS" -gt 0 ]; then
    phase "fuzz build-asan (${FUZZ_RUNS} inputs per target from seed 1)"
  else
    phase "fuzz build-asan (${FUZZ_SECONDS} s per target)"
  fi
  ctest --test-dir build-asan -j"$JOBS" --output-on-failure -L fuzz
fi

if [ "${SANITIZE_SKIP_TSAN:-0}" != 1 ]; then
  phase "configure build-tsan (ThreadSanitizer)"
  cmake -S . -B build-tsan "${common[@]}" -DWTX_SANITIZE=thread >/dev/null
  phase "build build-tsan"
  # Only the threaded tests: the libraries they link, then the tests themselves without the
  # wtx binary every test target otherwise depends on (Makefile generator: the target's own
  # depend and build steps; `target/fast` alone skips the depend step, so an edited test
  # source would not be recompiled in an existing build-tsan).
  # The coordinator on the etcd decision log (its background END thread, the leadership's
  # renewal thread, concurrent exactly-once writes) runs here too, against a real etcd; without
  # an etcd binary it exits 77 and is skipped.
  tsan_tests=(participant_concurrency_test source_file_test tcp_transport_test coordinator_decision_log_test
              etcd_decision_log_test fleet_member_test)
  build_existing build-tsan wtx_core wtx_kernels wtx_testing wtx_sim wtx_net wtx_test_main \
                 wtx_etcd_test_main wtx_test_pch
  if [ -f build-tsan/Makefile ]; then
    for t in "${tsan_tests[@]}"; do
      mk="tests/CMakeFiles/$t.dir/build.make"
      make -C build-tsan -f "$mk" "tests/CMakeFiles/$t.dir/depend" >/dev/null
      make -C build-tsan -j"$JOBS" -f "$mk" "tests/CMakeFiles/$t.dir/build" >/dev/null
    done
  else
    build_existing build-tsan "${tsan_tests[@]}"
  fi
  phase "test build-tsan"
  for t in "${tsan_tests[@]}"; do
    rc=0
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "build-tsan/bin/$t" || rc=$?
    if [ "$rc" = 77 ]; then
      echo "$t: skipped (no etcd binary)"
    elif [ "$rc" != 0 ]; then
      exit "$rc"
    fi
  done
fi
phase "done"
