// GradientReducer and broadcast_tensors (ops/distributed/data_parallel.h).
#include "ops/distributed/data_parallel.h"

#include "ops/autograd/grad_mode.h"
#include "runtime/error.h"

namespace kiln::distributed {

void broadcast_tensors(ProcessGroup& group, const std::vector<Tensor>& tensors, int root) {
  for (const Tensor& t : tensors) {
    if (t.is_contiguous()) {
      group.broadcast(t, root);
    } else {
      Tensor tmp = t.contiguous();
      group.broadcast(tmp, root);
      t.detach().copy_(tmp);
    }
  }
}

GradientReducer::GradientReducer(std::shared_ptr<ProcessGroup> group,
                                 std::vector<Tensor> parameters, size_t bucket_cap_bytes)
    : group_(std::move(group)), params_(std::move(parameters)) {
  KILN_CHECK(group_, ValueError, "[DistributedDataParallel] no process group");
  KILN_CHECK(bucket_cap_bytes > 0, ValueError,
             "[DistributedDataParallel] bucket_cap_mb must be positive");
  std::vector<size_t> open;  // the bucket being filled, per (dtype, device) in turn
  size_t open_bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k];
    KILN_CHECK(p.defined(), ValueError, "[DistributedDataParallel] parameter ", k, " is undefined");
    const size_t bytes = static_cast<size_t>(p.numel() * p.element_size());
    const bool same_kind = open.empty() || (params_[open.front()].dtype() == p.dtype() &&
                                            params_[open.front()].device() == p.device());
    if (!open.empty() && (!same_kind || open_bytes + bytes > bucket_cap_bytes)) {
      buckets_.push_back(std::move(open));
      open.clear();
      open_bytes = 0;
    }
    open.push_back(k);
    open_bytes += bytes;
  }
  if (!open.empty()) buckets_.push_back(std::move(open));
}

void GradientReducer::all_reduce_gradients() {
  autograd::NoGradScope no_grad;
  flats_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const auto& bucket = buckets_[b];
    const Tensor& first = params_[bucket.front()];
    int64_t total = 0;
    for (size_t k : bucket) total += params_[k].numel();
    Tensor& flat = flats_[b];
    if (!flat.defined()) flat = Tensor::make({total}, first.dtype(), first.device());
    int64_t offset = 0;
    for (size_t k : bucket) {
      const Tensor& p = params_[k];
      Tensor slot = flat.narrow(0, offset, p.numel()).view(p.sizes());
      const Tensor g = p.grad();
      if (g.defined())
        slot.copy_(g);
      else
        slot.zero_();
      offset += p.numel();
    }
    group_->all_reduce(flat, ReduceOp::Avg);  // the all_reduce op: traced with the rest
    offset = 0;
    for (size_t k : bucket) {
      Tensor& p = params_[k];
      Tensor slot = flat.narrow(0, offset, p.numel()).view(p.sizes());
      Tensor g = p.grad();
      if (g.defined())
        g.copy_(slot);
      else
        p.set_grad(slot.clone());
      offset += p.numel();
    }
  }
}

}  // namespace kiln::distributed
