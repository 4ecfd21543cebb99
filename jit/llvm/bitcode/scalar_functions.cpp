// Compiled by clang to LLVM bitcode at build time (cmake/jit_embeds.cmake), never into
// libkiln itself: one extern "C" function per pointwise op of ops/ops.def and compute
// type, kiln_fn_<op>_<f32|f64|i32|i64>, each calling the op's functor from
// ops/pointwise_math.h. jit/llvm/scalar_functions.cpp links them into the fused kernels.
//
// Flags (see cmake/jit_embeds.cmake): -O2; -fno-math-errno, so expf & co. become LLVM
// intrinsics the loop vectorizer maps to libmvec; -ffp-contract=off, so no multiply-add
// is fused (the eager kernels' rounding); -fwrapv, so integer overflow wraps as the
// hand-written IR did.
#include "ops/cpu/vectorizable_math.h"
#include "ops/philox.h"
#include "ops/pointwise_math.h"

namespace {

using kiln::OpId;
namespace pm = kiln::pm;

// The op's functor, but float erf (and the erf GELU) in the vectorizable form of
// ops/cpu/vectorizable_math.h.
template <OpId Id, class T>
T unary(T x) {
  return pm::UnaryFn<Id>{}(x);
}
template <>
float unary<OpId::Erf, float>(float x) {
  return kiln::cpu::erf_by_exp(x);
}
template <>
float unary<OpId::Gelu, float>(float x) {
  return 0.5f * x * (1.0f + kiln::cpu::erf_by_exp(x * 0.70710678118654752440f));
}

}  // namespace

#define KILN_FN_UNARY(Id, name, T, suffix) \
  extern "C" T kiln_fn_##name##_##suffix(T x) { return unary<OpId::Id>(x); }
#define KILN_FN_BINARY(Id, name, T, suffix)                                                       \
  extern "C" auto kiln_fn_##name##_##suffix(T a, T b)->decltype(pm::BinaryFn<OpId::Id>{}(a, b)) { \
    return pm::BinaryFn<OpId::Id>{}(a, b);                                                        \
  }

// The compute types of a row's dtype rule: floating-only ops get f32 and f64, the rest
// the integer types too; Attr (cast) is no function.
#define KILN_FN_TYPES_Float(F, Id, name) F(Id, name, float, f32) F(Id, name, double, f64)
#define KILN_FN_TYPES_PromoteFloat KILN_FN_TYPES_Float
#define KILN_FN_TYPES_Same(F, Id, name) \
  KILN_FN_TYPES_Float(F, Id, name) F(Id, name, int32_t, i32) F(Id, name, int64_t, i64)
#define KILN_FN_TYPES_Promote KILN_FN_TYPES_Same
#define KILN_FN_TYPES_Bool KILN_FN_TYPES_Same
#define KILN_FN_TYPES_Attr(F, Id, name)

// Pointwise families get functions; every other family (ops/registry.h) none.
#define KILN_FN_Unary(Id, name, rule) KILN_FN_TYPES_##rule(KILN_FN_UNARY, Id, name)
#define KILN_FN_Binary(Id, name, rule) KILN_FN_TYPES_##rule(KILN_FN_BINARY, Id, name)
#define KILN_FN_Clamp(Id, name, rule)
#define KILN_FN_Where(Id, name, rule)
#define KILN_FN_Reduce(Id, name, rule)
#define KILN_FN_Softmax(Id, name, rule)
#define KILN_FN_LayerNorm(Id, name, rule)
#define KILN_FN_Attention(Id, name, rule)
#define KILN_FN_Recurrent(Id, name, rule)
#define KILN_FN_Matmul(Id, name, rule)
#define KILN_FN_Linear(Id, name, rule)
#define KILN_FN_Conv2d(Id, name, rule)
#define KILN_FN_Pool2d(Id, name, rule)
#define KILN_FN_Unfold(Id, name, rule)
#define KILN_FN_Cat(Id, name, rule)
#define KILN_FN_IndexSelect(Id, name, rule)
#define KILN_FN_Gather(Id, name, rule)
#define KILN_FN_Scatter(Id, name, rule)
#define KILN_FN_Sort(Id, name, rule)
#define KILN_FN_Scan(Id, name, rule)
#define KILN_FN_Sample(Id, name, rule)
#define KILN_FN_Nonzero(Id, name, rule)
#define KILN_FN_ToDevice(Id, name, rule)
#define KILN_FN_Factory(Id, name, rule)
#define KILN_FN_Random(Id, name, rule)
#define KILN_FN_View(Id, name, rule)
#define KILN_FN_Collective(Id, name, rule)

#define KILN_OP(Id, name, family, rule) KILN_FN_##family(Id, name, rule)
#include "ops/ops.def"
#undef KILN_OP

// gelu's tanh form (attrs.approximate_tanh), which has no row of its own.
extern "C" float kiln_fn_gelu_tanh_f32(float x) { return pm::GeluTanh{}(x); }
extern "C" double kiln_fn_gelu_tanh_f64(double x) { return pm::GeluTanh{}(x); }

// rand / randn of the Random family: the draw the eager kernels make (ops/philox.h).
extern "C" double kiln_fn_philox_rand(uint64_t seed, uint64_t offset, uint64_t index, int bits) {
  return bits <= 31 ? kiln::cpu::rand_value_narrow(seed, offset, index, bits)
                    : kiln::philox::rand_value(seed, offset, index, bits);
}
extern "C" double kiln_fn_philox_randn(uint64_t seed, uint64_t offset, uint64_t index) {
  return kiln::philox::randn_value(seed, offset, index);
}
