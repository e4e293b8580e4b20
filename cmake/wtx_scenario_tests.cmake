# Scenario CTests. Every scenario `X.json` with an expectations file `X.expect.json` in `dir`:
#
#  * wtx_scenario_tests: runs end to end through the CLI, `wtx sim X.json --expect X.expect.json`
#    (non-zero exit when an expectation fails).
#  * wtx_compared_scenario_tests: runs twice, as the reference (in-process transport, host
#    memory) and with the `variant` arguments (a ;-list, e.g. "--transport;tcp" or
#    "--memory;reference-device"), and requires byte-identical outputs, the variant also meeting
#    the expectations (tests/net/compare_transports.cmake).

function(wtx_scenarios_with_expectations dir out)
  file(GLOB scenarios "${dir}/*.json")
  set(found)
  foreach(s ${scenarios})
    if(s MATCHES "\\.expect\\.json$")
      continue()
    endif()
    string(REGEX REPLACE "\\.json$" ".expect.json" e "${s}")
    if(EXISTS "${e}")
      list(APPEND found "${s}")
    endif()
  endforeach()
  set(${out} ${found} PARENT_SCOPE)
endfunction()

function(wtx_scenario_tests dir prefix)
  wtx_scenarios_with_expectations("${dir}" scenarios)
  foreach(s ${scenarios})
    string(REGEX REPLACE "\\.json$" ".expect.json" e "${s}")
    get_filename_component(name "${s}" NAME_WE)
    add_test(NAME "${prefix}.${name}" COMMAND wtx sim "${s}" --expect "${e}")
  endforeach()
endfunction()

function(wtx_compared_scenario_tests dir prefix variant)
  wtx_scenarios_with_expectations("${dir}" scenarios)
  foreach(s ${scenarios})
    string(REGEX REPLACE "\\.json$" ".expect.json" e "${s}")
    get_filename_component(name "${s}" NAME_WE)
    add_test(NAME "${prefix}.${name}"
             COMMAND ${CMAKE_COMMAND} -DWTX=$<TARGET_FILE:wtx> -DSCENARIO=${s} -DEXPECT=${e}
                     "-DVARIANT=${variant}"
                     -P ${PROJECT_SOURCE_DIR}/tests/net/compare_transports.cmake)
    set_tests_properties("${prefix}.${name}" PROPERTIES TIMEOUT 300)
  endforeach()
endfunction()
