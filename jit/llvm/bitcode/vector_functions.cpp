// Compiled by clang to LLVM bitcode at build time with -mavx2 -mfma -ffp-contract=fast
// (cmake/jit_embeds.cmake; GCC's default for the gnu++20 eager kernels), never into
// libkiln itself: 8-lane forms of the pointwise functions for which the eager kernels'
// xsimd code beats what the LLVM loop vectorizer makes of the scalar form. Each is the
// eager AVX2 kernels' own vector functor (ops/cpu/arch/pointwise_simd.h's VectorUnary, on
// an xsimd fma3<avx2> batch), so a full vector of a fused kernel computes the eager
// kernel's bits (in release builds). jit/llvm/scalar_functions.cpp maps the scalar function onto
// its vector form for the loop vectorizer (kVectorized), on hosts with AVX2 and FMA.
//
// Float erf (and the erf GELU): xsimd::erf skips the branch no lane needs (inputs all
// below 2/3 in magnitude cost one short polynomial), where the scalar erf_by_exp of
// ops/cpu/vectorizable_math.h computes both polynomials and an exp for every lane.
#define KILN_SIMD_ARCH_TAG jit_bitcode
#include "ops/cpu/arch/pointwise_simd.h"

namespace kiln::cpu::simd {
namespace {

using Batch = xsimd::batch<float, xsimd::fma3<xsimd::avx2>>;  // as pointwise_avx2.cpp

template <OpId Id>
__m256 unary8(__m256 x) {
  return VectorUnary<Id>{}(Batch(x));
}

}  // namespace
}  // namespace kiln::cpu::simd

using kiln::OpId;
using kiln::cpu::simd::unary8;

extern "C" __m256 kiln_vfn_erf_f32_x8(__m256 x) { return unary8<OpId::Erf>(x); }
extern "C" __m256 kiln_vfn_gelu_f32_x8(__m256 x) { return unary8<OpId::Gelu>(x); }
