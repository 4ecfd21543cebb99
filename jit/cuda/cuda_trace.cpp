// A compiled CUDA trace at replay (see cuda_trace.h): its steps' tensors and argument
// words for this run, then its segments launched as CUDA Graphs (jit/cuda/
// cuda_graph_plan.h), patched between replays. Library calls (cuBLAS, eager kernels) run
// inside the graphs too; a value a library call computes for the user is written to a
// plan-owned buffer and copied out by a memcpy node, so the call's pointers stay put
// across replays; a library input that moves between replays is read from a staging
// buffer. A graph is given up (noted) when the stream cannot be captured or library
// arguments change on every replay. A trace cut into segments (segments.h) can be
// launched segment by segment while the walk goes on (CudaPartialRun, tracer::PartialRun).
#include "jit/cuda/cuda_trace.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "jit/cuda/cuda_graph_plan.h"
#include "jit/cuda/library_inputs.h"
#include "jit/cuda/segments.h"
#include "jit/cuda/step_profile.h"
#include "jit/fused_trace.h"
#include "ops/dispatch.h"
#include "ops/kernels.h"
#include "runtime/cuda_context.h"
#include "tracer/config.h"

namespace kiln::jit::cuda_backend {
namespace {

using tracer::InputRef;
using tracer::TraceOp;
using tracer::TraceProgram;

class FusedCudaTrace final : public FusedTrace {
 public:
  FusedCudaTrace(TraceProgram program, FusionPlan plan, MemoryPlan memory,
                 std::vector<std::unique_ptr<CudaKernel>> kernels, std::vector<CudaCombo> combos,
                 std::map<int, FoldedMatmul> folds, std::map<int, std::unique_ptr<LtMatmul>> gemms,
                 Device device, std::string compile_note)
      : FusedTrace(std::move(program), std::move(plan), std::move(memory)),
        kernels_(std::move(kernels)),
        combos_(std::move(combos)),
        compile_note_(std::move(compile_note)),
        folds_(std::move(folds)),
        gemms_(std::move(gemms)),
        device_(device),
        library_inputs_(device, static_cast<int>(plan_.steps.size())) {
    if (const char* g = std::getenv("KILN_CUDA_GRAPHS"); g && std::string(g) == "0")
      graph_off_ = "KILN_CUDA_GRAPHS=0";
    if (step_profile::enabled()) graph_off_ = "KILN_CUDA_STEP_PROFILE=1";
    for (const Step& step : plan_.steps)
      host_ops_ += step.kind == Step::Kind::Library && program_.ops[step.op].meta.device != device_;
    plan_segments();
    if (step_profile::segments_enabled())
      timeline_ = std::make_unique<step_profile::SegmentTimeline>(
          device_.index, segments_.size(),
          "trace of " + std::to_string(program_.ops.size()) + " ops");
    combo_of_.assign(plan_.steps.size(), -1);
    launched_after_.resize(plan_.steps.size());
    for (size_t c = 0; c < combos_.size(); ++c) {
      for (size_t s : combos_[c].parts) combo_of_[s] = static_cast<int>(c);
      launched_after_[combos_[c].after].push_back(c);
      if (combos_[c].parts.size() > 1) ++combo_count_;
    }
  }

