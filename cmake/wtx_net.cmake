# Multi-process wtx: the TCP transport (Boost.Asio, header-only; frames of CBOR over TLS 1.3 with
# OpenSSL — a PSK from the shared secret or certificates — plus an HMAC-SHA-256 role/rank binding), the `wtx coordinator` / `wtx rank` commands, `wtx sim --transport tcp`, and
# the optional NCCL vote (built only when CUDA and NCCL are found). Included from the top-level
# CMakeLists.txt after the `wtx` executable is defined.

find_package(OpenSSL REQUIRED)  # Debian: libssl-dev (scripts/setup.sh)

add_library(wtx_net
  src/net/crypto.cc
  src/net/tls.cc
  src/net/codec.cc
  src/net/channel.cc
  src/net/channel_handshake.cc
  src/net/channel_accept.cc
  src/net/channel_util.cc
  src/net/control.cc
  src/net/tcp_transport.cc
  src/net/rank_agent.cc
  src/net/rank_service.cc
  src/net/message_transport.cc
)
target_include_directories(wtx_net PRIVATE ${PROJECT_SOURCE_DIR})
# Boost.Asio stays private: no public header includes it (src/net/ headers do; the internal
# targets below that include them link Boost::headers themselves).
target_link_libraries(wtx_net PUBLIC wtx_core Threads::Threads
                              PRIVATE Boost::headers OpenSSL::SSL OpenSSL::Crypto)
set_target_properties(wtx_net PROPERTIES EXPORT_NAME net DEFINE_SYMBOL "")
if(WTX_PCH)
  target_precompile_headers(wtx_net REUSE_FROM wtx_core)
endif()

# The TCP simulator and the control protocol of the rank/coordinator processes: its codec
# and the control services the `wtx coordinator` / `wtx rank` processes run (internal, always
# static, not installed; the rank service runs the scenario runner's data-plane steps).
add_library(wtx_tcp_sim STATIC
  src/net/control_codec.cc
  src/net/control_service.cc
  src/net/coordinator_recovery.cc
  src/conformance/tcp_simulator.cc
)
target_include_directories(wtx_tcp_sim PRIVATE ${PROJECT_SOURCE_DIR})
# Boost.Asio's SSL layer is header-only: whatever includes src/net/ headers calls OpenSSL itself,
# and needs it on its own link line once wtx_net is a shared library (-DBUILD_SHARED_LIBS=ON).
target_link_libraries(wtx_tcp_sim PUBLIC wtx_sim wtx_net Boost::headers OpenSSL::SSL
                                         OpenSSL::Crypto)
if(WTX_PCH)
  target_precompile_headers(wtx_tcp_sim REUSE_FROM wtx_core)
endif()

if(TARGET wtx)
  target_sources(wtx PRIVATE tools/wtx/cmd_coordinator.cc tools/wtx/cmd_rank.cc
                             tools/wtx/cmd_control.cc tools/wtx/cmd_load.cc)
  target_link_libraries(wtx PRIVATE wtx_tcp_sim)
endif()

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
