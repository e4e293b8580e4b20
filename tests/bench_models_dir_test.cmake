# `wtx bench` outside the checkout (issue 25 item 6), run by CTest as
#   cmake -DWTX=<wtx binary> -DWORK=<empty folder outside the repository> -P this file
# from WORK (WORKING_DIRECTORY): the quick bench finds its models itself and names where, and a
# --shared-dir without them exits 2 naming the flag.
foreach(v WTX WORK)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "pass -D${v}=...")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}/empty")
file(WRITE "${WORK}/garbage" "not a folder\n")

# No --shared-dir, no WTX_CONFORMANCE_DIR, from a folder with no models above it.
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=WTX_CONFORMANCE_DIR
                        ${WTX} bench --quick --only update,coverage --json
                WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "wtx bench --quick from ${WORK}: exit ${rc}\n${err}")
endif()
if(NOT err MATCHES "wtx bench: models from [^\n]+ \\((installed|build tree)\\)")
  message(FATAL_ERROR "wtx bench --quick: no 'models from DIR (installed|build tree)' line:\n${err}")
endif()
string(JSON source GET "${out}" models source)
string(JSON model GET "${out}" models model)
if(NOT source MATCHES "^(installed|build tree)$" OR NOT model MATCHES "tiny-qwen2/config.json$")
  message(FATAL_ERROR "wtx bench --json: models.source '${source}', models.model '${model}'")
endif()
foreach(k update_vs_memcpy coverage_check_ms)
  string(JSON v ERROR_VARIABLE e GET "${out}" ${k})
  if(e)
    message(FATAL_ERROR "wtx bench --json: no ${k}: ${e}")
  endif()
endforeach()

# --shared-dir overrides, and one without the models is refused naming the flag.
foreach(bad "${WORK}/missing" "${WORK}/garbage" "${WORK}/empty")
  execute_process(COMMAND ${WTX} bench --quick --only coverage --shared-dir "${bad}"
                  WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "--shared-dir ${bad}: ")
    message(FATAL_ERROR "wtx bench --shared-dir ${bad}: exit ${rc}, want 2 naming the flag:\n${err}")
  endif()
endforeach()
file(REMOVE_RECURSE "${WORK}")
