# GPU path (issue 6, docs/gpu.md). Included from the top-level CMakeLists.txt after the layers
# (wtx_layers.cmake).
#
#  * wtx_kernels (always; wtx_layers.cmake): the CPU references of the kernels
#    (kernels/gpu_ref.cc, sharing kernels/xxh3_hd.h with the device code) and device live memory.
#  * wtx_gpu (only with -DWTX_ENABLE_CUDA=ON and nvcc found): kernels/gpu_kernels.cu for
#    sm_90, plus the GPU benchmark wtx_gpu_bench. Defines WTX_HAVE_CUDA for its users.

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
    # NewDeviceLiveMemory (device_live_memory.h) comes from wtx_gpu in these builds: the
    # kernels layer's objects are compiled knowing it, and its link check links it.
    target_link_libraries(wtx_kernels PUBLIC wtx_gpu)
    target_compile_definitions(wtx_gpu PUBLIC WTX_HAVE_CUDA=1)
    target_compile_definitions(wtx_layer_kernels PUBLIC WTX_HAVE_CUDA=1)
    if(TARGET wtx_layer_link_check_kernels)
      target_link_libraries(wtx_layer_link_check_kernels PRIVATE CUDA::cudart)
      target_sources(wtx_layer_link_check_kernels PRIVATE $<TARGET_OBJECTS:wtx_gpu>)
      set_target_properties(wtx_layer_link_check_kernels PROPERTIES
        CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}" LINKER_LANGUAGE CXX)
    endif()
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

