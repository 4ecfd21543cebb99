#include "jit/llvm/llvm_jit.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>

#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/DynamicLibrary.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/Transforms/IPO/AlwaysInliner.h>

#include "jit/debug_dump.h"
#include "jit/kernel_cache.h"
#include "jit/llvm/codegen.h"
#include "jit/llvm/scalar_functions.h"
#include "jit/pinned_lru.h"

namespace kiln::jit::llvm_backend {
namespace {

template <class T>
T check(llvm::Expected<T> value, const char* what) {
  if (!value)
    throw std::runtime_error(std::string("[jit] ") + what + ": " +
                             llvm::toString(value.takeError()));
  return std::move(*value);
}

// Whether a comma-separated feature list ("+avx2,-avx512f,...") holds `feature`.
bool has_feature(const std::string& features, const std::string& feature) {
  return ("," + features + ",").find("," + feature + ",") != std::string::npos;
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

// Loop strength reduction (a codegen pass) took a sixth of the compile time of a GPT
// training step's kernels on this project's CPU VMs, and switching it off left their
// run time as it was: bench/models gpt, 39 kernels, 785 -> 645 ms of compile time,
// 17.2-18.5 vs 16.4-17.5 ms a step (docs/results/llvm_compile_time_cpu.txt). LLVM has
// no per-module switch for it, only the "disable-lsr" command-line option, which is
// process-wide (kiln's is the only LLVM code generator in its processes).
void disable_loop_strength_reduction() {
  llvm::StringMap<llvm::cl::Option*>& options = llvm::cl::getRegisteredOptions();
  auto it = options.find("disable-lsr");
  if (it == options.end()) return;
  if (auto* flag = static_cast<llvm::cl::opt<bool>*>(it->second)) flag->setValue(true);
}

}  // namespace

struct LlvmJit::Impl {
  std::mutex mutex;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::unique_ptr<llvm::TargetMachine> tm;                 // the data layout and triple (read-only)
  std::optional<llvm::orc::JITTargetMachineBuilder> jtmb;  // per-thread machines
  std::string cpu, features, host;
  bool libmvec = false;
  bool vector_variants = false;  // scalar_functions.h: AVX2 and FMA
  KernelCache cache{"cpu"};
  // A kernel linked into the JIT: its own resource tracker, so that dropping the last
  // reference unlinks it and frees its code. The table holds one reference and each
  // compiled trace using the kernel one more (KernelBinary::pin); an entry is evicted only
  // while the table's is the only one, under the mutex, so nothing can still call it and
  // no other thread can link the same symbol meanwhile.
  struct Linked {
    llvm::orc::ResourceTrackerSP tracker;
    KernelFn fn = nullptr;
    ~Linked() {
      if (tracker)
        if (llvm::Error err = tracker->remove()) llvm::consumeError(std::move(err));
    }
  };
  PinnedLru<Linked> loaded;  // key -> linked kernel
  LlvmJitStats stats;

  Impl() {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
    disable_loop_strength_reduction();
    auto jtmb = check(llvm::orc::JITTargetMachineBuilder::detectHost(), "detecting the host CPU");
    jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
    jtmb.setRelocationModel(llvm::Reloc::PIC_);
    cpu = jtmb.getCPU();
    features = jtmb.getFeatures().getString();
    tm = check(jtmb.createTargetMachine(), "creating the target machine");
    this->jtmb = jtmb;
    jit = check(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(jtmb).create(),
                "creating the ORC LLJIT");
    std::string err;
    libmvec = !llvm::sys::DynamicLibrary::LoadLibraryPermanently("libmvec.so.1", &err);
    vector_variants = has_feature(features, "+avx2") && has_feature(features, "+fma");
    jit->getMainJITDylib().addGenerator(
        check(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                  jit->getDataLayout().getGlobalPrefix()),
              "opening the process's symbols"));
    host = cpu + " " + features + " llvm-" LLVM_VERSION_STRING + (libmvec ? " libmvec" : "") +
           " fns-" + hex64(scalar_functions_digest()) + " codegen-" +
           std::to_string(kCodegenVersion);
  }

  void insert(const std::string& key, std::shared_ptr<Linked> linked) {
    stats.evicted += loaded.insert(key, std::move(linked));
  }

  llvm::TargetLibraryInfoImpl library_info() const {
    llvm::TargetLibraryInfoImpl tlii(tm->getTargetTriple());
    if (libmvec)
      tlii.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86,
                                              tm->getTargetTriple());
    if (vector_variants) add_vector_variants(tlii);
    return tlii;
  }

  // Compiles run on several threads at once (outside the mutex); a TargetMachine is not
  // shared between concurrent compiles, so each thread has its own.
  llvm::TargetMachine& thread_machine() {
    thread_local std::unique_ptr<llvm::TargetMachine> machine;
    if (!machine) machine = check(jtmb->createTargetMachine(), "creating the target machine");
    return *machine;
  }

  void optimize(llvm::Module& m) {
    llvm::LoopAnalysisManager lam;
    llvm::FunctionAnalysisManager fam;
    llvm::CGSCCAnalysisManager cgam;
    llvm::ModuleAnalysisManager mam;
    llvm::PipelineTuningOptions pto;
    pto.LoopVectorization = true;
    pto.SLPVectorization = true;
    llvm::PassBuilder pb(&thread_machine(), pto);
    llvm::TargetLibraryInfoImpl tlii = library_info();
    fam.registerPass([&] { return llvm::TargetLibraryAnalysis(tlii); });
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
    // The vector forms the loop vectorizer called (scalar_functions.h) go inline into the
    // vector loop.
    mpm.addPass(llvm::AlwaysInlinerPass());
    mpm.run(m, mam);
  }

