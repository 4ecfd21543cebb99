// Host-side reductions for the CPU backends (runtime/distributed/backends.h).
#include <algorithm>
#include <type_traits>

#include "runtime/distributed/backends.h"
#include "runtime/error.h"

namespace kiln::distributed {
namespace {

template <class T>
void reduce_typed(T* acc, const T* in, int64_t count, ReduceOp op) {
  if constexpr (std::is_same_v<T, bool>) {
    const bool any = op == ReduceOp::Sum || op == ReduceOp::Max;
    for (int64_t i = 0; i < count; ++i) acc[i] = any ? (acc[i] || in[i]) : (acc[i] && in[i]);
  } else {
    using C = compute_t<T>;
    for (int64_t i = 0; i < count; ++i) {
      const C a = static_cast<C>(acc[i]), b = static_cast<C>(in[i]);
      C r = a;
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg:
          r = a + b;
          break;
        case ReduceOp::Product:
          r = a * b;
          break;
        case ReduceOp::Min:
          r = b < a ? b : a;
          break;
        case ReduceOp::Max:
          r = b > a ? b : a;
          break;
      }
      acc[i] = static_cast<T>(r);
    }
  }
}

}  // namespace

void check_reducible(const char* op_name, DType dtype, ReduceOp op) {
  KILN_CHECK(op != ReduceOp::Avg || is_floating(dtype), DTypeError, "[", op_name,
             "] ReduceOp.AVG needs a floating-point tensor, got ", dtype_name(dtype));
}

void reduce_into(void* acc, const void* in, int64_t count, DType dtype, ReduceOp op) {
  visit_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    reduce_typed(static_cast<T*>(acc), static_cast<const T*>(in), count, op);
  });
}

void finish_average(void* data, int64_t count, DType dtype, int world_size) {
  visit_dtype(dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (!std::is_same_v<T, bool>) {
      using C = compute_t<T>;
      T* p = static_cast<T*>(data);
      const C n = static_cast<C>(world_size);
      for (int64_t i = 0; i < count; ++i) p[i] = static_cast<T>(static_cast<C>(p[i]) / n);
    }
  });
}

}  // namespace kiln::distributed