  void run(const std::vector<Tensor>& externals, const std::vector<Scalar>& scalars,
           std::vector<Tensor>& values, const std::vector<bool>& wanted) const override {
    if (must_interpret(wanted)) {
      tracer::interpret(program_, program_.ops.size(), externals, scalars, values);
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    // The graph's kernels (context-less cudaKernel_t handles) resolve in the current
    // context: launches, captures and node updates must happen with this trace's device
    // current (on cuda:1 with cuda:0 current, a kernel-node update failed with
    // cudaErrorInvalidValue).
    cuda_context::DeviceScope device_scope(device_.index);
    RunState st(program_.ops.size(), plan_.steps.size());
    for (size_t k = 0; k < segments_.size(); ++k) launch_segment(st, k, externals, scalars);
    finish_run(st, externals, scalars, values, wanted);
  }

  std::unique_ptr<tracer::PartialRun> start_partial() const override;

  struct CallSignature {
    std::vector<const void*> pointers;  // inputs, then the output
    std::vector<bool> contiguous;
    std::vector<double> scalars;
    // The staging copies issued before the call: a staging buffer made since the graph was
    // recorded can land at the address the moved input had then (the allocator reuses the
    // block), and its copy node is not in the graph yet: that must re-record, not patch.
    std::vector<int> staged;
    bool operator==(const CallSignature& o) const {
      return pointers == o.pointers && scalars == o.scalars && staged == o.staged;
    }
  };

  // One run's tensors and launch words, filled segment by segment: run() does every
  // segment at once; a partial run (tracer/backend.h) each once the walk has passed it.
  struct RunState {
    RunState(size_t ops, size_t steps)
        : v(ops), user(ops), calls(steps), args(steps), signature(steps) {}
    std::vector<Tensor> v;
    std::vector<Tensor> user;  // escaping library values: the copy the user gets
    std::vector<OpCall> calls;
    std::vector<std::vector<int64_t>> args;
    // What the library calls see, per step: input and output pointers, scalars.
    std::vector<CallSignature> signature;
    size_t segments_done = 0;
  };

  // A trace's steps are launched in segments, each with its own CUDA graph; a segment
  // ends where no step before it uses an op after it, so the walk can launch it once it
  // has passed the segment's last op (ops_end). Short traces are one segment.
  struct Segment {
    explicit Segment(int device) : graph(device) {}
    size_t first_step = 0, end_step = 0;
    size_t ops_end = 0;  // the walk depth after which the segment's inputs are all known
    CudaGraphPlan graph;
    std::vector<CallSignature> signature;
    std::string off;  // why this segment's graph is not used ("" while it is)
    int recaptures_in_a_row = 0;
  };

  void launch_segment(RunState& st, size_t k, const std::vector<Tensor>& externals,
                      const std::vector<Scalar>& scalars) const {
    Segment& seg = *segments_[k];
    std::vector<Tensor>& v = st.v;
    std::vector<Tensor>& user = st.user;
    std::vector<OpCall>& calls = st.calls;
    std::vector<std::vector<int64_t>>& args = st.args;
    // Per library step, the copies into its moving inputs' staging buffers (see
    // stage_moving_inputs), issued just before the call.
    std::map<int, std::vector<StageCopy>> stage_copies;
    // Steps run on the host before the launch, in step order: host-side ops (a batch built
    // on the CPU) and the copies of host tensors in.
    std::vector<int> uploads;
    // 1. Tensors, calls and argument words for this segment; nothing is launched yet.
    for (size_t s = seg.first_step; s < seg.end_step; ++s) {
      const Step& step = plan_.steps[s];
      if (step.kind == Step::Kind::View) {
        run_eager_step(step, externals, scalars, v, Tensor());
      } else if (step.kind == Step::Kind::Library) {
        const int i = step.op;
        if (program_.ops[i].meta.device != device_) {
          // A host-side op: it reads host values only (accepts()), so it runs before the
          // graph, into a fresh tensor (the memory plan leaves it off the arena).
          calls[s] = call_for(i, externals, scalars, v);
          v[i] = output_for(i, externals, v);
          uploads.push_back(static_cast<int>(s));
          continue;
        }
        if (auto f = folds_.find(static_cast<int>(s)); f != folds_.end()) {
          // a @ b + bias (+ act): the GEMM's operands stand in the call's inputs.
          const TraceOp& mm = program_.ops[f->second.matmul];
          calls[s].inputs = {resolve(mm.inputs[0], externals, v),
                             resolve(mm.inputs[1], externals, v),
                             resolve(f->second.bias, externals, v)};
        } else {
          calls[s] = call_for(i, externals, scalars, v);
        }
        if (is_upload(calls[s], i)) {
          // A host tensor copied to the device (a batch's .to(device)): it runs before the
          // graph, outside it (a copy from pageable host memory cannot be captured), into
          // a buffer of its own that the graph reads at a fixed address.
          Tensor& buffer = uploads_[i];
          const OutputMeta& m = program_.ops[i].meta;
          if (!buffer.defined()) buffer = Tensor::make(m.sizes, m.dtype, m.device);
          v[i] = buffer;
          if (plan_.escapes[i]) user[i] = output_for(i, externals, v);
          uploads.push_back(static_cast<int>(s));
          continue;
        }
        v[i] = library_output(i, externals, v);
        if (plan_.escapes[i] && !program_.ops[i].in_place) user[i] = output_for(i, externals, v);
        library_inputs_.stage_moving_inputs(static_cast<int>(s), calls[s], v[i], stage_copies);
        CallSignature& sig = st.signature[s];
        for (const Tensor& t : calls[s].inputs) {
          sig.pointers.push_back(t.defined() ? t.data_ptr() : nullptr);
          sig.contiguous.push_back(!t.defined() || t.is_contiguous());
        }
        sig.pointers.push_back(v[i].data_ptr());
        sig.contiguous.push_back(true);
        // A random state is no argument of the captured call: its kernel reads it from a
        // slot (random_slot), or it only carries it (attention_output).
        const int r = random_state_scalars(calls[s]);
        for (size_t q = 0; q < calls[s].scalars.size(); ++q)
          sig.scalars.push_back(r >= 0 && (q == size_t(r) || q == size_t(r) + 1)
                                    ? 0.0
                                    : calls[s].scalars[q].to_double());
        if (auto c = stage_copies.find(static_cast<int>(s)); c != stage_copies.end())
          for (const StageCopy& sc : c->second) sig.staged.push_back(sc.id);
      } else {
        const CudaKernel& k = *kernels_[s];
        for (int i : step.group.ops)
          if (plan_.stored[i]) v[i] = output_for(i, externals, v);
        if (k.lowered.work == 0) continue;
        std::vector<int64_t>& a = args[s];
        a.assign(static_cast<size_t>(k.layout.words()), 0);
        for (size_t o = 0; o < k.lowered.operands.size(); ++o)
          a[o] = k.lowered.kernel.operands[o].index_only
                     ? 0
                     : reinterpret_cast<int64_t>(
                           resolve(k.lowered.operands[o].source, externals, v).data_ptr());
        for (int d = 0; d < k.layout.rank; ++d)
          a[static_cast<size_t>(k.layout.shape_at() + d)] = k.lowered.shape[d];
        for (size_t o = 0; o < k.lowered.operands.size(); ++o)
          for (int d = 0; d < k.layout.rank; ++d)
            a[static_cast<size_t>(k.layout.strides_at()) + o * k.layout.rank + d] =
                k.lowered.operands[o].strides[d];
        scalar_payloads(k.lowered.scalar_slots, k.lowered.kernel.scalar_is_float, scalars,
                        a.data() + k.layout.scalars_at());
        a[static_cast<size_t>(k.layout.work_at())] = k.lowered.work;
      }
    }
    // 2. Launch: patch and replay the segment's graph, record it (again), or launch
    // directly. Every step in order; while patching a recorded graph (library calls are in
    // it already, with the same arguments) only the kernel and copy nodes are revisited.
    // An escaping library value is copied out in the segment of the last step that writes
    // into it in place (`empty(...).fill_(x)`, `cat(...).mul_(2)`), or its own.
    std::unique_ptr<step_profile::Run> timing;
    if (step_profile::enabled()) timing = std::make_unique<step_profile::Run>(device_.index);
    auto launch_steps = [&](bool patching) {
      for (size_t s = seg.first_step; s < seg.end_step; ++s) {
        const Step& step = plan_.steps[s];
        if (step.kind == Step::Kind::Library &&
            std::find(uploads.begin(), uploads.end(), static_cast<int>(s)) != uploads.end()) {
          // ran before the launch
        } else if (step.kind == Step::Kind::Library) {
          if (timing) timing->begin();
          if (auto c = stage_copies.find(static_cast<int>(s)); c != stage_copies.end())
            for (const StageCopy& sc : c->second) seg.graph.copy(sc.id, sc.dst, sc.src, sc.bytes);
          const RandomSlot* rs = library_inputs_.random_slot(static_cast<int>(s), calls[s]);
          if (rs) {
            const int r = random_state_scalars(calls[s]);
            seg.graph.kernel(rs->id, write_random_state_kernel(), 1, 1, 1,
                             {reinterpret_cast<int64_t>(rs->slot.data_ptr()),
                              calls[s].scalars[static_cast<size_t>(r)].to_int(),
                              calls[s].scalars[static_cast<size_t>(r) + 1].to_int()});
          }
          if (!patching) {
            RandomStateSlot scope(rs ? static_cast<const uint64_t*>(rs->slot.data_ptr()) : nullptr);
            run_library_step(static_cast<int>(s), calls[s], v[step.op]);
          }
          if (timing) timing->end(step_label(s));
        } else if (step.kind == Step::Kind::Kernel && combo_of_[s] < 0 && !args[s].empty()) {
          const CudaKernel& k = *kernels_[s];
          if (timing) timing->begin();
          seg.graph.kernel(static_cast<int>(s), k.fn, k.grid, k.block, k.block_y, args[s]);
          if (timing) timing->end(step_label(s));
        }
        for (size_t q : launched_after_[s]) launch_delayed(seg, combos_[q], args, timing.get());
      }
      for (size_t s : copy_outs_[k]) {
        const int i = plan_.steps[s].op;
        if (user[i].defined() && v[i].numel() > 0)
          seg.graph.copy(static_cast<int>(s), user[i].data_ptr(), v[i].data_ptr(),
                         static_cast<size_t>(v[i].numel()) * itemsize(v[i].dtype()));
      }
    };
    auto launch_all = [&] { launch_steps(false); };
    if (timeline_) timeline_->before(k);
    for (int s : uploads) run_library_step(s, calls[s], v[plan_.steps[s].op]);
    const std::vector<CallSignature> signature(st.signature.begin() + seg.first_step,
                                               st.signature.begin() + seg.end_step);
    if (!graph_off_.empty() || !seg.off.empty()) {
      launch_all();
    } else if (seg.graph.recorded() && signature == seg.signature) {
      seg.graph.begin_patch();
      launch_steps(true);
      seg.graph.launch();
      seg.recaptures_in_a_row = 0;
    } else {
      std::string why;
      if (seg.graph.recorded() && ++seg.recaptures_in_a_row > 3) {
        seg.off = "the library calls' arguments changed on 4 replays in a row (last: " +
                  what_changed(seg, signature) + ")";
        launch_all();
      } else if (seg.graph.record_and_launch(launch_all, &why)) {
        seg.signature = signature;
      } else {
        seg.off = "the stream could not be captured (" + why + ")";
        tracer::log_line(tracer::kLogPerf, "cuda graph given up: " + seg.off);
        launch_all();
      }
    }
    if (timeline_) timeline_->after(k);
    if (timing) timing->finish();
    st.segments_done = k + 1;
  }

  // After the last segment: the user gets the copies of escaping library values, and views
  // of them must view the copies too, not the staging buffers the next replay overwrites.
  void finish_run(RunState& st, const std::vector<Tensor>& externals,
                  const std::vector<Scalar>& scalars, std::vector<Tensor>& values,
                  const std::vector<bool>& wanted) const {
    std::vector<Tensor>& v = st.v;
    bool replaced = false;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!st.user[i].defined()) continue;
      v[i] = st.user[i];
      replaced = true;
    }
    if (replaced) {
      for (const Step& step : plan_.steps)
        if (step.kind == Step::Kind::View) run_eager_step(step, externals, scalars, v, Tensor());
    }
    hand_out(values, v, wanted);
  }

