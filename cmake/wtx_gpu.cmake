# GPU path (issue 6, docs/gpu.md). Included from the top-level CMakeLists.txt after the `wtx`
# executable is defined.
#
#  * wtx_kernels (always): the CPU references of the kernels (kernels/gpu_ref.cc, sharing
#    kernels/xxh3_hd.h with the device code) and live verification (src/memory/live_verify.cc,
#    `wtx verify`).
#  * wtx_gpu (only with -DWTX_ENABLE_CUDA=ON and nvcc found): kernels/gpu_kernels.cu for
#    sm_90, plus the GPU benchmark wtx_gpu_bench. Defines WTX_HAVE_CUDA for its users.

add_library(wtx_kernels
  kernels/gpu_ref.cc
  kernels/device_live_memory.cc
  src/memory/live_verify.cc
)
target_include_directories(wtx_kernels PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(wtx_kernels PUBLIC wtx_core)
set_target_properties(wtx_kernels PROPERTIES EXPORT_NAME kernels DEFINE_SYMBOL "")
if(TARGET wtx)
  target_sources(wtx PRIVATE tools/wtx/cmd_verify.cc)
  target_link_libraries(wtx PRIVATE wtx_kernels)
endif()

set(WTX_HAVE_CUDA OFF)
if(WTX_ENABLE_CUDA)
  # nvcc is often installed off PATH; check_language honours a preset compiler.
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    find_program(WTX_NVCC_ON_PATH nvcc)
    if(NOT WTX_NVCC_ON_PATH)
      set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler")
    endif()
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    # The headers are C++20; CMake 3.25 does not know nvcc 13's C++20 flag.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    find_package(CUDAToolkit REQUIRED)
    add_library(wtx_gpu kernels/gpu_kernels.cu kernels/device_live_memory_cuda.cc)
    # The project's -Wall/-Wextra (add_compile_options) are host-compiler flags.
    set_property(TARGET wtx_gpu PROPERTY COMPILE_OPTIONS
                 "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall>")
    set_target_properties(wtx_gpu PROPERTIES CUDA_STANDARD 20 CUDA_STANDARD_REQUIRED ON
                                             CUDA_EXTENSIONS OFF)
    target_include_directories(wtx_gpu PRIVATE ${PROJECT_SOURCE_DIR})
    # The CUDA runtime stays private: no public header includes it.
    target_link_libraries(wtx_gpu PUBLIC wtx_core PRIVATE CUDA::cudart)
    set_target_properties(wtx_gpu PROPERTIES EXPORT_NAME gpu DEFINE_SYMBOL "")
    # NewDeviceLiveMemory (device_live_memory.h) comes from wtx_gpu in these builds.
    target_link_libraries(wtx_kernels PUBLIC wtx_gpu)
    target_compile_definitions(wtx_gpu PUBLIC WTX_HAVE_CUDA=1)
    if(WTX_BUILD_BENCH)
      add_executable(wtx_gpu_bench tools/bench/gpu_bench.cc)
      target_link_libraries(wtx_gpu_bench PRIVATE wtx_kernels CUDA::cudart CLI11::CLI11)
      target_include_directories(wtx_gpu_bench PRIVATE ${PROJECT_SOURCE_DIR})
    endif()
    set(WTX_HAVE_CUDA ON)
    message(STATUS "wtx: CUDA kernels enabled (${CMAKE_CUDA_COMPILER}, sm_${CMAKE_CUDA_ARCHITECTURES})")
  else()
    message(STATUS "wtx: CUDA kernels disabled (nvcc not found)")
  endif()
else()
  message(STATUS "wtx: CUDA kernels disabled (WTX_ENABLE_CUDA=OFF)")
endif()

# The simulator picks a rank's live memory by name (`wtx sim --memory`).
target_link_libraries(wtx_sim PUBLIC wtx_kernels)
