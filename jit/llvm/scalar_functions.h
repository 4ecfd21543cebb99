// The pointwise math of the LLVM JIT: the functors of ops/pointwise_math.h, compiled by
// clang to LLVM bitcode at build time (jit/llvm/bitcode/scalar_functions.cpp, one
// extern "C" function per op and compute type) and embedded in libkiln, so fused CPU
// code computes with the very functions the eager kernels use, and an installed kiln
// reads nothing from disk.
//
// The code generator calls scalar_function_name(...) by name; link_scalar_functions then
// links the functions a kernel module calls into it (the bitcode is read lazily: only
// those are loaded), gives them internal linkage and alwaysinline, so the O3
// pipeline inlines and vectorizes them like hand-written IR (float erf and GELU: see
// vector_variants below).
#pragma once

#include <cstdint>
#include <string>

#include "ops/op_id.h"
#include "runtime/dtype.h"

namespace llvm {
class Module;
class TargetLibraryInfoImpl;
}  // namespace llvm

namespace kiln::jit::llvm_backend {

// "kiln_fn_exp_f32": op `fn` (gelu's tanh form when approximate) on values of `operand`'s
// compute type (16-bit floats compute in float32). Throws for bool operands.
std::string scalar_function_name(OpId fn, bool approximate, DType operand);

// Links the scalar functions `module` calls into it; throws std::runtime_error naming any
// that the bitcode lacks (an op on a type it has no function for). With vector_variants
// (the host has AVX2 and FMA), the 8-lane forms of float erf and the erf GELU come too
// (jit/llvm/bitcode/vector_functions.cpp: the eager kernels' xsimd code, which skips the
// branch no lane needs), and the two scalar functions stay calls (noinline) for the loop
// vectorizer to replace with them; the scalar remainder loop calls the scalar form.
void link_scalar_functions(llvm::Module& module, bool vector_variants);

// Registers the vector forms with the loop vectorizer (same condition as above).
void add_vector_variants(llvm::TargetLibraryInfoImpl& tlii);

// FNV-1a of the embedded bitcode: part of every kernel cache key, so kernels compiled
// against other scalar functions are never reused.
uint64_t scalar_functions_digest();

}  // namespace kiln::jit::llvm_backend
