#include "tracer/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>

#include "runtime/cuda_context.h"
#include "runtime/error.h"
#include "runtime/gpu_timer.h"
#include "tracer/tracer.h"

namespace kiln::profiler {

constinit thread_local Profile* tls_active = nullptr;

namespace {

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// Long keys keep their start and their end (a graph break's file:line).
std::string shorten(const std::string& key, size_t width) {
  if (key.size() <= width) return key;
  const size_t head = (width - 3) / 2;
  return key.substr(0, head) + "..." + key.substr(key.size() - (width - 3 - head));
}

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::Op:
      return "op";
    case Kind::Replay:
      return "replay";
    case Kind::Compile:
      return "compile";
    case Kind::GraphBreak:
      return "graph_break";
    case Kind::Materialize:
      return "materialize";
    case Kind::Kernel:
      return "kernel";
  }
  return "?";
}

std::string BreakCost::site() const {
  if (file.empty()) return "<unknown>";
  std::string s = file + ":" + std::to_string(line);
  if (!function.empty()) s += " (" + function + ")";
  return s;
}

Profile::Profile() : outer_(tls_active), origin_ns_(steady_ns()) {
  events_.reserve(1024);
  tls_active = this;
}

Profile::~Profile() { stop(); }

int64_t Profile::now() const { return steady_ns() - origin_ns_; }

void Profile::stop() {
  if (!running_) return;
  stop_ns_ = now();
  running_ = false;
  // Unlink this profile from the thread's chain (it may be stopped out of order).
  if (tls_active == this) {
    tls_active = outer_;
  } else {
    for (Profile* p = tls_active; p; p = p->outer_) {
      if (p->outer_ == this) {
        p->outer_ = outer_;
        break;
      }
    }
  }
  resolve_gpu();
}

double Profile::wall_ms() const { return (running_ ? now() : stop_ns_) / 1e6; }

size_t Profile::begin(Kind kind, std::string name, const Device& device) {
  Event e;
  e.kind = kind;
  e.name = std::move(name);
  e.device = device.is_cuda() ? device.str() : "cpu";
  if (device.is_cuda()) {
    // The first CUDA work of the profile on this device: an event the host time is
    // known at (the stream is idle after the synchronize), the GPU clock's origin.
    bool have_ref = false;
    for (const GpuRef& r : gpu_refs_) have_ref |= r.device == device.index;
    if (!have_ref && !gpu_timer::capturing(device.index)) {
      try {
        cuda_context::synchronize(device.index);
      } catch (...) {
      }
      if (void* ref = gpu_timer::record(device.index))
        gpu_refs_.push_back(GpuRef{device.index, ref, now()});
    }
  }
  e.start_ns = now();
  events_.push_back(std::move(e));
  gpu_marks_.push_back(GpuMarks{device.is_cuda() ? gpu_timer::record(device.index) : nullptr,
                                nullptr, device.index});
  return events_.size() - 1;
}

void Profile::end(size_t index) {
  GpuMarks& marks = gpu_marks_[index];
  if (marks.start) marks.end = gpu_timer::record(marks.device);
  events_[index].end_ns = now();
}

void Profile::resolve_gpu() {
  for (size_t i = 0; i < gpu_marks_.size(); ++i) {
    GpuMarks& m = gpu_marks_[i];
    if (!m.start) continue;
    for (const GpuRef& r : gpu_refs_) {
      if (r.device != m.device || !m.end) continue;
      const double a = gpu_timer::elapsed_ms(r.event, m.start);
      const double b = gpu_timer::elapsed_ms(r.event, m.end);
      if (a >= 0 && b >= a) {
        events_[i].gpu_start_ns = r.host_ns + static_cast<int64_t>(a * 1e6);
        events_[i].gpu_end_ns = r.host_ns + static_cast<int64_t>(b * 1e6);
      }
    }
    gpu_timer::destroy(m.start);
    gpu_timer::destroy(m.end);
    m = GpuMarks{};
  }
  for (const GpuRef& r : gpu_refs_) gpu_timer::destroy(r.event);
  gpu_refs_.clear();
}

double Profile::replay_ns_per_op() const {
  int64_t ns = 0, ops = 0;
  for (const Event& e : events_) {
    if (e.kind != Kind::Replay || e.end_ns < e.start_ns) continue;
    ns += e.end_ns - e.start_ns;
    ops += e.ops;
  }
  return ops > 0 ? static_cast<double>(ns) / static_cast<double>(ops) : -1.0;
}

std::vector<BreakCost> Profile::break_costs() const {
  double per_op = replay_ns_per_op();
  if (per_op < 0) per_op = tracer::Tracer::current().replay_ns_per_op();
  std::vector<BreakCost> out;
  for (const Event& e : events_) {
    if (e.kind != Kind::GraphBreak) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const BreakCost& b) {
      return b.reason == e.reason && b.file == e.file && b.line == e.line &&
             b.function == e.function;
    });
    if (it == out.end()) {
      BreakCost b;
      b.reason = e.reason;
      b.file = e.file;
      b.function = e.function;
      b.line = e.line;
      out.push_back(std::move(b));
      it = out.end() - 1;
    }
    ++it->count;
    it->eager_ops += e.ops;
    it->eager_ms += e.eager_ns / 1e6;
  }
  for (BreakCost& b : out)
    b.est_saving_ms = tracer::estimate_saving_ms(b.eager_ms, b.eager_ops, per_op);
  std::stable_sort(out.begin(), out.end(),
                   [](const BreakCost& a, const BreakCost& b) { return a.eager_ms > b.eager_ms; });
  return out;
}

