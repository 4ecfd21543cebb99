// The backend kernel interface: one function per op family and backend. The
// dispatcher calls them with validated calls and outputs already allocated with the
// inferred metadata (out may be a strided view for in-place ops). Kernels switch on
// call.op within their family; they only assert, never validate user input.
#pragma once

#include "ops/registry.h"

namespace kiln {

#define KILN_DECLARE_FAMILY_KERNELS(ns)                            \
  namespace ns {                                                   \
  void unary(const OpCall& call, const Tensor& out); /* + Cast */  \
  void clamp(const OpCall& call, const Tensor& out);               \
  void binary(const OpCall& call, const Tensor& out);              \
  void where(const OpCall& call, const Tensor& out);               \
  void reduce(const OpCall& call, const Tensor& out);              \
  void softmax(const OpCall& call, const Tensor& out);             \
  void layer_norm(const OpCall& call, const Tensor& out);          \
  void attention(const OpCall& call, const Tensor& out);           \
  void lstm(const OpCall& call, const Tensor& out);                \
  void matmul(const OpCall& call, const Tensor& out);              \
  void linear(const OpCall& call, const Tensor& out);              \
  void conv2d(const OpCall& call, const Tensor& out);              \
  void pool2d(const OpCall& call, const Tensor& out);              \
  void unfold(const OpCall& call, const Tensor& out); /* im2col */ \
  void cat(const OpCall& call, const Tensor& out);                 \
  void index_select(const OpCall& call, const Tensor& out);        \
  void gather(const OpCall& call, const Tensor& out);              \
  void scatter(const OpCall& call, const Tensor& out);             \
  void sort(const OpCall& call, const Tensor& out);                \
  void scan(const OpCall& call, const Tensor& out);                \
  void multinomial(const OpCall& call, const Tensor& out);         \
  void nonzero(const OpCall& call, const Tensor& out);             \
  void factory(const OpCall& call, const Tensor& out);             \
  void random(const OpCall& call, const Tensor& out);              \
  }

KILN_DECLARE_FAMILY_KERNELS(cpu)
KILN_DECLARE_FAMILY_KERNELS(cuda)

#undef KILN_DECLARE_FAMILY_KERNELS

// For kernels that need packed inputs: a contiguous copy of t converted to dtype, made
// on t's device by the Cast kernel directly (no dispatch hook, nothing recorded).
// Returns t itself when it already is contiguous with that dtype.
Tensor kernel_contiguous(const Tensor& t, DType dtype);
inline Tensor kernel_contiguous(const Tensor& t) { return kernel_contiguous(t, t.dtype()); }

// Conventions the dispatcher guarantees to kernels (normalized in ops/api.cpp and
// checked in ops/shape_rules.cpp):
//  - attrs.dim is non-negative and in range for the op's input (softmax, cat, ...).
//  - Reduce: attrs.dims lists the reduced dims, non-negative, sorted, unique; every dim
//    when the user named none (empty only for a 0-dim input). Argmax has at most one.
//  - Pool2d: kernel, stride (defaulted to kernel) and padding are filled in.
//  - Inputs may have any strides (expanded 0-strides, transposes, offsets) and dtypes
//    different from the output's; out may be a strided view (in-place ops).

// KILN_FILL_UNINITIALIZED=1 (read at each call): empty() fills floating tensors with NaN
// instead of leaving them as they come, so that a read of memory nobody wrote shows (as
// PyTorch's fill_uninitialized_memory). For tests and debugging; off by default.
bool fill_uninitialized();

// Device transfers (ToDevice family): copies src into out across devices; src and out
// have the same shape and dtype and out is contiguous (ops/copy_across_devices.cpp, on
// runtime/cuda_context.h's copies).
void copy_across_devices(const Tensor& src, const Tensor& out);

// Collectives (Collective family, ops/distributed/collective_ops.cpp), one kernel for
// both devices: copies inputs[0] into out unless they are the same memory, then runs the
// process group's collective on out now (CPU backends: synchronously; NCCL: enqueued on
// kiln's stream of out's device, capturable in a CUDA graph).
void run_collective(const OpCall& call, const Tensor& out);

// Random state in device memory, for CUDA graphs. A kernel that draws random numbers
// from its call's (seed, offset) scalars would be captured with them baked in; while a
// CUDA trace records or launches such a library step (random_state_scalars(call) >= 0)
// it opens a RandomStateSlot scope, and the kernel reads (seed, offset) from that device
// address at run time instead. The trace writes the slot in a graph kernel node of its
// own before the call (write_random_state_kernel(): one by-value RandomStateWords
// parameter), patched every replay like a fused kernel's scalars, so the captured call
// stays valid while the generator advances. Kernels that honour it: attention and
// attention_backward with dropout.
//
// The index of a call's seed scalar (offset next) when it carries a random state, or -1;
// attention_output carries the forward's for its backward and draws nothing
// (kernel_draws_random: false): the trace leaves the state out of what the captured call
// depends on either way.
int random_state_scalars(const OpCall& call);
bool kernel_draws_random(const OpCall& call);
class RandomStateSlot {
 public:
  explicit RandomStateSlot(const uint64_t* slot);
  ~RandomStateSlot();
  RandomStateSlot(const RandomStateSlot&) = delete;
  RandomStateSlot& operator=(const RandomStateSlot&) = delete;
  static const uint64_t* current();  // null outside a scope

 private:
  const uint64_t* previous_;
};
struct RandomStateWords {
  int64_t v[3];  // the slot's address, seed, offset
};
void* write_random_state_kernel();  // a __global__ function; null without CUDA

}  // namespace kiln
