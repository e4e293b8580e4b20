# The Python module `wtx` (docs/python.md): the pybind11 extension wtx._wtx plus the pure-Python
# files of python/wtx/, assembled in ${CMAKE_BINARY_DIR}/python/wtx/ so that
# `PYTHONPATH=build/python python3 -c "import wtx"` works after a build. Built against Debian's
# /usr/bin/python3 (pybind11-dev, python3-dev); torch is used at run time only, through the
# tensor protocol, never compiled against. Skipped with a message when Python's development
# files or pybind11 are missing. Tests: tests/python/ (pytest), registered in CTest.

option(WTX_PYTHON "Build the Python module when Python 3 and pybind11 are found" ON)
set(WTX_HAVE_PYTHON OFF)
if(WTX_PYTHON)
  if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
    set(Python3_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "Python 3 the module is built for")
  endif()
  find_package(Python3 COMPONENTS Interpreter Development QUIET)
  if(Python3_FOUND)
    find_package(pybind11 CONFIG QUIET)
  endif()
  if(Python3_FOUND AND pybind11_FOUND)
    set(WTX_HAVE_PYTHON ON)
  else()
    message(STATUS "wtx: Python module skipped (needs python3-dev and pybind11-dev: "
                   "Python3 found=${Python3_FOUND}, pybind11 found=${pybind11_FOUND})")
  endif()
endif()

if(WTX_HAVE_PYTHON)
  set(WTX_PYTHON_DIR "${CMAKE_BINARY_DIR}/python")
  # Two builds of the extension: wtx_python, the build tree's (build/python/wtx, what the tests
  # import: with the fault injection of test_crash_at), and wtx_python_installable (what
  # `pip install` ships, setup.py: compiled without it, so the installed module has no crash
  # points), as the build tree's `wtx` CLI keeps test flags the installed one lacks. Only
  # py_coordinator.cc and py_participant.cc (where test_crash_at is armed: ArmTestCrashPoint in
  # py_binding.h) differ between them: the other sources are compiled once, into wtx_python_objects, with the module's own flags (hidden
  # visibility, pybind11's and Python's headers).
  add_library(wtx_python_objects OBJECT python/src/module.cc python/src/py_common.cc
              python/src/py_manifest.cc
              python/src/py_transfer_plan.cc python/src/py_decision_log.cc
              python/src/py_storage.cc python/src/py_metrics.cc python/src/py_fleet.cc)
  set_target_properties(wtx_python_objects PROPERTIES
    CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON UNITY_BUILD OFF)
  target_include_directories(wtx_python_objects PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(wtx_python_objects PRIVATE pybind11::headers pybind11::module
                                                   wtx_net wtx_kernels wtx_core)
  function(wtx_python_module target outdir)
    pybind11_add_module(${target} MODULE python/src/py_coordinator.cc
                        python/src/py_participant.cc $<TARGET_OBJECTS:wtx_python_objects>)
    set_target_properties(${target} PROPERTIES
      OUTPUT_NAME _wtx
      LIBRARY_OUTPUT_DIRECTORY "${outdir}"
      UNITY_BUILD OFF)
    target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR})
    # pybind11 links the module with -flto; GCC's lto-wrapper then warns that it runs its LTRANS
    # jobs serially. -flto=auto runs them in parallel under make's jobserver (no warning).
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_link_options(${target} PRIVATE -flto=auto)
    endif()
    # Debian's librocksdb.a is not position-independent: the module takes RocksDB from the
    # shared library, listed before the static archive the wtx libraries bring (the archive
    # then contributes nothing).
    target_link_libraries(${target} PRIVATE wtx_net wtx_kernels wtx_core
                                            RocksDB::rocksdb-shared)
  endfunction()
  wtx_python_module(wtx_python "${WTX_PYTHON_DIR}/wtx")
  target_compile_definitions(wtx_python PRIVATE WTX_PY_TEST_HOOKS=1)
  wtx_python_module(wtx_python_installable "${CMAKE_BINARY_DIR}/python-installable/wtx")
  # The pure-Python files, copied at build time so that edits reach build/python/wtx/.
  file(GLOB_RECURSE WTX_PY_SOURCES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/python/wtx/*.py"
       "${PROJECT_SOURCE_DIR}/python/wtx/*.pyi" "${PROJECT_SOURCE_DIR}/python/wtx/py.typed")
  set(WTX_PY_OUTPUTS)
  foreach(src ${WTX_PY_SOURCES})
    file(RELATIVE_PATH name "${PROJECT_SOURCE_DIR}/python/wtx" "${src}")
    add_custom_command(OUTPUT "${WTX_PYTHON_DIR}/wtx/${name}"
                       COMMAND ${CMAKE_COMMAND} -E copy_if_different "${src}"
                               "${WTX_PYTHON_DIR}/wtx/${name}"
                       DEPENDS "${src}" VERBATIM)
    list(APPEND WTX_PY_OUTPUTS "${WTX_PYTHON_DIR}/wtx/${name}")
  endforeach()
  add_custom_target(wtx_python_files ALL DEPENDS ${WTX_PY_OUTPUTS})
  add_dependencies(wtx_python wtx_python_files)
  message(STATUS "wtx: Python module for ${Python3_EXECUTABLE} in ${WTX_PYTHON_DIR}/wtx")
endif()
