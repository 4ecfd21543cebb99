// kiln's public op functions (the C++ API). Each builds an OpCall and sends it through
// dispatch(); validation and error messages live in the shape rules (ops/shape_rules.cpp)
// so that every path (C++, Python, tracer replay) checks the same way. Composite ops
// (zeros, chunk, split, stack, embedding, ...) are written in terms of primitives.
#pragma once

#include <array>
#include <optional>
#include <source_location>
#include <vector>

#include "runtime/tensor.h"

namespace kiln {

// ---- factories
struct TensorOptions {
  DType dtype = DType::Float32;
  Device device = kCPU;
  TensorOptions() = default;
  TensorOptions(DType d) : dtype(d) {}
  TensorOptions(Device dev) : device(dev) {}
  TensorOptions(DType d, Device dev) : dtype(d), device(dev) {}
};
Tensor empty(const Dims& sizes, TensorOptions opts = {});
Tensor zeros(const Dims& sizes, TensorOptions opts = {});
Tensor ones(const Dims& sizes, TensorOptions opts = {});
Tensor full(const Dims& sizes, const Scalar& value, TensorOptions opts = {});
Tensor arange(const Scalar& end, TensorOptions opts = {});
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1,
              TensorOptions opts = {});
Tensor rand(const Dims& sizes, TensorOptions opts = {});   // U[0, 1)
Tensor randn(const Dims& sizes, TensorOptions opts = {});  // N(0, 1)
// Copies host values into a new tensor of dtype dtype_of<T>() with the given sizes
// (numel must match), on device. Instantiated for bool, int32_t, int64_t, float, double.
template <class T>
Tensor from_vector(const std::vector<T>& values, const Dims& sizes, Device device = kCPU);
Tensor scalar_tensor(const Scalar& value, TensorOptions opts = {});

// The global generator: Philox4x32-10, counter based. The same seed gives the same
// numbers on the CPU and on CUDA (rand bit for bit; randn in float64 to a few ulp, as
// CUDA's double log/cos may round the last bit differently from glibc's); each call
// advances the offset.
void manual_seed(uint64_t seed);
struct RandomState {
  uint64_t seed;
  uint64_t offset;
};
RandomState next_random_state();     // the (seed, offset) for the next random op
RandomState current_random_state();  // without advancing
void restore_random_state(RandomState state);
// rand drawn from `state` (the global generator does not move).
Tensor rand(const Dims& sizes, TensorOptions opts, RandomState state);

// ---- pointwise unary
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x, bool approximate_tanh = false);
Tensor silu(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);

// ---- pointwise binary; a scalar may stand on either side
#define KILN_BINARY_DECL(name)                   \
  Tensor name(const Tensor& a, const Tensor& b); \
  Tensor name(const Tensor& a, const Scalar& b); \
  Tensor name(const Scalar& a, const Tensor& b);
KILN_BINARY_DECL(add)
KILN_BINARY_DECL(sub)
KILN_BINARY_DECL(mul)
KILN_BINARY_DECL(div)
KILN_BINARY_DECL(pow)
KILN_BINARY_DECL(maximum)
KILN_BINARY_DECL(minimum)
KILN_BINARY_DECL(eq)
KILN_BINARY_DECL(ne)
KILN_BINARY_DECL(lt)
KILN_BINARY_DECL(le)
KILN_BINARY_DECL(gt)
KILN_BINARY_DECL(ge)
#undef KILN_BINARY_DECL
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b);
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b);

// ---- reductions (empty dims: all dims)
Tensor sum(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Dims& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x);  // of all elements
Tensor min(const Tensor& x);
Tensor max(const Tensor& x, int64_t dim, bool keepdim = false);  // values only
Tensor min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor var(const Tensor& x, const Dims& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Dims& dims = {}, bool keepdim = false);

// ---- normalization
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor layer_norm(const Tensor& x, const Dims& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

// ---- fused LSTM layer (ops/lstm_layout.h)

// One direction of one LSTM layer over a sequence: xw [T, B, 4H] (the input projection
// with both biases), h0, c0 [B, H], w_hh [4H, H] -> y [T + 1, B, H]: rows [0, T) h_t per
// time position, row T the final c (time runs from T - 1 down to 0 when reverse).
// Differentiable in xw, h0, c0 and w_hh; CPU and CUDA, float32 or float64 (lstm_layer_supports).
Tensor lstm_layer(const Tensor& xw, const Tensor& h0, const Tensor& c0, const Tensor& w_hh,
                  bool reverse);
// Whether lstm_layer runs for inputs of this dtype on this device.
bool lstm_layer_supports(DType dtype, Device device);

// ---- attention
// softmax(q k^T * scale [+ mask]) v over q [..., L, E], k [..., S, E], v [..., S, Ev]
// (batch dims broadcast); attn_mask broadcastable to [..., L, S], bool (false drops a
// key) or floating (added); is_causal drops keys j > i; scale defaults to 1/sqrt(E).
// Fused (ops/attention_layout.h: one pass forward, one backward from the saved
// logsumexp) on the CPU always; on CUDA where attention_cuda_supports says so (the
// composite otherwise). dropout_p > 0 drops attention weights as dropout(softmax(...))
// does, with kiln.rand's mask over [..., L, S] drawn from the next generator state: fused
// on CUDA (the same mask inside the kernels, forward and backward), the composite on
// the CPU.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = {}, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt,
                                    double dropout_p = 0.0);
