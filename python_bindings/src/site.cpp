// The Python side of the tracer's user locations: a site provider that walks the
// interpreter's frames to the first frame outside the kiln package, so graph-break
// reports and logs name the user's file:line (function), not kiln's own code.
// It runs only when the tracer asks (trace events, sync points), never per op.
#include <cstring>

#include "common.h"
#include "tracer/user_site.h"

namespace kiln::python {
namespace {

std::string g_package_dir;  // ".../kiln/": frames under it are kiln's, not the user's

bool python_site(tracer::UserSite* site) {
  if (!Py_IsInitialized() || !PyGILState_Check()) return false;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  while (frame) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    const char* file = PyUnicode_AsUTF8(code->co_filename);
    bool internal = !file || (!g_package_dir.empty() &&
                              std::strncmp(file, g_package_dir.c_str(), g_package_dir.size()) == 0);
    if (!internal) {
      site->file = file;
      site->line = PyFrame_GetLineNumber(frame);
      const char* name = PyUnicode_AsUTF8(code->co_name);
      site->function = name ? name : "";
      Py_DECREF(code);
      Py_DECREF(frame);
      return true;
    }
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
    Py_DECREF(frame);
    frame = back;
  }
  PyErr_Clear();
  return false;
}

void install_site_provider(const std::string& package_dir) {
  g_package_dir = package_dir;
  tracer::set_site_provider(&python_site);
}

bp::object current_site() {
  tracer::UserSite site;
  if (!python_site(&site)) return bp::object();
  return bp::make_tuple(site.file, site.line, site.function);
}

}  // namespace

void register_site() {
  bp::def("_install_site_provider", &install_site_provider);
  bp::def("_current_site", &current_site);
}

}  // namespace kiln::python
