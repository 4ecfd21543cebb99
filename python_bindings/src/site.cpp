// The Python side of the tracer's sites (tracer/user_site.h). Per op, python_op_site
// hashes (code object, bytecode offset) of each frame from the innermost one out to the
// first frame outside the kiln package: the user's call site plus the op's place inside
// kiln's own helpers. It materializes no strings and runs in tens of nanoseconds; code
// objects seen are kept alive in a small table, so an address in a hash is never reused
// by another code object. python_describe gives the words (file:line:column, function,
// the helper) and the stable key, only when the tracer asks (a new anchor, a graph break).
#include <cstring>
#include <unordered_map>

#include "common.h"
#include "tracer/user_site.h"

namespace kiln::python {
namespace {

std::string g_package_dir;  // ".../kiln/": frames under it are kiln's, not the user's

// Code object -> whether it is kiln's own (a strong reference is held per entry).
std::unordered_map<PyCodeObject*, bool> g_internal;
constexpr size_t kMaxCodes = 1 << 16;

bool is_internal(PyCodeObject* code) {
  auto it = g_internal.find(code);
  if (it != g_internal.end()) return it->second;
  if (g_internal.size() >= kMaxCodes) {
    // Rare (generated code): forget the table; ids seen before may be taken again, which
    // only merges loop heads, never changes a result.
    for (auto& [c, unused] : g_internal) Py_DECREF(c);
    g_internal.clear();
  }
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  if (!file) PyErr_Clear();
  const bool internal =
      !file || (!g_package_dir.empty() &&
                std::strncmp(file, g_package_dir.c_str(), g_package_dir.size()) == 0);
  Py_INCREF(code);
  g_internal.emplace(code, internal);
  return internal;
}

tracer::SiteId mix(tracer::SiteId h, uint64_t v) {
  return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
}

constexpr int kMaxFrames = 32;
// User frames in a site: the op's caller and its caller, so a user helper called twice
// on one line (`h(x) + h(x)`) is two sites.
constexpr int kUserFrames = 2;

tracer::SiteId python_op_site() {
  if (!Py_IsInitialized() || !PyGILState_Check()) return 0;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  if (!frame) return 0;
  Py_INCREF(frame);
  tracer::SiteId h = 0x6b696c6e5f736974ULL;
  int user = 0;
  for (int depth = 0; frame && depth < kMaxFrames; ++depth) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    h = mix(mix(h, reinterpret_cast<uintptr_t>(code)),
            static_cast<uint64_t>(PyFrame_GetLasti(frame)));
    const bool internal = is_internal(code);
    Py_DECREF(code);
    if (!internal && ++user == kUserFrames) break;
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  return h ? h : 1;
}

uint64_t bytecode_hash(PyCodeObject* code) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a
  PyObject* bytes = PyCode_GetCode(code);
  if (!bytes) {
    PyErr_Clear();
    return 0;
  }
  const char* data = PyBytes_AS_STRING(bytes);
  for (Py_ssize_t i = 0; i < PyBytes_GET_SIZE(bytes); ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 1099511628211ULL;
  }
  Py_DECREF(bytes);
  return h;
}

std::string utf8(PyObject* s) {
  const char* c = s ? PyUnicode_AsUTF8(s) : nullptr;
  if (!c) PyErr_Clear();
  return c ? c : "";
}

std::string base_name(const std::string& file) {
  const size_t slash = file.find_last_of('/');
  return slash == std::string::npos ? file : file.substr(slash + 1);
}

bool python_describe(tracer::UserSite* site) {
  if (!Py_IsInitialized() || !PyGILState_Check()) return false;
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  std::vector<tracer::SiteFrame> helpers;  // innermost first
  bool found = false;
  for (int depth = 0; frame && depth < kMaxFrames; ++depth) {
    PyCodeObject* code = PyFrame_GetCode(frame);  // new reference
    const int lasti = PyFrame_GetLasti(frame);
    const bool internal = is_internal(code);
    std::string file = utf8(code->co_filename);
    int line = 0, column = 0, end_line = 0, end_column = 0;
    if (!PyCode_Addr2Location(code, lasti, &line, &column, &end_line, &end_column) || line <= 0)
      line = PyFrame_GetLineNumber(frame);
    tracer::SiteFrame key{file, utf8(code->co_qualname), code->co_firstlineno, lasti,
                          bytecode_hash(code)};
    if (internal && found) {
      site->key.insert(site->key.begin(), std::move(key));  // kiln calling the user's code
    } else if (internal) {
      if (file.compare(0, g_package_dir.size(), g_package_dir) == 0)
        key.file = "kiln/" + file.substr(g_package_dir.size());
      if (helpers.empty())
        site->helper = base_name(file) + ":" + std::to_string(line) + " (" + key.qualname + ")";
      helpers.push_back(std::move(key));
    } else if (found) {
      site->key.insert(site->key.begin(), std::move(key));  // the caller of the user's frame
      Py_DECREF(code);
      break;
    } else {
      site->file = file;
      site->line = line;
      site->column = column >= 0 ? column + 1 : 0;
      site->function = utf8(code->co_name);
      site->key.push_back(std::move(key));
      for (auto it = helpers.rbegin(); it != helpers.rend(); ++it) site->key.push_back(*it);
      found = true;
    }
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);  // new reference
    Py_DECREF(frame);
    frame = back;
  }
  Py_XDECREF(frame);
  PyErr_Clear();
  if (!found) *site = tracer::UserSite{};
  return found;
}

void install_site_provider(const std::string& package_dir) {
  g_package_dir = package_dir;
  tracer::set_site_provider(tracer::SiteProvider{&python_op_site, &python_describe});
}

bp::object current_site() {
  tracer::UserSite site;
  if (!python_describe(&site)) return bp::object();
  return bp::make_tuple(site.file, site.line, site.function);
}

// (site id, file, line, column, function, helper, stable key) of the caller's place,
// for tests and tools.
bp::object exact_site() {
  tracer::UserSite site;
  if (!python_describe(&site)) return bp::object();
  return bp::make_tuple(python_op_site(), site.file, site.line, site.column, site.function,
                        site.helper, site.stable_key());
}

}  // namespace

void register_site() {
  bp::def("_install_site_provider", &install_site_provider);
  bp::def("_current_site", &current_site);
  bp::def("_exact_site", &exact_site);
}

}  // namespace kiln::python
