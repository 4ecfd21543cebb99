// explain(): what the tracer did and what it cost. Traces (ops, kernels, inputs and
// guards, replays, compile time), graph breaks (reason, user location, count, time
// spent eager because of them), recompiles (the guard that failed). Printable as a
// table and as JSON.
#pragma once

#include <string>
#include <vector>

namespace kiln::tracer {

struct TraceReport {
  int id = 0;
  int generation = 0;
  std::string site;
  std::vector<std::string> ops;
  std::vector<std::string> guards;  // one per external input
  int kernels = 0;
  std::string backend;
  int64_t replays = 0;
  int64_t side_exits = 0;
  double compile_ms = 0;
  bool stays_eager = false;
  std::vector<std::string> notes;  // what stayed unfused and why
};

struct BreakReport {
  std::string reason;
  std::string site;  // "train.py:42 (step)"
  std::string file;
  int line = 0;
  std::string function;
  int64_t count = 0;
  double eager_ms = 0;  // time spent running eagerly in trace segments this break cut
};

struct RecompileReport {
  int trace_id = 0;
  int generation = 0;
  std::string site;
  std::string guard;
};

struct ExplainReport {
  std::vector<TraceReport> traces;
  std::vector<BreakReport> breaks;  // sorted by eager_ms, most costly first
  std::vector<RecompileReport> recompiles;
  std::vector<std::string> eager_anchors;  // traces left eager after too many recompiles
  int64_t ops_recorded = 0;
  int64_t ops_replayed = 0;
  double compile_ms = 0;

  std::string table() const;
  std::string json() const;
};

}  // namespace kiln::tracer
