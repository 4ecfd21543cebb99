// TraceRecorder: the per-thread tracing state machine, installed as the dispatch hook.
//
//   idle      --op-->        walking (begin_walk: find or create the anchor)
//   walking   --op-->        RECORD: run eagerly, append to the trie
//                            REPLAY: the op matches the hot path: return a lazy tensor
//                            SIDE EXIT: a replay diverges: run the pending ops, RECORD on
//   walking   --boundary-->  idle (end_walk: run the plan or count the ending; compile
//                            when hot). Boundaries: host reads (item(), printing, copies
//                            to the host), region entry/exit, the anchor coming round
//                            again (a loop), the maximum trace length.
// Every boundary that is not a region edge or a loop is a graph break, reported with
// its reason, the user's source line and the eager time it cost.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "ops/dispatch.h"
#include "tracer/impl_map.h"
#include "tracer/report.h"
#include "tracer/trace_tree.h"

namespace kiln::tracer {

enum class BreakReason : uint8_t {
#define KILN_BREAK(id, phase, text) id,
#include "tracer/break_reasons.def"
#undef KILN_BREAK
};
const char* break_reason_text(BreakReason reason);

struct RegionOptions {
  std::string name = "region";
  int warmup = -1;  // -1: the global setting (KILN_WARMUP)
  bool fullgraph = false;
};

class TraceRecorder final : public DispatchHook {
 public:
  TraceRecorder();
  ~TraceRecorder() override;

  bool on_call(const OpCall& call, const OutputMeta& meta, Tensor* result) override;
  bool on_call_into(const OpCall& call, const OutputMeta& meta, const Tensor& out) override;

  // A host read: ends the current trace (a graph break at site).
  void on_sync(const std::string& reason, const UserSite& site);
  // Runs pending lazy work without ending the trace (a side exit).
  void flush();
  void region_enter(const RegionOptions& options, const UserSite& site);
  void region_exit(bool by_exception);
  void set_enabled(bool on);
  bool enabled() const { return enabled_; }
  void reset();
  ExplainReport explain() const;
  // Recorded ops (trie nodes, anchors included) this thread keeps now.
  int64_t cached_ops() const { return nodes_; }
  // Measured time of compiled-trace replays per op on this thread (the plans' runs, ns);
  // -1 before the first replay. The basis of the graph-break saving estimates.
  double replay_ns_per_op() const {
    return replay_ops_ > 0 ? static_cast<double>(replay_ns_) / static_cast<double>(replay_ops_)
                           : -1.0;
  }

  static TraceRecorder& current();  // this thread's recorder

 private:
  // Eager: a blacklisted anchor. EagerSingle: an anchor whose hot trace is a single op
  // (replaying it cannot beat running it); the walk lasts while the same op repeats.
  enum class Mode : uint8_t { Idle, Record, Replay, Eager, EagerSingle };
  enum class Boundary : uint8_t { Region, Loop, Break, Abort };
  struct BreakStats {
    std::string reason;
    UserSite site;
    int64_t count = 0;
    int64_t eager_ns = 0;
    int64_t eager_ops = 0;
  };

  bool active() const { return enabled_ || !regions_.empty(); }
  bool handle(const OpCall& call, const OutputMeta& meta, const Tensor* target, Tensor* result);
  // Whether a call is the op on a trie edge (the replay fast path: no TraceOp is built).
  // On success new_externals holds the call's new external inputs in slot order.
  bool match_call(const TraceOp& edge, const OpCall& call, const Tensor* target,
                  std::vector<Tensor>* new_externals) const;
  TraceOp describe(const OpCall& call, const OutputMeta& meta, const Tensor* target,
                   std::vector<Tensor>* new_externals, bool fresh) const;
  InputRef ref_for(const Tensor& t, bool fresh, TraceOp* op,
                   std::vector<Tensor>* new_externals) const;
  void begin_walk(const TraceOp& first);
  void end_walk(Boundary kind, const std::string& reason, const UserSite& site);
  bool closes_loop(const OpCall& call, const OutputMeta& meta, const Tensor* target,
                   const TraceOp& op, TraceOp* fresh, std::vector<Tensor>* fresh_externals);
  // A replayed op notes itself as a walk head like closes_loop does for a recorded one.
  void note_replayed_head(const OpCall& call, const OutputMeta& meta, const Tensor* target,
                          const TraceOp& edge);
  void side_exit(const std::string& why);
  void materialize(size_t count);
  void bind_outputs(const std::vector<Tensor>& values);
  void maybe_compile(TraceNode* node, const UserSite& site);
  // Appends a matched or recorded op's inputs, scalars and result to the walk.
  void commit(const OpCall& call, std::vector<Tensor>& new_externals, const Tensor& value);
  Tensor make_lazy(const OutputMeta& meta);
  void note_break(const std::string& reason, const UserSite& site, int64_t eager_ns,
                  int64_t eager_ops);
  TraceProgram program_for(TraceNode* node) const;
  int warmup_for_new_anchor() const;
  void clear_walk();
  // The walk failed (running its plan or its pending ops threw `error`): the lazy values
  // the user holds that never got one are marked, so reading them is a clear error.
  void fail_pending_values(std::exception_ptr error);
  // Drops the least recently walked traces (recorded ops and compiled plans) once this
  // thread keeps more than config().trace_cache_ops ops or config().max_traces plans.
  // Only between walks (nothing points into the trie then).
  void evict_lru();

  bool enabled_;
  std::vector<std::unique_ptr<Anchor>> anchors_;
  std::vector<RegionOptions> regions_;
  std::vector<UserSite> region_sites_;

  // The current walk.
  Mode mode_ = Mode::Idle;
  TraceNode* node_ = nullptr;  // last op matched or recorded
  Anchor* anchor_ = nullptr;
  std::vector<Tensor> externals_;
  std::vector<Scalar> scalars_;
  std::vector<std::weak_ptr<TensorImpl>> outputs_;  // per op: the tensor the user got
  ImplMap values_;                                  // tensor -> op producing its current value
  ImplMap external_of_;                             // tensor -> external input slot
  std::shared_ptr<PendingValue> pending_token_;
  int64_t walk_eager_ns_ = 0;
  std::string walk_guard_failure_;  // why the last replay left its trace (for recompiles)
  // Fresh descriptions of this walk's ops whose inputs are all external: each could start
  // a trace, and one coming round again (same scalars too) closes a loop.
  std::vector<std::pair<TraceOp, std::vector<Scalar>>> walk_heads_;  // with their scalars

  // Lifetime statistics.
  std::vector<std::shared_ptr<CompiledTrace>> compiled_;
  std::vector<BreakStats> breaks_;
  std::vector<RecompileReport> recompiles_;
  std::vector<std::string> eager_anchors_;
  int64_t ops_recorded_ = 0;
  int64_t ops_replayed_ = 0;
  int64_t replay_ns_ = 0;   // time in compiled-trace runs
  int64_t replay_ops_ = 0;  // ops those runs covered
  int next_trace_id_ = 1;
  // The LRU of the trie: walks so far (each stamps the nodes it passes), nodes kept
  // (anchors included), and what eviction dropped.
  uint64_t tick_ = 0;
  int64_t nodes_ = 0;
  int64_t evicted_traces_ = 0;
  int64_t evicted_ops_ = 0;
  bool in_boundary_ = false;
};

}  // namespace kiln::tracer