  const char* backend_name() const override { return "nvrtc"; }
  std::vector<std::string> notes() const override {
    std::vector<std::string> out = FusedTrace::notes();
    if (!compile_note_.empty()) out.push_back("nvrtc: " + compile_note_);
    std::lock_guard<std::mutex> lock(mutex_);
    GraphStats g;
    std::string off = graph_off_;
    for (const auto& seg : segments_) {
      const GraphStats& x = seg->graph.stats();
      g.captures += x.captures;
      g.recaptures += x.recaptures;
      g.launches += x.launches;
      g.kernel_updates += x.kernel_updates;
      g.copy_updates += x.copy_updates;
      if (off.empty()) off = seg->off;
    }
    if (!off.empty()) out.push_back("cuda graph off: " + off + "; kernels launched one by one");
    if (segments_.size() > 1)
      out.push_back("cuda graph: " + std::to_string(segments_.size()) +
                    " segments, each launched once the walk has passed it (" +
                    std::to_string(partial_launches_) + " launched early)");
    if (partial_stops_ > 0)
      out.push_back(
          "cuda graph: launching segments early waited " + std::to_string(partial_stops_) +
          " time(s) for the user to let go of a value the plan fuses away (last: " + partial_stop_ +
          ")");
    if (combo_count_ > 0) {
      size_t parts = 0;
      for (const CudaCombo& c : combos_) parts += c.parts.size() > 1 ? c.parts.size() : 0;
      out.push_back(
          "cuda horizontal: " + std::to_string(parts) + " kernels launched as " +
          std::to_string(combo_count_) +
          " combo kernel(s) (KILN_CUDA_HORIZONTAL=0 turns this off); largest: " + largest_combo());
    }
    if (host_ops_ > 0)
      out.push_back("cuda graph: " + std::to_string(host_ops_) +
                    " host-side op(s) run on the CPU before each launch");
    if (!uploads_.empty())
      out.push_back("cuda graph: " + std::to_string(uploads_.size()) +
                    " host tensor(s) copied in before each launch, outside the graph");
    if (library_inputs_.staged() > 0)
      out.push_back("cuda graph: " + std::to_string(library_inputs_.staged()) +
                    " library input(s) moved between replays, copied into staging buffers");
    out.push_back("cuda graph: " + std::to_string(g.captures) + " capture(s), " +
                  std::to_string(g.recaptures) +
                  " re-capture(s) (library call arguments changed), " + std::to_string(g.launches) +
                  " launch(es), " + std::to_string(g.kernel_updates) + " kernel-node and " +
                  std::to_string(g.copy_updates) + " copy-node update(s)");
    return out;
  }

