# `pip install . --config-settings=cmake.define.KILN_PIP_PREBUILT=<build dir>`: instead of
# building kiln again, package the module, libkiln.so and the Python sources of a
# build that scripts/setup.sh already made (what ctest python_pip_install does: a second
# full build would double CI's build time). The interpreter must be the one the module
# was built for.
set(_kiln_dir ${KILN_PIP_PREBUILT})
if(NOT IS_ABSOLUTE ${_kiln_dir})
  get_filename_component(_kiln_dir ${_kiln_dir} ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
endif()
file(GLOB _kiln_modules ${_kiln_dir}/python/kiln/_kiln*.so)
file(GLOB _kiln_libs ${_kiln_dir}/libkiln.so*)
if(NOT _kiln_modules OR NOT _kiln_libs)
  message(FATAL_ERROR "kiln: KILN_PIP_PREBUILT=${_kiln_dir} holds no built module "
    "(python/kiln/_kiln*.so) or libkiln.so: build it first (scripts/setup.sh)")
endif()
find_package(Python3 REQUIRED COMPONENTS Interpreter)
execute_process(COMMAND ${Python3_EXECUTABLE} -c
  "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"
  OUTPUT_VARIABLE _kiln_suffix OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
set(_kiln_module ${_kiln_dir}/python/kiln/_kiln${_kiln_suffix})
if(NOT EXISTS ${_kiln_module})
  message(FATAL_ERROR "kiln: the module in ${_kiln_dir}/python/kiln (${_kiln_modules}) "
    "was built for another Python; ${Python3_EXECUTABLE} (Python ${Python3_VERSION}) needs "
    "_kiln${_kiln_suffix}. Build for this interpreter with `pip install .` (no "
    "KILN_PIP_PREBUILT), which needs Boost.Python for Python ${Python3_VERSION_MAJOR}."
    "${Python3_VERSION_MINOR}.")
endif()
message(STATUS "kiln: packaging the prebuilt ${_kiln_module}")
install(FILES ${_kiln_module} ${_kiln_libs} DESTINATION kiln COMPONENT kiln_python)
install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/python_bindings/kiln/ DESTINATION kiln
        COMPONENT kiln_python FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
