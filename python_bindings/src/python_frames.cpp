#include "python_frames.h"

// CPython 3.11 keeps its frames in _PyInterpreterFrame records and creates a frame
// object only when asked for one; the layout is internal, so it is read through the
// interpreter's own header, for 3.11 only. Any other version uses the public API.
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 && !defined(Py_LIMITED_API)
#define KILN_FAST_FRAMES 1
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
#else
#define KILN_FAST_FRAMES 0
#endif

namespace kiln::python {

#if KILN_FAST_FRAMES
namespace {

// As PyThreadState_GetFrame and PyFrame_GetBack do: frames still being set up (before
// their first RESUME) are not reported.
_PyInterpreterFrame* complete(_PyInterpreterFrame* f) {
  while (f && _PyFrame_IsIncomplete(f)) f = f->previous;
  return f;
}

}  // namespace
#endif

bool FrameCursor::fast_available() { return KILN_FAST_FRAMES != 0; }

FrameCursor::FrameCursor(Mode mode) : mode_(KILN_FAST_FRAMES ? mode : Mode::Portable) {
#if KILN_FAST_FRAMES
  if (mode_ == Mode::Fast) {
    frame_ = complete(PyThreadState_Get()->cframe->current_frame);
    load();
    return;
  }
#endif
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  Py_XINCREF(frame);
  frame_ = frame;
  load();
}

FrameCursor::~FrameCursor() {
  if (mode_ == Mode::Portable) Py_XDECREF(static_cast<PyFrameObject*>(frame_));
}

void FrameCursor::load() {
  code_ = nullptr;
  lasti_ = -1;
  if (!frame_) return;
#if KILN_FAST_FRAMES
  if (mode_ == Mode::Fast) {
    auto* f = static_cast<_PyInterpreterFrame*>(frame_);
    code_ = f->f_code;
    const int units = _PyInterpreterFrame_LASTI(f);
    lasti_ = units < 0 ? -1 : units * static_cast<int>(sizeof(_Py_CODEUNIT));
    return;
  }
#endif
  auto* frame = static_cast<PyFrameObject*>(frame_);
  PyCodeObject* code = PyFrame_GetCode(frame);  // new reference; the frame holds another
  Py_DECREF(code);
  code_ = code;
  lasti_ = PyFrame_GetLasti(frame);
}

void FrameCursor::next() {
  if (!frame_) return;
#if KILN_FAST_FRAMES
  if (mode_ == Mode::Fast) {
    frame_ = complete(static_cast<_PyInterpreterFrame*>(frame_)->previous);
    load();
    return;
  }
#endif
  auto* frame = static_cast<PyFrameObject*>(frame_);
  frame_ = PyFrame_GetBack(frame);  // new reference
  Py_DECREF(frame);
  load();
}

}  // namespace kiln::python
