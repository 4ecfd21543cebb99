#include "tracer/profiler.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "runtime/error.h"
#include "tracer/tracer.h"

namespace kiln::profiler {
namespace {

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

std::string BreakCost::site() const {
  if (file.empty()) return "<unknown>";
  std::string s = file + ":" + std::to_string(line);
  if (!function.empty()) s += " (" + function + ")";
  return s;
}

double Profile::replay_ns_per_op() const {
  int64_t ns = 0, ops = 0;
  for (const Event& e : events()) {
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
  for (const Event& e : events()) {
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
  std::vector<int64_t> self(events().size());
  std::vector<size_t> order(events().size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return events()[a].start_ns < events()[b].start_ns ||
           (events()[a].start_ns == events()[b].start_ns &&
            events()[a].end_ns > events()[b].end_ns);
  });
  std::vector<size_t> stack;
  for (size_t i : order) {
    const Event& e = events()[i];
    const int64_t end = e.end_ns < e.start_ns ? e.start_ns : e.end_ns;
    self[i] = end - e.start_ns;
    while (!stack.empty() && events()[stack.back()].end_ns <= e.start_ns &&
           events()[stack.back()].end_ns >= 0)
      stack.pop_back();
    if (!stack.empty()) self[stack.back()] -= end - e.start_ns;
    stack.push_back(i);
  }
  std::map<std::string, Row> rows;
  for (size_t i = 0; i < events().size(); ++i) {
    const Event& e = events()[i];
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
  os << "kiln profile: " << events().size() << " events, wall " << fixed(wall_ms(), 3)
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
