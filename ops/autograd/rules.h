// Backward rules: for every op in ops/ops.def, how the gradients of its inputs follow
// from the gradient of its output. Rules are written with ordinary ops (ops/api.h), so
// the tracer records, fuses and replays a backward pass like any other code. One file
// per op family, as for the kernels: rules_pointwise.cpp (unary, clamp, binary, where,
// cast), rules_reduce.cpp (reductions, softmax, layer_norm), rules_attention.cpp, rules_lstm.cpp,
// rules_linalg.cpp (matmul, linear, conv2d, pooling, im2col), rules_data.cpp (views, cat,
// index_select, to_device), rules_along_dim.cpp (gather, scatters, scans, prod). rules.cpp maps
// each op to its family's rule.
#pragma once

#include "ops/autograd/node.h"

namespace kiln::autograd {

// Input gradients (one per call input; undefined where none) from the output gradient.
using BackwardFn = TensorList (*)(const OpNode& node, const Tensor& grad);
// Which call inputs the rule reads (bit i: input i), given which inputs need a gradient.
using SavedFn = uint32_t (*)(const OpCall& call, uint32_t needs_grad);

struct BackwardRule {
  BackwardFn backward = nullptr;  // null: the op has no gradient (comparisons, argmax, ...)
  SavedFn saved = nullptr;
};
const BackwardRule& backward_rule(OpId op);

// The family rules (defined in the rules_*.cpp files).
TensorList pointwise_backward(const OpNode& node, const Tensor& grad);
uint32_t pointwise_saved(const OpCall& call, uint32_t needs_grad);
TensorList reduce_backward(const OpNode& node, const Tensor& grad);
uint32_t reduce_saved(const OpCall& call, uint32_t needs_grad);
TensorList linalg_backward(const OpNode& node, const Tensor& grad);
uint32_t linalg_saved(const OpCall& call, uint32_t needs_grad);
TensorList attention_backward(const OpNode& node, const Tensor& grad);
uint32_t attention_saved(const OpCall& call, uint32_t needs_grad);
TensorList lstm_backward(const OpNode& node, const Tensor& grad);  // rules_lstm.cpp
uint32_t lstm_saved(const OpCall& call, uint32_t needs_grad);
TensorList data_backward(const OpNode& node, const Tensor& grad);
uint32_t data_saved(const OpCall& call, uint32_t needs_grad);
TensorList along_dim_backward(const OpNode& node, const Tensor& grad);  // rules_along_dim.cpp
uint32_t along_dim_saved(const OpCall& call, uint32_t needs_grad);

// ---- helpers shared by the rules
constexpr uint32_t kAll = ~0u;
inline uint32_t bit(int i) { return 1u << i; }
// Sums grad over the dims that broadcasting expanded, down to sizes.
Tensor sum_to(const Tensor& grad, const Dims& sizes);
// grad of a reduction over dims (sorted) of a tensor of input_sizes, broadcast back.
Tensor expand_reduced(const Tensor& grad, const Dims& input_sizes, const Dims& dims, bool keepdim);

}  // namespace kiln::autograd
