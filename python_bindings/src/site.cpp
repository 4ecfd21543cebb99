// The Python side of the tracer's sites (tracer/user_site.h). Per op, python_op_site
// hashes (code object, bytecode offset) of each frame from the innermost one out to the
// user's frame and its caller: the user's call site plus the op's place inside kiln's
// own helpers. It reads frames through FrameCursor (no frame objects on CPython 3.11)
// and builds no strings. Code objects seen are kept alive in a table, so an address in
// a hash is never reused by another code object.
//
// python_capture does the same and remembers the frames of each new site, so that the
// site can be described later, after its frames are gone (a region's entry is described
// only if its trace aborts). python_describe gives the words (file:line:column,
// function, the helper) and the stable key of a captured site, built once per site.
#include <cstring>
#include <optional>
#include <unordered_map>

#include "common.h"
#include "python_frames.h"
#include "tracer/user_site.h"

namespace kiln::python {
namespace {

std::string g_package_dir;  // ".../kiln/": frames under it are kiln's, not the user's

// Code object -> whether it is kiln's own (a strong reference is held per entry).
std::unordered_map<PyCodeObject*, bool> g_internal;
constexpr size_t kMaxCodes = 1 << 16;

// Per captured site: its frames (innermost first; the code objects are held by
// g_internal) and, once asked for, its description.
struct SiteFrames {
  struct Frame {
    PyCodeObject* code;
    int lasti;
    bool internal;
  };
  std::vector<Frame> frames;
  std::optional<tracer::UserSite> described;
};
std::unordered_map<tracer::SiteId, SiteFrames> g_sites;
constexpr size_t kMaxSites = 1 << 16;

// A direct-mapped cache in front of g_internal (a site walks a handful of frames per op;
// the map's lookup would be most of its cost). Entries are codes held by g_internal.
struct RecentCode {
  PyCodeObject* code = nullptr;
  bool internal = false;
};
constexpr size_t kRecent = 64;
RecentCode g_recent[kRecent];
size_t recent_slot(PyCodeObject* code) {
  return (reinterpret_cast<uintptr_t>(code) >> 4) % kRecent;
}

uint64_t g_forgotten = 0;  // how often the tables were forgotten

void forget_all() {
  g_sites.clear();  // their frames' code objects are released below
  for (RecentCode& r : g_recent) r = RecentCode{};
  for (auto& [c, unused] : g_internal) Py_DECREF(c);
  g_internal.clear();
  ++g_forgotten;
}

bool is_internal(PyCodeObject* code) {
  RecentCode& recent = g_recent[recent_slot(code)];
  if (recent.code == code) return recent.internal;
  auto it = g_internal.find(code);
  if (it != g_internal.end()) {
    recent = RecentCode{code, it->second};
    return it->second;
  }
  // Rare (generated code): forget the tables; ids seen before may be taken again, which
  // only merges loop heads, never changes a result (a site no longer known is
  // described as unknown).
  if (g_internal.size() >= kMaxCodes) forget_all();
  const char* file = PyUnicode_AsUTF8(code->co_filename);
  if (!file) PyErr_Clear();
  const bool internal =
      !file || (!g_package_dir.empty() &&
                std::strncmp(file, g_package_dir.c_str(), g_package_dir.size()) == 0);
  Py_INCREF(code);
  g_internal.emplace(code, internal);
  g_recent[recent_slot(code)] = RecentCode{code, internal};
  return internal;
}

tracer::SiteId mix(tracer::SiteId h, uint64_t v) {
  return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
}

constexpr int kMaxFrames = 32;
// User frames in a site: the op's caller and its caller, so a user helper called twice
// on one line (`h(x) + h(x)`) is two sites.
constexpr int kUserFrames = 2;

// Walks the site's frames (see the top of the file), calling frame(code, lasti, internal)
// on each after it is hashed; returns the site id (0: no Python frame).
template <typename OnFrame>
tracer::SiteId walk_site(FrameCursor::Mode mode, OnFrame&& frame, int user_frames = kUserFrames) {
  if (!Py_IsInitialized() || !PyGILState_Check()) return 0;
  FrameCursor cursor(mode);
  if (cursor.done()) return 0;
  tracer::SiteId h = 0x6b696c6e5f736974ULL;
  int user = 0;
  for (int depth = 0; !cursor.done() && depth < kMaxFrames; ++depth, cursor.next()) {
    PyCodeObject* code = cursor.code();
    h = mix(mix(h, reinterpret_cast<uintptr_t>(code)), static_cast<uint64_t>(cursor.lasti()));
    const bool internal = is_internal(code);
    frame(code, cursor.lasti(), internal);
    if (!internal && ++user == user_frames) break;
  }
  return h ? h : 1;
}

tracer::SiteId python_op_site() {
  return walk_site(FrameCursor::Mode::Fast, [](PyCodeObject*, int, bool) {});
}

// The site up to the user's frame, its caller left out (tracer::SiteProvider).
tracer::SiteId python_function_site() {
  return walk_site(
      FrameCursor::Mode::Fast, [](PyCodeObject*, int, bool) {}, 1);
}

// The same id, through the public frame API (tests compare the two).
tracer::SiteId python_op_site_portable() {
  return walk_site(FrameCursor::Mode::Portable, [](PyCodeObject*, int, bool) {});
}

tracer::SiteId python_capture() {
  SiteFrames::Frame chain[kMaxFrames];
  int n = 0;
  const uint64_t forgotten = g_forgotten;
  const tracer::SiteId id =
      walk_site(FrameCursor::Mode::Fast, [&](PyCodeObject* code, int lasti, bool internal) {
        chain[n++] = {code, lasti, internal};
      });
  // Frames kept only while the table holds their code objects (not if it was forgotten
  // during this walk).
  if (id == 0 || forgotten != g_forgotten || g_sites.count(id)) return id;
  if (g_sites.size() >= kMaxSites) g_sites.clear();  // rare: sites seen before turn unknown
  g_sites[id].frames.assign(chain, chain + n);
  return id;
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

// The words and the stable key of a site from its frames (innermost first).
tracer::UserSite describe_frames(const std::vector<SiteFrames::Frame>& frames) {
  tracer::UserSite site;
  std::vector<tracer::SiteFrame> helpers;  // innermost first
  bool found = false;
  for (const auto& [code, lasti, internal] : frames) {
    std::string file = utf8(code->co_filename);
    int line = 0, column = 0, end_line = 0, end_column = 0;
    if (!PyCode_Addr2Location(code, lasti, &line, &column, &end_line, &end_column) || line <= 0)
      line = PyCode_Addr2Line(code, lasti);
    tracer::SiteFrame key{file, utf8(code->co_qualname), code->co_firstlineno, lasti,
                          bytecode_hash(code)};
    if (internal && found) {
      site.key.insert(site.key.begin(), std::move(key));  // kiln calling the user's code
    } else if (internal) {
      if (file.compare(0, g_package_dir.size(), g_package_dir) == 0)
        key.file = "kiln/" + file.substr(g_package_dir.size());
      if (helpers.empty())
        site.helper = base_name(file) + ":" + std::to_string(line) + " (" + key.qualname + ")";
      helpers.push_back(std::move(key));
    } else if (found) {
      site.key.insert(site.key.begin(), std::move(key));  // the caller of the user's frame
      break;
    } else {
      site.file = file;
      site.line = line;
      site.column = column >= 0 ? column + 1 : 0;
      site.function = utf8(code->co_name);
      site.key.push_back(std::move(key));
      for (auto it = helpers.rbegin(); it != helpers.rend(); ++it) site.key.push_back(*it);
      found = true;
    }
  }
  PyErr_Clear();
  return found ? site : tracer::UserSite{};
}

bool python_describe(tracer::SiteId id, tracer::UserSite* site) {
  if (!Py_IsInitialized() || !PyGILState_Check()) return false;
  auto it = g_sites.find(id);
  if (it == g_sites.end()) return false;
  if (!it->second.described) it->second.described = describe_frames(it->second.frames);
  *site = *it->second.described;
  return site->known();
}

void install_site_provider(const std::string& package_dir) {
  g_package_dir = package_dir;
  tracer::set_site_provider(tracer::SiteProvider{&python_op_site, &python_function_site,
                                                 &python_capture, &python_describe});
}

bp::object current_site() {
  const tracer::UserSite site = tracer::current_site();
  if (!site.known()) return bp::object();
  return bp::make_tuple(site.file, site.line, site.function);
}

// (site id, file, line, column, function, helper, stable key) of the caller's place,
// for tests and tools.
bp::object exact_site() {
  tracer::UserSite site;
  const tracer::SiteId id = python_capture();
  if (!python_describe(id, &site)) return bp::object();
  return bp::make_tuple(python_op_site(), site.file, site.line, site.column, site.function,
                        site.helper, site.stable_key());
}

// (the op site through the fast frame reader, the same through the public API, whether
// the fast reader is in use): tests check that both see the same frames.
bp::object site_readers() {
  return bp::make_tuple(python_op_site(), python_op_site_portable(), FrameCursor::fast_available());
}

}  // namespace

void register_site() {
  bp::def("_install_site_provider", &install_site_provider);
  bp::def("_current_site", &current_site);
  bp::def("_exact_site", &exact_site);
  bp::def("_site_readers", &site_readers);
}

}  // namespace kiln::python
