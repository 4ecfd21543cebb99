# kiln_python_check() (a macro: what it finds stays visible to the caller): finds the
# interpreter (Python3_EXECUTABLE) and the Boost.Python built for its CPython version,
# or stops with an error that names what is missing.
# Debian 12 ships Boost.Python for its own python3 (3.11) only: libboost-python1.74-dev's
# libboost_python311.so. Sets KILN_BOOST_PYTHON (the Boost component, e.g. python311).
macro(kiln_python_check)
  find_package(Python3 COMPONENTS Interpreter Development.Module)
  if(NOT Python3_Interpreter_FOUND)
    message(FATAL_ERROR "kiln: no Python interpreter at '${Python3_EXECUTABLE}'")
  endif()
  set(_kiln_pyver "${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}")
  if(NOT Python3_Development.Module_FOUND)
    message(FATAL_ERROR "kiln: the headers of Python ${_kiln_pyver} (${Python3_EXECUTABLE}) are "
      "missing: install python${_kiln_pyver}-dev (Debian: python3-dev for its python3)")
  endif()
  set(_kiln_component python${Python3_VERSION_MAJOR}${Python3_VERSION_MINOR})
  find_package(Boost 1.74 QUIET COMPONENTS ${_kiln_component})
  if(NOT Boost_${_kiln_component}_FOUND)
    message(FATAL_ERROR "kiln: Boost.Python for Python ${_kiln_pyver} was not found "
      "(libboost_${_kiln_component}.so), but ${Python3_EXECUTABLE} is Python ${_kiln_pyver}. kiln's "
      "module is a Boost.Python extension and needs a Boost.Python built for the same "
      "CPython version. Debian 12's libboost-python-dev provides it only for its own "
      "python3 (3.11, libboost_python311.so): use /usr/bin/python3 or a virtual environment "
      "made from it (/usr/bin/python3 -m venv --system-site-packages VENV), or build "
      "Boost.Python for Python ${_kiln_pyver}.")
  endif()
  set(KILN_BOOST_PYTHON ${_kiln_component})
endmacro()