  std::string emit_object(llvm::Module& m) {
    llvm::SmallVector<char, 0> buffer;
    llvm::raw_svector_ostream os(buffer);
    llvm::legacy::PassManager pm;
    pm.add(new llvm::TargetLibraryInfoWrapperPass(library_info()));
    if (thread_machine().addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
      throw std::runtime_error("[jit] the target cannot emit object files");
    pm.run(m);
    return std::string(buffer.data(), buffer.size());
  }

  std::shared_ptr<Linked> link(const std::string& symbol, const std::string& object) {
    auto linked = std::make_shared<Linked>();
    linked->tracker = jit->getMainJITDylib().createResourceTracker();
    auto buffer = llvm::MemoryBuffer::getMemBufferCopy(object, symbol);
    if (auto err = jit->addObjectFile(linked->tracker, std::move(buffer)))
      throw std::runtime_error("[jit] linking " + symbol + ": " + llvm::toString(std::move(err)));
    // On failure the tracker goes with `linked`, taking the half-linked object with it.
    linked->fn = check(jit->lookup(symbol), "looking up the kernel").toPtr<KernelFn>();
    return linked;
  }
};

LlvmJit& LlvmJit::instance() {
  static LlvmJit jit;
  return jit;
}

LlvmJit::LlvmJit() : impl_(new Impl) {}
LlvmJit::~LlvmJit() = default;  // the JIT lives as long as the process (code stays callable)

std::optional<KernelBinary> LlvmJit::find_loaded(const std::string& text) {
  const auto t0 = std::chrono::steady_clock::now();
  KernelBinary out;
  out.key = hex64(fnv1a(text)) + hex64(fnv1a(text, 0x9e3779b97f4a7c15ull)) + "-" +
            hex64(fnv1a(impl_->host));
  std::lock_guard<std::mutex> lock(impl_->mutex);
  std::shared_ptr<Impl::Linked> e = impl_->loaded.find(out.key);
  if (!e) return std::nullopt;
  ++impl_->stats.memory_hits;
  out.fn = e->fn;
  out.pin = e;
  out.source = KernelBinary::Source::Memory;
  out.ms = ms_since(t0);
  return out;
}

KernelBinary LlvmJit::get(const Kernel& kernel, bool keep_ir, const std::string* given_text) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string text = given_text ? *given_text : kernel.text();
  KernelBinary out;
  out.key = hex64(fnv1a(text)) + hex64(fnv1a(text, 0x9e3779b97f4a7c15ull)) + "-" +
            hex64(fnv1a(impl_->host));
  const std::string symbol = "kiln_kernel_" + out.key.substr(0, 32);
  std::unique_lock<std::mutex> lock(impl_->mutex);
  auto from_memory = [&](const std::shared_ptr<Impl::Linked>& linked) {
    out.fn = linked->fn;
    out.pin = linked;
    out.source = KernelBinary::Source::Memory;
    out.ms = ms_since(t0);
  };
  if (std::shared_ptr<Impl::Linked> e = impl_->loaded.find(out.key); e && !keep_ir) {
    ++impl_->stats.memory_hits;
    from_memory(e);
    return out;
  } else if (!e && !keep_ir) {
    if (std::optional<std::string> object = impl_->cache.load(out.key)) {
      std::shared_ptr<Impl::Linked> linked = impl_->link(symbol, *object);
      out.fn = linked->fn;
      out.pin = linked;
      impl_->insert(out.key, std::move(linked));
      ++impl_->stats.disk_hits;
      out.source = KernelBinary::Source::Disk;
      out.ms = ms_since(t0);
      return out;
    }
  }
  if (compile_refused())
    throw std::runtime_error("[jit] compile refused: KILN_LLVM_JIT_FAIL is set");
  // The compile itself runs without the lock: other threads compile other kernels.
  lock.unlock();
  llvm::LLVMContext context;
  std::unique_ptr<llvm::Module> module = emit_kernel(kernel, symbol, context);
  module->setDataLayout(impl_->tm->createDataLayout());
  module->setTargetTriple(impl_->tm->getTargetTriple().str());
  link_scalar_functions(*module, impl_->vector_variants);
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
  const std::string object = impl_->emit_object(*module);
  lock.lock();
  // Linked meanwhile (another thread compiled the same kernel), or before (keep_ir).
  if (std::shared_ptr<Impl::Linked> e = impl_->loaded.find(out.key)) {
    from_memory(e);
    return out;
  }
  impl_->cache.store(out.key, object);
  std::shared_ptr<Impl::Linked> linked = impl_->link(symbol, object);
  out.fn = linked->fn;
  out.pin = linked;
  impl_->insert(out.key, std::move(linked));
  ++impl_->stats.compiled;
  out.source = KernelBinary::Source::Compiled;
  out.ms = ms_since(t0);
  return out;
}

bool LlvmJit::compile_refused() {
  const char* f = std::getenv("KILN_LLVM_JIT_FAIL");
  return f && *f && std::string(f) != "0";
}

LlvmJitStats LlvmJit::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  LlvmJitStats s = impl_->stats;
  s.resident = static_cast<int64_t>(impl_->loaded.size());
  return s;
}

void LlvmJit::set_max_entries(size_t entries) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->loaded.set_max_entries(entries);
}

size_t LlvmJit::max_entries() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->loaded.max_entries();
}

std::string LlvmJit::host() const { return impl_->host; }
std::string LlvmJit::cache_dir() const {
  return impl_->cache.enabled() ? impl_->cache.dir() : impl_->cache.disabled_reason();
}

}  // namespace kiln::jit::llvm_backend
