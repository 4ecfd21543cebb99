// The trace tree: a trie of TraceOps under each anchor. An anchor groups the traces that
// start with the same op at the same place in the program (same op, attributes and
// wiring, whatever its inputs' shapes); below its root, a path is a trace with its guards,
// and traces that share a prefix share the walk. A node where traces have ended `warmup`
// times gets a CompiledTrace; a second compiled variant under an anchor is a recompile.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tracer/backend.h"
#include "tracer/user_site.h"

namespace kiln::tracer {

// An immutable compiled trace (the captured artifact), apart from the recorder's state.
struct CompiledTrace {
  int id = 0;
  int generation = 0;  // 0 for the first compile under an anchor, then 1, 2, ... (recompiles)
  TraceProgram program;
  std::unique_ptr<Executable> executable;
  std::vector<TensorGuard> guards;  // per external input
  UserSite site;                    // where the trace's first op was called
  std::string recompile_reason;     // the guard that failed, for generation > 0
  double compile_ms = 0;
  mutable int64_t replays = 0;
  mutable int64_t side_exits = 0;
};

// Per anchor: its lifecycle (compiled, recompiling, or left eager).
struct AnchorState {
  int warmup = 2;
  int compiles = 0;
  int first_trace_id = 0;
  int recompiles = 0;
  bool eager_only = false;  // blacklisted after too many recompiles
  bool single_op = false;   // its hot trace is one op: nothing to fuse, runs eagerly
  UserSite site;
};

struct TraceNode {
  TraceOp op;  // the op on the edge from the parent (unused at the root)
  TraceNode* parent = nullptr;
  int depth = 0;  // ops from the anchor to here, inclusive (0 at the root)
  std::vector<std::unique_ptr<TraceNode>> children;
  int64_t endings = 0;  // times a trace ended here
  int plans_below = 0;  // compiled traces at or under this node
  // The recorder's walk counter when a walk last passed here (the LRU clock). A walk
  // passes every node from its anchor down, so a node is never newer than its parent.
  uint64_t last_use = 0;
  std::shared_ptr<CompiledTrace> plan;

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
  TraceOp first;  // compared by wiring only
  AnchorState state;
  TraceNode root;  // its children are the first ops of the variants (with guards)
};

}  // namespace kiln::tracer
