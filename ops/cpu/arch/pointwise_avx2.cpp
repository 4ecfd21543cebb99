// The avx2 build of the vector pointwise kernels (see ops/cpu/simd.h); compiled with
// this instruction set's -m flags by CMakeLists.txt.
#define KILN_SIMD_ARCH_TAG avx2
#include "ops/cpu/arch/pointwise_simd.h"

namespace kiln::cpu::simd {

void fill_avx2(KernelSet* set) { fill_set<xsimd::fma3<xsimd::avx2>>(set, "avx2"); }

}  // namespace kiln::cpu::simd
