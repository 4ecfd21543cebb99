// The trace lifecycle (the role of LuaJIT's lj_trace.c): per anchor, an explicit state
// machine with verb-named transitions, and the compile policy that drives it.
//
//   Recording  --on_compile-->    Compiled     a path became hot (hotness: traces ended at
//                                              its end hot_threshold() times) and compiled
//   Recording  --on_single_op-->  SingleOp     the hot path is one op: nothing to fuse
//   Compiled   --on_recompile-->  Compiled     another variant compiled: a penalty, with
//   Recording                                  the reason the walk left the last one kept
//   Compiled   --on_recompile-->  Blacklisted  past KILN_RECOMPILE_LIMIT penalties
//   Compiled   --on_evicted-->    Recording    eviction dropped every compiled variant
//   Compiled   --on_slower_than_eager--> SlowerThanEager   a variant's replays measured
//                                              slower than eager (speed_check.h)
//   Recording  --on_compile_failed-->  CompileFailed   its first compile threw (a failed
//                                              recompile only leaves its variant uncompiled)
//
// A hot path compiles in the background by default (background_compile.h): it is
// submitted at the ending that made it hot (the anchor stays Recording meanwhile, its
// walks eager) and the transitions above happen when the result is installed, at the
// anchor's next walk. SingleOp, Blacklisted, SlowerThanEager and CompileFailed are final (until
// reset() or eviction drops the anchor): their walks run eagerly. A walk's mode follows the state
// (walk.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "tracer/break_reason.h"
#include "tracer/user_site.h"

namespace kiln::tracer {

struct Anchor;
struct TraceNode;
struct TraceTree;
struct TraceStatistics;
struct Walk;

enum class TraceState : uint8_t {
  Recording,
  Compiled,
  SingleOp,
  Blacklisted,
  SlowerThanEager,
  CompileFailed
};
const char* trace_state_name(TraceState state);  // "recording"

class TraceLifecycle {
 public:
  TraceLifecycle(int warmup, UserSite site) : warmup_(warmup), site_(std::move(site)) {}

  TraceState state() const { return state_; }
  const UserSite& site() const { return site_; }
  // C++ sites are often unknown when a trace starts: name it by where it ends.
  void name_by_end(const UserSite& end);

  // Hotness: a path compiles once traces ended at its end this many times (the warmup).
  // Backoff belongs to loop heads (HeadPenalty below), not here: a variant that compiles
  // is a penalty already, and KILN_RECOMPILE_LIMIT bounds them.
  int hot_threshold() const { return warmup_; }
  bool is_hot(int64_t endings) const { return endings >= hot_threshold(); }

  int compiles() const { return compiles_; }  // variants installed so far
  int penalties() const { return penalties_; }
  int first_trace_id() const { return first_trace_id_; }
  // The reason of the last penalty (kept for the report after blacklisting).
  const std::optional<BreakCause>& last_penalty() const { return last_penalty_; }
  // Why the anchor runs eagerly when a measurement put it there (SlowerThanEager).
  const std::optional<BreakCause>& eager_cause() const { return eager_cause_; }
  // Whether walks under the anchor run eagerly for good (until reset() or eviction).
  bool stays_eager() const {
    return state_ == TraceState::Blacklisted || state_ == TraceState::SlowerThanEager ||
           state_ == TraceState::CompileFailed;
  }

  // Transitions (each checks that it is legal from the current state).
  void on_compile(int trace_id);
  bool on_single_op();  // true when this call moved the state to SingleOp
  // A variant compiled again: one penalty. False when it was one too many: Blacklisted,
  // and the variant must not be installed.
  bool on_recompile(const BreakCause& cause, int limit);
  void on_evicted();
  // A compiled variant measured slower than eager (cause: a SlowerThanEager reason).
  void on_slower_than_eager(const BreakCause& cause);
  // The first compile threw (cause: a CompileFailed reason).
  void on_compile_failed(const BreakCause& cause);

 private:
  void transition(TraceState from_a, TraceState from_b, TraceState to);

  TraceState state_ = TraceState::Recording;
  int warmup_ = 2;
  int compiles_ = 0;
  int penalties_ = 0;
  int first_trace_id_ = 0;
  std::optional<BreakCause> last_penalty_;
  std::optional<BreakCause> eager_cause_;
  UserSite site_;
};

// Loop-head penalties (LuaJIT's penalty_pc, with backoff). A walk that comes round to an
// op it passed mid-walk (LoopClose::AtHead, walk.h) ends there and the next walk is
// anchored at that head: right for a loop entered from code before it, wrong for an op
// repeated inside a larger step (a layer called six times in a step that a host read
// ends). When a walk anchored at such a head ends at a host read, the head was false: it
// is suspended (closes no loop as a head, so the step's walk runs through it to the
// read) for the next `penalty` walks, and each new penalty doubles that. A walk that runs
// through a suspended head and reaches the maximum trace length instead of a host read
// proves it a loop's head (lift()): a loop that read the host once and then runs on
// without reads (else its walks, each 8192 ops, recorded eagerly for 16 x 8192 ops before
// the suspension ran out). A proven head is not suspended by later host reads (a loop
// synced now and then: else one 8192-op walk recorded after every read).
class HeadPenalty {
 public:
  static constexpr uint64_t kFirst = 16;  // walks
  static constexpr uint64_t kMost = 1 << 14;

