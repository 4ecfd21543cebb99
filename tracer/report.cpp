#include "tracer/report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace kiln::tracer {
namespace {

std::string fixed(double v, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

template <class T, class F>
std::string json_list(const std::vector<T>& items, F&& one) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + one(items[i]);
  return s + "]";
}

std::string quoted(const std::string& s) { return "\"" + json_escape(s) + "\""; }

// A measured time in ms, or null when not measured (< 0).
std::string optional_ms(double ms) { return ms < 0 ? std::string("null") : fixed(ms, 4); }

}  // namespace

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

double estimate_saving_ms(double eager_ms, int64_t eager_ops, double replay_ns_per_op) {
  if (replay_ns_per_op < 0) return -1;
  const double replayed_ms = static_cast<double>(eager_ops) * replay_ns_per_op / 1e6;
  return eager_ms > replayed_ms ? eager_ms - replayed_ms : 0.0;
}

std::string ExplainReport::table() const {
  std::ostringstream os;
  os << "kiln explain: " << traces.size() << " compiled trace(s), " << breaks.size()
     << " graph break site(s), " << recompiles.size() << " recompile(s); ops recorded "
     << ops_recorded << ", replayed " << ops_replayed << ", compile " << fixed(compile_ms)
     << " ms\n";
  if (!traces.empty()) {
    os << "\nTraces\n";
    os << "  id    ops  kernels  inputs  replays  compile_ms  backend      site\n";
    for (const TraceReport& t : traces) {
      char line[512];
      std::snprintf(
          line, sizeof line, "  %-5s %4zu  %7d  %6zu  %7lld  %10s  %-11s  %s%s\n",
          (std::to_string(t.id) + (t.generation ? "/" + std::to_string(t.generation) : "")).c_str(),
          t.ops.size(), t.kernels, t.guards.size(), static_cast<long long>(t.replays),
          fixed(t.compile_ms).c_str(), t.backend.c_str(), t.site.c_str(),
          t.stays_eager ? "  [stays eager]" : "");
      os << line;
      if (t.replay_ms >= 0 && t.eager_ms >= 0)
        os << "        speed: replay " << fixed(t.replay_ms, 3) << " ms vs eager "
           << fixed(t.eager_ms, 3)
           << " ms (medians): " << fixed(t.eager_ms / std::max(t.replay_ms, 1e-6)) << "x"
           << (t.bound_samples > 0
                   ? "; " + std::to_string(t.bound_samples) +
                         " replay sample(s) bound a plan, runs alone " + fixed(t.run_ms, 3) + " ms"
                   : std::string())
           << "\n";
      if (!t.eager_reason.empty()) os << "        stays eager: " << t.eager_reason << "\n";
      std::string ops;
      for (size_t i = 0; i < t.ops.size(); ++i) ops += (i ? " -> " : "") + t.ops[i];
      os << "        ops: " << ops << "\n";
      for (size_t i = 0; i < t.guards.size(); ++i)
        os << "        guard in" << i << ": " << t.guards[i] << "\n";
      if (!t.symbolic.empty()) {
        // Index symbols (i0, ...) are a slice's or select's bounds (symbolic_shapes.h).
        const bool sizes = t.symbolic.rfind("s", 0) == 0;
        const bool bounds =
            t.symbolic.rfind("i", 0) == 0 || t.symbolic.find("; i") != std::string::npos;
        os << "        symbolic "
           << (sizes && bounds ? "sizes and bounds: "
               : sizes         ? "sizes: "
                               : "bounds: ")
           << t.symbolic << "; bound to " << t.size_bindings << " other size(s)"
           << (bounds ? " or bounds" : "") << " in " << fixed(t.binding_ms, 3)
           << " ms (no recompile)\n";
      }
      if (t.arena_bytes > 0)
        os << "        arena: " << fixed(static_cast<double>(t.arena_bytes) / (1 << 20), 2)
           << " MiB for its intermediates\n";
      for (const std::string& n : t.notes) os << "        note: " << n << "\n";
    }
  }
  if (!breaks.empty()) {
    os << "\nGraph breaks (most costly first; est_save_ms: estimated saving if compiled "
          "through = eager_ms - eager ops x measured replay time per op"
       << (replay_ns_per_op >= 0 ? " (" + fixed(replay_ns_per_op / 1e3, 3) + " us)"
                                 : std::string(" (n/a: no replay measured yet)"))
       << ")\n";
    os << "  count  eager_ms  est_save_ms  site                               reason\n";
    for (const BreakReport& b : breaks) {
      char line[512];
      std::snprintf(line, sizeof line, "  %5lld  %8s  %11s  %-33s  %s\n",
                    static_cast<long long>(b.count), fixed(b.eager_ms, 3).c_str(),
                    b.est_saving_ms < 0 ? "n/a" : fixed(b.est_saving_ms, 3).c_str(), b.site.c_str(),
                    b.reason.c_str());
      os << line;
    }
  }
  if (!recompiles.empty()) {
    os << "\nRecompiles\n";
    for (const RecompileReport& r : recompiles)
      os << "  trace " << r.trace_id << "/" << r.generation << " at " << r.site
         << " -- guard failed: " << r.guard << "\n";
  }
  for (const std::string& e : eager_anchors) os << "\nStays eager: " << e << "\n";
  if (evicted_traces > 0 || evicted_ops > 0)
    os << "\nEvicted (least recently used, KILN_MAX_TRACES / KILN_TRACE_CACHE_OPS): "
       << evicted_traces << " compiled trace(s), " << evicted_ops << " recorded op(s)\n";
  return os.str();
}

