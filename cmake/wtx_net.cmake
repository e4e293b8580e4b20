# Multi-process wtx beyond the net layer (wtx_layers.cmake: the TCP transport, the rank agent,
# the control protocol): the optional NCCL vote (built only when CUDA and NCCL are found), the
# commit benchmark and the TCP scenario tests. Included from the top-level CMakeLists.txt after
# the CLI.

# NCCL vote: only when CUDA's runtime and NCCL are found (nccl.h in /usr/local/cuda/include,
# libnccl.so in /usr/local/cuda/lib64). Host code only: no nvcc needed.
option(WTX_ENABLE_NCCL "Build the NCCL vote when CUDA and NCCL are found" ON)
set(WTX_HAVE_NCCL OFF)
if(WTX_ENABLE_NCCL)
  find_package(CUDAToolkit QUIET)
  find_path(WTX_NCCL_INCLUDE_DIR nccl.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(WTX_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(CUDAToolkit_FOUND AND WTX_NCCL_INCLUDE_DIR AND WTX_NCCL_LIBRARY)
    # Installed as wtx::nccl. NCCL and the CUDA runtime stay private
    # (include/wtx/nccl_vote.h includes neither).
    add_library(wtx_nccl src/net/nccl_vote.cc)
    set_target_properties(wtx_nccl PROPERTIES EXPORT_NAME nccl DEFINE_SYMBOL "")
    target_include_directories(wtx_nccl PRIVATE ${PROJECT_SOURCE_DIR} ${WTX_NCCL_INCLUDE_DIR})
    target_link_libraries(wtx_nccl PUBLIC wtx_net PRIVATE CUDA::cudart ${WTX_NCCL_LIBRARY})
    set(WTX_HAVE_NCCL ON)
    message(STATUS "wtx: NCCL vote enabled (${WTX_NCCL_LIBRARY})")
  else()
    message(STATUS "wtx: NCCL vote disabled (CUDA runtime or NCCL not found)")
  endif()
endif()

# `wtx sim --transport tcp` against the in-process output, for every scenario of `dir` that has
# an expectations file: identical output document, expectations met.
function(wtx_tcp_scenario_tests dir prefix)
  wtx_compared_scenario_tests("${dir}" "${prefix}" "--transport;tcp")  # cmake/wtx_scenario_tests.cmake
endfunction()

# Commit latency against rank count (docs/protocol.md, "Scale"): a benchmark, not a test.
if(WTX_BUILD_BENCH)
  add_executable(wtx_commit_bench tools/net_bench/commit_bench.cc)
  target_link_libraries(wtx_commit_bench PRIVATE wtx_tcp_sim CLI11::CLI11)
  target_include_directories(wtx_commit_bench PRIVATE ${PROJECT_SOURCE_DIR})
endif()
