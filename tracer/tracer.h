// Tracer: this thread's tracer, installed as the dispatch hook. It drives one walk at a
// time (walk.h) through the trace tree (trace_tree.h):
//
//   idle      --op-->        walking (begin_walk: find or create the anchor)
//   walking   --op-->        RECORD: run eagerly, append to the tree
//                            REPLAY: the op matches the compiled path: return a lazy tensor
//                            SIDE EXIT: a replay diverges: materialize, RECORD on
//                            (side_exit.h)
//   walking   --boundary-->  idle (end_walk: replay the compiled trace (replay.h), or
//                            materialize and count the ending, compiling when hot
//                            (lifecycle.h); then evict (eviction.h)). Boundaries: host
//                            reads (item(), printing, copies to the host), region entry
//                            and exit, the anchor coming round again (a loop), the
//                            maximum trace length.
// Every boundary that is not a region edge or a loop is a graph break, raised with a
// BreakReason (break_reason.h) and reported with the user's source line and the eager
// time it cost (statistics.h).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ops/dispatch.h"
#include "tracer/break_reason.h"
#include "tracer/region_plan.h"
#include "tracer/report.h"
#include "tracer/statistics.h"
#include "tracer/trace_tree.h"
#include "tracer/walk.h"
#include "tracer/warm_start.h"

namespace kiln::tracer {

struct RegionOptions {
  std::string name = "region";
  int warmup = -1;  // -1: the global setting (KILN_WARMUP)
  bool fullgraph = false;
};

class Tracer final : public DispatchHook {
 public:
  Tracer();
  ~Tracer() override;

  bool on_call(const OpCall& call, const OutputMeta& meta, Tensor* result) override;
  // The replay fast path before dispatch infers the call's metadata: the call is the
  // next op of the compiled path (exact guards, not a view): its lazy value, with the
  // recorded metadata.
  bool on_known_call(const OpCall& call, Tensor* result, const OutputMeta** meta) override;
  bool on_call_into(const OpCall& call, const OutputMeta& meta, const Tensor& out) override;

  // A host read or memory export (a Sync reason): ends the current trace, a graph break
  // at the current site (current_site(fallback), described only when a trace ends);
  // inside a fullgraph region, raises GraphBreakError.
  void on_sync(const BreakCause& cause, const SourceSite& fallback);
  // A host read of `read` (null: unknown) at `where`. A value a host-side op made (below)
  // that does not depend on the walk (walk.h: depends_on) is read without a boundary:
  // returns true, and the caller reads it under lazy::PendingPause. Otherwise on_sync,
  // and the sites of the walk's ops the read value came from become host-side; returns
  // false. (Any other read stays a boundary: an input read to branch on, item() of a
  // loss.)
  bool on_host_read(const BreakCause& cause, const SourceSite& where, const TensorImpl* read);
  // Runs pending lazy work without ending the trace (a side exit).
  void flush();
  void region_enter(const RegionOptions& options, const CapturedSite& site);
  void region_exit(bool by_exception);
  // The plan of the last outermost region whose call replayed one compiled trace from
  // its entry to its exit (region_plan.h); taken once (a null trace when there is none).
  RegionPlan take_region_plan();
  // Whether outermost region exits keep their plan (off by default: a kept plan holds
  // its inputs until taken); kiln.compile(fn, skip=True) turns it on around its calls.
  void keep_region_plans(bool on) { plans_wanted_ = on; }
  void set_enabled(bool on);
  bool enabled() const { return enabled_; }
  void reset();
  // Waits for this thread's background compiles (background_compile.h) and installs
  // them, but for the anchor being walked, whose plan swaps in at its next walk.
  void wait_for_compiles();
  int compiles_in_flight() const;  // background compiles of this thread not done yet
  ExplainReport explain() const { return statistics_.explain(tree_); }
  // Recorded ops (tree nodes, anchors included) this thread keeps now.
  int64_t cached_ops() const { return tree_.nodes; }
  // Measured time of compiled-trace replays per op on this thread (ns); -1 before the
  // first replay. The basis of the graph-break saving estimates.
  double replay_ns_per_op() const { return statistics_.replay_ns_per_op(); }

  static Tracer& current();  // this thread's tracer

 private:
  enum class Boundary : uint8_t { Region, Loop, Break, Abort };

