// The single entry point for every op call, from C++ and Python alike.
//
//   dispatch(call)            validates, infers the output metadata (infer_output),
//                             allocates the output (or builds the view) and runs the
//                             backend kernel of the inputs' device.
//   dispatch_into(call, out)  the same, writing into an existing tensor (in-place ops,
//                             copy_, fill_): out's shape must equal the inferred one
//                             and its dtype must be able to hold the result.
//
// A DispatchHook, when installed, sees each call first (the tracer records or replays
// there); it may return a result to short-circuit the eager path.
#pragma once

#include "ops/registry.h"

namespace kiln {

// Shape/dtype/device rule for a call: validates the inputs (throwing kiln errors that
// name the op, the argument and expected vs actual) and returns the output metadata.
OutputMeta infer_output(const OpCall& call);

Tensor dispatch(const OpCall& call);
void dispatch_into(const OpCall& call, const Tensor& out);

// Runs the kernel only (no hook, no validation): out already has the inferred metadata.
void run_kernel(const OpCall& call, const Tensor& out);
// The eager tail of dispatch / dispatch_into for a validated call (no hook): builds the
// view or allocates the output and runs the kernel.
Tensor execute(const OpCall& call, const OutputMeta& meta);
void execute_into(const OpCall& call, const OutputMeta& meta, const Tensor& out);

class DispatchHook {
 public:
  virtual ~DispatchHook() = default;
  // Return true and set *result to take over the call.
  virtual bool on_call(const OpCall& call, const OutputMeta& meta, Tensor* result) = 0;
  // Asked first, before the call is validated and its metadata inferred: a hook that
  // already knows the call (the tracer replaying a compiled path: the same op on inputs
  // its guards passed, whose output metadata it recorded) may take it over here. Return
  // true, set *result, and point *meta at the output metadata (valid until the hook's
  // next call). Only for calls whose validation would pass and whose metadata
  // infer_output would give (a view's result then shares its input's version counter, as
  // on the other path). Otherwise return false: on_call follows.
  virtual bool on_known_call(const OpCall& call, Tensor* result, const OutputMeta** meta) {
    (void)call, (void)result, (void)meta;
    return false;
  }
  // Return true to take over an in-place call (out is written by the hook, now or lazily).
  virtual bool on_call_into(const OpCall& call, const OutputMeta& meta, const Tensor& out) = 0;
};
// One hook per thread (the tracer is per thread). Pass nullptr to remove.
void set_dispatch_hook(DispatchHook* hook);
DispatchHook* dispatch_hook();
// Creates a thread's hook on its first dispatch (the tracer registers itself here).
using DispatchHookFactory = DispatchHook* (*)();
void set_dispatch_hook_factory(DispatchHookFactory factory);

// While alive, calls on this thread bypass the hook (kiln's own host reads use it so
// that reading a value does not record ops).
class NoHookScope {
 public:
  NoHookScope();
  ~NoHookScope();
  NoHookScope(const NoHookScope&) = delete;
  NoHookScope& operator=(const NoHookScope&) = delete;

 private:
  DispatchHook* saved_;
};

}  // namespace kiln
