// The Collective family's shape rule and kernel, and ProcessGroup::all_reduce through
// dispatch (ops/distributed/collective_ops.h).
#include "ops/distributed/collective_ops.h"

#include "ops/dispatch.h"
#include "ops/kernels.h"
#include "ops/shape_rules_sample.h"
#include "runtime/error.h"

namespace kiln {
namespace {

distributed::ReduceOp reduce_op_of(const OpCall& c) {
  KILN_CHECK(c.attrs.dim >= 0 && c.attrs.dim <= static_cast<int64_t>(distributed::ReduceOp::Max),
             ValueError, "[", c.name(), "] unknown ReduceOp ", c.attrs.dim);
  return static_cast<distributed::ReduceOp>(c.attrs.dim);
}

}  // namespace

OutputMeta infer_collective(const OpCall& c) {
  KILN_CHECK(c.inputs.size() == 1, ValueError, "[", c.name(), "] takes one tensor, got ",
             c.inputs.size());
  const Tensor& t = c.inputs[0];
  distributed::ProcessGroup::find(c.attrs.count, c.name()).check_all_reduce(t, reduce_op_of(c));
  OutputMeta meta;
  meta.sizes = t.sizes();
  meta.strides = contiguous_strides(t.sizes());
  meta.dtype = t.dtype();
  meta.device = t.device();
  return meta;
}

void run_collective(const OpCall& call, const Tensor& out) {
  const Tensor& in = call.inputs[0];
  // A compiled trace may hand the kernel another buffer than the input's (an arena
  // slice): the reduction works in place on out.
  if (out.numel() > 0 && in.data_ptr() != out.data_ptr()) {
    OpCall copy{OpId::Cast, {in}, {}, {}};
    copy.attrs.dtype = out.dtype();
    run_kernel(copy, out);
  }
  distributed::ProcessGroup::find(call.attrs.count, call.name())
      .run_all_reduce(out, reduce_op_of(call));
}

namespace distributed {

void all_reduce(ProcessGroup& group, const Tensor& tensor, ReduceOp op) {
  KILN_CHECK(tensor.defined(), ValueError, "[all_reduce] tensor is an undefined tensor");
  OpCall call{OpId::AllReduce, {tensor}, {}, {}};
  call.attrs.count = group.id();
  call.attrs.dim = static_cast<int64_t>(op);
  dispatch_into(call, tensor);
}

// Declared in runtime/distributed/process_group.h; defined here, in the ops layer, since
// it dispatches the op. The site comes from the tracer's site scopes (ops carry none).
void ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op, Loc) {
  distributed::all_reduce(*this, tensor, op);
}

}  // namespace distributed
}  // namespace kiln
