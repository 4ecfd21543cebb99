// KernelIR -> CUDA C source, compiled by NVRTC (jit/cuda/nvrtc_compiler.h). Each kernel
// is `extern "C" __global__ void <name>(const KilnArgs<N> a)`: one by-value parameter, a
// flat array of 64-bit words, so a CUDA Graph kernel node is updated by rewriting it:
//
//   a.v[0, nops)                      operand data pointers
//   a.v[nops, +rank)                  the collapsed iteration shape
//   a.v[nops + rank, +nops * rank)    per operand, its element strides over that shape
//   then one word per scalar slot     a double's bits or an int64
//   then the work                     elements (pointwise) or rows (row kernel)
//
// Pointwise kernels are grid-stride loops; when the space is one dim and every operand
// is contiguous or broadcast, each thread handles 4 elements with aligned vector loads
// and stores (checked at run time; the tail and misaligned pointers take the scalar loop).
// Row kernels run one block per row (grid-stride over rows): one pass per reduction stage
// with a deterministic block reduction, then a pass storing the full-size outputs; a row
// of at most 8 elements per thread is read from memory once and kept in registers. Short
// rows (up to 512 or 1024 elements) run one warp per row instead (shuffles only).
// float16/bfloat16 are stored as 16 bits and computed in float32, as on the CPU.
#pragma once

#include <string>

#include "jit/kernel_ir.h"

namespace kiln::jit::cuda_backend {

struct ArgsLayout {
  int operands = 0, rank = 0, scalars = 0;
  int shape_at() const { return operands; }
  int strides_at() const { return operands + rank; }
  int scalars_at() const { return operands + rank + operands * rank; }
  int work_at() const { return scalars_at() + scalars; }
  int words() const { return work_at() + 1; }
};
ArgsLayout args_layout(const Kernel& kernel);

// Helpers every kernel uses; goes once at the top of a program.
const std::string& cuda_prelude();

// Row kernels: rows of at most warp_row_limit() elements run one warp per row (launch
// with blockDim = (32, rows per block)), holding warp_cached_elements() per lane in
// registers; longer rows run one block (blockDim.y = 1, at most 256 threads) per row.
int warp_cached_elements(const Kernel& kernel);
int64_t warp_row_limit(const Kernel& kernel);

// One kernel's definition (after the prelude). A row kernel given its row length
// (cols >= 0) holds only the path the launch takes for that length (warp rows with as
// few cached slots as it needs, or block rows cached or streamed): valid for launches
// of rows of that length class only, which its text (and so its name) tells apart.
std::string emit_cuda_kernel(const Kernel& kernel, const std::string& name, int64_t cols = -1);
// The same code as a part of a combo kernel (jit/cuda/horizontal.h): `__device__
// __noinline__ void name(const long long* __restrict__ v, unsigned kiln_block, unsigned
// kiln_blocks)`, reading its words (the layout above) from v and running as block
// kiln_block of kiln_blocks wherever the kernel reads blockIdx.x of gridDim.x.
std::string emit_cuda_part(const Kernel& kernel, const std::string& name);

}  // namespace kiln::jit::cuda_backend