std::string Profile::table(const std::string& sort_by, int row_limit) const {
  KILN_CHECK(sort_by == "total" || sort_by == "self" || sort_by == "count" || sort_by == "avg" ||
                 sort_by == "name",
             ValueError, "[profile.table] sort_by must be total, self, count, avg or name, got '",
             sort_by, "'");
  struct Row {
    std::string key;
    int64_t count = 0;
    int64_t total_ns = 0, self_ns = 0, gpu_ns = 0;
  };
  // Self time: a span's time minus that of the spans directly inside it.
  std::vector<int64_t> self(events_.size());
  std::vector<size_t> order(events_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return events_[a].start_ns < events_[b].start_ns ||
           (events_[a].start_ns == events_[b].start_ns && events_[a].end_ns > events_[b].end_ns);
  });
  std::vector<size_t> stack;
  for (size_t i : order) {
    const Event& e = events_[i];
    const int64_t end = e.end_ns < e.start_ns ? e.start_ns : e.end_ns;
    self[i] = end - e.start_ns;
    while (!stack.empty() && events_[stack.back()].end_ns <= e.start_ns &&
           events_[stack.back()].end_ns >= 0)
      stack.pop_back();
    if (!stack.empty()) self[stack.back()] -= end - e.start_ns;
    stack.push_back(i);
  }
  std::map<std::string, Row> rows;
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    std::string key = e.name;
    if (e.kind == Kind::Op && e.device != "cpu") key += " [" + e.device + "]";
    Row& r = rows[key];
    r.key = key;
    ++r.count;
    r.total_ns += e.end_ns < e.start_ns ? 0 : e.end_ns - e.start_ns;
    r.self_ns += std::max<int64_t>(0, self[i]);
    if (e.gpu_start_ns >= 0) r.gpu_ns += e.gpu_end_ns - e.gpu_start_ns;
  }
  std::vector<Row> list;
  bool any_gpu = false;
  for (auto& [k, r] : rows) {
    any_gpu |= r.gpu_ns > 0;
    list.push_back(r);
  }
  auto avg = [](const Row& r) { return r.count ? r.total_ns / r.count : 0; };
  std::stable_sort(list.begin(), list.end(), [&](const Row& a, const Row& b) {
    if (sort_by == "count") return a.count > b.count;
    if (sort_by == "avg") return avg(a) > avg(b);
    if (sort_by == "self") return a.self_ns > b.self_ns;
    if (sort_by == "name") return a.key < b.key;
    return a.total_ns > b.total_ns;
  });
  const double wall = std::max(wall_ms(), 1e-9);
  std::ostringstream os;
  os << "kiln profile: " << events_.size() << " events, wall " << fixed(wall_ms(), 3)
     << " ms (this thread; sorted by " << sort_by << ")\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-56s %8s %11s %11s %10s %7s%s\n", "name", "count",
                "total_ms", "self_ms", "avg_ms", "%wall", any_gpu ? "      gpu_ms" : "");
  os << line;
  int shown = 0;
  for (const Row& r : list) {
    if (row_limit >= 0 && shown++ >= row_limit) break;
    std::string gpu;
    if (any_gpu) {
      char g[32];
      std::snprintf(g, sizeof g, " %11.3f", r.gpu_ns / 1e6);
      gpu = g;
    }
    std::snprintf(line, sizeof line, "  %-56s %8lld %11.3f %11.3f %10.4f %6.1f%%%s\n",
                  shorten(r.key, 56).c_str(), static_cast<long long>(r.count), r.total_ns / 1e6,
                  r.self_ns / 1e6, avg(r) / 1e6, 100.0 * (r.total_ns / 1e6) / wall, gpu.c_str());
    os << line;
  }
  const std::vector<BreakCost> costs = break_costs();
  if (!costs.empty()) {
    os << "\nGraph break costs (most costly first; est_save_ms is an estimate: eager_ms minus "
          "the same ops at the measured replay time per op)\n";
    os << "  count  eager_ops   eager_ms  est_save_ms  site                               "
          "reason\n";
    for (const BreakCost& b : costs) {
      std::snprintf(line, sizeof line, "  %5lld  %9lld  %9.3f  %11s  %-33s  %s\n",
                    static_cast<long long>(b.count), static_cast<long long>(b.eager_ops),
                    b.eager_ms, b.est_saving_ms < 0 ? "n/a" : fixed(b.est_saving_ms, 3).c_str(),
                    b.site().c_str(), b.reason.c_str());
      os << line;
    }
  }
  return os.str();
}

}  // namespace kiln::profiler