 private:
  friend class CudaPartialRun;

  bool kept(size_t i) const { return value_kept(plan_, i); }

  // Segments (segments.h), each with its own graph, and the copy-outs' segments.
  void plan_segments() {
    const SegmentPlan cut = cut_segments(program_, plan_);
    segments_.clear();
    for (const SegmentCut& c : cut.cuts) {
      auto seg = std::make_unique<Segment>(device_.index);
      seg->first_step = c.first_step;
      seg->end_step = c.end_step;
      seg->ops_end = c.ops_end;
      segments_.push_back(std::move(seg));
    }
    copy_outs_ = cut.copy_outs;
    copy_segment_ = cut.copy_segment;
  }

  // Kernels delayed by horizontal fusion (horizontal.h): one alone, or a combo kernel with
  // its parts' words at their places.
  void launch_delayed(Segment& seg, const CudaCombo& c,
                      const std::vector<std::vector<int64_t>>& args,
                      step_profile::Run* timing) const {
    const size_t last = c.parts.back();
    if (c.parts.size() == 1) {
      const CudaKernel& k = *kernels_[last];
      if (timing) timing->begin();
      seg.graph.kernel(static_cast<int>(last), k.fn, k.grid, k.block, k.block_y, args[last]);
      if (timing) timing->end(step_label(last));
      return;
    }
    std::vector<unsigned> grids;
    std::vector<const std::vector<int64_t>*> words;
    for (size_t p : c.parts) {
      grids.push_back(kernels_[p]->grid);
      words.push_back(&args[p]);
    }
    std::vector<int64_t> combo_words;
    combo_args(c.layout, grids, words, combo_words);
    if (timing) timing->begin();
    seg.graph.kernel(static_cast<int>(last), c.fn, c.grid, c.block, c.block_y, combo_words);
    if (timing) timing->end(c.label);
  }

