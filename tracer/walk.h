// The walk (the role of LuaJIT's lj_record.c): one pass of the op stream from an anchor
// down the trace tree, between two boundaries. Each op is described against the walk
// (its inputs as external slots or values of earlier ops, the guards of new externals),
// then either matched against a compiled path (replay: the op returns a lazy tensor) or
// run eagerly and appended to the tree (record). Walk holds this per-walk state and the
// matching; the Tracer (tracer.h) drives it op by op.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "ops/dispatch.h"
#include "tracer/backend.h"
#include "tracer/break_reason.h"
#include "tracer/impl_map.h"
#include "tracer/trace_tree.h"

namespace kiln::tracer {

// Record: run each op eagerly and append it to the tree. Replay: follow a compiled path.
// Eager: a blacklisted anchor. EagerSingle: an anchor whose hot trace is a single op
// (replaying it cannot beat running it); the walk lasts while the same op repeats.
enum class WalkMode : uint8_t { Idle, Record, Replay, Eager, EagerSingle };

// Marks the tracer's own work (a boundary, a side exit) for its duration: ops then run
// untraced (Walk::in_boundary). Nests.
class WalkBoundaryScope {
 public:
  explicit WalkBoundaryScope(bool& in_boundary) : flag_(in_boundary), saved_(in_boundary) {
    flag_ = true;
  }
  ~WalkBoundaryScope() { flag_ = saved_; }
  WalkBoundaryScope(const WalkBoundaryScope&) = delete;
  WalkBoundaryScope& operator=(const WalkBoundaryScope&) = delete;

 private:
  bool& flag_;
  bool saved_;
};

// Whether an op closes the walk's loop: No; AtAnchor, the walk came round to the op it
// started with (the true loop head, LuaJIT's loop closing at the start PC); AtHead, it
// came round to an op it passed later (a guess: the walk may have started before the
// loop, or the head may sit in an inner loop; lifecycle.h's head penalties judge it).
enum class LoopClose : uint8_t { No, AtAnchor, AtHead };

// The mode a walk starts in under an anchor at walk `now`: it follows the anchor's
// TraceState (Eager while a FreshPathPenalty suspends its recording).
WalkMode walk_mode_for(const Anchor& anchor, uint64_t now);

struct Walk {
  WalkMode mode = WalkMode::Idle;
  TraceNode* node = nullptr;  // last op matched or recorded
  Anchor* anchor = nullptr;
  uint64_t tick = 0;  // the tree's LRU clock when the walk began: stamps the nodes it passes
  std::vector<Tensor> externals;
  std::vector<Scalar> scalars;
  std::vector<std::weak_ptr<TensorImpl>> outputs;  // per op: the tensor the user got
  // Per op: whether its value has the metadata its node recorded (not an in-place op's
  // target, nor a value whose offset followed an external input's other than the
  // recorded one): a view of it infers the metadata the view's node recorded.
  std::vector<uint8_t> exact;
  // Per op, on eager walks: the last op count (a multiple of 64) at which its value was
  // seen still held, at least 64 ops after it was made (0: never). program() marks held
  // the values seen held 64+ ops after their last reader in the walk: kept by the user
  // (a loss across a micro-step), not by autograd (which drops a saved activation when
  // the backward op reading it ran): TraceProgram::held.
  std::vector<int32_t> seen_held;
  ImplMap values;                       // tensor -> op producing its current value
  ImplMap external_of;                  // tensor -> external input slot
  FirstSlots external_on;               // storage -> the first external input slot on it
  std::vector<const Storage*> written;  // storages this walk writes in place
  std::shared_ptr<PendingValue> pending_token;
  int64_t eager_ns = 0;                  // time this walk ran ops eagerly
  std::optional<BreakCause> exit_cause;  // why it left its compiled path (for recompiles)
  // Symbolic sizes (symbolic_shapes.h): each symbol's size in this walk (0: not met yet),
  // bound by match() on a symbolic path; and, under an anchor with a symbolic variant,
  // the metadata of each op of the walk, replayed or recorded (a path's nodes hold the
  // metadata of the walk that first recorded them, of another size below a symbolic op).
  mutable std::vector<int64_t> symbol_values;
  // Each index symbol's value in this walk (a slice's start or end, a select's index that
  // moved between walks: symbolic bounds), bound by match() like symbol_values.
  mutable std::vector<std::optional<int64_t>> index_values;
  std::vector<OutputMeta> metas;
  // Fresh descriptions of this walk's ops whose inputs are all external, with their
  // scalars and depth: each could start a trace, and one coming round again closes a loop.
  struct Head {
    TraceOp op;
    std::vector<Scalar> scalars;
    int depth = 0;  // of the op in the walk (1: the first op after the anchor)
  };
  std::vector<Head> heads;
  // The run of consecutive ops with the same op and (known) site that the walk's last op
  // belongs to: its first op's depth. One call from Python that issues the same op
  // several times (stack's unsqueeze per input, from one bytecode) is such a run; an op
  // that repeats inside the run does not close a loop (the loop would be inside kiln's
  // C++ code, which the user's program never comes round to).
  OpId run_op{};
  SiteId run_site = 0;
  int run_start = 0;
  // Pipelined replay (replay.h): the run of the one compiled trace below this walk's path,
  // launched in parts as the walk passes them; partial_node holds that trace.
  std::unique_ptr<PartialRun> partial;
  const TraceNode* partial_node = nullptr;
  size_t partial_next = SIZE_MAX;  // the depth at which partial launches its next part
  int partial_probe = 1;           // the depth of the next look for that trace (0: done)
  // Set while the tracer runs its own work (a boundary, a side exit): ops then run
  // untraced. Not part of a walk's state: clear() keeps it.
  bool in_boundary = false;