  bool active() const { return enabled_ || !regions_.empty(); }
  // Loops close outside regions and outside kiln's own loops (backward, optimizer steps).
  bool loops_allowed() const;
  bool handle(const OpCall& call, const OutputMeta& meta, const Tensor* target, Tensor* result);
  // A host-side op: its site made a value that was read on the host (host_sites_), and
  // none of its inputs depends on the walk. It runs eagerly, outside the trace, so the
  // read of its value later needs no boundary (a batch's random indices, their elements).
  bool runs_on_host_side(const OpCall& call) const;
  void note_host_value(const Tensor& value);
  // A view (a slice of a token array at a moving offset: data[i:i + bptt]) that would
  // start a walk at its site with bounds (attributes) other than those its anchors there
  // were made with: each step would be a new anchor that never gets hot. Such a site
  // becomes host-side: the view runs eagerly outside traces, and the trace that reads it
  // takes it as an input (its offset is not guarded).
  static bool is_varying_view(const TraceOp& first,
                              const std::vector<std::unique_ptr<Anchor>>& anchors);
  bool is_host_value(const TensorImpl* t) const;
  // The call is the next op of the compiled path (child): returns its lazy value.
  Tensor replay_op(const OpCall& call, const OutputMeta& meta, const Tensor* target,
                   TraceNode* child, std::vector<Tensor>& new_externals);
  // Runs the call eagerly and appends it to the tree under the walk's node.
  Tensor record_op(const OpCall& call, const OutputMeta& meta, const Tensor* target,
                   const TraceOp& op, std::vector<Tensor>& new_externals);
  // Why the op `op` leaves the compiled path at the walk's node (a Replay reason).
  BreakCause divergence(const TraceOp& op) const;
  // head_key: the HeadPenalty key when the walk begins at a head found mid-walk, else 0.
  // round: the walk begins because the last one came round to its anchor (a loop).
  void begin_walk(const TraceOp& first, uint64_t head_key, bool round = false);
  // A walk that began as a round of its anchor's loop runs into a host read: when the
  // loop came round only a few times since the walk before it (LoopRounds), in few
  // enough ops for one trace, the loop is unrolled into the trace between the two reads.
  void unroll_short_loop();
  static uint64_t penalty_key(const TraceOp& op);
  // A guessed head issued inside one of kiln's helpers (an autocast cast in F.linear, an
  // nn module's op): the helper's place and the op, whatever the user's call site; 0 for
  // an op the user's own code issued. A head found false there suspends the helper's
  // place at every call site (helper_penalties_): a layer's weight casts at five user
  // lines are one false head, not five found one step at a time.
  static uint64_t helper_key(const UserSite& site, OpId op);
  bool helper_suspended(OpId op) const;
  // Ends the walk; `cause` is the reason of a Break or Abort (none for Region and Loop).
  // provisional: a loop closure at a guessed head ends it (lifecycle.h, kProvisionalEndings).
  void end_walk(Boundary kind, const BreakCause* cause, const UserSite& site,
                bool provisional = false);
  int warmup_for_new_anchor() const;

  bool enabled_;
  // The outermost region's walk: still the one that began at its entry (no boundary
  // inside); the host-side op and independent read counts at its entry; whether its exit
  // keeps its plan (region_exit without an exception).
  bool region_clean_ = false;
  int64_t region_side_ops_ = 0;
  bool keep_region_plan_ = false;
  bool plans_wanted_ = false;
  RegionPlan region_plan_;
  std::vector<RegionOptions> regions_;
  std::vector<CapturedSite> region_sites_;  // described only if a region aborts
  TraceTree tree_;
  Walk walk_;
  TraceStatistics statistics_;
  WarmStart warm_;  // stored traces: loaded at new anchors, heads met mid-walk
  std::unordered_map<uint64_t, HeadPenalty> head_penalties_;    // by penalty_key
  std::unordered_map<uint64_t, HeadPenalty> helper_penalties_;  // by helper_key
  // The suspended head the current walk last ran through (its penalty key), and the walk
  // (tree_.tick): lifted if that walk reaches the maximum trace length (HeadPenalty::lift).
  uint64_t passed_suspended_head_ = 0, passed_suspended_tick_ = 0;
  // The loop the current walk is a round of: a walk came round to its anchor and ended
  // (LoopClose::AtAnchor), and each later walk of the same anchor that did too. A loop
  // that comes round at most kMaxUnrolledRounds times between two host reads, in at most
  // the maximum trace length of ops, is not a loop of the program's hot path but a short
  // one inside it (a training step's gradient-accumulation micro-steps between two
  // loss.item() reads): its head is suspended like a false head (HeadPenalty), so the
  // walk from the first read runs through it and the step is one trace.
  struct LoopRounds {
    const Anchor* anchor = nullptr;
    int rounds = 0;   // walks of the loop that ended by coming round
    int64_t ops = 0;  // the ops of those walks
  };
  static constexpr int kMaxUnrolledRounds = 8;
  LoopRounds loop_rounds_;
  bool walk_is_round_ = false;             // the current walk began as a round of loop_rounds_
  std::unordered_set<SiteId> host_sites_;  // sites of ops whose values were read on the host
  // The latest values host-side ops made (identity; weak: a dead one is not found).
  std::vector<std::pair<const TensorImpl*, std::weak_ptr<TensorImpl>>> host_values_;
};

}  // namespace kiln::tracer