  std::string largest_combo() const {
    const CudaCombo* best = &combos_[0];
    for (const CudaCombo& c : combos_)
      if (c.parts.size() > best->parts.size()) best = &c;
    return best->label;
  }

  std::string step_label(size_t s) const {
    return step_profile::label(program_, plan_, s, folds_.count(static_cast<int>(s)) > 0);
  }

  // The first library call whose arguments differ from the captured ones, for the note
  // that says why the graph was given up.
  std::string what_changed(const Segment& seg, const std::vector<CallSignature>& now) const {
    for (size_t q = 0; q < now.size() && q < seg.signature.size(); ++q) {
      const CallSignature &a = now[q], &b = seg.signature[q];
      if (a == b) continue;
      const std::string op = program_.ops[plan_.steps[seg.first_step + q].op].str();
      for (size_t j = 0; j < a.pointers.size() && j < b.pointers.size(); ++j) {
        if (a.pointers[j] == b.pointers[j]) continue;
        const bool out = j + 1 == a.pointers.size();
        return op + ": " + (out ? std::string("its output") : "input " + std::to_string(j)) +
               " at a new address" + (a.contiguous[j] ? "" : " (a strided view, not staged)");
      }
      for (size_t j = 0; j < a.scalars.size() && j < b.scalars.size(); ++j)
        if (a.scalars[j] != b.scalars[j]) return op + ": scalar " + std::to_string(j) + " changed";
      if (a.staged != b.staged) return op + ": an input newly staged";
      return op + ": its arguments changed";
    }
    return "the calls changed";
  }

