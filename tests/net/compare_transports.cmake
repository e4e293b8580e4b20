# cmake -DWTX=<wtx binary> -DSCENARIO=<file.json> [-DEXPECT=<file.expect.json>]
#       [-DVARIANT="--transport;tcp"] -P compare_transports.cmake
#
# Runs the scenario as the reference (in-process transport, host memory) and again with the
# VARIANT arguments (default: the TCP transport, coordinator and ranks as separate processes on
# loopback; or e.g. `--memory;reference-device`, the participant's device path) and requires
# byte-identical output documents (same outcomes, errors and versions); the variant run must
# also meet the expectations file when there is one.
if(NOT DEFINED VARIANT OR VARIANT STREQUAL "")
  set(VARIANT --transport tcp)
endif()
string(REPLACE ";" "" variant_name "${VARIANT}")
execute_process(COMMAND "${WTX}" sim "${SCENARIO}"
                OUTPUT_VARIABLE inproc RESULT_VARIABLE rc_inproc ERROR_VARIABLE err_inproc
                TIMEOUT 300)
if(NOT rc_inproc EQUAL 0)
  message(FATAL_ERROR "wtx sim (inproc) failed (${rc_inproc}):\n${err_inproc}")
endif()
set(expect_args)
if(EXPECT AND EXISTS "${EXPECT}")
  set(expect_args --expect "${EXPECT}")
endif()
execute_process(COMMAND "${WTX}" sim "${SCENARIO}" ${VARIANT} ${expect_args}
                OUTPUT_VARIABLE tcp RESULT_VARIABLE rc_tcp ERROR_VARIABLE err_tcp
                TIMEOUT 300)
if(NOT rc_tcp EQUAL 0)
  message(FATAL_ERROR "wtx sim ${VARIANT} failed (${rc_tcp}):\n${err_tcp}\n${tcp}")
endif()
if(NOT inproc STREQUAL tcp)
  get_filename_component(name "${SCENARIO}" NAME_WE)
  set(a "${CMAKE_CURRENT_BINARY_DIR}/${name}.inproc.json")
  set(b "${CMAKE_CURRENT_BINARY_DIR}/${name}.${variant_name}.json")
  file(WRITE "${a}" "${inproc}")
  file(WRITE "${b}" "${tcp}")
  message(FATAL_ERROR "outputs differ with ${VARIANT}: diff ${a} ${b}")
endif()
message(STATUS "identical output with ${VARIANT}: ${SCENARIO}")