// The unfused form (matmul, scale, where/add, softmax, dropout, matmul), with attn_mask
// already bool or of q's dtype.
Tensor attention_composite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                           bool is_causal, double scale, double dropout_p = 0.0);
// Whether the CUDA fused forward takes these inputs (batch dims already broadcast):
// float32 / bfloat16 / float16, E == Ev of 64 or 128, no mask, at most 2 batch dims,
// 16-byte aligned rows (ops/cuda/attention.cu). False in a build without CUDA.
bool attention_cuda_supports(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask);
// Whether the CUDA fused backward takes them: the forward's inputs, in float32.
bool attention_cuda_backward_supports(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& mask);

// ---- linear algebra, convolution, pooling
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0});
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel,
                  std::array<int64_t, 2> stride = {0, 0},  // 0: same as kernel
                  std::array<int64_t, 2> padding = {0, 0});
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel,
                  std::array<int64_t, 2> stride = {0, 0}, std::array<int64_t, 2> padding = {0, 0});
// max_pool2d's gradient: grad (the pooled shape) to each window's first maximum of x.
Tensor max_pool2d_backward(const Tensor& grad, const Tensor& x, std::array<int64_t, 2> kernel,
                           std::array<int64_t, 2> stride = {0, 0},
                           std::array<int64_t, 2> padding = {0, 0});

// Sliding patches: im2col(x [N, C, H, W]) -> [N, C*kH*kW, oH*oW] (PyTorch's unfold),
// positions outside x read pad_value; col2im is its adjoint (fold): patches summed back
// into [N, C, H, W] with output_size {H, W}.
Tensor im2col(const Tensor& x, std::array<int64_t, 2> kernel,
              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
              double pad_value = 0.0);
Tensor col2im(const Tensor& cols, const Dims& output_size, std::array<int64_t, 2> kernel,
              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0});

// ---- joining, splitting, indexing
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor flip(const Tensor& x, int64_t dim);  // one dim (an index_select of reversed positions)

// ---- along one dim (ops/api_along_dim.cpp). Indices are int64 tensors of the input's
// rank (index_add: 1-D, int32 or int64); a bad one throws IndexError.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                 const Scalar& alpha = 1);
// Sorting: stable (equal values keep their order), NaN the largest value.
struct SortResult {
  Tensor values, indices;
};
SortResult sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
SortResult topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true,
                bool sorted = true);
// Scans and the product (floats accumulate in double; integers and bool give int64).
Tensor cumsum(const Tensor& x, int64_t dim);
Tensor cumprod(const Tensor& x, int64_t dim);
Tensor prod(const Tensor& x);  // of all elements
Tensor prod(const Tensor& x, int64_t dim, bool keepdim = false);

// ---- sampling and data-dependent shapes (ops/api_sample.cpp)
// Category indices drawn from the rows of probs ([n] or [b, n], unnormalized weights) on
// the global generator, or on `state` when given (the same state draws the same samples
// on the CPU and on CUDA).
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false,
                   std::optional<RandomState> state = std::nullopt);
// [count, rank] coordinates of the nonzero elements (row-major order). Its shape depends
// on the values: a graph break (the tracer's trace ends here, with this reason).
Tensor nonzero(const Tensor& x, std::source_location loc = std::source_location::current());
// The elements of x where the bool mask (broadcast with x) is true, flattened; a graph
// break like nonzero; differentiable in x.
Tensor masked_select(const Tensor& x, const Tensor& mask,
                     std::source_location loc = std::source_location::current());

// ---- operators
Tensor operator-(const Tensor& x);
#define KILN_OPERATOR_DECL(sym)                          \
  Tensor operator sym(const Tensor& a, const Tensor& b); \
  Tensor operator sym(const Tensor& a, const Scalar& b); \
  Tensor operator sym(const Scalar& a, const Tensor& b);
KILN_OPERATOR_DECL(+)
KILN_OPERATOR_DECL(-)
KILN_OPERATOR_DECL(*)
KILN_OPERATOR_DECL(/)
KILN_OPERATOR_DECL(==)
KILN_OPERATOR_DECL(!=)
KILN_OPERATOR_DECL(<)
KILN_OPERATOR_DECL(<=)
KILN_OPERATOR_DECL(>)
KILN_OPERATOR_DECL(>=)
#undef KILN_OPERATOR_DECL

// ---- result-type rules (PyTorch's), exposed for the bindings and tests
DType result_type(const Tensor& a, const Tensor& b);
DType result_type(const Tensor& a, const Scalar& b);

}  // namespace kiln