  // Where library op i writes: its in-place target, its arena slice, or (a value the
  // user receives) a buffer owned by this trace that a copy node hands out.
  Tensor library_output(int i, const std::vector<Tensor>& externals,
                        const std::vector<Tensor>& v) const {
    const TraceOp& op = program_.ops[i];
    if (op.in_place || !plan_.escapes[i]) return output_for(i, externals, v);
    Tensor& t = staging_[i];
    if (!t.defined()) t = Tensor::make(op.meta.sizes, op.meta.dtype, op.meta.device);
    return t;
  }

  // A host tensor copied to this trace's device, out of place.
  bool is_upload(const OpCall& call, int i) const {
    return call.op == OpId::ToDevice && !program_.ops[i].in_place && call.inputs.size() == 1 &&
           call.inputs[0].defined() && call.inputs[0].device().is_cpu();
  }

  void run_library_step(int s, const OpCall& call, const Tensor& out) const {
    if (auto g = gemms_.find(s); g != gemms_.end()) {
      for (const Tensor& t : call.inputs)
        if (!t.is_contiguous())  // the guards make this impossible
          throw std::logic_error("[cuda jit] a folded GEMM operand is not contiguous");
      g->second->run(call.inputs[0].data_ptr(), call.inputs[1].data_ptr(),
                     call.inputs[2].data_ptr(), out.data_ptr());
      return;
    }
    run_library_call(plan_.steps[s].op, call, out);
  }

  std::vector<std::unique_ptr<CudaKernel>> kernels_;  // per step (null: not a kernel)
  std::vector<CudaCombo> combos_;                     // kernels launched together
  std::vector<int> combo_of_;                         // per step: its delayed launch, or -1
  std::vector<std::vector<size_t>> launched_after_;   // per step: the delayed launches after it
  size_t combo_count_ = 0;                            // delayed launches of 2 parts or more
  std::string compile_note_;                          // how its kernels were compiled
  std::map<int, FoldedMatmul> folds_;                 // library steps that are a folded GEMM
  std::map<int, std::unique_ptr<LtMatmul>> gemms_;    // ... and their cuBLASLt plans
  Device device_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Segment>> segments_;
  std::vector<std::vector<size_t>> copy_outs_;  // per segment: the steps copied out at its end
  std::vector<int> copy_segment_;               // per step: the segment of its copy-out, or -1
  std::string graph_off_;                       // why no graph is used ("" while they are)
  mutable int64_t partial_launches_ = 0;        // segments launched before the walk ended
  mutable int64_t partial_stops_ = 0;           // partial runs stopped by a held fused-away value
  mutable std::string partial_stop_;            // the last such value
  mutable std::map<int, Tensor> staging_;
  mutable std::map<int, Tensor> uploads_;  // by op: where a host tensor is copied in
  int host_ops_ = 0;                       // library steps that are host-side ops
  mutable LibraryInputs library_inputs_;   // staging buffers and random-state slots
  std::unique_ptr<step_profile::SegmentTimeline> timeline_;  // KILN_CUDA_STEP_PROFILE=segments
};

// A FusedCudaTrace's run launched segment by segment as the walk passes them
// (tracer::PartialRun). It holds the trace's lock from start to finish or abandon.
class CudaPartialRun final : public tracer::PartialRun {
 public:
  explicit CudaPartialRun(const FusedCudaTrace& trace)
      : t_(trace), lock_(trace.mutex_), st_(trace.program_.ops.size(), trace.plan_.steps.size()) {
    if (t_.timeline_) t_.timeline_->started();
  }

