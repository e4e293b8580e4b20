# The layers of the wtx libraries (docs/architecture.md, "Layers"), lowest first. Each layer is
# one OBJECT library, `wtx_layer_<name>`, that links (for its usage requirements) only the
# layers below it:
#
#   util -> manifest -> layouts -> memory (+ kernels) -> journal -> etcd -> metrics -> txn
#        -> history -> fleet -> checkpoint -> net
#
# Above them, outside the production libraries: testing (src/testing: fault injection, crash
# points, the in-process cluster) -> conformance (src/conformance: the scenario runner) ->
# tools (tools/: the CLI, benchmarks, torture) and python (python/src: never testing or
# conformance).
#
# Enforced by the build: with WTX_BUILD_TESTS, `wtx_layer_link_check_<name>` links every object
# of a layer and of the layers below it, and nothing above, into an executable, so a call from a
# layer into one above fails to link, naming the symbol. `ctest -R layering` checks every
# #include against the same order (tests/layering/check_layering.py, docs/architecture.md).
#
# The installed libraries are made of these objects: wtx_core (util .. checkpoint but kernels),
# wtx_kernels (kernels), wtx_net (net). Included from the top-level CMakeLists.txt.

# The Hugging Face layouts: every src/layouts/hf_*.cc (a new model family is one file there plus
# its line in src/layouts/hf_families.inc; see docs/manifest.md).
file(GLOB WTX_HF_LAYOUT_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/layouts/hf_*.cc")
list(SORT WTX_HF_LAYOUT_SOURCES)

set(WTX_LAYERS)  # in order, lowest first
# wtx_layer(NAME SOURCES... [DEPS layer...] [LIBS target...]): one layer's object library.
# DEPS: the layers below it that it uses; LIBS: outside libraries (usage requirements).
function(wtx_layer name)
  cmake_parse_arguments(L "" "" "SOURCES;DEPS;LIBS" ${ARGN})
  add_library(wtx_layer_${name} OBJECT ${L_SOURCES})
  target_include_directories(wtx_layer_${name}
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    PRIVATE ${PROJECT_SOURCE_DIR})
  foreach(dep ${L_DEPS})
    if(NOT dep IN_LIST WTX_LAYERS)
      message(FATAL_ERROR "wtx layer ${name}: '${dep}' is not a layer below it")
    endif()
    target_link_libraries(wtx_layer_${name} PUBLIC wtx_layer_${dep})
  endforeach()
  target_link_libraries(wtx_layer_${name} PUBLIC nlohmann_json::nlohmann_json ${L_LIBS})
  if(WTX_PCH)
    if(name STREQUAL "util")
      # nlohmann/json dominates compile time; every target shares this precompiled header.
      target_precompile_headers(wtx_layer_util
        PRIVATE <nlohmann/json.hpp> <string> <vector> <map> <memory>)
    else()
      target_precompile_headers(wtx_layer_${name} REUSE_FROM wtx_layer_util)
    endif()
  endif()
  # The layers of this one and below, for the link check and the installed libraries.
  set(closure ${name})
  foreach(dep ${L_DEPS})
    list(APPEND closure ${WTX_LAYER_CLOSURE_${dep}})
  endforeach()
  list(REMOVE_DUPLICATES closure)
  set(WTX_LAYER_CLOSURE_${name} ${closure} PARENT_SCOPE)
  set(WTX_LAYER_LIBS_${name} ${L_LIBS} PARENT_SCOPE)
  list(APPEND WTX_LAYERS ${name})
  set(WTX_LAYERS ${WTX_LAYERS} PARENT_SCOPE)
endfunction()

wtx_layer(util
  SOURCES src/util/status.cc src/util/cbor.cc src/util/cbor_writer.cc src/util/hash_util.cc
          src/util/json_fields.cc src/util/file_util.cc src/util/env.cc src/util/logger.cc
  LIBS ${WTX_ROCKSDB} xxHash::xxhash Threads::Threads)
wtx_layer(manifest
  SOURCES src/manifest/dtype.cc src/manifest/dtype_convert.cc src/manifest/box.cc
          src/manifest/box_json.cc src/manifest/manifest.cc
  DEPS util)
# Transfer plans (src/plan) sit with the layouts they read: a TP/EP trainer is laid out as vLLM
# lays out a rank.
wtx_layer(layouts
  SOURCES ${WTX_HF_LAYOUT_SOURCES} src/plan/trainer_sharding.cc src/plan/transfer_plan.cc
          src/plan/transfer_plan_json.cc
  DEPS manifest util)
wtx_layer(memory
  SOURCES src/memory/content_hash.cc src/memory/chunk_hash_pool.cc
          src/memory/expected_version.cc src/memory/host_arena.cc src/memory/live_memory.cc
          src/memory/chunks_before_declare.cc src/memory/storage_identity.cc
          src/memory/piece_digest.cc src/memory/checkpoint_image_digest.cc
  DEPS layouts manifest util)
# The kernels' CPU references and device live memory (kernels/): the memory layer's device
# side, its own installed library (wtx_kernels); the CUDA kernels are wtx_gpu (wtx_gpu.cmake).
wtx_layer(kernels
  SOURCES kernels/gpu_ref.cc kernels/device_live_memory.cc
  DEPS memory manifest util)
wtx_layer(journal
  SOURCES journal/record.cc journal/record_fields.cc journal/journal.cc journal/watermark.cc
          journal/verify.cc
  DEPS memory manifest util)
find_package(OpenSSL REQUIRED)  # Debian: libssl-dev (scripts/setup.sh)
# The etcd v3 client of the shared decision log (its JSON gateway over HTTP/1.1 with
# Boost.Beast, optionally HTTPS; base64 with OpenSSL). Uses nothing of wtx but util.
wtx_layer(etcd
  SOURCES src/etcd/base64.cc src/etcd/etcd_url.cc src/etcd/http_post.cc src/etcd/etcd_client.cc
          src/etcd/stored_record.cc
  DEPS util
  LIBS Boost::headers OpenSSL::SSL OpenSSL::Crypto Threads::Threads)
# The Prometheus series of participants and coordinators (docs/observability.md): prometheus-cpp's
# registry, its exposer for the daemons, and the event log the Python module mirrors.
wtx_layer(metrics
  SOURCES src/metrics/metrics_hub.cc src/metrics/rank_metrics.cc
          src/metrics/coordinator_metrics.cc src/metrics/metrics_server.cc
  DEPS util
  LIBS prometheus-cpp::core prometheus-cpp::pull Threads::Threads)
wtx_layer(txn
  SOURCES src/txn/coverage.cc src/txn/protocol.cc src/txn/decision_fields.cc
          src/txn/participant.cc src/txn/participant_write.cc src/txn/participant_pieces.cc
          src/txn/participant_piece_digest.cc
          src/txn/participant_patch.cc
          src/txn/participant_derived.cc src/txn/participant_prepare.cc
          src/txn/participant_landing.cc src/txn/participant_verify.cc
          src/txn/participant_identity.cc src/txn/participant_metrics.cc
          src/txn/participant_state.cc src/txn/participant_records.cc
          src/txn/coordinator_records.cc src/txn/event_records.cc src/txn/journal_check.cc
          src/txn/coordinator.cc src/txn/vote_report.cc src/txn/decision_log_journal.cc
          src/txn/logged_decision_json.cc
          src/txn/resolve_from_log.cc src/txn/inproc_transport.cc src/txn/fan_out.cc
          src/txn/decision_log.cc src/txn/decision_log_records.cc src/txn/decision_log_etcd.cc
          src/txn/etcd_leadership.cc
  DEPS metrics journal etcd memory layouts manifest util)
wtx_layer(history
  SOURCES src/history/history.cc src/history/journal_reader.cc src/history/journal_views.cc
          src/history/live_verify.cc src/history/served_at.cc
  DEPS txn etcd journal memory manifest util)
# Fleets (wtx/fleet.h): the replicas' registry in etcd, the staleness gate, fleet status.
wtx_layer(fleet
  SOURCES src/fleet/fleet_records.cc src/fleet/fleet_view.cc src/fleet/fleet_registry.cc
          src/fleet/fleet_json.cc src/fleet/fleet_status.cc src/fleet/fleet_member.cc
  DEPS txn etcd util)
wtx_layer(checkpoint
  SOURCES src/checkpoint/safetensors_header.cc src/checkpoint/safetensors_checkpoint.cc
          src/checkpoint/checkpoint_slices.cc
  DEPS txn etcd memory layouts manifest util)
# The TCP transport (Boost.Asio, header-only; frames of CBOR over TLS 1.3 with OpenSSL — a PSK
# from the shared secret or certificates — plus an HMAC-SHA-256 role/rank binding), the rank
# agent, and the control protocol of the `wtx coordinator` / `wtx rank` processes (its codec,
# services and the coordinator's startup recovery).
wtx_layer(net
  SOURCES src/net/crypto.cc src/net/tls.cc src/net/codec.cc src/net/channel.cc
          src/net/channel_handshake.cc src/net/channel_accept.cc src/net/channel_util.cc
          src/net/control.cc src/net/tcp_transport.cc src/net/rank_agent.cc
          src/net/rank_service.cc src/net/message_transport.cc src/net/control_codec.cc
          src/net/control_service.cc src/net/coordinator_recovery.cc
          src/net/catch_up.cc src/net/fleet_catch_up.cc
  DEPS fleet checkpoint history txn etcd journal memory manifest util
  LIBS Boost::headers OpenSSL::SSL OpenSSL::Crypto Threads::Threads)

# The installed libraries: objects of the layers above, and the link interface they had as
# one library each (consumers see include/ only; the repository root stays private).
# REQUIRES: every layer's objects go into exactly one of them.
function(wtx_installed_library target export_name)
  cmake_parse_arguments(I "" "" "LAYERS;PUBLIC;PRIVATE" ${ARGN})
  set(objects)
  foreach(layer ${I_LAYERS})
    list(APPEND objects $<TARGET_OBJECTS:wtx_layer_${layer}>)
  endforeach()
  add_library(${target} ${objects})
  set_target_properties(${target} PROPERTIES LINKER_LANGUAGE CXX EXPORT_NAME ${export_name})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                              $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${target} PUBLIC nlohmann_json::nlohmann_json ${I_PUBLIC}
                                  PRIVATE ${I_PRIVATE})
