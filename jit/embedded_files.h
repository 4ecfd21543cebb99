// Files embedded in libkiln at build time (cmake/embed.cmake), so that an installed
// kiln never looks for them on disk:
//   nvrtc_headers()             ops/pointwise_math.h and what it includes, for the
//                               source of every fused CUDA kernel (jit/cuda/)
//   scalar_functions_bitcode()  the pointwise functors as LLVM bitcode (jit/llvm/)
// Each group is defined only in builds that have its backend.
#pragma once

#include <cstddef>
#include <span>

namespace kiln::jit {

struct EmbeddedFile {
  const char* path;  // relative to the source root: "ops/pointwise_math.h"
  const char* data;  // the bytes, followed by a NUL
  size_t size;       // without the NUL
};

namespace embedded {
std::span<const EmbeddedFile> nvrtc_headers();
std::span<const EmbeddedFile> scalar_functions_bitcode();
}  // namespace embedded

}  // namespace kiln::jit
