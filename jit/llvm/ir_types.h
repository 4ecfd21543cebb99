// kiln dtypes in the LLVM IR of the CPU kernels (jit/llvm/codegen.cpp): the type a value
// is computed in (bool i1, int32, int64, double, float for float32/float16/bfloat16)
// and the type it is stored in (bool i8, half, bfloat16 as i16 bits), loads and stores
// between them (bfloat16 rounds to nearest even, NaN stays a quiet NaN), and casts.
// The emitter derives from IrDTypes: these are its helpers over its IRBuilder.
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>

#include "runtime/dtype.h"

namespace kiln::jit::llvm_backend {

class IrDTypes {
 protected:
  explicit IrDTypes(llvm::LLVMContext& ctx) : b_(ctx) {}

  llvm::Type* ctype(DType d);  // the computing type
  llvm::Type* stype(DType d);  // the storage type
  static bool flt(DType d) { return is_floating(d); }
  llvm::Value* load(DType d, llvm::Value* addr);  // a stored element, as computed
  llvm::Value* to_storage(DType d, llvm::Value* v);
  // Rounds a float32-computed value through float16/bfloat16 (what a cast to them does).
  llvm::Value* round_through(DType d, llvm::Value* v);
  llvm::Value* convert(llvm::Value* v, DType from, DType to);
  llvm::Value* fconst(llvm::Type* t, double v) { return llvm::ConstantFP::get(t, v); }

  llvm::IRBuilder<> b_;
};

}  // namespace kiln::jit::llvm_backend
