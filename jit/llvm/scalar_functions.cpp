#include "jit/llvm/scalar_functions.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Transforms/Utils/ModuleUtils.h>

#include "jit/embedded_files.h"
#include "jit/kernel_ir.h"
#include "ops/registry.h"

namespace kiln::jit::llvm_backend {
namespace {

constexpr const char* kPrefix = "kiln_fn_";

// Scalar functions with an 8-lane form in vector_functions.bc (same name + "_x8" under
// kiln_vfn_), which the loop vectorizer calls for 8 lanes of the scalar one; the form goes
// inline into the vector loop after vectorization (llvm_jit.cpp): a call spills the loop's
// vectors, as much as the short polynomial costs on small inputs (a GELU kernel 0.94 ->
// 0.53 ms). Float exp has none: xsimd's exp measured slower than libmvec's on ordinary
// inputs (a [4096, 256] softmax 1.34 ms against 0.74-1.0), and the inputs libmvec is slow
// on (-inf) are kept from it where they occur (jit/lower.cpp's softmax rows).
constexpr const char* kVectorized[] = {"erf_f32", "gelu_f32"};
constexpr unsigned kVectorLanes = 8;
constexpr const char* kVectorPrefix = "kiln_vfn_";

std::string vector_name(const char* base) { return std::string(kVectorPrefix) + base + "_x8"; }

// One of the embedded bitcode files, by its name.
llvm::MemoryBufferRef bitcode(const char* name) {
  for (const EmbeddedFile& f : embedded::scalar_functions_bitcode())
    if (std::string(f.path) == name)
      return llvm::MemoryBufferRef(llvm::StringRef(f.data, f.size), f.path);
  throw std::runtime_error(std::string("[jit] no embedded bitcode ") + name);
}

// Links the functions of one embedded bitcode file that `module` declares.
void link_needed(llvm::Module& module, const char* name) {
  // Read lazily: the linker loads only the functions this module calls.
  llvm::Expected<std::unique_ptr<llvm::Module>> lib =
      llvm::getLazyBitcodeModule(bitcode(name), module.getContext());
  if (!lib)
    throw std::runtime_error(std::string("[jit] reading ") + name + ": " +
                             llvm::toString(lib.takeError()));
  (*lib)->setDataLayout(module.getDataLayout());
  (*lib)->setTargetTriple(module.getTargetTriple());
  if (llvm::Linker::linkModules(module, std::move(*lib), llvm::Linker::Flags::LinkOnlyNeeded))
    throw std::runtime_error(std::string("[jit] linking ") + name + " failed");
}

}  // namespace

std::string scalar_function_name(OpId fn, bool approximate, DType operand) {
  const char* suffix = nullptr;
  switch (operand) {
    case DType::Float16:
    case DType::BFloat16:
    case DType::Float32:
      suffix = "f32";
      break;
    case DType::Float64:
      suffix = "f64";
      break;
    case DType::Int32:
      suffix = "i32";
      break;
    case DType::Int64:
      suffix = "i64";
      break;
    case DType::Bool:
      throw std::runtime_error(std::string("[jit] ") + op_name(fn) + " has no fused code for bool");
  }
  return std::string(kPrefix) + op_name(fn) + (approximate ? "_tanh_" : "_") + suffix;
}

void add_vector_variants(llvm::TargetLibraryInfoImpl& tlii) {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const char* base : kVectorized) {
      n.push_back(kPrefix + std::string(base));
      n.push_back(vector_name(base));
    }
    return n;
  }();
  static const std::vector<llvm::VecDesc> descs = [] {
    std::vector<llvm::VecDesc> d;
    for (size_t i = 0; i < names.size(); i += 2)
      d.emplace_back(names[i], names[i + 1], llvm::ElementCount::getFixed(kVectorLanes), false,
                     "_ZGV_LLVM_N8v");
    return d;
  }();
  tlii.addVectorizableFunctions(descs);
}

void link_scalar_functions(llvm::Module& module, bool vector_variants) {
  // The vector forms of the functions this module calls are declared, so that they are
  // linked in too.
  std::vector<std::string> scalar_with_vector;
  if (vector_variants) {
    llvm::LLVMContext& c = module.getContext();
    auto* v8f = llvm::FixedVectorType::get(llvm::Type::getFloatTy(c), kVectorLanes);
    for (const char* base : kVectorized) {
      if (!module.getFunction(kPrefix + std::string(base))) continue;
      scalar_with_vector.push_back(kPrefix + std::string(base));
      module.getOrInsertFunction(vector_name(base), llvm::FunctionType::get(v8f, {v8f}, false));
    }
  }
  link_needed(module, "scalar_functions.bc");
  if (!scalar_with_vector.empty()) link_needed(module, "vector_functions.bc");
  for (llvm::Function& f : module) {
    // Philox's rounds (ops/philox.h; __forceinline__ under NVRTC) go inline wherever a
    // kernel draws, so that the loop vectorizer sees them (codegen.cpp's rand fill
    // functions make four calls of one draw, above the inliner's threshold).
    if (f.getName().starts_with("_ZN4kiln6philox") && !f.isDeclaration()) {
      f.removeFnAttr(llvm::Attribute::NoInline);
      f.addFnAttr(llvm::Attribute::AlwaysInline);
    }
    const bool vector_form = f.getName().starts_with(kVectorPrefix);
    if (!f.getName().starts_with(kPrefix) && !vector_form) continue;
    if (f.isDeclaration())
      throw std::runtime_error("[jit] no scalar function " + f.getName().str() +
                               " (an op on a type it is not defined for)");
    f.setLinkage(llvm::GlobalValue::InternalLinkage);
    f.removeFnAttr(llvm::Attribute::NoInline);
    f.removeFnAttr(llvm::Attribute::OptimizeNone);
    // A function with a vector form stays a call until the loop vectorizer has replaced
    // it (its scalar remainder loop calls it as it is).
    const bool has_vector = std::find(scalar_with_vector.begin(), scalar_with_vector.end(),
                                      f.getName().str()) != scalar_with_vector.end();
    f.addFnAttr(has_vector ? llvm::Attribute::NoInline : llvm::Attribute::AlwaysInline);
    if (vector_form) llvm::appendToCompilerUsed(module, {&f});  // kept for the vectorizer
    // The kernel's CPU and features replace clang's generic x86-64 ones (llvm_jit.cpp).
    f.removeFnAttr("target-cpu");
    f.removeFnAttr("target-features");
    f.removeFnAttr("tune-cpu");
  }
}

uint64_t scalar_functions_digest() {
  static const uint64_t digest = [] {
    std::string all;
    for (const EmbeddedFile& f : embedded::scalar_functions_bitcode()) all.append(f.data, f.size);
    return fnv1a(all);
  }();
  return digest;
}

}  // namespace kiln::jit::llvm_backend