std::string ExplainReport::json() const {
  std::ostringstream os;
  os << "{\"traces\": "
     << json_list(traces,
                  [](const TraceReport& t) {
                    return "{\"id\": " + std::to_string(t.id) +
                           ", \"generation\": " + std::to_string(t.generation) +
                           ", \"site\": " + quoted(t.site) +
                           ", \"site_key\": " + quoted(t.site_key) +
                           ", \"ops\": " + json_list(t.ops, quoted) +
                           ", \"guards\": " + json_list(t.guards, quoted) +
                           ", \"kernels\": " + std::to_string(t.kernels) +
                           ", \"backend\": " + quoted(t.backend) +
                           ", \"replays\": " + std::to_string(t.replays) +
                           ", \"side_exits\": " + std::to_string(t.side_exits) +
                           ", \"compile_ms\": " + fixed(t.compile_ms, 3) +
                           ", \"notes\": " + json_list(t.notes, quoted) +
                           ", \"symbolic\": " + quoted(t.symbolic) +
                           ", \"size_bindings\": " + std::to_string(t.size_bindings) +
                           ", \"arena_bytes\": " + std::to_string(t.arena_bytes) +
                           ", \"binding_ms\": " + fixed(t.binding_ms, 3) +
                           ", \"stays_eager\": " + (t.stays_eager ? "true" : "false") +
                           ", \"eager_reason\": " + quoted(t.eager_reason) +
                           ", \"replay_median_ms\": " + optional_ms(t.replay_ms) +
                           ", \"eager_median_ms\": " + optional_ms(t.eager_ms) +
                           ", \"speed_bound_samples\": " + std::to_string(t.bound_samples) +
                           ", \"run_median_ms\": " + optional_ms(t.run_ms) + "}";
                  })
     << ", \"graph_breaks\": "
     << json_list(
            breaks,
            [](const BreakReport& b) {
              return "{\"reason\": " + quoted(b.reason) + ", \"kind\": " + quoted(b.kind) +
                     ", \"phase\": " + quoted(b.phase) + ", \"file\": " + quoted(b.file) +
                     ", \"line\": " + std::to_string(b.line) +
                     ", \"function\": " + quoted(b.function) +
                     ", \"count\": " + std::to_string(b.count) +
                     ", \"eager_ms\": " + fixed(b.eager_ms, 4) +
                     ", \"eager_ops\": " + std::to_string(b.eager_ops) + ", \"est_saving_ms\": " +
                     (b.est_saving_ms < 0 ? std::string("null") : fixed(b.est_saving_ms, 4)) + "}";
            })
     << ", \"recompiles\": "
     << json_list(recompiles,
                  [](const RecompileReport& r) {
                    return "{\"trace\": " + std::to_string(r.trace_id) +
                           ", \"generation\": " + std::to_string(r.generation) +
                           ", \"site\": " + quoted(r.site) + ", \"guard\": " + quoted(r.guard) +
                           "}";
                  })
     << ", \"eager_anchors\": " << json_list(eager_anchors, quoted)
     << ", \"ops_recorded\": " << ops_recorded << ", \"ops_replayed\": " << ops_replayed
     << ", \"compile_ms\": " << fixed(compile_ms, 3) << ", \"replay_ns_per_op\": "
     << (replay_ns_per_op < 0 ? std::string("null") : fixed(replay_ns_per_op, 1))
     << ", \"evicted_traces\": " << evicted_traces << ", \"evicted_ops\": " << evicted_ops
     << ", \"head_penalties\": " << head_penalties << ", \"unrolled_loops\": " << unrolled_loops
     << ", \"fresh_path_suspensions\": " << fresh_path_suspensions
     << ", \"independent_reads\": " << independent_reads << ", \"host_side_ops\": " << host_side_ops
     << ", \"stored_loaded\": " << stored_loaded << ", \"stored_refused\": " << stored_refused
     << "}";
  return os.str();
}

}  // namespace kiln::tracer
