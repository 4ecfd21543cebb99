#include "jit/memory_plan.h"

#include <algorithm>
#include <limits>

namespace kiln::jit {

using tracer::InputRef;
using tracer::TraceOp;

std::string MemoryPlan::str() const {
  return "arena " + std::to_string(arena_bytes) + " bytes (" + std::to_string(naive_bytes) +
         " without reuse, " + std::to_string(live_bytes) + " alive at once at most)";
}

MemoryPlan plan_memory(const tracer::TraceProgram& p, const FusionPlan& plan) {
  const int n = static_cast<int>(p.ops.size());
  MemoryPlan mp;
  mp.offset.assign(n, -1);
  // The tensor a value's bytes belong to: views and in-place results share their base's.
  std::vector<int> root(n, -1);
  for (int i = 0; i < n; ++i) {
    if (plan.canonical[i] != i) continue;
    const TraceOp& op = p.ops[i];
    root[i] = i;
    const InputRef* base = nullptr;
    if (op.in_place)
      base = &op.target;
    else if (op_info(op.op).family == OpFamily::View)
      base = &op.inputs[0];
    if (base)
      root[i] = base->kind == InputRef::Kind::Value ? root[plan.canonical[base->index]] : -1;
  }
  // When step s really runs (plan.launch_at): what it reads or writes stays alive until then.
  auto launched = [&](int s) {
    return s >= 0 && static_cast<size_t>(s) < plan.launch_at.size() ? plan.launch_at[s] : s;
  };
  std::vector<int> last(n, -1);
  for (int i = 0; i < n; ++i) {
    if (plan.canonical[i] != i) continue;
    const TraceOp& op = p.ops[i];
    const int at = launched(plan.step_of[i]);
    auto read = [&](const InputRef& r) {
      if (r.kind != InputRef::Kind::Value) return;
      const int rt = root[plan.canonical[r.index]];
      if (rt >= 0) last[rt] = std::max(last[rt], at);
    };
    for (const InputRef& r : op.inputs) read(r);
    if (op.in_place) read(op.target);
    if (root[i] >= 0) last[root[i]] = std::max(last[root[i]], at);
  }
  // A value the user holds mid-walk (TraceProgram::held) in a trace launched in parts (CUDA)
  // may be handed out when the run ends: its bytes are never reused within the run.
  if (tracer::home_device(p).is_cuda()) {
    for (int i = 0; i < n && i < static_cast<int>(p.held.size()); ++i) {
      const int c = plan.canonical[i];
      if (p.held[i] && c >= 0 && root[c] >= 0) last[root[c]] = std::numeric_limits<int>::max();
    }
  }
  struct Block {
    int64_t offset, bytes;
    int last;
  };
  std::vector<Block> blocks;
  std::vector<int> defs;  // per block: the step that writes it
  std::vector<int> order;
  const Device home = tracer::home_device(p);  // host-side ops of a GPU trace: fresh tensors
  for (int i = 0; i < n; ++i) {
    if (plan.canonical[i] != i || !plan.stored[i] || plan.escapes[i] || root[i] != i ||
        p.ops[i].in_place || p.ops[i].meta.device != home)
      continue;
    // An op whose value escapes through a view keeps its own fresh tensor (escapes set).
    order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return plan.step_of[a] < plan.step_of[b]; });
  for (int i : order) {
    const TraceOp& op = p.ops[i];
    int64_t numel = 1;
    for (int64_t s : op.meta.sizes) numel *= s;
    const int64_t bytes = (numel * itemsize(op.meta.dtype) + 63) / 64 * 64;
    mp.naive_bytes += bytes;
    const int def = plan.step_of[i];
    // First fit among the bytes not used by a value still alive at `def`.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const Block& b : blocks)
      if (b.last >= def) busy.push_back({b.offset, b.offset + b.bytes});
    std::sort(busy.begin(), busy.end());
    int64_t at = 0;
    for (const auto& [lo, hi] : busy) {
      if (at + bytes <= lo) break;
      at = std::max(at, hi);
    }
    blocks.push_back(Block{at, bytes, std::max(last[i], def)});
    defs.push_back(def);
    mp.offset[i] = at;
    mp.arena_bytes = std::max(mp.arena_bytes, at + bytes);
  }
  std::vector<std::pair<int, int64_t>> events;  // (step, +bytes at its def / -bytes after last)
  for (size_t b = 0; b < blocks.size(); ++b) {
    events.push_back({defs[b], blocks[b].bytes});
    events.push_back({blocks[b].last + 1, -blocks[b].bytes});
  }
  std::sort(events.begin(), events.end());
  int64_t alive = 0;
  for (const auto& [step, bytes] : events) mp.live_bytes = std::max(mp.live_bytes, alive += bytes);
  return mp;
}

}  // namespace kiln::jit