endfunction()

wtx_installed_library(wtx_core core
  LAYERS util manifest layouts memory journal etcd metrics txn history fleet checkpoint
  PRIVATE ${WTX_ROCKSDB} prometheus-cpp::core prometheus-cpp::pull xxHash::xxhash Threads::Threads Boost::headers OpenSSL::SSL
          OpenSSL::Crypto)
wtx_installed_library(wtx_kernels kernels LAYERS kernels PUBLIC wtx_core)
# Boost.Asio stays private: no public header includes it (src/net/ headers do; the internal
# targets that include them link Boost::headers themselves).
wtx_installed_library(wtx_net net LAYERS net PUBLIC wtx_core Threads::Threads
                      PRIVATE Boost::headers OpenSSL::SSL OpenSSL::Crypto)

# The link checks: a layer with everything below it and nothing above links on its own.
if(WTX_BUILD_TESTS)
  foreach(layer ${WTX_LAYERS})
    set(check wtx_layer_link_check_${layer})
    add_executable(${check} "${PROJECT_SOURCE_DIR}/tests/layering/link_check_main.cc")
    set(libs)
    foreach(l ${WTX_LAYER_CLOSURE_${layer}})
      list(APPEND libs wtx_layer_${l} ${WTX_LAYER_LIBS_${l}})
    endforeach()
    target_link_libraries(${check} PRIVATE ${libs})
    set_target_properties(${check} PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                                              "${PROJECT_BINARY_DIR}/layering")
  endforeach()
endif()
