// run_blocked(): see ops/cpu/block_loop.h.
#include "ops/cpu/block_loop.h"

#include <algorithm>
#include <cstring>

#include "ops/cpu/convert.h"
#include "ops/cpu/loops.h"

namespace kiln::cpu {
namespace {

// What one input needs, fixed for the whole call.
struct InputPlan {
  int operand = -1;  // index in the loop's operands; -1 for a constant
  int64_t item = 0;  // bytes per element in the tensor
  int64_t buffer_item = 0;
  bool direct = false;  // tensor dtype == buffer dtype: contiguous runs need no copy
  ConvertFn convert = nullptr;
  const unsigned char* constant = nullptr;
};

struct Plan {
  int num_inputs = 0;
  InputPlan inputs[kMaxBlockInputs];
  int64_t out_item = 0, out_buffer_item = 0;
  bool out_direct = false;
  ConvertFn out_convert = nullptr;
  BlockFn fn = nullptr;
  const void* ctx = nullptr;
};

// The per-thread state: the block buffers, and the inner-run callback for run_range().
class BlockRunner {
 public:
  BlockRunner(const Plan& plan, int64_t range) : plan_(plan) {
    const int64_t fill = std::min(range, kBlockElements);
    for (int k = 0; k < plan.num_inputs; ++k) {
      const InputPlan& in = plan.inputs[k];
      if (in.operand >= 0) continue;
      // One copy, then doubling copies of what is there (log2(kBlockElements) calls).
      char* buffer = buffers_[k];
      std::memcpy(buffer, in.constant, in.buffer_item);
      for (int64_t have = 1; have < fill; have *= 2)
        std::memcpy(buffer + have * in.buffer_item, buffer,
                    std::min(have, fill - have) * in.buffer_item);
    }
  }

  void operator()(char* const* ptrs, const int64_t* strides, int64_t n) {
    const Plan& p = plan_;
    const void* in[kMaxBlockInputs];
    if (all_direct(strides)) {  // one call for the whole run
      for (int k = 0; k < p.num_inputs; ++k) in[k] = ptrs[p.inputs[k].operand];
      p.fn(in, ptrs[0], n, p.ctx);
      return;
    }
    for (int64_t start = 0; start < n; start += kBlockElements) {
      const int64_t m = std::min(kBlockElements, n - start);
      for (int k = 0; k < p.num_inputs; ++k) {
        const InputPlan& input = p.inputs[k];
        if (input.operand < 0) {
          in[k] = buffers_[k];
          continue;
        }
        const int64_t stride = strides[input.operand];
        const char* src = ptrs[input.operand] + start * stride;
        if (input.direct && stride == input.item) {
          in[k] = src;
        } else {
          input.convert(src, stride, buffers_[k], input.buffer_item, m);
          in[k] = buffers_[k];
        }
      }
      char* dst = ptrs[0] + start * strides[0];
      if (p.out_direct && strides[0] == p.out_item) {
        p.fn(in, dst, m, p.ctx);
      } else {
        char* out = buffers_[kMaxBlockInputs];
        p.fn(in, out, m, p.ctx);
        p.out_convert(out, p.out_buffer_item, dst, strides[0], m);
      }
    }
  }

 private:
  bool all_direct(const int64_t* strides) const {
    const Plan& p = plan_;
    if (!p.out_direct || strides[0] != p.out_item) return false;
    for (int k = 0; k < p.num_inputs; ++k) {
      const InputPlan& in = p.inputs[k];
      if (in.operand < 0 || !in.direct || strides[in.operand] != in.item) return false;
    }
    return true;
  }

  const Plan& plan_;
  alignas(64) char buffers_[kMaxBlockInputs + 1][kBlockElements * 8];
};

// The common small case: every tensor contiguous with out's element count and already
// in its buffer dtype, at most one block: one call of fn, no loop to build. Returns
// false (nothing done) when the case does not apply.
bool run_small_contiguous(const Tensor& out, DType out_buffer_dtype, const BlockInput* inputs,
                          int num_inputs, BlockFn fn, const void* ctx) {
  const int64_t n = out.numel();
  if (n > kBlockElements || !out.is_contiguous() || out.dtype() != out_buffer_dtype) return false;
  for (int k = 0; k < num_inputs; ++k) {
    const Tensor* t = inputs[k].tensor;
    if (t && (!t->is_contiguous() || t->numel() != n || t->dtype() != inputs[k].dtype))
      return false;
  }
  alignas(64) char constants[kMaxBlockInputs][kBlockElements * 8];
  const void* in[kMaxBlockInputs];
  for (int k = 0; k < num_inputs; ++k) {
    const BlockInput& input = inputs[k];
    if (input.tensor) {
      in[k] = input.tensor->data_ptr();
      continue;
    }
    const int64_t item = itemsize(input.dtype);
    std::memcpy(constants[k], input.value, item);
    for (int64_t have = 1; have < n; have *= 2)
      std::memcpy(constants[k] + have * item, constants[k], std::min(have, n - have) * item);
    in[k] = constants[k];
  }
  fn(in, out.data_ptr(), n, ctx);
  return true;
}

}  // namespace

void run_blocked(const Tensor& out, DType out_buffer_dtype, const BlockInput* given, int num_inputs,
                 BlockFn fn, const void* ctx) {
  if (out.numel() == 0) return;
  if (run_small_contiguous(out, out_buffer_dtype, given, num_inputs, fn, ctx)) return;
  BlockInput inputs[kMaxBlockInputs];  // one-element tensors become constants here
  for (int k = 0; k < num_inputs; ++k) inputs[k] = given[k];
  Plan plan;
  plan.num_inputs = num_inputs;
  plan.fn = fn;
  plan.ctx = ctx;
  plan.out_item = out.element_size();
  plan.out_buffer_item = itemsize(out_buffer_dtype);
  plan.out_direct = out.dtype() == out_buffer_dtype;
  plan.out_convert = converter(out_buffer_dtype, out.dtype());

  LoopOperand operands[kMaxLoopOperands];
  int num_operands = 0;
  operands[num_operands++] = LoopOperand::of(out);
  for (int k = 0; k < num_inputs; ++k) {
    BlockInput& input = inputs[k];
    InputPlan& in = plan.inputs[k];
    in.buffer_item = itemsize(input.dtype);
    if (input.tensor && input.tensor->numel() == 1) {  // fold into a constant
      convert_one(input.tensor->dtype(), input.tensor->data_ptr(), input.dtype, input.value);
      input.tensor = nullptr;
    }
    if (!input.tensor) {
      in.constant = input.value;
      continue;
    }
    in.operand = num_operands;
    in.item = input.tensor->element_size();
    in.direct = input.tensor->dtype() == input.dtype;
    in.convert = converter(input.tensor->dtype(), input.dtype);
    operands[num_operands++] = LoopOperand::of(*input.tensor);
  }

  const StridedLoop loop = make_loop(out, operands, num_operands);
  parallel_loop(loop, kPointwiseGrain, [&](int64_t begin, int64_t end) {
    BlockRunner runner(plan, end - begin);
    run_range(loop, begin, end, runner);
  });
}

}  // namespace kiln::cpu