  size_t next_launch_at() const override {
    return stopped_ || st_.segments_done >= t_.segments_.size()
               ? SIZE_MAX
               : t_.segments_[st_.segments_done]->ops_end;
  }

  void launch_through(size_t depth, const std::vector<Tensor>& externals,
                      const std::vector<Scalar>& scalars,
                      const std::vector<std::weak_ptr<TensorImpl>>& outputs) override {
    cuda_context::DeviceScope device_scope(t_.device_.index);
    while (depth >= next_launch_at()) {
      const size_t k = st_.segments_done;
      const size_t begin = k == 0 ? 0 : t_.segments_[k - 1]->ops_end;
      const size_t end = t_.segments_[k]->ops_end;
      // A value held now that the plan does not keep (fused away) could not be handed out
      // if still held at the end: this segment waits until the user lets go of it (a
      // residual stream's x, held through the next sublayer), looked at again as the walk
      // goes on; at the end, finish() runs what is left. Kept values held now (autograd's
      // saved tensors, mostly dropped by the end) are copied out at finish() if still held
      // and not planned to be. Values found released stay released: the scan resumes.
      for (size_t i = std::max(begin, scan_from_); i < end && i < outputs.size(); ++i) {
        scan_from_ = i;
        if (!outputs[i].expired() && !t_.kept(i)) {
          if (waiting_on_ != i) {
            waiting_on_ = i;
            ++t_.partial_stops_;
            t_.partial_stop_ = "v" + std::to_string(i) + " " + t_.program_.ops[i].str();
          }
          return;
        }
      }
      if (t_.timeline_) t_.timeline_->at_depth(k, depth);
      t_.launch_segment(st_, k, externals, scalars);
      ++t_.partial_launches_;
    }
  }

  void finish(const std::vector<Tensor>& externals, const std::vector<Scalar>& scalars,
              std::vector<Tensor>& values, const std::vector<bool>& wanted) override {
    cuda_context::DeviceScope device_scope(t_.device_.index);
    const size_t done_ops = ops_done();
    std::vector<bool> rest(wanted);
    for (size_t i = 0; i < done_ops && i < rest.size(); ++i) rest[i] = false;
    if (t_.must_interpret(rest)) {
      const size_t start = abandon(externals, values);
      tracer::interpret_from(t_.program_, start, t_.program_.ops.size(), externals, scalars,
                             values);
      return;
    }
    for (size_t k = st_.segments_done; k < t_.segments_.size(); ++k)
      t_.launch_segment(st_, k, externals, scalars);
    t_.finish_run(st_, externals, scalars, values, wanted);
    // Values of the early segments held now that the plan did not plan to hand out (an
    // arena value, a view of one): the user gets a copy; the next replay reuses the arena.
    for (size_t i = 0; i < done_ops && i < values.size(); ++i)
      if (values[i].defined() && !t_.user_safe(i)) values[i] = values[i].clone();
  }

