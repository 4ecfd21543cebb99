// The collectives as ops (ops.def's Collective family): what ProcessGroup::all_reduce
// (runtime/distributed/process_group.h) dispatches, so that the tracer records it and a
// data-parallel training step, its gradient all-reduce included, is one trace.
//
//   all_reduce(tensor, op, group)  in place on `tensor`: OpCall{AllReduce, {tensor}} with
//                                  attrs.count = group.id(), attrs.dim = op, dispatched
//                                  into tensor (dispatch_into).
//
// Contract: the op has effects outside the process (registry.h: has_effects), so traces
// run it exactly once per call, in program order, never dropped, merged or re-run. It
// writes outside autograd as torch.distributed.all_reduce does: no grad_fn, no error for a
// leaf that requires grad, its history left as it is. The shape rule checks the group
// still exists (ValueError otherwise: a trace names its group by id and never keeps it
// alive), the tensor is contiguous, on a device the backend serves (DeviceError) and of a
// dtype the op reduces (DTypeError). The kernel exchanges the signature with every rank
// first on the CPU backends (ValueError naming both ranks' calls on a mismatch) and then
// reduces: CPU backends synchronously, NCCL enqueued on kiln's stream (so it is captured
// in the CUDA graph of a compiled CUDA trace, where it runs as a library step).
#pragma once

#include "runtime/distributed/process_group.h"

namespace kiln::distributed {

void all_reduce(ProcessGroup& group, const Tensor& tensor, ReduceOp op = ReduceOp::Sum);

}  // namespace kiln::distributed
