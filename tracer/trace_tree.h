// The trace tree: a trie of TraceOps under each anchor. An anchor groups the traces that
// start with the same op at the same place in the program (same op, attributes and
// wiring, whatever its inputs' shapes); below its root, a path is a trace with its guards,
// and traces that share a prefix share the walk. A node where traces have ended often
// enough (lifecycle.h) holds a CompiledTrace; a second compiled variant under an anchor
// is a recompile. TraceTree is every anchor this thread keeps.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tracer/background_compile.h"
#include "tracer/compiled_trace.h"
#include "tracer/lifecycle.h"
#include "tracer/speed_check.h"

namespace kiln::tracer {

struct TraceNode {
  TraceOp op;  // the op on the edge from the parent (unused at the root)
  TraceNode* parent = nullptr;
  int depth = 0;  // ops from the anchor to here, inclusive (0 at the root)
  std::vector<std::unique_ptr<TraceNode>> children;
  int64_t endings = 0;     // times a trace ended here (its hotness)
  int compiled_below = 0;  // compiled traces at or under this node
  // The tree's walk counter when a walk last passed here (the LRU clock). A walk passes
  // every node from its anchor down, so a node is never newer than its parent.
  uint64_t last_use = 0;
  std::shared_ptr<const CompiledTrace> compiled;
  int64_t replays = 0;          // of `compiled`
  int64_t side_exits = 0;       // walks that left `compiled`'s path before its end
  SpeedTrial speed;             // `compiled` against eager over its first replays
  bool compile_failed = false;  // its compile threw: it is not compiled again
  // Put back from the warm-start store: op.site is not known yet (sites are per process);
  // the first walk that passes the node fills it in (warm_start.h).
  bool site_unknown = false;
  // A view recorded on one input, a value of its walk that had the metadata of its own
  // node (Walk::exact): where a replaying walk's input has that too, op.meta is what
  // inferring the view would give (Tracer::on_known_call). False when put back from the
  // warm-start store.
  bool view_of_exact = false;

  TraceNode* find_child(const TraceOp& op) const {
    for (const auto& c : children)
      if (c->op.matches(op)) return c.get();
    return nullptr;
  }
  TraceNode* add_child(const TraceOp& op) {
    auto node = std::make_unique<TraceNode>();
    node->op = op;
    node->parent = this;
    node->depth = depth + 1;
    children.push_back(std::move(node));
    return children.back().get();
  }
  // The ops from the anchor down to this node.
  std::vector<const TraceOp*> path() const {
    std::vector<const TraceOp*> ops(depth);
    const TraceNode* n = this;
    for (int i = depth - 1; i >= 0; --i, n = n->parent) ops[i] = &n->op;
    return ops;
  }
};

struct Anchor {
  TraceOp first;  // compared by wiring and site (same_place), not guards
  TraceLifecycle lifecycle;
  TraceNode root;  // its children are the first ops of the variants (with guards)
  // Set when a walk began here because the stream came round to this op mid-walk
  // (LoopClose::AtHead): the key of its HeadPenalty (lifecycle.h); 0 otherwise.
  uint64_t head_key = 0;
  // That head was found by place (Walk::closes_loop: the same op at the same site on
  // other externals), not by the very same inputs coming round: its rounds are
  // provisional (lifecycle.h, kProvisionalEndings).
  bool head_guessed = false;
  // A compile of one of its paths running in the background (background_compile.h), and
  // the node it is for; installed at the anchor's next walk once done. One at a time: a
  // path that gets hot meanwhile waits (its endings go on counting).
  std::shared_ptr<CompileJob> pending;
  TraceNode* pending_node = nullptr;
  // Its key in the warm-start store (persist.h: anchor_key, site_key_hash); "" when warm
  // starts are off or its site has no stable key (its traces are not saved).
  std::string stored_key;
  uint64_t stored_site = 0;
  // Walks ending on new paths again and again suspend its recording (lifecycle.h).
  FreshPathPenalty fresh_paths;
  // A variant with symbolic sizes was compiled here (symbolic_shapes.h): its walks keep
  // each replayed op's metadata (Walk::metas).
  bool symbolic = false;
  // Where its first op is in the user's function, whoever called it (current_function_
  // site; 0: unknown, or the anchor began at a loop head): a walk from the same place
  // reached through another caller takes this anchor (TraceTree::find_anchor_in_function).
  SiteId function_site = 0;
};

struct TraceTree {
  std::vector<std::unique_ptr<Anchor>> anchors;
  struct CompiledAt {
    Anchor* anchor;
    TraceNode* node;  // node->compiled is the trace
  };
  std::vector<CompiledAt> compiled;  // every compiled trace kept, in compile order
  int64_t nodes = 0;                 // nodes kept, anchors' roots included
  uint64_t tick = 0;                 // walks so far (the LRU clock)
  int next_trace_id = 1;

  // The anchor whose first op is first's op at first's site, or nullptr.
  Anchor* find_anchor(const TraceOp& first) const {
    for (const auto& a : anchors)
      if (a->first.same_place(first)) return a.get();
    return nullptr;
  }
  // The anchor whose first op has first's wiring at function_site (its place in the
  // user's function, the caller left out), or nullptr.
  Anchor* find_anchor_in_function(const TraceOp& first, SiteId function_site) const {
    for (const auto& a : anchors)
      if (a->function_site == function_site && a->first.same_wiring(first)) return a.get();
    return nullptr;
  }
  Anchor* add_anchor(const TraceOp& first, TraceLifecycle lifecycle) {
    anchors.push_back(std::make_unique<Anchor>(
        Anchor{first, std::move(lifecycle), {}, 0, false, nullptr, nullptr, {}, 0, {}, false, 0}));
    ++nodes;
    return anchors.back().get();
  }
};

}  // namespace kiln::tracer
