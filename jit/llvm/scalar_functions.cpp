#include "jit/llvm/scalar_functions.h"

#include <stdexcept>

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Support/MemoryBuffer.h>

#include "jit/embedded_files.h"
#include "jit/kernel_ir.h"
#include "ops/registry.h"

namespace kiln::jit::llvm_backend {
namespace {

constexpr const char* kPrefix = "kiln_fn_";

llvm::MemoryBufferRef bitcode() {
  const EmbeddedFile& f = embedded::scalar_functions_bitcode().front();
  return llvm::MemoryBufferRef(llvm::StringRef(f.data, f.size), f.path);
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

void link_scalar_functions(llvm::Module& module) {
  // Read lazily: the linker loads only the functions this module calls.
  llvm::Expected<std::unique_ptr<llvm::Module>> lib =
      llvm::getLazyBitcodeModule(bitcode(), module.getContext());
  if (!lib)
    throw std::runtime_error("[jit] reading the scalar functions' bitcode: " +
                             llvm::toString(lib.takeError()));
  (*lib)->setDataLayout(module.getDataLayout());
  (*lib)->setTargetTriple(module.getTargetTriple());
  if (llvm::Linker::linkModules(module, std::move(*lib), llvm::Linker::Flags::LinkOnlyNeeded))
    throw std::runtime_error("[jit] linking the scalar functions failed");
  for (llvm::Function& f : module) {
    // Philox's rounds (ops/philox.h; __forceinline__ under NVRTC) go inline wherever a
    // kernel draws, so that the loop vectorizer sees them (codegen.cpp's rand fill
    // functions make four calls of one draw, above the inliner's threshold).
    if (f.getName().starts_with("_ZN4kiln6philox") && !f.isDeclaration()) {
      f.removeFnAttr(llvm::Attribute::NoInline);
      f.addFnAttr(llvm::Attribute::AlwaysInline);
    }
    if (!f.getName().starts_with(kPrefix)) continue;
    if (f.isDeclaration())
      throw std::runtime_error("[jit] no scalar function " + f.getName().str() +
                               " (an op on a type it is not defined for)");
    f.setLinkage(llvm::GlobalValue::InternalLinkage);
    f.removeFnAttr(llvm::Attribute::NoInline);
    f.removeFnAttr(llvm::Attribute::OptimizeNone);
    f.addFnAttr(llvm::Attribute::AlwaysInline);
    // The kernel's CPU and features replace clang's generic x86-64 ones (llvm_jit.cpp).
    f.removeFnAttr("target-cpu");
    f.removeFnAttr("target-features");
    f.removeFnAttr("tune-cpu");
  }
}

uint64_t scalar_functions_digest() {
  static const uint64_t digest = [] {
    const EmbeddedFile& f = embedded::scalar_functions_bitcode().front();
    return fnv1a(std::string(f.data, f.size));
  }();
  return digest;
}

}  // namespace kiln::jit::llvm_backend
