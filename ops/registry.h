// The op registry: OpId, each op's static description (name, family, dtype rule) from
// ops/ops.def, and OpCall, the one description of an op invocation that the
// dispatcher, the tracer and the backends all share.
#pragma once

#include <cstdint>
#include <string>

#include <boost/container/small_vector.hpp>

#include "ops/op_id.h"
#include "runtime/tensor.h"

namespace kiln {

// Which shape rule and which backend kernel function an op uses.
enum class OpFamily : uint8_t {
  Unary,
  Clamp,
  Binary,
  Where,
  Reduce,
  Softmax,
  LayerNorm,
  Attention,
  Recurrent,
  Matmul,
  Linear,
  Conv2d,
  Pool2d,
  Unfold,
  Cat,
  IndexSelect,
  Gather,
  Scatter,
  Sort,
  Scan,
  Sample,
  Nonzero,
  ToDevice,
  Factory,
  Random,
  View,
  Collective
};
enum class DTypeRule : uint8_t {
  Same,
  Float,
  Promote,
  PromoteFloat,
  Bool,
  Int64,
  Attr,
  Accumulate
};

struct OpInfo {
  OpId id;
  const char* name;
  OpFamily family;
  DTypeRule dtype_rule;
};

const OpInfo& op_info(OpId id);
inline const char* op_name(OpId id) { return op_info(id).name; }
// An op with effects outside this process (the Collective family: every rank must make
// the same calls in the same order): its result may look unused, yet it must run exactly
// once, in program order. Dead-code elimination, CSE, fusion and every re-run of a trace
// (verify's float64 run) honour it.
inline bool has_effects(OpId id) { return op_info(id).family == OpFamily::Collective; }
// Looks an op up by name ("add"); returns false if there is none.
bool find_op(const std::string& name, OpId* out);

// Structural attributes of a call: they pick the kernel and are part of trace keys.
// Each op reads the fields its row in ops.def names; the rest stay at defaults.
struct OpAttrs {
  Dims dims;                             // reduction dims, permutation, sizes, normalized shape
  int64_t dim = 0;                       // softmax/cat/slice/select/index_select/unsqueeze dim
  int64_t start = 0, end = 0, step = 1;  // slice; select uses start
  int64_t kernel[2] = {1, 1}, stride[2] = {1, 1}, padding[2] = {0, 0};
  int64_t correction = 1;  // var
  bool keepdim = false;
  bool scalar_first = false;                // binary op with the scalar on the left (2 - x)
  bool has_min = false, has_max = false;    // clamp
  bool approximate_tanh = false;            // gelu
  bool descending = false, stable = false;  // argsort, topk (descending: largest first)
  int64_t count = 0;                        // topk's k, multinomial's samples, nonzero's count
  bool replacement = false;                 // multinomial
  bool causal = false;                      // attention: keys after the query masked
  bool reverse = false;                     // lstm: time runs from the last position back
  DType dtype = DType::Float32;             // cast, factories
  Device device;                            // factories, to_device

  bool operator==(const OpAttrs& o) const;
  size_t hash() const;
};

using TensorList = boost::container::small_vector<Tensor, 3>;
using ScalarList = boost::container::small_vector<Scalar, 3>;

// One op invocation. Scalars are run-time values (plan arguments when traced);
// attrs are structural (they change the kernel or the output metadata).
struct OpCall {
  OpId op;
  TensorList inputs;
  ScalarList scalars;
  OpAttrs attrs;

  const OpInfo& info() const { return op_info(op); }
  const char* name() const { return op_info(op).name; }
};

// What an op will produce, known before any kernel runs. For views, strides and
// offset describe the view of inputs[0]'s storage; otherwise the output is contiguous.
struct OutputMeta {
  Dims sizes;
  Dims strides;
  int64_t offset = 0;
  DType dtype = DType::Float32;
  Device device;
};

}  // namespace kiln
