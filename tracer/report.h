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
  std::string site;      // "train.py:42 (step)"; with the column and helper where two
                         // traces start on one line ("train.py:42:17 (step) via ...")
  std::string site_key;  // the site's stable key (user_site.h), for an on-disk cache
  std::vector<std::string> ops;
  std::vector<std::string> guards;  // one per external input
  int kernels = 0;
  std::string backend;
  int64_t replays = 0;
  int64_t side_exits = 0;
  double compile_ms = 0;
  bool stays_eager = false;
  std::string eager_reason;  // why it stays eager when a measurement decided it, else ""
  // Medians of its first replays and of eager runs of the same ops, interleaved
  // (tracer/speed_check.h); -1 until measured, and for traces not judged (not on the CPU).
  double replay_ms = -1;
  double eager_ms = -1;
  // A symbolic trace's share of that: how many of the replay samples bound its plan to
  // new sizes or bounds (their binding is in replay_ms), and the median of the runs alone.
  int bound_samples = 0;
  double run_ms = -1;
  std::vector<std::string> notes;  // what stayed unfused and why
  // Symbolic sizes (tracer/symbolic_shapes.h): which dims are symbols, as relations
  // ("s0 = dim 0 of in0 = dim 0 of in3 (compiled at 12)") and which slice or select bounds
  // ("i0 = start of op 1 (slice dim 1) (compiled at 2)"), "" for an exact trace; and how
  // many other sizes or bounds it was bound to (no recompile) and the time that took.
  std::string symbolic;
  int64_t size_bindings = 0;
  int64_t arena_bytes = 0;  // its intermediates' memory (a GPU trace's: a share of one arena)
  double binding_ms = 0;
};

struct BreakReport {
  std::string reason;  // the message: "item() reads a value on the host"
  std::string kind;    // its row in tracer/break_reasons.def: "HostRead"
  std::string phase;   // the row's phase: "sync" or "record"
  std::string site;    // "train.py:42 (step)"
  std::string file;
  int line = 0;
  std::string function;
  int64_t count = 0;
  double eager_ms = 0;    // time spent running eagerly in trace segments this break cut
  int64_t eager_ops = 0;  // ops those segments ran eagerly
  // An ESTIMATE of what compiling through the break would save (estimate_saving_ms);
  // -1 when no replay has been measured on this thread yet.
  double est_saving_ms = -1;
};

// The graph-break saving model: the eager time of the cut segments minus the same ops
// at the measured replay time per op (compiled-trace runs / the ops they covered), at
// least 0; -1 (unknown) when replay_ns_per_op < 0. An estimate: it assumes the ops
// around the break would replay at this run's average replay cost per op, and that cost
// counts the compiled trace's run only, not the per-op dispatch of a lazy walk.
double estimate_saving_ms(double eager_ms, int64_t eager_ops, double replay_ns_per_op);

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
  std::vector<std::string> eager_anchors;  // traces left eager: recompiles, speed
  int64_t ops_recorded = 0;
  int64_t ops_replayed = 0;
  double compile_ms = 0;
  double replay_ns_per_op = -1;  // measured; the basis of est_saving_ms
  // Dropped by the LRU limits (KILN_MAX_TRACES, KILN_TRACE_CACHE_OPS): compiled traces
  // and recorded ops; a dropped trace records and compiles again if it comes back.
  int64_t evicted_traces = 0;
  int64_t evicted_ops = 0;
  // False loop heads: walks anchored at an op met again mid-walk that ran into a host
  // read (HeadPenalty, lifecycle.h).
  int64_t head_penalties = 0;
  // Short loops between two host reads (a gradient-accumulation loop inside a step)
  // unrolled into the step's trace: their head was suspended (Tracer: LoopRounds).
  int64_t unrolled_loops = 0;
  // Anchors whose walks each took a new path, kFreshWalks in a row: their recording was
  // suspended for a while (FreshPathPenalty, lifecycle.h).
  int64_t fresh_path_suspensions = 0;
  // Host reads of values that owe nothing to the trace being walked (no boundary), and
  // the ops run outside traces because their values are read on the host (a batch's
  // random indices): Tracer::on_host_read.
  int64_t independent_reads = 0;
  int64_t host_side_ops = 0;
  // Warm starts (warm_start.h): traces put back from the store, and stored traces refused
  // by this build (another build or format version, malformed).
  int64_t stored_loaded = 0;
  int64_t stored_refused = 0;

  std::string table() const;
  std::string json() const;
};

// s with JSON string escapes (quotes, backslashes, control characters), no quotes around.
std::string json_escape(const std::string& s);

}  // namespace kiln::tracer
