#include "ops/dispatch.h"

#include "ops/autograd/record.h"
#include "ops/kernels.h"
#include "runtime/error.h"
#include "runtime/profile_events.h"

namespace kiln {
namespace {

// The hook and whether it was made, in one thread-local (one TLS lookup per op).
struct HookSlot {
  DispatchHook* hook = nullptr;
  bool initialized = false;
};
constinit thread_local HookSlot tls_hook_slot;
DispatchHookFactory g_hook_factory = nullptr;

DispatchHook* current_hook() {
  HookSlot& slot = tls_hook_slot;
  if (!slot.initialized) [[unlikely]] {
    slot.initialized = true;
    if (g_hook_factory) slot.hook = g_hook_factory();
  }
  return slot.hook;
}

}  // namespace

void set_dispatch_hook(DispatchHook* hook) {
  HookSlot& slot = tls_hook_slot;
  slot.initialized = true;
  slot.hook = hook;
}
DispatchHook* dispatch_hook() { return current_hook(); }
void set_dispatch_hook_factory(DispatchHookFactory factory) { g_hook_factory = factory; }

NoHookScope::NoHookScope() : saved_(current_hook()) { tls_hook_slot.hook = nullptr; }
NoHookScope::~NoHookScope() { tls_hook_slot.hook = saved_; }

void run_kernel(const OpCall& call, const Tensor& out) {
  const OpFamily family = call.info().family;
  if (family == OpFamily::ToDevice) {
    copy_across_devices(call.inputs[0], out);
    return;
  }
  if (family == OpFamily::Collective) {  // even when empty: every rank takes part
    run_collective(call, out);
    return;
  }
  // Index kernels check every index even when the result is empty.
  if (out.numel() == 0 && family != OpFamily::IndexSelect && family != OpFamily::Gather &&
      family != OpFamily::Scatter)
    return;
  const bool cuda = out.device().is_cuda();
#define KILN_RUN(fn)     \
  if (cuda)              \
    cuda::fn(call, out); \
  else                   \
    cpu::fn(call, out);  \
  return;
  switch (family) {
    case OpFamily::Unary:
      KILN_RUN(unary)
    case OpFamily::Clamp:
      KILN_RUN(clamp)
    case OpFamily::Binary:
      KILN_RUN(binary)
    case OpFamily::Where:
      KILN_RUN(where)
    case OpFamily::Reduce:
      KILN_RUN(reduce)
    case OpFamily::Softmax:
      KILN_RUN(softmax)
    case OpFamily::LayerNorm:
      KILN_RUN(layer_norm)
    case OpFamily::Attention:
      KILN_RUN(attention)
    case OpFamily::Recurrent:
      KILN_RUN(lstm)
    case OpFamily::Matmul:
      KILN_RUN(matmul)
    case OpFamily::Linear:
      KILN_RUN(linear)
    case OpFamily::Conv2d:
      KILN_RUN(conv2d)
    case OpFamily::Pool2d:
      KILN_RUN(pool2d)
    case OpFamily::Unfold:
      KILN_RUN(unfold)
    case OpFamily::Cat:
      KILN_RUN(cat)
    case OpFamily::IndexSelect:
      KILN_RUN(index_select)
    case OpFamily::Gather:
      KILN_RUN(gather)
    case OpFamily::Scatter:
      KILN_RUN(scatter)
    case OpFamily::Sort:
      KILN_RUN(sort)
    case OpFamily::Scan:
      KILN_RUN(scan)
    case OpFamily::Sample:
      KILN_RUN(multinomial)
    case OpFamily::Nonzero:
      KILN_RUN(nonzero)
    case OpFamily::Factory:
      KILN_RUN(factory)
    case OpFamily::Random:
      KILN_RUN(random)
    case OpFamily::ToDevice:
    case OpFamily::View:
    case OpFamily::Collective:
      return;
  }
#undef KILN_RUN
}

Tensor dispatch(const OpCall& call) {
  Tensor result;
  DispatchHook* hook = current_hook();
  const OutputMeta* known = nullptr;
  if (hook && hook->on_known_call(call, &result, &known)) {
    if (call.info().family == OpFamily::View)
      call.inputs[0].impl()->share_version_with(*result.impl());
    if (autograd::should_record(call)) {
      const OutputMeta meta = *known;
      autograd::record(call, meta, result);
    }
    return result;
  }
  const OutputMeta meta = infer_output(call);
  if (!hook || !hook->on_call(call, meta, &result)) result = execute(call, meta);
  if (call.info().family == OpFamily::View)
    call.inputs[0].impl()->share_version_with(*result.impl());
  if (autograd::should_record(call)) autograd::record(call, meta, result);
  return result;
}

Tensor execute(const OpCall& call, const OutputMeta& meta) {
  profiler::Span span(profiler::Kind::Op, meta.device, [&] { return std::string(call.name()); });
  if (call.info().family == OpFamily::View) {
    return Tensor::make_view(call.inputs[0].storage(), meta.sizes, meta.strides, meta.offset,
                             meta.dtype);
  }
  Tensor out;
  try {
    out = Tensor::make(meta.sizes, meta.dtype, meta.device);
  } catch (const OutOfMemoryError& e) {  // name the op whose output did not fit
    throw OutOfMemoryError(detail::cat("[", call.name(), "] ", e.what()));
  }
  run_kernel(call, out);
  return out;
}

void dispatch_into(const OpCall& call, const Tensor& out) {
  KILN_CHECK(out.defined(), ValueError, "[", call.name(), "] the output tensor is undefined");
  const OutputMeta meta = infer_output(call);
  KILN_CHECK(call.info().family != OpFamily::View, Error, "[", call.name(),
             "] a view op cannot write into an existing tensor");
  KILN_CHECK(meta.sizes == out.sizes(), ShapeError, "[", call.name(), "] the result of shape ",
             dims_str(meta.sizes), " cannot be written in place into a tensor of shape ",
             dims_str(out.sizes()));
  KILN_CHECK(meta.device == out.device(), DeviceError, "[", call.name(), "] the result on ",
             meta.device.str(), " cannot be written in place into a tensor on ",
             out.device().str());
  // PyTorch's in-place rule: the result dtype must be castable to out's dtype without
  // changing category (float into int or anything non-bool into bool is refused).
  const bool ok = meta.dtype == out.dtype() || is_floating(out.dtype()) ||
                  (is_integral(out.dtype()) && !is_floating(meta.dtype)) || call.op == OpId::Cast ||
                  call.info().family == OpFamily::Factory;
  KILN_CHECK(ok, DTypeError, "[", call.name(), "] result dtype ", dtype_name(meta.dtype),
             " cannot be written in place into a tensor of dtype ", dtype_name(out.dtype()));
  // A collective writes outside autograd, as torch.distributed's do: no grad_fn, no check
  // (a leaf that requires grad may be all-reduced), the history left as it is.
  const autograd::InPlacePlan history =
      has_effects(call.op) ? autograd::InPlacePlan{} : autograd::prepare_in_place(call, meta, out);
  DispatchHook* hook = current_hook();
  if (!hook || !hook->on_call_into(call, meta, out)) execute_into(call, meta, out);
  out.impl()->bump_version();
  autograd::rebase(out, history);
}

void execute_into(const OpCall& call, const OutputMeta& meta, const Tensor& out) {
  profiler::Span span(profiler::Kind::Op, meta.device, [&] { return std::string(call.name()); });
  if (meta.dtype == out.dtype() || call.op == OpId::Cast ||
      call.info().family == OpFamily::Factory) {
    run_kernel(call, out);
    return;
  }
  // Compute in the result dtype, then convert into out.
  Tensor tmp = Tensor::make(meta.sizes, meta.dtype, meta.device);
  run_kernel(call, tmp);
  OpCall cast{OpId::Cast, {tmp}, {}, {}};
  cast.attrs.dtype = out.dtype();
  run_kernel(cast, out);
}

Tensor kernel_contiguous(const Tensor& t, DType dtype) {
  if (t.is_contiguous() && t.dtype() == dtype) return t;
  Tensor out = Tensor::make(t.sizes(), dtype, t.device());
  OpCall cast{OpId::Cast, {t}, {}, {}};
  cast.attrs.dtype = dtype;
  run_kernel(cast, out);
  return out;
}

}  // namespace kiln
