// NVRTC -> CUBIN -> cudaLibrary (see nvrtc_compiler.h).
#include "jit/cuda/nvrtc_compiler.h"

#include <cuda_runtime.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "jit/debug_dump.h"
#include "jit/embedded_files.h"
#include "jit/kernel_cache.h"
#include "jit/kernel_ir.h"
#include "jit/pinned_lru.h"
#include "runtime/cuda_context.h"

namespace kiln::jit::cuda_backend {
namespace {

void check_nvrtc(nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS)
    throw std::runtime_error(std::string("[nvrtc] ") + what + ": " + nvrtcGetErrorString(r));
}
void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string("[cuda jit] ") + what + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
  }
}

// FNV-1a of the embedded headers: part of the cache key, as the source text is.
uint64_t headers_digest() {
  static const uint64_t digest = [] {
    uint64_t h = fnv1a("");
    for (const EmbeddedFile& f : embedded::nvrtc_headers())
      h = fnv1a(std::string(f.path) + '\n' + std::string(f.data, f.size), h);
    return h;
  }();
  return digest;
}

std::string arch_of(int device) {
  int major = 0, minor = 0;
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
             "compute capability");
  check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
             "compute capability");
  return "sm_" + std::to_string(major) + std::to_string(minor);
}

}  // namespace

std::string compile_cubin(const std::string& source, const std::string& arch) {
  if (const char* f = std::getenv("KILN_CUDA_JIT_FAIL"); f && *f && std::string(f) != "0")
    throw std::runtime_error("[nvrtc] compile refused: KILN_CUDA_JIT_FAIL is set");
  // The headers the source includes (ops/pointwise_math.h, ...) come from libkiln.
  std::vector<const char*> header_texts, header_names;
  for (const EmbeddedFile& f : embedded::nvrtc_headers()) {
    header_texts.push_back(f.data);
    header_names.push_back(f.path);
  }
  nvrtcProgram prog;
  check_nvrtc(nvrtcCreateProgram(&prog, source.c_str(), "kiln_trace.cu",
                                 static_cast<int>(header_texts.size()), header_texts.data(),
                                 header_names.data()),
              "nvrtcCreateProgram");
  const std::string arch_opt = "--gpu-architecture=" + arch;
  const char* opts[] = {arch_opt.c_str(), "-std=c++17", "--extra-device-vectorization"};
  const nvrtcResult r = nvrtcCompileProgram(prog, 3, opts);
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    if (n) nvrtcGetProgramLog(prog, log.data());
    nvrtcDestroyProgram(&prog);
    if (log.size() > 2000) log = log.substr(0, 2000) + "...";
    throw std::runtime_error(std::string("[nvrtc] compile failed (") + nvrtcGetErrorString(r) +
                             "): " + log);
  }
  size_t size = 0;
  check_nvrtc(nvrtcGetCUBINSize(prog, &size), "nvrtcGetCUBINSize");
  std::string cubin(size, '\0');
  check_nvrtc(nvrtcGetCUBIN(prog, cubin.data()), "nvrtcGetCUBIN");
  nvrtcDestroyProgram(&prog);
  return cubin;
}

struct NvrtcCompiler::Impl {
  // A loaded library, unloaded when the last reference goes. The table holds one and each
  // compiled trace using it one more (CudaModule::pin); an entry is evicted only while
  // the table's is the only one (under the mutex), so no trace can still launch from it.
  struct Library {
    cudaLibrary_t lib = nullptr;
    ~Library() {
      if (!lib) return;
      // A launch from it may still run (a trace evicted right after its replay): kiln
      // queues all work on one stream per device, so wait for those first.
      try {
        for (int d = 0; d < cuda_context::device_count(); ++d) cuda_context::synchronize(d);
      } catch (const std::exception&) {  // a failed device: nothing more to wait for
      }
      if (cudaLibraryUnload(lib) != cudaSuccess) cudaGetLastError();
    }
  };
  std::mutex mutex;
  KernelCache cache{"cuda"};
  PinnedLru<Library> loaded;  // key -> library
  NvrtcStats stats;
  std::string version;
};

NvrtcCompiler::NvrtcCompiler() : impl_(new Impl()) {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) == NVRTC_SUCCESS)
    impl_->version = "nvrtc " + std::to_string(major) + "." + std::to_string(minor);
  else
    impl_->version = "nvrtc ?";
}

NvrtcCompiler& NvrtcCompiler::instance() {
  static NvrtcCompiler* compiler = new NvrtcCompiler();  // kept for the process
  return *compiler;
}

CudaModule NvrtcCompiler::get(const std::string& source, const std::vector<std::string>& names,
                              int device) {
  const auto t0 = std::chrono::steady_clock::now();
  CudaModule out;
  out.arch = arch_of(device);
  const std::string key = "cuda-" + hex64(fnv1a(source)) + "-" + hex64(fnv1a(source, 7)) + "-" +
                          out.arch + "-" + impl_->version + "-" + hex64(headers_digest());
  std::lock_guard<std::mutex> lock(impl_->mutex);
  cudaLibrary_t lib = nullptr;
  std::shared_ptr<Impl::Library> library;
  if ((library = impl_->loaded.find(key))) {
    lib = library->lib;
    out.source = CudaModule::Source::Memory;
    ++impl_->stats.memory_hits;
  } else {
    std::string cubin;
    if (auto cached = impl_->cache.load(key)) {
      cubin = std::move(*cached);
      out.source = CudaModule::Source::Disk;
    } else {
      cubin = compile_cubin(source, out.arch);
      out.source = CudaModule::Source::Compiled;
    }
    const cudaError_t e =
        cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (e != cudaSuccess && out.source == CudaModule::Source::Disk) {
      // A cached CUBIN the driver refuses (another driver, a bad file that passed the
      // checksum): compile afresh.
      cudaGetLastError();
      cubin = compile_cubin(source, out.arch);
      out.source = CudaModule::Source::Compiled;
      check_cuda(cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
                 "cudaLibraryLoadData");
    } else {
      check_cuda(e, "cudaLibraryLoadData");
    }
    if (out.source == CudaModule::Source::Compiled) {
      impl_->cache.store(key, cubin);
      ++impl_->stats.compiled;
    } else {
      ++impl_->stats.disk_hits;
    }
    library = std::make_shared<Impl::Library>();
    library->lib = lib;
    impl_->stats.evicted += impl_->loaded.insert(key, library);
  }
  for (const std::string& name : names) {
    cudaKernel_t k = nullptr;
    check_cuda(cudaLibraryGetKernel(&k, lib, name.c_str()), "cudaLibraryGetKernel");
    out.kernels.push_back(reinterpret_cast<void*>(k));
  }
  out.pin = library;
  out.ms = ms_since(t0);
  return out;
}

NvrtcStats NvrtcCompiler::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  NvrtcStats s = impl_->stats;
  s.resident = static_cast<int64_t>(impl_->loaded.size());
  return s;
}

void NvrtcCompiler::set_max_entries(size_t entries) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->loaded.set_max_entries(entries);
}

std::string NvrtcCompiler::cache_dir() const { return impl_->cache.dir(); }
std::string NvrtcCompiler::version() const { return impl_->version; }

}  // namespace kiln::jit::cuda_backend
