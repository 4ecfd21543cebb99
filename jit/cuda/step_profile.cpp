#include "jit/cuda/step_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#include "runtime/gpu_timer.h"

namespace kiln::jit::step_profile {
namespace {

struct Row {
  long count = 0;
  double ms = 0;
};

// The process-wide table, printed at exit.
class Table {
 public:
  void add(const std::string& label, double ms) {
    std::lock_guard<std::mutex> lock(mutex_);
    Row& r = rows_[label];
    r.count += 1;
    r.ms += ms;
    total_ms_ += ms;
  }
  ~Table() {
    std::vector<std::pair<std::string, Row>> rows(rows_.begin(), rows_.end());
    if (rows.empty()) return;
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    std::fprintf(stderr, "[kiln step profile] %.3f ms of GPU time in compiled CUDA steps\n",
                 total_ms_);
    std::fprintf(stderr, "%10s %8s %9s %6s  %s\n", "total ms", "count", "us each", "%", "step");
    for (size_t i = 0; i < rows.size() && i < 60; ++i) {
      const Row& r = rows[i].second;
      std::fprintf(stderr, "%10.3f %8ld %9.2f %6.1f  %s\n", r.ms, r.count, r.ms * 1e3 / r.count,
                   100.0 * r.ms / total_ms_, rows[i].first.c_str());
    }
  }

 private:
  std::mutex mutex_;
  std::map<std::string, Row> rows_;
  double total_ms_ = 0;
};

Table& table() {
  static Table t;
  return t;
}

}  // namespace

std::string label(const tracer::TraceProgram& program, const FusionPlan& plan, size_t s,
                  bool folded) {
  const Step& step = plan.steps[s];
  if (step.kind == Step::Kind::Library) {
    const tracer::TraceOp& op = program.ops[step.op];
    std::string out = std::string(folded ? "gemm+epilogue " : "") + op_name(op.op) + " " +
                      dims_str(op.meta.sizes);
    for (const tracer::InputRef& r : op.inputs)
      if (r.kind == tracer::InputRef::Kind::Value)
        out += " <" + dims_str(program.ops[r.index].meta.sizes) + ">";
    return out;
  }
  std::string names;
  int shown = 0;
  for (int i : step.group.ops) {
    if (shown++ == 8) {
      names += ",...";
      break;
    }
    names += (names.empty() ? "" : ",") + std::string(op_name(program.ops[i].op));
  }
  return "fused " + names + " " + dims_str(step.group.shape) +
         (step.group.reduced_dims ? " rows" : "");
}

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_CUDA_STEP_PROFILE");
    return v && std::string(v) == "1";
  }();
  return on;
}

Run::~Run() {
  gpu_timer::destroy(start_);
  for (const Span& s : spans_) {
    gpu_timer::destroy(s.from);
    gpu_timer::destroy(s.to);
  }
}

void Run::begin() {
  gpu_timer::destroy(start_);
  start_ = gpu_timer::record(device_);
}

void Run::end(const std::string& label) {
  void* to = gpu_timer::record(device_);
  spans_.push_back(Span{start_, to, label});
  start_ = nullptr;
}

void Run::finish() {
  table();  // constructed before the first row: destroyed (printed) after the last
  for (Span& s : spans_) {
    const double ms = gpu_timer::elapsed_ms(s.from, s.to);
    if (ms >= 0) table().add(s.label, ms);
    gpu_timer::destroy(s.from);
    gpu_timer::destroy(s.to);
  }
  spans_.clear();
}

}  // namespace kiln::jit::step_profile
