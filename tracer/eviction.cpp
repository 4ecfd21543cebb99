#include "tracer/eviction.h"

#include <algorithm>
#include <functional>

#include "runtime/error.h"
#include "tracer/config.h"

namespace kiln::tracer {
namespace {

// The tick below which dropping everything leaves at most 7/8 of the cap (some room
// before the next eviction, so a scan is paid once per cap/8 new entries at most); 0 when
// the cap holds.
uint64_t evict_below(std::vector<uint64_t>& ticks, int64_t cap) {
  const int64_t n = static_cast<int64_t>(ticks.size());
  if (n <= cap) return 0;
  const auto k = static_cast<size_t>(n - (cap - cap / 8));
  std::nth_element(ticks.begin(), ticks.begin() + static_cast<std::ptrdiff_t>(k - 1), ticks.end());
  return ticks[k - 1] + 1;
}

}  // namespace

void evict_least_recent(TraceTree& tree, TraceStatistics& statistics) {
  const int64_t op_cap = std::max<int64_t>(config().trace_cache_ops, 1);
  const int64_t compiled_cap = std::max(config().max_traces, 1);
  if (tree.nodes <= op_cap && static_cast<int64_t>(tree.compiled.size()) <= compiled_cap) return;
  // The ticks of every node and of every node holding a compiled trace.
  std::vector<uint64_t> node_ticks, compiled_ticks;
  node_ticks.reserve(static_cast<size_t>(tree.nodes));
  std::vector<const TraceNode*> stack;
  for (const auto& a : tree.anchors) {
    stack.push_back(&a->root);
    while (!stack.empty()) {
      const TraceNode* n = stack.back();
      stack.pop_back();
      node_ticks.push_back(n->last_use);
      if (n->compiled) compiled_ticks.push_back(n->last_use);
      for (const auto& c : n->children) stack.push_back(c.get());
    }
  }
  const uint64_t threshold =
      std::min(std::max(evict_below(node_ticks, op_cap), evict_below(compiled_ticks, compiled_cap)),
               tree.tick);
  if (threshold == 0) return;

  // A node goes exactly when its last use is older than the threshold (a node is never
  // newer than its parent, so what stays is a tree again). The compiled list drops its
  // entries first, while the nodes still exist.
  const size_t compiled_before = tree.compiled.size();
  std::erase_if(tree.compiled,
                [&](const TraceTree::CompiledAt& c) { return c.node->last_use < threshold; });
  const size_t dropped_compiled = compiled_before - tree.compiled.size();
  int64_t dropped_nodes = 0;
  // Counts a subtree that goes; returns the compiled traces in it.
  auto drop = [&](const TraceNode& top) {
    int compiled = 0;
    stack.push_back(&top);
    while (!stack.empty()) {
      const TraceNode* n = stack.back();
      stack.pop_back();
      ++dropped_nodes;
      if (n->compiled) ++compiled;
      for (const auto& c : n->children) stack.push_back(c.get());
    }
    return compiled;
  };
  // Removes the children of n older than the threshold; returns the compiled traces
  // removed under n.
  std::function<int(TraceNode&)> prune = [&](TraceNode& n) {
    int compiled = 0;
    for (auto it = n.children.begin(); it != n.children.end();) {
      if ((*it)->last_use < threshold) {
        compiled += drop(**it);
        it = n.children.erase(it);
      } else {
        compiled += prune(**it);
        ++it;
      }
    }
    n.compiled_below -= compiled;
    return compiled;
  };
  std::erase_if(tree.anchors, [&](const std::unique_ptr<Anchor>& a) {
    // A background compile for a node that goes is dropped with it (skipped if queued).
    if (a->pending && (a->root.last_use < threshold || a->pending_node->last_use < threshold)) {
      a->pending->abandon();
      a->pending.reset();
      a->pending_node = nullptr;
    }
    if (a->root.last_use < threshold) {
      drop(a->root);
      return true;
    }
    if (prune(a->root) > 0 && a->root.compiled_below == 0 &&
        a->lifecycle.state() == TraceState::Compiled)
      a->lifecycle.on_evicted();
    return false;
  });
  tree.nodes -= dropped_nodes;
  statistics.evicted_ops += dropped_nodes;
  statistics.evicted_traces += static_cast<int64_t>(dropped_compiled);
  log_line(kLogTrace, detail::cat("evicted the least recently used traces: ", dropped_compiled,
                                  " compiled, ", dropped_nodes, " recorded op(s); keeping ",
                                  tree.compiled.size(), " compiled (KILN_MAX_TRACES=", compiled_cap,
                                  "), ", tree.nodes, " op(s) (KILN_TRACE_CACHE_OPS=", op_cap, ")"));
}

}  // namespace kiln::tracer
