# Install rules (`cmake --install build [--prefix DIR]`), included from the top-level
# CMakeLists.txt after every library target is defined (WTX_INSTALL, ON when wtx is the
# top-level project).
#
#   include/wtx/*.h                     the public headers (nothing under src/, journal/, kernels/)
#   lib/libwtx_{core,kernels,net}.a     (.so with -DBUILD_SHARED_LIBS=ON), libwtx_gpu and
#                                       libwtx_nccl when built
#   bin/wtx                             the CLI (WTX_BUILD_TOOLS), without the daemons' test hooks
#   share/wtx/models/*/config.json      the model configs `wtx bench` reads (with the CLI)
#   lib/cmake/wtx/                      wtxConfig.cmake, its version file, wtxTargets.cmake and
#                                       FindxxHash.cmake: find_package(wtx CONFIG) gives wtx::wtx
#                                       (core + kernels' CPU references), wtx::net, and when
#                                       built wtx::gpu, wtx::nccl
#   lib/pkgconfig/wtx.pc                the same libraries for pkg-config
#
# The internal libraries (wtx_sim, wtx_tcp_sim, wtx_testing) are static and not installed.
include(CMakePackageConfigHelpers)

set(WTX_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/wtx")
set(wtx_installed_libraries wtx_core wtx_kernels wtx_library wtx_net)
foreach(t wtx_gpu wtx_nccl)
  if(TARGET ${t})
    list(APPEND wtx_installed_libraries ${t})
  endif()
endforeach()

if(BUILD_SHARED_LIBS)
  # The installed libraries find each other (libwtx_kernels needs libwtx_gpu) wherever the
  # prefix is: a RUNPATH is not inherited from the executable that loads them.
  set_target_properties(${wtx_installed_libraries} PROPERTIES INSTALL_RPATH "$ORIGIN")
endif()

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/wtx" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
        COMPONENT wtx_development FILES_MATCHING PATTERN "*.h")
install(TARGETS ${wtx_installed_libraries} EXPORT wtxTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT wtx_development
        LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT wtx_runtime
        RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT wtx_runtime
        INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
if(TARGET wtx_installable)
  # The CLI without the daemons' test hooks (cmake/wtx_cli.cmake), installed as bin/wtx.
  if(BUILD_SHARED_LIBS)
    set_target_properties(wtx_installable PROPERTIES
                          INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
  endif()
  install(TARGETS wtx_installable RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}"
          COMPONENT wtx_runtime)
  # The model configs `wtx bench` (and `wtx manifest --hf-config`) read, outside a checkout.
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/tests/conformance/models/"
          DESTINATION "${CMAKE_INSTALL_DATADIR}/wtx/models"
          COMPONENT wtx_runtime FILES_MATCHING PATTERN "config.json")
endif()
install(EXPORT wtxTargets NAMESPACE wtx:: DESTINATION "${WTX_CMAKE_DIR}"
        FILE wtxTargets.cmake COMPONENT wtx_development)

# What the config file must find for the exported link interfaces. Static libraries carry
# their private dependencies ($<LINK_ONLY:...>); shared ones only the public ones. Read from
# the targets themselves, so that a dependency added to a library later is found too.
set(WTX_CONFIG_STATIC OFF)
if(NOT BUILD_SHARED_LIBS)
  set(WTX_CONFIG_STATIC ON)
endif()
set(WTX_CONFIG_NEEDS_OPENSSL OFF)
set(WTX_CONFIG_NEEDS_CUDA OFF)
foreach(t ${wtx_installed_libraries})
  get_target_property(libs ${t} LINK_LIBRARIES)
  get_target_property(ilibs ${t} INTERFACE_LINK_LIBRARIES)
  if("${libs};${ilibs}" MATCHES "OpenSSL::")
    set(WTX_CONFIG_NEEDS_OPENSSL ON)
  endif()
  if("${libs};${ilibs}" MATCHES "CUDA::")
    set(WTX_CONFIG_NEEDS_CUDA ON)
  endif()
endforeach()

configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/wtxConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/wtxConfig.cmake" INSTALL_DESTINATION "${WTX_CMAKE_DIR}")
# 0.x: a minor version may break the API.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/wtxConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/wtxConfig.cmake" "${PROJECT_BINARY_DIR}/wtxConfigVersion.cmake"
              "${PROJECT_SOURCE_DIR}/cmake/modules/FindxxHash.cmake"
        DESTINATION "${WTX_CMAKE_DIR}" COMPONENT wtx_development)

# pkg-config: relocatable (prefix from the .pc file's own place), so `--prefix` works.
file(RELATIVE_PATH WTX_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" WTX_PC_TO_PREFIX "${WTX_PC_TO_PREFIX}")
set(WTX_PC_LIBS "-lwtx_net -lwtx_kernels")
set(WTX_PC_EXTRA "")
if(TARGET wtx_gpu)
  string(APPEND WTX_PC_LIBS " -lwtx_gpu")
  string(APPEND WTX_PC_EXTRA " -L${CUDAToolkit_LIBRARY_DIR} -lcudart")
endif()
string(APPEND WTX_PC_LIBS " -lwtx_core")
set(WTX_PC_REQUIRES "nlohmann_json")
set(WTX_PC_REQUIRES_PRIVATE "rocksdb libxxhash prometheus-cpp-pull prometheus-cpp-core")
if(WTX_CONFIG_NEEDS_OPENSSL)
  string(APPEND WTX_PC_REQUIRES_PRIVATE " openssl")
endif()
if(WTX_CONFIG_STATIC)
  # Static archives: their dependencies must be on every link line, not only with --static.
  string(APPEND WTX_PC_REQUIRES " ${WTX_PC_REQUIRES_PRIVATE}")
  set(WTX_PC_REQUIRES_PRIVATE "")
  string(APPEND WTX_PC_LIBS "${WTX_PC_EXTRA} -pthread")
  set(WTX_PC_LIBS_PRIVATE "")
else()
  set(WTX_PC_LIBS_PRIVATE "${WTX_PC_EXTRA} -pthread")
endif()
configure_file("${PROJECT_SOURCE_DIR}/cmake/wtx.pc.in" "${PROJECT_BINARY_DIR}/wtx.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/wtx.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig"
        COMPONENT wtx_development)
