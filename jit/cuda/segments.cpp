// Cutting a compiled CUDA trace into segments (see segments.h).
#include "jit/cuda/segments.h"

#include <algorithm>
#include <cstdint>

namespace kiln::jit::cuda_backend {

using tracer::InputRef;
using tracer::TraceOp;

bool value_kept(const FusionPlan& plan, size_t i) {
  const int c = plan.canonical[i];
  if (c < 0) return false;
  const int st = plan.step_of[c];
  // A library or view step's own value; not an op it absorbed (a folded matmul, the ops an
  // attention step replaced), whose value never exists.
  return plan.stored[c] ||
         (st >= 0 && plan.steps[st].kind != Step::Kind::Kernel && plan.steps[st].op == c);
}

SegmentPlan cut_segments(const tracer::TraceProgram& program, const FusionPlan& plan) {
  const size_t n = program.ops.size(), steps = plan.steps.size();
  // Each step's first and last op.
  std::vector<size_t> lo(steps, n), hi(steps, 0);
  for (size_t s = 0; s < steps; ++s) {
    const Step& step = plan.steps[s];
    if (step.kind == Step::Kind::Kernel) {
      for (int i : step.group.ops) {
        lo[s] = std::min(lo[s], static_cast<size_t>(i));
        hi[s] = std::max(hi[s], static_cast<size_t>(i));
      }
    } else {
      lo[s] = hi[s] = static_cast<size_t>(step.op);
    }
  }
  // blocked[b]: a cut before op b would leave an op >= b reading a value not kept.
  std::vector<size_t> last_reader(n, 0);
  for (size_t j = 0; j < n; ++j) {
    const TraceOp& op = program.ops[j];
    auto read = [&](const InputRef& r) {
      if (r.kind == InputRef::Kind::Value) last_reader[r.index] = std::max(last_reader[r.index], j);
    };
    for (const InputRef& r : op.inputs) read(r);
    if (op.in_place) read(op.target);
  }
  std::vector<int> blocked_delta(n + 2, 0);
  for (size_t i = 0; i < n; ++i)
    if (last_reader[i] > i && !value_kept(plan, i)) {  // cuts in (i, last_reader] blocked
      ++blocked_delta[i + 1];
      --blocked_delta[last_reader[i] + 1];
    }
  std::vector<uint8_t> blocked(n + 1, 0);
  for (size_t b = 0, run = 0; b <= n; ++b) {
    run += blocked_delta[b];
    blocked[b] = run > 0;
  }
  SegmentPlan out;
  size_t first = 0, seg_ops_start = 0, prefix_hi = 0;
  std::vector<size_t> suffix_lo(steps + 1, n);
  for (size_t s = steps; s-- > 0;) suffix_lo[s] = std::min(suffix_lo[s + 1], lo[s]);
  size_t min_ops = kFirstSegmentOps;
  for (size_t s = 0; s < steps; ++s) {
    prefix_hi = std::max(prefix_hi, hi[s]);
    const size_t cut = prefix_hi + 1;  // ops [seg_ops_start, cut) are in steps <= s
    if (s + 1 < steps && cut <= suffix_lo[s + 1] && !blocked[cut] &&
        cut - seg_ops_start >= min_ops && n - cut >= kSegmentOps) {
      out.cuts.push_back(SegmentCut{first, s + 1, cut});
      first = s + 1;
      seg_ops_start = cut;
      min_ops = std::min(kSegmentOps, 2 * min_ops);
    }
  }
  out.cuts.push_back(SegmentCut{first, steps, n});
  // Copy-outs.
  std::vector<size_t> segment_of_step(steps, 0);
  for (size_t k = 0; k < out.cuts.size(); ++k)
    for (size_t s = out.cuts[k].first_step; s < out.cuts[k].end_step; ++s) segment_of_step[s] = k;
  out.copy_outs.assign(out.cuts.size(), {});
  out.copy_segment.assign(steps, -1);
  for (size_t s = 0; s < steps; ++s) {
    const Step& step = plan.steps[s];
    if (step.kind != Step::Kind::Library) continue;
    const int i = step.op;
    if (!plan.escapes[i] || program.ops[i].in_place) continue;
    size_t last_write = s;
    for (size_t j = static_cast<size_t>(i) + 1; j < n; ++j) {
      const TraceOp& w = program.ops[j];
      if (!w.in_place || plan.canonical[j] != static_cast<int>(j)) continue;
      const InputRef root = in_place_root(program, w.target);
      if (root.kind == InputRef::Kind::Value && root.index == i && plan.step_of[j] >= 0)
        last_write = std::max(last_write, static_cast<size_t>(plan.step_of[j]));
    }
    const size_t k = segment_of_step[last_write];
    out.copy_outs[k].push_back(s);
    out.copy_segment[s] = static_cast<int>(k);
  }
  return out;
}

}  // namespace kiln::jit::cuda_backend
