// NVRTC -> CUBIN -> cudaLibrary (see nvrtc_compiler.h).
#include "jit/cuda/nvrtc_compiler.h"

#include <cuda_runtime.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
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

std::string CudaKernels::summary(size_t requested) const {
  std::string s = std::to_string(requested) + " kernel(s), " + std::to_string(unique) +
                  " different: " + std::to_string(reused) + " loaded already, " +
                  std::to_string(from_disk) + " from disk, " + std::to_string(compiled) +
                  " compiled";
  if (compiled)
    s += " as " + std::to_string(programs) + " program(s) on " + std::to_string(threads) +
         " thread(s) (" + std::to_string(static_cast<int64_t>(nvrtc_ms)) +
         " ms of NVRTC time in all)";
  return s + ", " + std::to_string(static_cast<int64_t>(ms)) + " ms wall, " + arch;
}

struct NvrtcCompiler::Impl {
  // A loaded library (one program's CUBIN), unloaded when the last reference goes: the
  // LRU holds one, each compiled trace using one of its kernels one more (its pin). The
  // LRU drops it only while its reference is the only one (under the mutex), so no trace
  // can still launch from it; the kernel table's weak references never count.
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
  struct TableEntry {
    void* fn = nullptr;  // cudaKernel_t
    std::weak_ptr<Library> library;
    std::string program;  // the library's LRU key
  };
  using Dropped = std::vector<std::shared_ptr<Library>>;

