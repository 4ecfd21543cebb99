// Reading the Python stack cheaply, for the per-op site (site.cpp).
//
// FrameCursor walks the current thread's frames from the innermost one outwards and
// gives each frame's code object and bytecode offset (f_lasti, in bytes: the value of
// PyFrame_GetLasti). Both are borrowed and valid while the frame runs, i.e. for the
// duration of the walk. On CPython 3.11 it reads the interpreter's frame stack
// directly (internal/pycore_frame.h): no frame object is created, where the public API
// (PyEval_GetFrame, PyFrame_GetBack) creates one per frame it touches. Other versions
// take the public API (Portable); both see the same frames with the same values, which
// tests/python/test_tracer_sites.py checks. Needs the GIL.
#pragma once

#include <Python.h>

namespace kiln::python {

class FrameCursor {
 public:
  enum class Mode { Fast, Portable };
  explicit FrameCursor(Mode mode = Mode::Fast);
  ~FrameCursor();
  FrameCursor(const FrameCursor&) = delete;
  FrameCursor& operator=(const FrameCursor&) = delete;

  bool done() const { return code_ == nullptr; }
  PyCodeObject* code() const { return code_; }  // borrowed
  int lasti() const { return lasti_; }
  void next();  // to the calling frame

  // Whether Mode::Fast reads the interpreter's frames (CPython 3.11) rather than
  // falling back to the public API.
  static bool fast_available();

 private:
  void load();

  Mode mode_;
  void* frame_ = nullptr;  // _PyInterpreterFrame* (Fast) or an owned PyFrameObject*
  PyCodeObject* code_ = nullptr;
  int lasti_ = -1;
};

}  // namespace kiln::python
