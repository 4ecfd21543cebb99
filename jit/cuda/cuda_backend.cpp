// The CUDA trace backend: for the compile driver (jit/compile_driver.h), the epilogue
// pass (matmul + bias + activation as one cuBLASLt GEMM) and CUDA C for every fusion
// group, named by its content and compiled by NVRTC (kernels loaded already are
// reused, the rest compiled as a few programs in parallel; jit/cuda/nvrtc_compiler.h)
// -> FusedCudaTrace, replayed as one CUDA Graph (jit/cuda/cuda_graph_plan.h). Library
// calls (cuBLAS, eager kernels) run inside the graph too; a value a library call
// computes for the user is written to a plan-owned buffer and copied out by a memcpy
// node, so the call's pointers stay put across replays. A group that cannot be lowered
// or compiled runs eagerly (noted); a program not entirely on one CUDA device is
// declined. The graph is given up (noted) when the stream cannot be captured or library
// arguments change on every replay (random ops).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "jit/compile_driver.h"
#include "jit/cuda/cuda_codegen.h"
#include "jit/cuda/cuda_graph_plan.h"
#include "jit/cuda/matmul_epilogue.h"
#include "jit/cuda/nvrtc_compiler.h"
#include "jit/fused_trace.h"
#include "ops/dispatch.h"
#include "runtime/cuda_context.h"
#include "tracer/config.h"

