#include "jit/debug_dump.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>

namespace kiln::jit {

DebugDump::DebugDump() {
  const char* root = std::getenv("KILN_DEBUG_DIR");
  if (!root || !*root) return;
  static std::atomic<int> counter{0};
  mkdir(root, 0755);
  const std::string dir =
      std::string(root) + "/trace-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
  if (mkdir(dir.c_str(), 0755) == 0) dir_ = dir;
}

void DebugDump::write(const std::string& file, const std::string& text) const {
  if (!active()) return;
  std::ofstream out(dir_ + "/" + file, std::ios::binary);
  out << text;
}

void DebugDump::write_plan(const tracer::TraceProgram& program, const FusionPlan& plan,
                           const MemoryPlan& memory, const std::string& kernel_text) const {
  if (!active()) return;
  const std::string text = program_text(program);
  write("trace.txt", text);
  write("fusion.txt", "== before fusion\n" + text + "\n== after fusion\n" + plan.str(program) +
                          "\n" + memory.str() + "\n\n== kernels\n" + kernel_text);
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string program_text(const tracer::TraceProgram& p) {
  std::string out;
  int slot = 0;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const tracer::TraceOp& op = p.ops[i];
    for (const tracer::TensorGuard& g : op.new_guards)
      out += "in" + std::to_string(slot++) + ": " + g.str() + "\n";
    out += "v" + std::to_string(i) + " = " + op.str() + " -> " + dtype_name(op.meta.dtype) +
           dims_str(op.meta.sizes) + (i < p.live.size() && p.live[i] ? "  [live]" : "") + "\n";
  }
  return out;
}

}  // namespace kiln::jit
