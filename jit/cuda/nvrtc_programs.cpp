// A trace's kernels -> NVRTC programs compiled on several threads (see nvrtc_programs.h).
#include "jit/cuda/nvrtc_programs.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
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

namespace {

size_t count_of(const std::string& text, const char* what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

double estimated_compile_ms(const std::string& body) {
  return 40.0 + static_cast<double>(body.size()) / 125.0 +
         40.0 * static_cast<double>(count_of(body, "#pragma unroll")) +
         60.0 * static_cast<double>(count_of(body, "rand_value("));
}

std::vector<std::vector<size_t>> plan_programs(const std::vector<double>& costs, int threads) {
  const size_t n = costs.size();
  if (n == 0) return {};
  double total = 0;
  for (double c : costs) total += c;
  const auto by_work = static_cast<size_t>(std::max(1.0, std::floor(total / kMinProgramMs)));
  const size_t programs = std::min({n, by_work, static_cast<size_t>(std::max(threads, 1))});
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return costs[a] > costs[b]; });
  std::vector<std::vector<size_t>> out(programs);
  std::vector<double> load(programs, 0.0);
  for (size_t k : order) {  // longest first, to the least loaded program (LPT)
    const size_t p = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    out[p].push_back(k);
    load[p] += costs[k];
  }
  for (std::vector<size_t>& program : out) std::sort(program.begin(), program.end());
  return out;
}

std::vector<CompiledProgram> compile_programs(const std::string& prelude,
                                              const std::vector<KernelSource>& kernels,
                                              const std::string& arch, int threads) {
  std::vector<CompiledProgram> programs;
  if (kernels.empty()) return programs;
  std::vector<double> costs;
  for (const KernelSource& k : kernels) costs.push_back(estimated_compile_ms(k.body));
  std::vector<double> program_cost;
  for (std::vector<size_t>& chunk : plan_programs(costs, threads)) {
    CompiledProgram p;
    p.source = prelude;
    double cost = 0;
    for (size_t q : chunk) {
      p.source += "\n" + kernels[q].body;
      cost += costs[q];
    }
    p.kernels = std::move(chunk);
    programs.push_back(std::move(p));
    program_cost.push_back(cost);
  }
  // Costliest first, so a long program does not start last.
  std::vector<size_t> order(programs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return program_cost[a] > program_cost[b]; });
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