  // The library of a CUBIN, or null (the CUDA error cleared, its code in *error) when the
  // driver refuses it.
  static std::shared_ptr<Library> load_library(const std::string& cubin, cudaError_t* error) {
    cudaLibrary_t lib = nullptr;
    *error = cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (*error != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    auto library = std::make_shared<Library>();
    library->lib = lib;
    return library;
  }

  // The kernels `names` of a library; false (the CUDA error cleared) if one is missing.
  static bool kernels_of(const Library& library, const std::vector<std::string>& names,
                         std::vector<void*>& fns) {
    fns.clear();
    for (const std::string& name : names) {
      cudaKernel_t k = nullptr;
      if (cudaLibraryGetKernel(&k, library.lib, name.c_str()) != cudaSuccess || !k) {
        cudaGetLastError();
        return false;
      }
      fns.push_back(reinterpret_cast<void*>(k));
    }
    return true;
  }

  // A library of the kernels `names`, entered in the LRU (if new) and the kernel table.
  // Libraries the LRU drops go to `dropped`, destroyed by the caller after the lock.
  void adopt(const std::string& program, const std::shared_ptr<Library>& library,
             const std::vector<std::string>& keys, const std::vector<void*>& fns,
             Dropped& dropped) {
    std::lock_guard<std::mutex> lock(mutex);
    // Another thread may have loaded the same program meanwhile: its library stays the
    // LRU's; this one lives while the kernels' pins do (the table's entries expire then).
    if (!loaded.find(program)) stats.evicted += loaded.insert(program, library, &dropped);
    for (size_t q = 0; q < keys.size(); ++q) table[keys[q]] = TableEntry{fns[q], library, program};
    if (table.size() > sweep_at) {
      for (auto it = table.begin(); it != table.end();)
        it = it->second.library.expired() ? table.erase(it) : std::next(it);
      sweep_at = std::max<size_t>(4096, 2 * table.size());
    }
  }

  std::mutex mutex;
  KernelCache cache{"cuda"};                          // thread-safe (files renamed into place)
  PinnedLru<Library> loaded;                          // program key -> library (the owner)
  std::unordered_map<std::string, TableEntry> table;  // kernel key -> kernel
  size_t sweep_at = 4096;
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

CudaKernels NvrtcCompiler::get(const std::string& prelude, const std::vector<KernelSource>& kernels,
                               int device) {
  const auto t0 = std::chrono::steady_clock::now();
  CudaKernels out;
  out.arch = arch_of(device);
  // What a kernel's code depends on besides its definition.
  const std::string suffix =
      "-" + out.arch + "-" + impl_->version + "-" + hex64(fnv1a(prelude, headers_digest()));
  auto kernel_key = [&](const std::string& name) { return "kernel-" + name + suffix; };

  std::unordered_map<std::string, size_t> slot;  // name -> its index in `unique`
  std::vector<const KernelSource*> unique;
  for (const KernelSource& k : kernels)
    if (slot.emplace(k.name, unique.size()).second) unique.push_back(&k);
  out.unique = static_cast<int64_t>(unique.size());
  std::vector<void*> fn(unique.size(), nullptr);
  std::vector<std::shared_ptr<Impl::Library>> lib(unique.size());

  // 1. Kernels loaded already (a table hit marks its library recently used).
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    for (size_t u = 0; u < unique.size(); ++u) {
      auto it = impl_->table.find(kernel_key(unique[u]->name));
      if (it == impl_->table.end()) continue;
      if (!(lib[u] = it->second.library.lock())) continue;
      fn[u] = it->second.fn;
      impl_->loaded.find(it->second.program);
      ++out.reused;
    }
    impl_->stats.memory_hits += out.reused;
  }

  // 2. The disk cache: kernel -> its program's key -> that program's CUBIN.
  Impl::Dropped dropped;  // destroyed (unloaded) at return, after every lock
  std::map<std::string, std::vector<size_t>> on_disk;  // program key -> kernels
  std::vector<size_t> missing;
  for (size_t u = 0; u < unique.size(); ++u) {
    if (lib[u]) continue;
    if (auto program = impl_->cache.load(kernel_key(unique[u]->name)))
      on_disk[*program].push_back(u);
    else
      missing.push_back(u);
  }
  for (const auto& [program, us] : on_disk) {
    std::shared_ptr<Impl::Library> library;
    {
      std::lock_guard<std::mutex> lock(impl_->mutex);
      library = impl_->loaded.find(program);  // loaded already for its other kernels
    }
    cudaError_t refused = cudaSuccess;
    if (!library)
      if (auto cubin = impl_->cache.load(program)) library = Impl::load_library(*cubin, &refused);
    std::vector<std::string> names, keys;
    for (size_t u : us) {
      names.push_back(unique[u]->name);
      keys.push_back(kernel_key(unique[u]->name));
    }
    std::vector<void*> fns;
    // A missing or refused CUBIN (another driver, a file that passed the checksum yet is
    // bad), or an index entry naming the wrong program: compile those kernels afresh.
    if (!library || !Impl::kernels_of(*library, names, fns)) {
      missing.insert(missing.end(), us.begin(), us.end());
      continue;
    }
    impl_->adopt(program, library, keys, fns, dropped);
    for (size_t q = 0; q < us.size(); ++q) {
      fn[us[q]] = fns[q];
      lib[us[q]] = library;
    }
    out.from_disk += static_cast<int64_t>(us.size());
  }

  // 3. Compile the rest, several programs at once, none under the mutex.
  if (!missing.empty()) {
    std::sort(missing.begin(), missing.end());  // the trace's order: stable program keys
    std::vector<KernelSource> sources;
    for (size_t u : missing) sources.push_back(*unique[u]);
    const int threads = nvrtc_threads();
    const std::vector<CompiledProgram> programs =
        compile_programs(prelude, sources, out.arch, threads);
    out.threads = static_cast<int>(std::min<size_t>(programs.size(), threads));
    for (const CompiledProgram& p : programs) {
      const std::string program =
          "cuda-" + hex64(fnv1a(p.source)) + "-" + hex64(fnv1a(p.source, 7)) + suffix;
      cudaError_t refused = cudaSuccess;
      std::shared_ptr<Impl::Library> library = Impl::load_library(p.cubin, &refused);
      if (!library) check_cuda(refused, "cudaLibraryLoadData");
      std::vector<std::string> names, keys;
      for (size_t q : p.kernels) {
        names.push_back(sources[q].name);
        keys.push_back(kernel_key(sources[q].name));
      }
      std::vector<void*> fns;
      if (!Impl::kernels_of(*library, names, fns))
        throw std::runtime_error("[cuda jit] cudaLibraryGetKernel: a compiled kernel is missing");
      impl_->cache.store(program, p.cubin);  // the program first, then its index entries
      for (const std::string& key : keys) impl_->cache.store(key, program);
      impl_->adopt(program, library, keys, fns, dropped);
      for (size_t q = 0; q < p.kernels.size(); ++q) {
        const size_t u = missing[p.kernels[q]];
        fn[u] = fns[q];
        lib[u] = library;
      }
      out.nvrtc_ms += p.ms;
    }
    out.compiled = static_cast<int64_t>(missing.size());
    out.programs = static_cast<int64_t>(programs.size());
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stats.compiled += out.compiled;
    impl_->stats.programs += out.programs;
  }
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stats.disk_hits += out.from_disk;
  }
  for (const KernelSource& k : kernels) {
    const size_t u = slot.at(k.name);
    out.kernels.push_back(fn[u]);
    out.pins.push_back(lib[u]);
  }
  out.ms = ms_since(t0);
  return out;
}

NvrtcStats NvrtcCompiler::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  NvrtcStats s = impl_->stats;
  s.resident = static_cast<int64_t>(impl_->loaded.size());
  s.table = static_cast<int64_t>(impl_->table.size());
  return s;
}

void NvrtcCompiler::set_max_entries(size_t entries) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->loaded.set_max_entries(entries);
}

std::string NvrtcCompiler::cache_dir() const { return impl_->cache.dir(); }
std::string NvrtcCompiler::version() const { return impl_->version; }

}  // namespace kiln::jit::cuda_backend
