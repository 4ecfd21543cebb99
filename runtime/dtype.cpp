#include "runtime/dtype.h"

namespace kiln {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::Bool:
      return "bool";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::Float16:
      return "float16";
    case DType::BFloat16:
      return "bfloat16";
    case DType::Float32:
      return "float32";
    case DType::Float64:
      return "float64";
  }
  return "?";
}

std::string to_string(DType d) { return dtype_name(d); }

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa != fb) return fa ? a : b;  // integer with floating: the floating type
  if (!fa) return DType::Int64;     // int32 with int64
  // Both floating and different.
  if (a == DType::Float64 || b == DType::Float64) return DType::Float64;
  return DType::Float32;  // f16/bf16 with each other or with f32
}

}  // namespace kiln
