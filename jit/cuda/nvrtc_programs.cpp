// A trace's kernels -> NVRTC programs compiled on several threads (see nvrtc_programs.h).
#include "jit/cuda/nvrtc_programs.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <system_error>
#include <thread>

#include "jit/cuda/nvrtc_compiler.h"
#include "jit/debug_dump.h"
#include "jit/kernel_ir.h"

namespace kiln::jit::cuda_backend {

std::string kernel_name(const std::string& body_with_placeholder_name) {
  return "kiln_" + hex64(fnv1a(body_with_placeholder_name)) +
         hex64(fnv1a(body_with_placeholder_name, 7));
}

int nvrtc_threads() {
  if (const char* v = std::getenv("KILN_NVRTC_THREADS"); v && *v) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end == '\0' && n >= 1) return static_cast<int>(std::min<long>(n, 64));
  }
  const unsigned cores = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp<unsigned>(cores, 1, 16));
}

std::vector<std::vector<size_t>> chunk_kernels(size_t n, int threads) {
  if (n == 0) return {};
  const size_t by_size = std::max<size_t>(n / kMinKernelsPerProgram, 1);
  const size_t programs = std::min<size_t>(by_size, static_cast<size_t>(std::max(threads, 1)));
  std::vector<std::vector<size_t>> out(programs);
  for (size_t p = 0, next = 0; p < programs; ++p) {
    const size_t take = n / programs + (p < n % programs ? 1 : 0);  // sizes differ by <= 1
    for (size_t q = 0; q < take; ++q) out[p].push_back(next++);
  }
  return out;
}

std::vector<CompiledProgram> compile_programs(const std::string& prelude,
                                              const std::vector<KernelSource>& kernels,
                                              const std::string& arch, int threads) {
  std::vector<CompiledProgram> programs;
  if (kernels.empty()) return programs;
  for (std::vector<size_t>& chunk : chunk_kernels(kernels.size(), threads)) {
    CompiledProgram p;
    p.source = prelude;
    for (size_t q : chunk) p.source += "\n" + kernels[q].body;
    p.kernels = std::move(chunk);
    programs.push_back(std::move(p));
  }
  // Largest first, so a long program does not start last.
  std::vector<size_t> order(programs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return programs[a].source.size() > programs[b].source.size();
  });
  std::vector<std::exception_ptr> errors(programs.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < order.size();) {
      CompiledProgram& p = programs[order[i]];
      const auto t0 = std::chrono::steady_clock::now();
      try {
        p.cubin = compile_cubin(p.source, arch);
      } catch (...) {
        errors[order[i]] = std::current_exception();
      }
      p.ms = ms_since(t0);
    }
  };
  const size_t helpers = std::min<size_t>(programs.size(), static_cast<size_t>(threads)) - 1;
  std::vector<std::thread> pool;
  try {
    for (size_t t = 0; t < helpers; ++t) pool.emplace_back(work);
  } catch (const std::system_error&) {  // no more threads: the ones started (and this) suffice
  }
  work();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return programs;
}

}  // namespace kiln::jit::cuda_backend
