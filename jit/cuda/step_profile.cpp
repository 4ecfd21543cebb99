#include "jit/cuda/step_profile.h"

#include <algorithm>
#include <chrono>
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
    std::string out = std::string(folded                          ? "gemm+epilogue "
                                  : plan.attention.count(step.op) ? "attention for "
                                                                  : "") +
                      op_name(op.op) + " " + dims_str(op.meta.sizes);
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

bool segments_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_CUDA_STEP_PROFILE");
    return v && std::string(v) == "segments";
  }();
  return on;
}

namespace {

struct SegmentRow {
  long runs = 0;
  double gpu_ms = 0, idle_ms = 0, host_ms = 0, depth = 0, since_start_ms = 0;
};

// Per trace, per segment; printed at exit.
class SegmentTable {
 public:
  void add(const std::string& trace, size_t k, double gpu, double idle, double host, double depth,
           double since_start) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<SegmentRow>& rows = traces_[trace];
    if (rows.size() <= k) rows.resize(k + 1);
    rows[k].runs += 1;
    rows[k].gpu_ms += gpu;
    rows[k].idle_ms += idle;
    rows[k].host_ms += host;
    rows[k].depth += depth;
    rows[k].since_start_ms += since_start;
  }
  ~SegmentTable() {
    for (const auto& [trace, rows] : traces_) {
      double gpu = 0, idle = 0, host = 0;
      std::fprintf(stderr, "[kiln segment timeline] %s, ms per run\n", trace.c_str());
      std::fprintf(stderr, "%8s %6s %10s %10s %10s\n", "segment", "runs", "gpu busy", "gpu idle",
                   "host");
      for (size_t k = 0; k < rows.size(); ++k) {
        const SegmentRow& r = rows[k];
        if (r.runs == 0) continue;
        std::fprintf(stderr, "%8zu %6ld %10.3f %10.3f %10.3f %8.0f %12.3f\n", k, r.runs,
                     r.gpu_ms / r.runs, r.idle_ms / r.runs, r.host_ms / r.runs, r.depth / r.runs,
                     r.since_start_ms / r.runs);
        gpu += r.gpu_ms / r.runs;
        idle += r.idle_ms / r.runs;
        host += r.host_ms / r.runs;
      }
      std::fprintf(stderr,
                   "   total: gpu busy %.3f, gpu idle %.3f (segment 0's: since the previous "
                   "run's end), host %.3f\n",
                   gpu, idle, host);
    }
  }

 private:
  std::mutex mutex_;
  std::map<std::string, std::vector<SegmentRow>> traces_;
};

SegmentTable& segment_table() {
  static SegmentTable t;
  return t;
}

double host_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

SegmentTimeline::SegmentTimeline(int device, size_t segments, std::string name)
    : device_(device), name_(std::move(name)), run_(segments) {
  segment_table();  // constructed before the first row: printed after the last
}

SegmentTimeline::~SegmentTimeline() {
  clear(run_);
  clear(last_);
}

void SegmentTimeline::clear(std::vector<Mark>& marks) {
  for (Mark& m : marks) {
    gpu_timer::destroy(m.from);
    gpu_timer::destroy(m.to);
    m = Mark{};
  }
}

void SegmentTimeline::started() {
  fold();
  started_ = host_seconds();
}

void SegmentTimeline::at_depth(size_t k, size_t d) {
  if (k < run_.size()) run_[k].depth = d;
}

void SegmentTimeline::before(size_t k) {
  if (k == 0 && run_[0].from) fold();  // not pipelined: started() did not fold
  if (k >= run_.size()) return;
  run_[k].host_from = host_seconds();
  run_[k].from = gpu_timer::record(device_);
}

void SegmentTimeline::after(size_t k) {
  if (k >= run_.size()) return;
  run_[k].to = gpu_timer::record(device_);
  run_[k].host_to = host_seconds();
}

void SegmentTimeline::fold() {
  bool complete = !run_.empty();
  for (const Mark& m : run_) complete = complete && m.from && m.to;
  if (complete && ++runs_ > 3 && !last_.empty() && last_[0].to) {
    for (size_t k = 0; k < run_.size(); ++k) {
      const Mark& prev = k == 0 ? last_[0] : run_[k - 1];
      const double gpu = gpu_timer::elapsed_ms(run_[k].from, run_[k].to);
      const double idle = gpu_timer::elapsed_ms(prev.to, run_[k].from);
      const double host = (run_[k].host_from - prev.host_to) * 1e3;
      const double since = started_ > 0 ? (run_[k].host_from - started_) * 1e3 : -1;
      if (gpu >= 0 && idle >= 0)
        segment_table().add(name_, k, gpu, idle, host, static_cast<double>(run_[k].depth), since);
    }
  }
  if (complete) {
    clear(last_);
    last_.assign(1, run_.back());
    run_.back() = Mark{};
  }
  clear(run_);
  started_ = 0;
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