  size_t abandon(const std::vector<Tensor>& externals, std::vector<Tensor>& values) override {
    cuda_context::DeviceScope device_scope(t_.device_.index);
    const size_t n = t_.program_.ops.size();
    // Escaping library values of the launched segments whose copy-out belongs to a later
    // segment (an in-place write that never ran): copied now.
    for (size_t k = 0; k < st_.segments_done; ++k) {
      const auto& seg = *t_.segments_[k];
      for (size_t s = seg.first_step; s < seg.end_step; ++s) {
        if (t_.copy_segment_[s] < static_cast<int>(st_.segments_done)) continue;
        const int i = t_.plan_.steps[s].op;
        const Tensor &dst = st_.user[i], &src = st_.v[i];
        if (!dst.defined() || src.numel() == 0) continue;
        cuda_context::copy_device_to_device(
            dst.data_ptr(), t_.device_.index, src.data_ptr(), t_.device_.index,
            static_cast<size_t>(src.numel()) * itemsize(src.dtype()));
      }
    }
    std::vector<Tensor>& v = st_.v;
    for (size_t i = 0; i < n; ++i)
      if (st_.user[i].defined()) v[i] = st_.user[i];
    const size_t done_ops = ops_done();
    values.assign(n, Tensor());
    // Arena values are copied out: the ops run eagerly next may make views of them that
    // the user keeps, and the next replay reuses the arena.
    std::vector<Tensor> copies(n);
    for (size_t i = 0; i < done_ops; ++i) {
      const int c = t_.plan_.canonical[i];
      if (c < 0 || !v[static_cast<size_t>(c)].defined()) continue;
      const Tensor& x = v[static_cast<size_t>(c)];
      if (t_.memory_.offset[static_cast<size_t>(c)] >= 0 && !st_.user[c].defined() &&
          !t_.program_.ops[static_cast<size_t>(c)].in_place && x.is_contiguous()) {
        Tensor& copy = copies[static_cast<size_t>(c)];
        if (!copy.defined()) {
          copy = Tensor::make(x.sizes(), x.dtype(), x.device());
          cuda_context::copy_device_to_device(copy.data_ptr(), t_.device_.index, x.data_ptr(),
                                              t_.device_.index,
                                              static_cast<size_t>(x.numel()) * itemsize(x.dtype()));
        }
        values[i] = copy;
      } else {
        values[i] = x;
      }
    }
    // Views made in the launched segments look at the copies too.
    for (size_t i = 0; i < done_ops; ++i) {
      const TraceOp& op = t_.program_.ops[i];
      if (op_info(op.op).family != OpFamily::View || t_.plan_.canonical[i] != static_cast<int>(i))
        continue;
      OpCall call{op.op, {}, {}, op.attrs};
      for (const InputRef& r : op.inputs)
        call.inputs.push_back(r.kind == InputRef::Kind::External ? externals[r.index]
                                                                 : values[r.index]);
      values[i] = execute(call, infer_output(call));
    }
    st_.segments_done = t_.segments_.size();  // nothing more to launch
    stopped_ = true;
    return done_ops;
  }

 private:
  size_t ops_done() const {
    return st_.segments_done == 0 ? 0 : t_.segments_[st_.segments_done - 1]->ops_end;
  }

  const FusedCudaTrace& t_;
  std::lock_guard<std::mutex> lock_;
  FusedCudaTrace::RunState st_;
  bool stopped_ = false;
  size_t scan_from_ = 0;          // ops before it were found released (or kept)
  size_t waiting_on_ = SIZE_MAX;  // the held fused-away value the next launch waits for
};

std::unique_ptr<tracer::PartialRun> FusedCudaTrace::start_partial() const {
  if (segments_.size() < 2) return nullptr;
  return std::make_unique<CudaPartialRun>(*this);
}

}  // namespace

std::unique_ptr<tracer::Executable> make_cuda_trace(
    TraceProgram program, FusionPlan plan, MemoryPlan memory,
    std::vector<std::unique_ptr<CudaKernel>> kernels, std::vector<CudaCombo> combos,
    std::map<int, FoldedMatmul> folds, std::map<int, std::unique_ptr<LtMatmul>> gemms,
    Device device, std::string compile_note) {
  return std::make_unique<FusedCudaTrace>(std::move(program), std::move(plan), std::move(memory),
                                          std::move(kernels), std::move(combos), std::move(folds),
                                          std::move(gemms), device, std::move(compile_note));
}

}  // namespace kiln::jit::cuda_backend
