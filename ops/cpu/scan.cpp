// CPU Scan family along attrs.dim: cumsum, cumprod (each prefix) and prod (the total).
// Floating inputs accumulate in double (PyTorch's CPU accumulation type) and keep their
// dtype; integer and bool inputs accumulate and return int64.
#include <type_traits>
#include <vector>

#include "ops/cpu/kernel_io.h"
#include "ops/kernels.h"
#include "runtime/parallel.h"

namespace kiln::cpu {
namespace {

template <class T>
void run_scan(const OpCall& c, const Tensor& out) {
  constexpr bool kFloat = std::is_floating_point_v<compute_t<T>>;
  using Acc = std::conditional_t<kFloat, double, int64_t>;
  using Out = std::conditional_t<kFloat, T, int64_t>;
  const Tensor x = kernel_contiguous(c.inputs[0]);
  const DimSplit s = split_at_dim(x.sizes(), c.attrs.dim);
  const bool sum = c.op == OpId::Cumsum;
  const bool total = c.op == OpId::Prod;
  with_output(out, dtype_of<Out>(), [&](const Tensor& dst) {
    const T* v = x.data<T>();
    Out* y = dst.data<Out>();
    parallel_for(0, s.outer, 1, [&](int64_t lo, int64_t hi) {
      std::vector<Acc> acc(static_cast<size_t>(s.inner));
      for (int64_t o = lo; o < hi; ++o) {
        std::fill(acc.begin(), acc.end(), Acc(sum ? 0 : 1));
        for (int64_t i = 0; i < s.size; ++i) {
          for (int64_t r = 0; r < s.inner; ++r) {
            const Acc e =
                static_cast<Acc>(static_cast<compute_t<T>>(v[(o * s.size + i) * s.inner + r]));
            Acc& a = acc[static_cast<size_t>(r)];
            a = sum ? a + e : a * e;
            if (!total) y[(o * s.size + i) * s.inner + r] = to_element<Out>(a);
          }
        }
        if (total)
          for (int64_t r = 0; r < s.inner; ++r)
            y[o * s.inner + r] = to_element<Out>(acc[static_cast<size_t>(r)]);
      }
    });
  });
}

}  // namespace

void scan(const OpCall& call, const Tensor& out) {
  visit_dtype(call.inputs[0].dtype(), [&](auto tag) { run_scan<decltype(tag)>(call, out); });
}

}  // namespace kiln::cpu
