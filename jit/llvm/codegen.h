// KernelIR -> LLVM IR, built with IRBuilder. The emitted function is
//
//   void <name>(ptr operands, ptr shape, ptr strides, ptr scalars, i64 begin, i64 end)
//
// operands: one data pointer per kernel operand; shape: kernel.rank sizes; strides: per
// operand kernel.rank element strides; scalars: 64-bit payloads (a double's bits or an
// int64). [begin, end) is a range of elements (pointwise kernels) or rows (row kernels):
// the host splits the work over its threads and calls the function once per chunk.
// Innermost loops are plain counted loops over noalias pointers, written for the loop
// vectorizer. A pointwise op is a call of its scalar function (jit/llvm/scalar_functions.h:
// the op's functor from ops/pointwise_math.h), defined once the module is linked with
// link_scalar_functions; inlined, its exp/log/sin/cos/pow map to glibc's vector math
// (libmvec) when it is loaded. A rand of at most 31 bits (float32, float16, bfloat16) read
// at contiguous indices is drawn four elements per Philox draw into a stack buffer, chunk
// by chunk, by a fill function of the kernel (codegen.cpp, "rand buffers").
#pragma once

#include <memory>
#include <string>

#include "jit/kernel_ir.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace kiln::jit::llvm_backend {

// Part of the kernel caches' key (llvm_jit.cpp): bumped when the code emitted for a
// KernelIR changes, so that no cache hands out objects of an older code generator.
// 2: rand buffers (one Philox draw per four elements).
// 3: no loop strength reduction (llvm_jit.cpp).
constexpr int kCodegenVersion = 3;

std::unique_ptr<llvm::Module> emit_kernel(const Kernel& kernel, const std::string& name,
                                          llvm::LLVMContext& context);

}  // namespace kiln::jit::llvm_backend