  bool suspended(uint64_t now) const { return now < suspended_until_; }
  void penalize(uint64_t now) {
    penalty_ = penalty_ == 0 ? kFirst : std::min(penalty_ * 2, kMost);
    suspended_until_ = now + penalty_;
    ++count_;
  }
  bool proven() const { return proven_; }  // lift() ran: host reads penalize it no more
  void lift() {
    suspended_until_ = 0;
    proven_ = true;
  }
  int count() const { return count_; }
  uint64_t penalty() const { return penalty_; }

 private:
  uint64_t penalty_ = 0;
  uint64_t suspended_until_ = 0;
  int count_ = 0;
  bool proven_ = false;  // lift(): walks through it reached the length limit
};

// Anchors whose walks never repeat (LuaJIT blacklists a trace start that keeps aborting;
// here with backoff, as for heads): kFreshWalks walks in a row at an anchor with nothing
// compiled or compiling, each ending on a path no walk had ended on before and none of
// them hot (a slice whose bounds move every step, a scalar that changes), suspend its
// recording: its walks run eagerly, recording nothing, for the next `penalty` walks (16,
// doubling up to HeadPenalty::kMost), then it records again. Recording such a stream cost
// 7x its eager time (bench/dynamic_shapes.py, kv) and compiled nothing.
class FreshPathPenalty {
 public:
  static constexpr int kFreshWalks = 8;

  bool suspended(uint64_t now) const { return backoff_.suspended(now); }
  // A walk ended on a path that has now ended `endings` times; hot: it compiles (or a
  // peer of it does). True when this ending suspended the anchor.
  bool on_ending(int64_t endings, bool hot, uint64_t now) {
    streak_ = endings == 1 && !hot ? streak_ + 1 : 0;
    if (streak_ < kFreshWalks) return false;
    streak_ = 0;
    backoff_.penalize(now);
    return true;
  }
  uint64_t penalty() const { return backoff_.penalty(); }

 private:
  int streak_ = 0;
  HeadPenalty backoff_;
};

// A walk ended by a loop closing at a guessed head (LoopClose::AtHead found by place: the
// same op at the same site on other externals, not the very same inputs), or a round of
// a loop anchored at one while the loop's rounds so far would fit in one trace (at most
// KILN_MAX_TRACE ops), is provisional: the head may be a layer called several times in a
// step (an autocast cast of each layer's weight), found false at the step's host read.
// Its path is hot only after kProvisionalEndings endings, not the warmup's 2, and a head
// found false forgets the endings of its anchor's paths (forget_endings): a false head's
// per-layer traces never compile (before: a bf16 GPT step on the H200 compiled 17 traces,
// 12 recompiles), while a real loop compiles once its rounds outgrow one trace.
constexpr int64_t kProvisionalEndings = 16;
// The endings counted on the anchor's paths not compiled (nor compiling) go back to 0.
void forget_endings(Anchor& anchor);

// The compile policy, at the end of a walk that recorded or materialized up to `node`
// (not at a compiled trace): counts the ending and, once the path is hot, compiles it
// (or leaves the anchor eager), logging and noting the event in `statistics`. In
// background mode the compile is submitted (Anchor::pending) and this returns at once.
// provisional: the walk ended as above.
void on_trace_ended(TraceTree& tree, Anchor& anchor, TraceNode& node, const Walk& walk,
                    TraceStatistics& statistics, const UserSite& end_site, bool provisional);

// Installs the anchor's background compile if it is done (wait: waits for it first);
// true when one was installed or reported as failed. Called when a walk begins at the
// anchor, and by wait_for_compiles().
bool take_finished_compile(TraceTree& tree, Anchor& anchor, TraceStatistics& statistics, bool wait);

// Where an installed trace's compile ran: on the user's thread, on the compile thread, or
// on the user's thread for a trace loaded from the warm-start store (warm_start.h: not
// saved again).
enum class CompileOrigin : uint8_t { OnThread, Background, Stored };

// Installs a stored trace's compile result at `node` (the end of its path, just put
// under the anchor) as a compile (the anchor's first) or a recompile (a further variant),
// as if its path had got hot; a failed compile is reported as any other.
struct CompileResult;
struct TraceProgram;
void install_stored_trace(TraceTree& tree, Anchor& anchor, TraceNode& node, TraceProgram program,
                          CompileResult result, TraceStatistics& statistics);

}  // namespace kiln::tracer
