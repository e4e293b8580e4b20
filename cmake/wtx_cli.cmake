# The `wtx` CLI (tools/wtx/, docs/cli.md), built twice over one set of objects (wtx_cli):
#  * `wtx` (build/bin/wtx): the build tree's CLI, the one the tests, the simulator's TCP mode and
#    the benchmarks run; its daemons have the test-only hooks (--test-hooks, --sync-delay-ms:
#    tools/wtx/daemon_hooks_testing.cc over wtx_testing);
#  * `wtx_installable` (build/installable/wtx): what `cmake --install` ships as bin/wtx; its
#    daemons have neither flag (tools/wtx/daemon_hooks_none.cc).
# Included from the top-level CMakeLists.txt after the libraries.
if(WTX_BUILD_TOOLS)
  add_library(wtx_cli OBJECT
    tools/wtx/main.cc
    tools/wtx/cmd_sim.cc
    tools/wtx/cmd_journal.cc
    tools/wtx/cmd_manifest.cc tools/wtx/cmd_plan.cc tools/wtx/hf_flags.cc
    tools/wtx/cmd_bench.cc tools/bench/bench.cc tools/bench/bench_journal.cc
    tools/bench/bench_landing.cc
    tools/bench/bench_load.cc tools/bench/bench_expect.cc
    tools/wtx/cmd_torture.cc tools/torture/torture.cc tools/torture/model.cc
    tools/torture/script_plan.cc tools/torture/script_processes.cc tools/torture/script_ops.cc
    tools/torture/script_checks.cc
    tools/wtx/cmd_coordinator.cc tools/wtx/cmd_rank.cc tools/wtx/cmd_control.cc
    tools/wtx/decision_log_flags.cc tools/wtx/metrics_flags.cc tools/wtx/progress.cc
    tools/wtx/cmd_load.cc
    tools/wtx/cmd_verify.cc
    tools/wtx/cmd_fleet.cc
  )
  target_include_directories(wtx_cli PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(wtx_cli PUBLIC wtx_sim wtx_testing wtx_net wtx_kernels wtx_core
                                       CLI11::CLI11)
  # `wtx bench` finds its model configs installed (cmake/wtx_install.cmake: <datadir>/wtx/models,
  # relative to the executable or at the configured prefix) or in this source tree.
  set_source_files_properties(tools/wtx/cmd_bench.cc PROPERTIES COMPILE_DEFINITIONS
    "WTX_SOURCE_DIR=\"${PROJECT_SOURCE_DIR}\";WTX_INSTALL_DATADIR=\"${CMAKE_INSTALL_DATADIR}\";WTX_INSTALL_FULL_DATADIR=\"${CMAKE_INSTALL_FULL_DATADIR}\"")
  if(WTX_PCH)
    target_precompile_headers(wtx_cli REUSE_FROM wtx_layer_util)
  endif()

  add_executable(wtx tools/wtx/daemon_hooks_testing.cc)
  add_executable(wtx_installable tools/wtx/daemon_hooks_none.cc)
  foreach(t wtx wtx_installable)
    target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${t} PRIVATE wtx_cli)
  endforeach()
  target_link_libraries(wtx PRIVATE wtx_process_test_hooks)
  set_target_properties(wtx_installable PROPERTIES
    OUTPUT_NAME wtx RUNTIME_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}/installable")
endif()
