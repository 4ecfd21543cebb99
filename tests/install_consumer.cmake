# ctest's kiln_install_consumer (cmake -P): installs this build of kiln into a fresh
# prefix, builds examples/cmake_consumer against it with find_package(kiln) and runs
# it. Passed in with -D: KILN_BUILD_DIR, KILN_SOURCE_DIR, KILN_LIB (the built
# libkiln.so), WORK_DIR, GENERATOR, MAKE_PROGRAM, CXX_COMPILER. Prints "KILN_SKIP:"
# (ctest then reports the test as skipped) when libkiln has not been built.
cmake_minimum_required(VERSION 3.24)

set(prefix ${WORK_DIR}/prefix)
set(consumer_build ${WORK_DIR}/build)
if(NOT EXISTS "${KILN_LIB}")
  message("KILN_SKIP: ${KILN_LIB} is not built")
  return()
endif()
file(REMOVE_RECURSE ${WORK_DIR})

function(step name)
  string(TIMESTAMP t0 "%s")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out
    TIMEOUT 150)
  string(TIMESTAMP t1 "%s")
  math(EXPR dt "${t1} - ${t0}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "[${name}] FAILED (${rc}) after ${dt} s: ${ARGN}\n${out}")
  endif()
  message("[${name}] ok (${dt} s)")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

step(install ${CMAKE_COMMAND} --install ${KILN_BUILD_DIR} --prefix ${prefix})

# The exported link interface must not pull in kiln's private dependencies.
file(GLOB target_files ${prefix}/lib*/cmake/kiln/kilnTargets*.cmake
     ${prefix}/lib/*/cmake/kiln/kilnTargets*.cmake)
if(NOT target_files)
  message(FATAL_ERROR "no kilnTargets*.cmake under ${prefix}")
endif()
foreach(f ${target_files})
  file(READ ${f} text)
  string(REGEX MATCH "INTERFACE_LINK_LIBRARIES \"[^\"]*\"" link_iface "${text}")
  if(link_iface MATCHES "LLVM|CUDA|cuda|cublas|nvrtc|blas|xsimd")
    message(FATAL_ERROR "${f}: private dependency in the exported ${link_iface}")
  endif()
  string(FIND "${text}" "${KILN_SOURCE_DIR}/" in_source)
  if(NOT in_source EQUAL -1)
    message(FATAL_ERROR "${f} refers to the source tree ${KILN_SOURCE_DIR}")
  endif()
endforeach()

set(configure_args -S ${KILN_SOURCE_DIR}/examples/cmake_consumer -B ${consumer_build}
    -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
if(MAKE_PROGRAM)
  list(APPEND configure_args -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
step(configure ${CMAKE_COMMAND} ${configure_args})
message("${step_output}")
# find_package(kiln) must have found the installed package, not the build tree's.
file(STRINGS ${consumer_build}/CMakeCache.txt kiln_dir REGEX "^kiln_DIR:")
string(FIND "${kiln_dir}" "=${prefix}/" in_prefix)
if(in_prefix EQUAL -1)
  message(FATAL_ERROR "find_package(kiln) found ${kiln_dir}, not the package in ${prefix}")
endif()

step(build ${CMAKE_COMMAND} --build ${consumer_build})
step(run ${consumer_build}/kiln_consumer)
message("${step_output}")
# Leave nothing big behind when it passed (the installed libkiln.so is a copy).
file(REMOVE_RECURSE ${WORK_DIR})
