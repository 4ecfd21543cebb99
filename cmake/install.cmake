# `cmake --install <build> [--prefix <p>]` for C++ users (see examples/README.md):
#
#   <p>/include/kiln/{runtime,ops,tracer}/*.h   the public headers, tree preserved, so
#                                               `#include "ops/api.h"` works as in-tree
#   <p>/lib/libkiln.so                          (lib/<multiarch> when <p> is /usr)
#   <p>/lib/cmake/kiln/kilnConfig.cmake, kilnConfigVersion.cmake, kilnTargets*.cmake
#
# The headers go one level down (include/kiln/) so that kiln's generic folder names
# (runtime/, ops/) do not land in a shared include dir; kiln::kiln puts <p>/include/kiln
# on the consumer's include path. Everything libkiln links privately (CUDA, cuBLAS,
# NVRTC, LLVM, OpenBLAS, xsimd) stays out of the exported link interface; the installed
# library keeps an RPATH to non-system dirs it was linked from (the CUDA toolkit's).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KILN_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/kiln)
set(KILN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
set(KILN_BOOST_MIN_VERSION 1.74)

target_include_directories(kiln INTERFACE $<INSTALL_INTERFACE:${KILN_INSTALL_INCLUDEDIR}>)
set_target_properties(kiln PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

install(TARGETS kiln EXPORT kilnTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The public headers: ops/api.h, tracer/api.h and everything they include (all of it
# in these three folders' top level, plus the .def X-macro tables). Subfolders
# (ops/cpu, ops/cuda, runtime/cuda, ...) are kernels and backends, not installed.
foreach(dir runtime runtime/distributed ops ops/autograd ops/optim ops/distributed tracer)
  file(GLOB _kiln_headers CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/*.h
       ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/*.def)
  install(FILES ${_kiln_headers} DESTINATION ${KILN_INSTALL_INCLUDEDIR}/${dir})
endforeach()

install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${KILN_INSTALL_CMAKEDIR})
# 0.x: a minor version bump may break the API.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/kilnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kilnConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/kilnConfigVersion.cmake DESTINATION ${KILN_INSTALL_CMAKEDIR})
