#include "jit/llvm/llvm_jit.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include "jit/debug_dump.h"
#include "jit/kernel_cache.h"
#include "jit/llvm/codegen.h"

namespace kiln::jit::llvm_backend {
namespace {

template <class T>
T check(llvm::Expected<T> value, const char* what) {
  if (!value)
    throw std::runtime_error(std::string("[jit] ") + what + ": " +
                             llvm::toString(value.takeError()));
  return std::move(*value);
}

int widest_vector_bits(const llvm::Module& m) {
  int bits = 0;
  for (const llvm::Function& f : m)
    for (const llvm::BasicBlock& bb : f)
      for (const llvm::Instruction& inst : bb)
        if (auto* vt = llvm::dyn_cast<llvm::FixedVectorType>(inst.getType()))
          bits = std::max(bits, static_cast<int>(vt->getPrimitiveSizeInBits().getFixedValue()));
  return bits;
}

}  // namespace

struct LlvmJit::Impl {
  std::mutex mutex;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::unique_ptr<llvm::TargetMachine> tm;
  std::string cpu, features, host;
  bool libmvec = false;
  KernelCache cache{"cpu"};
  std::unordered_map<std::string, KernelFn> loaded;
  LlvmJitStats stats;

  Impl() {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
    auto jtmb = check(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host CPU");
    jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    jtmb.setRelocationModel(llvm::Reloc::PIC_);
    cpu = jtmb.getCPU();
    features = jtmb.getFeatures().getString();
    tm = check(jtmb.createTargetMachine(), "creating the target machine");
    jit = check(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(jtmb).create(),
                "creating the ORC LLJIT");
    std::string err;
    libmvec = !llvm::sys::DynamicLibrary::LoadLibraryPermanently("libmvec.so.1", &err);
    jit->getMainJITDylib().addGenerator(
        check(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                  jit->getDataLayout().getGlobalPrefix()),
              "opening the process's symbols"));
    host = cpu + " " + features + " llvm-" LLVM_VERSION_STRING + (libmvec ? " libmvec" : "");
  }

  llvm::TargetLibraryInfoImpl library_info() const {
    llvm::TargetLibraryInfoImpl tlii(tm->getTargetTriple());
    if (libmvec)
      tlii.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86,
                                              tm->getTargetTriple());
    return tlii;
  }

  void optimize(llvm::Module& m) {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PipelineTuningOptions pto;
    pto.LoopVectorization = true;
    pto.SLPVectorization = true;
    llvm::PassBuilder pb(tm.get(), pto);
    llvm::TargetLibraryInfoImpl tlii = library_info();
    fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
    mpm.run(m, mam);
  }

  std::string emit_object(llvm::Module& m) {
    llvm::SmallVector<char, 0> buffer;
    llvm::raw_svector_ostream os(buffer);
    llvm::legacy::PassManager pm;
    pm.add(new llvm::TargetLibraryInfoWrapperPass(library_info()));
    if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
      throw std::runtime_error("[jit] the target cannot emit object files");
    pm.run(m);
    return std::string(buffer.data(), buffer.size());
  }

  KernelFn link(const std::string& symbol, const std::string& object) {
    auto buffer = llvm::MemoryBuffer::getMemBufferCopy(object, symbol);
    if (auto err = jit->addObjectFile(std::move(buffer)))
      throw std::runtime_error("[jit] linking " + symbol + ": " + llvm::toString(std::move(err)));
    auto addr = check(jit->lookup(symbol), "looking up the kernel");
    return addr.toPtr<KernelFn>();
  }
};

LlvmJit& LlvmJit::instance() {
  static LlvmJit jit;
  return jit;
}

LlvmJit::LlvmJit() : impl_(new Impl) {}
LlvmJit::~LlvmJit() = default;  // the JIT lives as long as the process (code stays callable)

KernelBinary LlvmJit::get(const Kernel& kernel, bool keep_ir) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string text = kernel.text();
  KernelBinary out;
  out.key = hex64(fnv1a(text)) + hex64(fnv1a(text, 0x9e3779b97f4a7c15ull)) + "-" +
            hex64(fnv1a(impl_->host));
  const std::string symbol = "kiln_kernel_" + out.key.substr(0, 32);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (auto it = impl_->loaded.find(out.key); it != impl_->loaded.end() && !keep_ir) {
    ++impl_->stats.memory_hits;
    out.fn = it->second;
    out.source = KernelBinary::Source::Memory;
    out.ms = ms_since(t0);
    return out;
  }
  if (auto it = impl_->loaded.find(out.key); it == impl_->loaded.end() && !keep_ir) {
    if (std::optional<std::string> object = impl_->cache.load(out.key)) {
      out.fn = impl_->link(symbol, *object);
      impl_->loaded[out.key] = out.fn;
      ++impl_->stats.disk_hits;
      out.source = KernelBinary::Source::Disk;
      out.ms = ms_since(t0);
      return out;
    }
  }
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> module = emit_kernel(kernel, symbol, context);
  module->setDataLayout(impl_->tm->createDataLayout());
  module->setTargetTriple(impl_->tm->getTargetTriple().str());
  for (llvm::Function& f : *module) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", impl_->cpu);
    f.addFnAttr("target-features", impl_->features);
    f.addFnAttr("prefer-vector-width", "256");
  }
  impl_->optimize(*module);
  out.vector_width = widest_vector_bits(*module);
  if (keep_ir) {
    llvm::raw_string_ostream os(out.llvm_ir);
    module->print(os, nullptr);
  }
  if (auto it = impl_->loaded.find(out.key); it != impl_->loaded.end()) {
    out.fn = it->second;  // already linked: this compile only produced the IR text
    out.source = KernelBinary::Source::Memory;
    out.ms = ms_since(t0);
    return out;
  }
  const std::string object = impl_->emit_object(*module);
  impl_->cache.store(out.key, object);
  out.fn = impl_->link(symbol, object);
  impl_->loaded[out.key] = out.fn;
  ++impl_->stats.compiled;
  out.source = KernelBinary::Source::Compiled;
  out.ms = ms_since(t0);
  return out;
}

LlvmJitStats LlvmJit::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->stats;
}

std::string LlvmJit::host() const { return impl_->host; }
std::string LlvmJit::cache_dir() const {
  return impl_->cache.enabled() ? impl_->cache.dir() : impl_->cache.disabled_reason();
}

}  // namespace kiln::jit::llvm_backend