namespace kiln::jit::cuda_backend {
namespace {

using tracer::InputRef;
using tracer::TraceOp;
using tracer::TraceProgram;

struct CudaKernel {
  LoweredKernel lowered;
  ArgsLayout layout;
  void* fn = nullptr;
  std::shared_ptr<const void> pin;  // keeps fn's library loaded (NvrtcCompiler's LRU)
  std::string name;                 // kernel_name() of its definition
  unsigned block = 256;
  unsigned block_y = 1;  // row kernels in warp mode: rows per block
  unsigned grid = 1;
};

// Block shape and grid for a kernel (see cuda_codegen.h): pointwise 256 threads, about
// 4 elements each per sweep; short rows one warp per row, 4 rows per block; longer rows
// one block of up to 256 threads per row, up to 8 elements per thread in registers.
void choose_launch(CudaKernel& k, int sms) {
  const LoweredKernel& l = k.lowered;
  int64_t units;
  if (l.kernel.kind == Kernel::Kind::Pointwise) {
    k.block = 256;
    units = (l.work + 1023) / 1024;
  } else if (l.cols <= warp_row_limit(l.kernel)) {
    k.block = 32;
    k.block_y = 4;
    units = (l.work + 3) / 4;
  } else {
    k.block = 32;
    while (k.block < 256 && static_cast<int64_t>(k.block) * 8 < l.cols) k.block *= 2;
    units = l.work;
  }
  k.grid = static_cast<unsigned>(std::clamp<int64_t>(units, 1, static_cast<int64_t>(sms) * 32));
}

class FusedCudaTrace final : public FusedTrace {
 public:
  FusedCudaTrace(TraceProgram program, FusionPlan plan, MemoryPlan memory,
                 std::vector<std::unique_ptr<CudaKernel>> kernels,
                 std::map<int, FoldedMatmul> folds, std::map<int, std::unique_ptr<LtMatmul>> gemms,
                 Device device, std::string compile_note)
      : FusedTrace(std::move(program), std::move(plan), std::move(memory)),
        kernels_(std::move(kernels)),
        compile_note_(std::move(compile_note)),
        folds_(std::move(folds)),
        gemms_(std::move(gemms)),
        device_(device),
        graph_(device.index) {
    if (const char* g = std::getenv("KILN_CUDA_GRAPHS"); g && std::string(g) == "0")
      graph_off_ = "KILN_CUDA_GRAPHS=0";
    for (const Step& step : plan_.steps)
      host_ops_ += step.kind == Step::Kind::Library && program_.ops[step.op].meta.device != device_;
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
    const size_t n = program_.ops.size();
    std::vector<Tensor> v(n);
    std::vector<Tensor> user(n);  // escaping library values: the copy the user gets
    // 1. Tensors, calls and argument words for this run; nothing is launched yet.
    std::vector<OpCall> calls(plan_.steps.size());
    std::vector<std::vector<int64_t>> args(plan_.steps.size());
    // What the library calls see, per step: input and output pointers, scalars.
    std::vector<CallSignature> signature(plan_.steps.size());
    // Per library step, the copies into its moving inputs' staging buffers (see
    // stage_moving_inputs), issued just before the call.
    std::map<int, std::vector<StageCopy>> stage_copies;
    // Steps run on the host before the launch, in step order: host-side ops (a batch built
    // on the CPU) and the copies of host tensors in.
    std::vector<int> uploads;
    for (size_t s = 0; s < plan_.steps.size(); ++s) {
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
        stage_moving_inputs(static_cast<int>(s), calls[s], v[i], stage_copies);
        CallSignature& sig = signature[s];
        for (const Tensor& t : calls[s].inputs) {
          sig.pointers.push_back(t.defined() ? t.data_ptr() : nullptr);
          sig.contiguous.push_back(!t.defined() || t.is_contiguous());
        }
        sig.pointers.push_back(v[i].data_ptr());
        sig.contiguous.push_back(true);
        for (const Scalar& x : calls[s].scalars) sig.scalars.push_back(x.to_double());
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
    // 2. Launch: patch and replay the graph, record it (again), or launch directly.
    // Every step in order; while patching a recorded graph (library calls are in it
    // already, with the same arguments) only the kernel and copy nodes are revisited.
    // The escaping library values are copied out last: a later step may still write
    // into one in place (`empty(...).fill_(x)`, `cat(...).mul_(2)`).
    auto launch_steps = [&](bool patching) {
      for (size_t s = 0; s < plan_.steps.size(); ++s) {
        const Step& step = plan_.steps[s];
        if (step.kind == Step::Kind::Library) {
          if (std::find(uploads.begin(), uploads.end(), static_cast<int>(s)) != uploads.end())
            continue;  // ran before the launch
          if (auto c = stage_copies.find(static_cast<int>(s)); c != stage_copies.end())
            for (const StageCopy& sc : c->second) graph_.copy(sc.id, sc.dst, sc.src, sc.bytes);
          if (!patching) run_library_step(static_cast<int>(s), calls[s], v[step.op]);
        } else if (step.kind == Step::Kind::Kernel && !args[s].empty()) {
          const CudaKernel& k = *kernels_[s];
          graph_.kernel(static_cast<int>(s), k.fn, k.grid, k.block, k.block_y, args[s]);
        }
      }
      for (size_t s = 0; s < plan_.steps.size(); ++s) {
        const Step& step = plan_.steps[s];
        const int i = step.op;
        if (step.kind == Step::Kind::Library && user[i].defined() && v[i].numel() > 0)
          graph_.copy(static_cast<int>(s), user[i].data_ptr(), v[i].data_ptr(),
                      static_cast<size_t>(v[i].numel()) * itemsize(v[i].dtype()));
      }
    };
    auto launch_all = [&] { launch_steps(false); };
    for (int s : uploads) run_library_step(s, calls[s], v[plan_.steps[s].op]);
    if (!graph_off_.empty()) {
      launch_all();
    } else if (graph_.recorded() && signature == signature_) {
      graph_.begin_patch();
      launch_steps(true);
      graph_.launch();
      recaptures_in_a_row_ = 0;
    } else {
      std::string why;
      if (graph_.recorded() && ++recaptures_in_a_row_ > 3) {
        graph_off_ = "the library calls' arguments changed on 4 replays in a row (last: " +
                     what_changed(signature) + ")";
        launch_all();
      } else if (graph_.record_and_launch(launch_all, &why)) {
        signature_ = signature;
      } else {
        graph_off_ = "the stream could not be captured (" + why + ")";
        tracer::log_line(tracer::kLogPerf, "cuda graph given up: " + graph_off_);
        launch_all();
      }
    }
    // The user gets the copies of escaping library values, and views of them must view
    // the copies too, not the staging buffers the next replay overwrites.
    bool replaced = false;
    for (size_t i = 0; i < n; ++i) {
      if (!user[i].defined()) continue;
      v[i] = user[i];
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
    const GraphStats& g = graph_.stats();
    if (!graph_off_.empty())
      out.push_back("cuda graph off: " + graph_off_ + "; kernels launched one by one");
    if (host_ops_ > 0)
      out.push_back("cuda graph: " + std::to_string(host_ops_) +
                    " host-side op(s) run on the CPU before each launch");
    if (!uploads_.empty())
      out.push_back("cuda graph: " + std::to_string(uploads_.size()) +
                    " host tensor(s) copied in before each launch, outside the graph");
    if (!stages_.empty())
      out.push_back("cuda graph: " + std::to_string(stages_.size()) +
                    " library input(s) moved between replays, copied into staging buffers");
    out.push_back("cuda graph: " + std::to_string(g.captures) + " capture(s), " +
                  std::to_string(g.recaptures) +
                  " re-capture(s) (library call arguments changed), " + std::to_string(g.launches) +
                  " launch(es), " + std::to_string(g.kernel_updates) + " kernel-node and " +
                  std::to_string(g.copy_updates) + " copy-node update(s)");
    return out;
  }

 private:
  struct CallSignature {
    std::vector<const void*> pointers;  // inputs, then the output
    std::vector<bool> contiguous;
    std::vector<double> scalars;
    bool operator==(const CallSignature& o) const {
      return pointers == o.pointers && scalars == o.scalars;
    }
  };

  // The first library call whose arguments differ from the captured ones, for the note
  // that says why the graph was given up.
  std::string what_changed(const std::vector<CallSignature>& now) const {
    for (size_t s = 0; s < now.size() && s < signature_.size(); ++s) {
      const CallSignature &a = now[s], &b = signature_[s];
      if (a == b) continue;
      const std::string op = program_.ops[plan_.steps[s].op].str();
      for (size_t j = 0; j < a.pointers.size() && j < b.pointers.size(); ++j) {
        if (a.pointers[j] == b.pointers[j]) continue;
        const bool out = j + 1 == a.pointers.size();
        return op + ": " + (out ? std::string("its output") : "input " + std::to_string(j)) +
               " at a new address" + (a.contiguous[j] ? "" : " (a strided view, not staged)");
      }
      for (size_t j = 0; j < a.scalars.size() && j < b.scalars.size(); ++j)
        if (a.scalars[j] != b.scalars[j]) return op + ": scalar " + std::to_string(j) + " changed";
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

  // A library call's input that arrives at a new address on a later run (a new batch
  // tensor each step, a value the user receives fresh each run) would change what the
  // captured library call reads and force a re-capture on every replay. Once an input slot
  // has moved, the call reads it from a buffer owned by this trace instead, with the same
  // strides, and a copy node (patched per replay, no re-capture) fills the buffer with the
  // bytes the view spans just before the call. Inputs that never move (parameters, arena
  // values) are read in place, copied never; a view spanning over 4x its elements (a
  // column of a large tensor) is not staged.
  struct StageCopy {
    int id;
    void* dst;
    const void* src;
    size_t bytes;
  };
  // The elements a view spans in its storage, from its first element: numel for a dense
  // layout in any order (a transpose), more for a slice of a larger tensor; -1 when a
  // stride is negative.
  static int64_t span_of(const Tensor& t) {
    int64_t last = 0;
    for (size_t d = 0; d < t.sizes().size(); ++d) {
      if (t.strides()[d] < 0) return -1;
      last += (t.sizes()[d] - 1) * t.strides()[d];
    }
    return last + 1;
  }

  void stage_moving_inputs(int s, OpCall& call, const Tensor& result,
                           std::map<int, std::vector<StageCopy>>& out) const {
    for (size_t j = 0; j < call.inputs.size(); ++j) {
      Tensor& t = call.inputs[j];
      // Only this device's tensors are copied on its stream; an in-place call's target
      // (or a view of it) is read and written where it is.
      if (!t.defined() || t.numel() == 0 || t.device() != device_) continue;
      if (result.defined() && t.storage() == result.storage()) continue;
      const int64_t span = span_of(t);
      // A copy of the span must not cost much more than the view itself (q, k or v of a
      // fused qkv projection spans 3x its elements: staged; a column of a matrix: not).
      const bool stageable = span > 0 && span <= 4 * t.numel() + 64;
      const std::pair<int, int> slot{s, static_cast<int>(j)};
      auto st = stages_.find(slot);
      if (st == stages_.end()) {
        const void* before = last_input_[slot];
        last_input_[slot] = t.data_ptr();
        if (before == nullptr || before == t.data_ptr() || !stageable) continue;
        Stage fresh;
        fresh.id = static_cast<int>(plan_.steps.size() + stages_.size());
        fresh.storage =
            Storage::allocate(static_cast<size_t>(span) * itemsize(t.dtype()), t.device());
        fresh.buffer = Tensor::make_view(fresh.storage, t.sizes(), t.strides(), 0, t.dtype());
        st = stages_.emplace(slot, std::move(fresh)).first;
      }
      const Stage& stage = st->second;
      if (!stageable || t.sizes() != stage.buffer.sizes() ||
          t.strides() != stage.buffer.strides() || t.dtype() != stage.buffer.dtype())
        continue;  // the guards make this impossible; read it in place then
      out[s].push_back(StageCopy{stage.id, stage.buffer.data_ptr(), t.data_ptr(),
                                 static_cast<size_t>(span) * itemsize(t.dtype())});
      t = stage.buffer;
    }
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
    execute_into(call, program_.ops[plan_.steps[s].op].meta, out);
  }

  std::vector<std::unique_ptr<CudaKernel>> kernels_;  // per step (null: not a kernel)
  std::string compile_note_;                          // how its kernels were compiled
  std::map<int, FoldedMatmul> folds_;                 // library steps that are a folded GEMM
  std::map<int, std::unique_ptr<LtMatmul>> gemms_;    // ... and their cuBLASLt plans
  Device device_;
  mutable std::mutex mutex_;
  mutable CudaGraphPlan graph_;
  mutable std::vector<CallSignature> signature_;
  mutable std::string graph_off_;  // why the graph is not used ("" while it is)
  mutable int recaptures_in_a_row_ = 0;
  mutable std::map<int, Tensor> staging_;
  mutable std::map<int, Tensor> uploads_;  // by op: where a host tensor is copied in
  int host_ops_ = 0;                       // library steps that are host-side ops
  struct Stage {
    int id = 0;                        // its copy node's id (after the steps' ids)
    std::shared_ptr<Storage> storage;  // the moving input's span, copied before each call
    Tensor buffer;                     // the input's view of it, as the library call reads
  };
  mutable std::map<std::pair<int, int>, Stage> stages_;            // by (step, input)
  mutable std::map<std::pair<int, int>, const void*> last_input_;  // until a slot moves
};

// One attempt's CUDA code: the epilogue pass's GEMMs, then the CUDA C of every kernel
// group, each named by a hash of its definition (identical groups share one kernel),
// loaded or compiled by NvrtcCompiler in finish().
class CudaKernelBuild final : public KernelBuild {
 public:
  CudaKernelBuild(Device device, int sms) : device_(device), sms_(sms) {}

  void fold_epilogues(const TraceProgram& program, FusionPlan& plan) override {
    try {
      folds_ = fold_matmul_epilogues(program, plan);
      for (const auto& [s, f] : folds_)
        gemms_[s] = std::make_unique<LtMatmul>(device_.index, program.ops[f.matmul].meta.dtype, f.m,
                                               f.n, f.k, f.epilogue);
    } catch (const std::exception& e) {
      throw PassFailed(Pass::Epilogue, std::string("matmul epilogues left unfused: ") + e.what());
    }
  }

  void add(size_t s, const FusionGroup&, LoweredKernel lowered) override {
    auto k = std::make_unique<CudaKernel>();
    k->lowered = std::move(lowered);
    k->layout = args_layout(k->lowered.kernel);
    k->name = kernel_name(emit_cuda_kernel(k->lowered.kernel, "kiln_k"));
    if (source_of_.emplace(k->name, sources_.size()).second)
      sources_.push_back({k->name, emit_cuda_kernel(k->lowered.kernel, k->name)});
    kernel_steps_.push_back(s);
    choose_launch(*k, sms_);
    if (kernels_.size() <= s) kernels_.resize(s + 1);
    kernels_[s] = std::move(k);
  }

  void finish() override {
    if (kernel_steps_.empty()) return;
    const CudaKernels loaded =
        NvrtcCompiler::instance().get(cuda_prelude(), sources_, device_.index);
    for (size_t s : kernel_steps_) {
      CudaKernel& k = *kernels_[s];
      const size_t q = source_of_.at(k.name);
      k.fn = loaded.kernels[q];
      k.pin = loaded.pins[q];
    }
    note_ = loaded.summary(kernel_steps_.size());
  }

  void dump(const DebugDump& dump) const override {
    std::string text = cuda_prelude();
    for (const KernelSource& d : sources_) text += "\n" + d.body;
    dump.write("kernels.cu", text);
  }

  std::string compile_report() const override {
    return NvrtcCompiler::instance().version() +
           "\ncache: " + NvrtcCompiler::instance().cache_dir() + "\n" + note_ + "\n";
  }

  std::unique_ptr<tracer::Executable> instantiate(const TraceProgram& program, FusionPlan plan,
                                                  MemoryPlan memory) override {
    kernels_.resize(plan.steps.size());
    return std::make_unique<FusedCudaTrace>(program, std::move(plan), std::move(memory),
                                            std::move(kernels_), std::move(folds_),
                                            std::move(gemms_), device_, note_);
  }

 private:
  Device device_;
  int sms_;
  std::map<int, FoldedMatmul> folds_;  // by step, from the epilogue pass
  std::map<int, std::unique_ptr<LtMatmul>> gemms_;
  std::vector<std::unique_ptr<CudaKernel>> kernels_;  // per step (null: not a kernel)
  std::vector<KernelSource> sources_;                 // each different kernel's definition, once
  std::map<std::string, size_t> source_of_;           // name -> its index in sources_
  std::vector<size_t> kernel_steps_;                  // the steps that are kernels, in order
  std::string note_;  // how finish() got them (CudaKernels::summary)
};

class NvrtcCudaBackend final : public JitBackend {
 public:
  NvrtcCudaBackend() : JitBackend(DeviceType::CUDA) {}

 protected:
  // Every op on one CUDA device, or a host-side op reading host values only (a batch
  // built on the CPU and copied in: it runs before the launch).
  bool accepts(const TraceProgram& program) const override {
    const Device device = tracer::home_device(program);
    if (!device.is_cuda()) return false;
    for (const TraceOp& op : program.ops) {
      if (op.meta.device == device) continue;
      if (!op.meta.device.is_cpu()) return false;
      for (const tracer::InputRef& r : op.inputs)
        if (r.kind == tracer::InputRef::Kind::Value && !program.ops[r.index].meta.device.is_cpu())
          return false;
    }
    return true;
  }

  std::unique_ptr<KernelBuild> start(const TraceProgram& program, const DebugDump&) override {
    const Device device = tracer::home_device(program);
    int sms = 1;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device.index) != cudaSuccess) {
      cudaGetLastError();
      sms = 1;
    }
    return std::make_unique<CudaKernelBuild>(device, sms);
  }
};

struct Registration {
  Registration() {
    static NvrtcCudaBackend backend;
    tracer::register_backend(&backend);
  }
} registration;

}  // namespace
}  // namespace kiln::jit::cuda_backend
