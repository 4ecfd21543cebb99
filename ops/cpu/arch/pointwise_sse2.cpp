// The sse2 build of the vector pointwise kernels (see ops/cpu/simd.h); compiled with
// this instruction set's -m flags by CMakeLists.txt.
#define KILN_SIMD_ARCH_TAG sse2
#include "ops/cpu/arch/pointwise_simd.h"

namespace kiln::cpu::simd {

void fill_sse2(KernelSet* set) { fill_set<xsimd::sse2>(set, "sse2"); }

}  // namespace kiln::cpu::simd
