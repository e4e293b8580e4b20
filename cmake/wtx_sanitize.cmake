# Sanitizer and fuzzing builds (scripts/sanitize.sh configures them; the default build uses
# neither). Included before any target is defined, so the flags reach every wtx target.
#
#   -DWTX_SANITIZE=address,undefined   ASan + UBSan on every target; any report aborts
#   -DWTX_SANITIZE=thread              ThreadSanitizer
#   -DWTX_FUZZ=ON                      libFuzzer targets of tests/fuzz and their CTests
#                                      (label "fuzz"); requires clang
set(WTX_SANITIZE "" CACHE STRING "Comma-separated -fsanitize= list for every target (empty: none)")
option(WTX_FUZZ "Build the libFuzzer targets (clang only)" OFF)
if(WTX_SANITIZE)
  add_compile_options(-fsanitize=${WTX_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${WTX_SANITIZE})
endif()
if(WTX_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "WTX_FUZZ needs clang: configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
