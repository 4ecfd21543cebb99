// The AVX-512 build of the vector pointwise kernels (see ops/cpu/simd.h); compiled with
// -mavx512f/bw/dq/vl -mavx2 -mfma by CMakeLists.txt. The xsimd arch is avx512dq, not
// avx512bw: BW adds only byte/word integer ops (unused for float/double), and xsimd
// 8.1's avx512bw integer select does not compile with GCC 12 at -O0.
#define KILN_SIMD_ARCH_TAG avx512
#include "ops/cpu/arch/pointwise_simd.h"

namespace kiln::cpu::simd {

void fill_avx512(KernelSet* set) { fill_set<xsimd::avx512dq>(set, "avx512"); }

}  // namespace kiln::cpu::simd
