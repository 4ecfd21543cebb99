// Compiled by clang to LLVM bitcode at build time with -mavx2 -mfma -ffp-contract=fast
// (cmake/jit_embeds.cmake; GCC's default for the gnu++20 eager kernels), never into
// libkiln itself: 8-lane forms of the pointwise functions for which the eager
// kernels' xsimd code beats what the LLVM loop vectorizer makes of the scalar form. Each
// applies the op's functor from ops/pointwise_math.h to an xsimd AVX2 batch, exactly as the
// eager AVX2 kernels do (ops/cpu/arch/pointwise_simd.h), so a full vector of a fused kernel
// computes the eager kernel's bits. jit/llvm/scalar_functions.cpp maps the scalar function
// onto its vector form for the loop vectorizer, on hosts with AVX2 and FMA.
//
// float erf (and the erf GELU): xsimd::erf skips the branch no lane needs (inputs all below
// 2/3 in magnitude cost one short polynomial), where the scalar erf_by_exp of
// ops/cpu/vectorizable_math.h computes both polynomials and an exp for every lane.
#include <immintrin.h>

#include <xsimd/xsimd.hpp>

#include "ops/pointwise_math.h"

namespace {

using Batch = xsimd::batch<float, xsimd::fma3<xsimd::avx2>>;  // as ops/cpu/arch/pointwise_avx2.cpp

template <kiln::OpId Id>
__m256 unary8(__m256 x) {
  return kiln::pm::UnaryFn<Id>{}(Batch(x));
}

}  // namespace

extern "C" __m256 kiln_vfn_erf_f32_x8(__m256 x) { return unary8<kiln::OpId::Erf>(x); }
extern "C" __m256 kiln_vfn_gelu_f32_x8(__m256 x) { return unary8<kiln::OpId::Gelu>(x); }
