# cmake -DWTX=<wtx binary> -DSCENARIO=<file.json> [-DEXPECT=<file.expect.json>] -P compare_transports.cmake
#
# Runs the scenario with the in-process transport and with the TCP transport (coordinator and
# ranks as separate processes on loopback) and requires byte-identical output documents; the
# TCP run must also meet the expectations file when there is one.
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
execute_process(COMMAND "${WTX}" sim "${SCENARIO}" --transport tcp ${expect_args}
                OUTPUT_VARIABLE tcp RESULT_VARIABLE rc_tcp ERROR_VARIABLE err_tcp
                TIMEOUT 300)
if(NOT rc_tcp EQUAL 0)
  message(FATAL_ERROR "wtx sim --transport tcp failed (${rc_tcp}):\n${err_tcp}\n${tcp}")
endif()
if(NOT inproc STREQUAL tcp)
  get_filename_component(name "${SCENARIO}" NAME_WE)
  set(a "${CMAKE_CURRENT_BINARY_DIR}/${name}.inproc.json")
  set(b "${CMAKE_CURRENT_BINARY_DIR}/${name}.tcp.json")
  file(WRITE "${a}" "${inproc}")
  file(WRITE "${b}" "${tcp}")
  message(FATAL_ERROR "outputs differ between transports: diff ${a} ${b}")
endif()
message(STATUS "identical output on both transports: ${SCENARIO}")
