// Gradient checkpointing: checkpoint(fn, inputs) runs fn without saving anything for
// backward and records one CheckpointNode; backward re-runs fn (same random numbers)
// with grad on and backpropagates through the recomputed segment. Memory: only the
// segment's inputs are kept; cost: the segment's forward runs twice.
#pragma once

#include <functional>
#include <vector>

#include "runtime/tensor.h"

namespace kiln::autograd {

using SegmentFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
std::vector<Tensor> checkpoint(const SegmentFn& fn, const std::vector<Tensor>& inputs);

}  // namespace kiln::autograd
