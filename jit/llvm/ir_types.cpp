#include "jit/llvm/ir_types.h"

namespace kiln::jit::llvm_backend {

using llvm::Type;
using llvm::Value;

Type* IrDTypes::ctype(DType d) {
  switch (d) {
    case DType::Bool:
      return b_.getInt1Ty();
    case DType::Int32:
      return b_.getInt32Ty();
    case DType::Int64:
      return b_.getInt64Ty();
    case DType::Float64:
      return b_.getDoubleTy();
    default:
      return b_.getFloatTy();
  }
}

Type* IrDTypes::stype(DType d) {
  switch (d) {
    case DType::Bool:
      return b_.getInt8Ty();
    case DType::Float16:
      return b_.getHalfTy();
    case DType::BFloat16:
      return b_.getInt16Ty();
    default:
      return ctype(d);
  }
}

Value* IrDTypes::load(DType d, Value* addr) {
  Value* v = b_.CreateLoad(stype(d), addr);
  switch (d) {
    case DType::Bool:
      return b_.CreateICmpNE(v, b_.getInt8(0));
    case DType::Float16:
      return b_.CreateFPExt(v, b_.getFloatTy());
    case DType::BFloat16:
      return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(v, b_.getInt32Ty()), 16), b_.getFloatTy());
    default:
      return v;
  }
}

Value* IrDTypes::to_storage(DType d, Value* v) {
  switch (d) {
    case DType::Bool:
      return b_.CreateZExt(v, b_.getInt8Ty());
    case DType::Float16:
      return b_.CreateFPTrunc(v, b_.getHalfTy());
    case DType::BFloat16: {  // round to nearest even; NaN stays a quiet NaN
      Value* bits = b_.CreateBitCast(v, b_.getInt32Ty());
      Value* lsb = b_.CreateAnd(b_.CreateLShr(bits, 16), b_.getInt32(1));
      Value* rounded =
          b_.CreateLShr(b_.CreateAdd(bits, b_.CreateAdd(lsb, b_.getInt32(0x7fff))), 16);
      Value* nan = b_.CreateFCmpUNO(v, v);
      return b_.CreateTrunc(b_.CreateSelect(nan, b_.getInt32(0x7fc0), rounded), b_.getInt16Ty());
    }
    default:
      return v;
  }
}

Value* IrDTypes::round_through(DType d, Value* v) {
  if (d == DType::Float16)
    return b_.CreateFPExt(b_.CreateFPTrunc(v, b_.getHalfTy()), b_.getFloatTy());
  if (d == DType::BFloat16) {
    Value* s = to_storage(d, v);
    return b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(s, b_.getInt32Ty()), 16), b_.getFloatTy());
  }
  return v;
}

Value* IrDTypes::convert(Value* v, DType from, DType to) {
  Type* t = ctype(to);
  if (from == to) return v;
  Value* r;
  if (from == DType::Bool) {
    r = flt(to) ? b_.CreateUIToFP(v, t) : b_.CreateZExt(v, t);
  } else if (to == DType::Bool) {
    r = flt(from) ? b_.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0))
                  : b_.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
  } else if (flt(from) && flt(to)) {
    r = b_.CreateFPCast(v, t);
  } else if (flt(from)) {
    r = b_.CreateFPToSI(v, t);
  } else if (flt(to)) {
    r = b_.CreateSIToFP(v, t);
  } else {
    r = b_.CreateSExtOrTrunc(v, t);
  }
  return round_through(to, r);
}

}  // namespace kiln::jit::llvm_backend
