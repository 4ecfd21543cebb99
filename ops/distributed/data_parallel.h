// Data-parallel training in C++: what kiln.nn.parallel.DistributedDataParallel does,
// as two calls around an ordinary training loop.
//
//   auto group = kiln::distributed::init_process_group();   // Options: backend "gloo"
//   kiln::distributed::broadcast_tensors(*group, params);   // every rank starts equal
//   kiln::distributed::GradientReducer reducer(group, params);
//   for (...) {
//     loss(model(x_of_this_rank)).backward();
//     reducer.all_reduce_gradients();    // grads := mean over ranks
//     optimizer.step();
//   }
//
// Gradients are averaged in buckets of at most bucket_cap_bytes (PyTorch's bucket_cap_mb,
// 25 MiB): parameters in reverse order (the order backward produces their gradients),
// grouped by dtype and device, copied into one flat buffer per bucket, all-reduced with
// ReduceOp::Avg (the all_reduce op: the tracer records it, so the copies, the reduction
// and the optimizer step after it are one trace with the backward), copied back. A
// parameter with no gradient on this rank contributes zeros, and after the call it has
// the averaged gradient (so every rank's optimizer sees the same gradients). Call it on
// every rank after the same backward passes.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "runtime/distributed/process_group.h"
#include "runtime/tensor.h"

namespace kiln::distributed {

// Copies rank `root`'s values of tensors into every rank's tensors, in place.
void broadcast_tensors(ProcessGroup& group, const std::vector<Tensor>& tensors, int root = 0);

class GradientReducer {
 public:
  GradientReducer(std::shared_ptr<ProcessGroup> group, std::vector<Tensor> parameters,
                  size_t bucket_cap_bytes = size_t{25} << 20);
  void all_reduce_gradients();
  // The parameter indices of each bucket, in the order the buckets are reduced.
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }
  ProcessGroup& group() const { return *group_; }

 private:
  std::shared_ptr<ProcessGroup> group_;
  std::vector<Tensor> params_;
  std::vector<std::vector<size_t>> buckets_;
  std::vector<Tensor> flats_;  // one flat buffer per bucket, made on first use
};

}  // namespace kiln::distributed