  bool active() const { return mode != WalkMode::Idle; }
  bool at_root() const { return node == &anchor->root; }

  // Starts a walk at anchor's root; tick stamps it for the LRU.
  void begin(Anchor& start, uint64_t now);
  void clear();

  // Whether a call is the op on a tree edge (the replay fast path: no TraceOp is built).
  // On success new_externals holds the call's new external inputs in slot order.
  bool match(const TraceOp& edge, const OpCall& call, const Tensor* target,
             std::vector<Tensor>* new_externals) const;
  // The call as a TraceOp of this walk; fresh: as the first op of a new walk.
  TraceOp describe(const OpCall& call, const OutputMeta& meta, const Tensor* target,
                   std::vector<Tensor>* new_externals, bool fresh) const;
  // The same into *op, a default-constructed TraceOp (a TraceOp is costly to move).
  void describe_into(TraceOp* op, const OpCall& call, const OutputMeta& meta, const Tensor* target,
                     std::vector<Tensor>* new_externals, bool fresh) const;
  // Moves to `next` and appends a matched or recorded op's inputs, scalars and result;
  // exact_meta: the result has next's recorded metadata (Walk::exact).
  void commit(TraceNode* next, const OpCall& call, std::vector<Tensor>& new_externals,
              const Tensor& value, bool exact_meta);
  // Whether the call has one input and it is a value of this walk with its node's
  // recorded metadata (Walk::exact).
  bool single_exact_input(const OpCall& call) const;
  // Whether t's value now depends on this walk: it is one of the walk's values (lazy
  // while replaying), has no memory yet, or shares memory the walk writes in place. The
  // same answer when recording and replaying the same path (structure, not timing).
  bool depends_on(const TensorImpl* t) const;
  // The sites of the walk's ops that the value of op `value` comes from (its inputs'
  // producers, transitively), and the external inputs those ops read.
  struct Producers {
    std::vector<SiteId> sites;
    std::vector<const TensorImpl*> externals;
  };
  Producers producers(int value) const;
  // A tensor with the op's metadata whose value the compiled trace computes later.
  Tensor make_lazy(const OutputMeta& meta);
  // The walked path as a program (live: the values the user still holds), with this
  // walk's sizes: under a symbolic anchor every op's metadata from `metas`, symbolic
  // guards made exact.
  TraceProgram program() const;

  // Whether this op closes a loop: the walk comes round (same op, wiring, scalars and
  // site) to an op it started with or passed as a head. Only where loops may close
  // (loops_allowed: outside regions and kiln's own loops). `op` is the op described
  // against the walk, with its site.
  // When it closes one at the anchor or at a head it noted, *fresh gets the op described
  // fresh (as the first op of a new walk, with its site) and *fresh_externals its
  // externals: what the walk that begins there describes again (see Fresh).
  // *fresh must be as constructed (its op is described in place).
  struct Fresh {
    bool set = false;
    TraceOp op;
    std::vector<Tensor> externals;
  };
  LoopClose closes_loop(const OpCall& call, const OutputMeta& meta, const Tensor* target,
                        const TraceOp& op, bool loops_allowed, Fresh* fresh = nullptr);
  // Whether an op reads only external inputs, at least one (a head's first condition).
  static bool all_inputs_external(const TraceOp& op) {
    if (op.inputs.empty()) return false;
    for (const InputRef& r : op.inputs)
      if (r.kind != InputRef::Kind::External) return false;
    return !op.in_place || op.target.kind == InputRef::Kind::External;
  }
  // A replayed op notes itself as a head like closes_loop does for a recorded one.
  // (Only what closes_loop compares: no guards' contents, metadata or externals.)
  void note_replayed_head(const OpCall& call, const Tensor* target, const TraceOp& edge,
                          bool loops_allowed);

 private:
  void note_head_described(const OpCall& call, const Tensor* target);
  InputRef ref_for(const Tensor& t, bool fresh, TraceOp* op,
                   std::vector<Tensor>* new_externals) const;
};

}  // namespace kiln::tracer
