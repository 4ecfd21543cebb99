// Horizontal fusion of a CUDA trace's small independent kernels (jit/cuda/horizontal.h).
// Without a GPU (NVRTC and the plan need none):
//   - a combo of three kernels (two identical, one a row kernel) and a second combo sharing
//     a part compile together with NVRTC for sm_90; each part's code is the kernel's own
//     code with its words and block index renamed; the argument layout puts the end
//     blocks first, then each part's words, and combo_args fills them;
//   - plan_combos on programs recorded on the CPU (plain-loop SGD with momentum over
//     parameters of varied shapes; clip_grad_norm_-style norms, a stack and per-tensor
//     scales; a per-parameter chain norm_i -> update_i; a matmul reading an updated
//     parameter): the launch order respects every dependence (a value is produced by an
//     earlier launch than any reader; in-place writes to one tensor keep their order),
//     library steps keep their place, and the independent kernels share combos.
// With a GPU (skipped without): traced loops of per-tensor updates against float64
// references computed on the host and eager CUDA, with the combos in explain()'s notes.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "capture_backend.h"
#include "ops/api.h"
#include "tracer_util.h"

#ifdef KILN_WITH_CUDA
#include "jit/cuda/cuda_codegen.h"
#include "jit/cuda/horizontal.h"
#include "jit/memory_plan.h"
#include "jit/cuda/nvrtc_compiler.h"
#include "jit/cuda/nvrtc_programs.h"
#include "jit/lower.h"
#include "jit/pipeline.h"
#include "tracer/backend.h"
#endif

using namespace kt;
using kiln::Tensor;
namespace tr = kiln::tracer;

namespace {

#ifdef KILN_WITH_CUDA
using namespace kiln::jit;
using namespace kiln::jit::cuda_backend;
using kiln::DType;

// ---------------------------------------------------------------- codegen (no GPU)

// x * s + y over one contiguous dim (a pointwise part).
Kernel axpy_kernel() {
  Kernel k;
  k.rank = 1;
  k.scalar_is_float = {1};
  for (int o = 0; o < 3; ++o) {
    KOperand op;
    op.loaded = o < 2;
    op.stored = o == 2;
    k.operands.push_back(op);
  }
  KNode lx, ly, s;
  lx.op = ly.op = KOp::Load;
  lx.operand = 0;
  ly.operand = 1;
  s.op = KOp::Scalar;
  s.dtype = DType::Float64;
  s.slot = 0;
  s.level = Level::Invariant;
  const int32_t x = k.add(lx), y = k.add(ly);
  KNode c;
  c.op = KOp::Cast;
  c.level = Level::Invariant;
  c.in[0] = k.add(s);
  const int32_t sc = k.add(c);
  const int32_t m = k.add(math_node(kiln::OpId::Mul, DType::Float32, x, sc));
  k.stores.push_back({k.add(math_node(kiln::OpId::Add, DType::Float32, m, y)), 2});
  return k;
}

// sum(|x|) per row over 2 dims, stored per row (a row part, one stage).
Kernel abs_sum_rows() {
  Kernel k;
  k.kind = Kernel::Kind::Row;
  k.rank = 2;
  KOperand in, out;
  in.loaded = true;
  out.stored = true;
  out.row_level = true;
  k.operands = {in, out};
  KNode l;
  l.op = KOp::Load;
  l.operand = 0;
  const int32_t a = k.add(math_node(kiln::OpId::Abs, DType::Float32, k.add(l)));
  KNode r;
  r.op = KOp::ReduceSum;
  r.level = Level::Row;
  r.stage = 1;
  r.in[0] = a;
  k.stores.push_back({k.add(r), 1});
  return k;
}

std::string name_of(const Kernel& k) { return kernel_name(emit_cuda_kernel(k, "kiln_k")); }

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(CudaHorizontal, CombosOfPointwiseAndRowPartsCompileWithNvrtc) {
  const Kernel a = axpy_kernel(), r = abs_sum_rows();
  const std::vector<const Kernel*> parts{&a, &r, &a};
  const std::vector<std::string> names{name_of(a), name_of(r), name_of(a)};
  const std::string first = emit_combo(parts, names, "kiln_combo_a");
  // A second combo in the same program shares the row part: defined once (guards).
  const std::string second = emit_combo({&r, &a}, {names[1], names[0]}, "kiln_combo_b");
  EXPECT_EQ(count(first, "void " + names[0] + "("), 1u) << first;
  EXPECT_EQ(count(first, names[0] + "(kiln_w"), 2u) << first;
  EXPECT_NE(first.find("__grid_constant__"), std::string::npos);
  const std::string source = cuda_prelude() + first + second;
  std::string cubin;
  try {
    cubin = compile_cubin(source, "sm_90");
  } catch (const std::exception& e) {
    FAIL() << e.what() << "\n" << source;
  }
  EXPECT_NE(cubin.find("kiln_combo_a"), std::string::npos);
  EXPECT_NE(cubin.find("kiln_combo_b"), std::string::npos);
  // Named by content, like every kernel: the same parts, the same name.
  EXPECT_EQ(kernel_name(emit_combo(parts, names, "kiln_k")),
            kernel_name(emit_combo(parts, names, "kiln_k")));
  EXPECT_NE(kernel_name(emit_combo(parts, names, "kiln_k")),
            kernel_name(emit_combo({&a, &r}, {names[0], names[1]}, "kiln_k")));
}

TEST(CudaHorizontal, APartIsTheKernelsOwnCodeWithItsWordsAndBlockIndex) {
  for (const Kernel& k : {axpy_kernel(), abs_sum_rows()}) {
    std::string kernel = emit_cuda_kernel(k, "f"), part = emit_cuda_part(k, "f");
    auto body = [](std::string s) { return s.substr(s.find('\n')); };
    auto rename = [](std::string s, const std::string& from, const std::string& to) {
      for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
        s.replace(at, from.size(), to);
      return s;
    };
    kernel = rename(rename(rename(body(kernel), "a.v[", "v["), "blockIdx.x", "kiln_block"),
                    "gridDim.x", "kiln_blocks");
    EXPECT_EQ(kernel, body(part));
    EXPECT_EQ(part.rfind("__device__ __noinline__ void f(", 0), 0u) << part;
  }
}

TEST(CudaHorizontal, ArgumentsAreTheEndBlocksThenEachPartsWords) {
  const Kernel a = axpy_kernel(), r = abs_sum_rows();
  const int wa = args_layout(a).words(), wr = args_layout(r).words();
  EXPECT_EQ(wa, 3 + 1 + 3 + 1 + 1);  // pointers, shape, strides, scalar, work
  EXPECT_EQ(wr, 2 + 2 + 4 + 1);
  const ComboLayout l = combo_layout({wa, wr, wa});
  ASSERT_EQ(l.word_at.size(), 3u);
  EXPECT_EQ(l.word_at[0], 3);
  EXPECT_EQ(l.word_at[1], 3 + wa);
  EXPECT_EQ(l.word_at[2], 3 + wa + wr);
  EXPECT_EQ(l.words, 3 + 2 * wa + wr);
  const std::string src = emit_combo({&a, &r, &a}, {name_of(a), name_of(r), name_of(a)}, "c");
  EXPECT_NE(src.find("KilnArgs<" + std::to_string(l.words) + ">"), std::string::npos) << src;
  for (int p = 0; p < 3; ++p)
    EXPECT_NE(src.find("a.v + " + std::to_string(l.word_at[p]) + ","), std::string::npos) << src;
  std::vector<int64_t> pa(static_cast<size_t>(wa)), pr(static_cast<size_t>(wr)), pb(pa.size());
  for (size_t i = 0; i < pa.size(); ++i) pa[i] = 100 + static_cast<int64_t>(i);
  for (size_t i = 0; i < pr.size(); ++i) pr[i] = 200 + static_cast<int64_t>(i);
  for (size_t i = 0; i < pb.size(); ++i) pb[i] = 300 + static_cast<int64_t>(i);
  std::vector<int64_t> out;
  combo_args(l, {4, 1, 7}, {&pa, &pr, &pb}, out);
  ASSERT_EQ(out.size(), static_cast<size_t>(l.words));
  EXPECT_EQ(out[0], 4);
  EXPECT_EQ(out[1], 5);
  EXPECT_EQ(out[2], 12);
  EXPECT_EQ(out[3], 100);
  EXPECT_EQ(out[static_cast<size_t>(l.word_at[1])], 200);
  EXPECT_EQ(out[static_cast<size_t>(l.word_at[2]) + pb.size() - 1], 300 + wa - 1);
  EXPECT_LE(kMaxComboWords * 8, 32764 / 2 + 4);  // half CUDA 12.1+'s parameter limit
}

TEST(CudaHorizontal, LabelsCountEqualParts) {
  EXPECT_EQ(combo_label({"fused mul [4]", "fused abs,sum [3] rows", "fused mul [4]"}),
            "combo of 3: fused mul [4] x2, fused abs,sum [3] rows");
}

TEST(CudaHorizontal, OnlyLaunchesThatLeaveTheGpuIdleAreWorthCombining) {
  ComboCandidate c{true, 132 * 8, 256, 1, 30};
  EXPECT_TRUE(worth_combining(c, 132));  // one wave of resident blocks
  c.grid += 1;
  EXPECT_FALSE(worth_combining(c, 132));
  c = {true, 10, 32, 4, kMaxPartWords + 1};
  EXPECT_FALSE(worth_combining(c, 132));
  c.words = 40;
  EXPECT_TRUE(worth_combining(c, 132));
  c.kernel = false;
  EXPECT_FALSE(worth_combining(c, 132));
}

// ---------------------------------------------------------------- plans (no GPU)

class HorizontalPlan : public CapturingTest {
 protected:
  // f's program (run in regions until compiled), planned as the CUDA backend plans it
  // (the CPU's fusable ops stand in), every kernel a small candidate of block shape 256
  // (pointwise) or 32 x 4 (rows).
  void plan(const std::function<void()>& f) {
    ASSERT_TRUE(capture(f)) << tr::explain().table();
    program_ = *backend_.captured;
    plan_ = plan_fusion(program_, fusable_except(kiln::DeviceType::CPU, {}));
    std::vector<ComboCandidate> steps(plan_.steps.size());
    for (size_t s = 0; s < plan_.steps.size(); ++s) {
      const Step& st = plan_.steps[s];
      if (st.kind != Step::Kind::Kernel) continue;
      const bool rows = st.group.reduced_dims > 0;
      steps[s] = {true, 4, rows ? 32u : 256u, rows ? 4u : 1u, 24};
    }
    launches_ = plan_combos(program_, plan_, steps, 132);
    check_order();
  }

  // Every dependence holds in the launch order: a value's producer launches before its
  // readers (never with them), and the steps touching one external in place keep their
  // order (never in one launch).
  void check_order() {
    std::vector<int> rank(plan_.steps.size(), -1);
    int next = 0;
    std::map<size_t, std::vector<size_t>> after;
    for (size_t q = 0; q < launches_.size(); ++q) after[launches_[q].after].push_back(q);
    std::set<size_t> delayed;
    for (const DelayedLaunch& l : launches_)
      for (size_t s : l.parts) {
        EXPECT_LE(s, l.after);
        delayed.insert(s);
      }
    for (size_t s = 0; s < plan_.steps.size(); ++s) {
      if (!delayed.count(s)) rank[s] = next++;
      for (size_t q : after[s]) {
        for (size_t p : launches_[q].parts) rank[p] = next;
        ++next;
      }
    }
    for (size_t s = 0; s < plan_.steps.size(); ++s) ASSERT_GE(rank[s], 0) << s;
    // The step whose launch computes value v: through views, their base's.
    std::function<int(int)> producer = [&](int v) {
      const int c = plan_.canonical[v];
      const tr::TraceOp& op = program_.ops[c];
      if (plan_.steps[plan_.step_of[c]].kind == Step::Kind::View &&
          op.inputs[0].kind == tr::InputRef::Kind::Value)
        return producer(op.inputs[0].index);
      return plan_.step_of[c];
    };
    std::map<int, std::vector<size_t>> touching;  // external slot -> steps writing into it
    for (size_t i = 0; i < program_.ops.size(); ++i) {
      if (plan_.canonical[i] != static_cast<int>(i)) continue;
      const int s = plan_.step_of[i];
      if (plan_.steps[s].kind == Step::Kind::View) continue;  // reads nothing on the GPU
      const tr::TraceOp& op = program_.ops[i];
      for (const tr::InputRef& r : op.inputs) {
        if (r.kind != tr::InputRef::Kind::Value) continue;
        const int from = producer(r.index);
        if (from != s) {
          EXPECT_LT(rank[from], rank[s]) << "step " << s << " reads step " << from;
        }
      }
      if (op.in_place && op.target.kind == tr::InputRef::Kind::External)
        touching[op.target.index].push_back(static_cast<size_t>(s));
    }
    for (size_t i = 0; i < program_.ops.size(); ++i) {  // readers of an updated external
      if (plan_.canonical[i] != static_cast<int>(i)) continue;
      const int s = plan_.step_of[i];
      if (plan_.steps[s].kind == Step::Kind::View) continue;
      for (const tr::InputRef& r : program_.ops[i].inputs) {
        if (r.kind != tr::InputRef::Kind::External) continue;
        for (size_t w : touching[r.index])
          if (static_cast<int>(w) != s) {
            EXPECT_EQ(w < static_cast<size_t>(s), rank[w] < rank[s])
                << "external " << r.index << ": steps " << w << " and " << s;
          }
      }
    }
  }

  size_t combos() const {
    size_t n = 0;
    for (const DelayedLaunch& l : launches_) n += l.parts.size() > 1;
    return n;
  }
  size_t kernel_steps() const {
    size_t n = 0;
    for (const Step& s : plan_.steps) n += s.kind == Step::Kind::Kernel;
    return n;
  }
  size_t largest() const {
    size_t n = 0;
    for (const DelayedLaunch& l : launches_) n = std::max(n, l.parts.size());
    return n;
  }

  tr::TraceProgram program_;
  FusionPlan plan_;
  std::vector<DelayedLaunch> launches_;
};

const std::vector<Dims> kShapes = {{64, 33}, {128},    {7, 9, 5}, {1000},    {16, 64},
                                   {3},      {33, 17}, {256},     {2, 3, 4}, {50, 20}};

TEST_F(HorizontalPlan, PlainLoopSgdUpdatesShareOneCombo) {
  std::vector<Tensor> p, g, m;
  for (const Dims& d : kShapes) {
    p.push_back(random_tensor(d));
    g.push_back(random_tensor(d));
    m.push_back(kiln::zeros(d));
  }
  plan([&] {
    for (size_t i = 0; i < p.size(); ++i) {
      m[i].mul_(0.9).add_(g[i] + p[i] * 1e-4);
      p[i].sub_(m[i] * 0.01);
    }
  });
  EXPECT_EQ(kernel_steps(), kShapes.size()) << plan_.str(program_);
  EXPECT_EQ(combos(), 1u) << plan_.str(program_);
  EXPECT_EQ(largest(), kShapes.size());
  EXPECT_FALSE(plan_.launch_at.empty());
}

TEST_F(HorizontalPlan, ClipGradNormNormsThenScalesAroundTheStack) {
  std::vector<Tensor> g;
  for (const Dims& d : kShapes) g.push_back(random_tensor(d));
  plan([&] {
    std::vector<Tensor> norms;
    for (const Tensor& x : g) norms.push_back(kiln::sqrt(kiln::sum(x * x)));
    const Tensor stacked = kiln::stack(norms);
    const Tensor total = kiln::sqrt(kiln::sum(stacked * stacked));
    const Tensor coef = kiln::clamp(1.0 / (total + 1e-6), std::nullopt, 1.0);
    for (Tensor& x : g) x.mul_(coef);
  });
  // The norms (rows) in one combo, the scales (pointwise) in another.
  EXPECT_GE(combos(), 2u) << plan_.str(program_);
  EXPECT_GE(largest(), kShapes.size()) << plan_.str(program_);
}

TEST_F(HorizontalPlan, PerParameterChainsGiveOneComboPerLink) {
  std::vector<Tensor> p, g;
  for (const Dims& d : kShapes) {
    p.push_back(random_tensor(d));
    g.push_back(random_tensor(d));
  }
  plan([&] {
    for (size_t i = 0; i < p.size(); ++i) {
      const Tensor n = kiln::sum(g[i] * g[i]);  // a row kernel
      p[i].sub_(g[i] * n * 0.01);               // reads it: pointwise, after it
    }
  });
  // One combo per link: squares (where not fused into the norm), norms, updates.
  EXPECT_GE(combos(), 2u) << plan_.str(program_);
  EXPECT_LE(combos(), 3u) << plan_.str(program_);
  EXPECT_EQ(largest(), kShapes.size()) << plan_.str(program_);
}

// A small reduction over a big value (a row sum standing in for a weight gradient)
// is that value's last reader: its launch is not delayed past it, so the memory plan lets
// the next big value reuse the bytes (two 2 MiB products share one slice of the arena;
// delayed to the end, both sums kept both products alive). Small kernels reading only
// small values still share combos.
TEST_F(HorizontalPlan, ADelayNeverKeepsABigValueAlivePastItsLastReader) {
  const Tensor w = random_tensor({64, 1024});
  const Tensor x = random_tensor({512, 64}), y = random_tensor({512, 64});
  std::vector<Tensor> p, g;
  for (int i = 0; i < 4; ++i) {
    p.push_back(random_tensor({8, 8}));
    g.push_back(random_tensor({8, 8}));
  }
  Tensor sa, sb;
  plan([&] {
    for (int i = 0; i < 2; ++i) p[i].sub_(g[i] * 0.1);
    sa = kiln::sum(kiln::matmul(x, w), {1});  // 512 x 1024 floats: 2 MiB
    sb = kiln::sum(kiln::matmul(y, w), {1});
    for (int i = 2; i < 4; ++i) p[i].sub_(g[i] * 0.1);
  });
  const int64_t big = 512 * 1024 * 4;
  int sums = 0;
  for (size_t s = 0; s < plan_.steps.size(); ++s) {
    const Step& st = plan_.steps[s];
    if (st.kind != Step::Kind::Kernel || st.group.reduced_dims == 0) continue;
    ++sums;
    const int at = plan_.launch_at.empty() ? static_cast<int>(s) : plan_.launch_at[s];
    EXPECT_EQ(at, static_cast<int>(s))
        << "the sum of step " << s << " launches after step " << at << "\n"
        << plan_.str(program_);
  }
  EXPECT_EQ(sums, 2) << plan_.str(program_);
  const MemoryPlan memory = plan_memory(program_, plan_);
  EXPECT_LT(memory.arena_bytes, 2 * big) << memory.str();
  EXPECT_GE(combos(), 1u) << plan_.str(program_);  // the parameter updates
}

TEST_F(HorizontalPlan, ALibraryStepReadingAnUpdateKeepsItsPlace) {
  std::vector<Tensor> p, g;
  for (int i = 0; i < 6; ++i) {
    p.push_back(random_tensor({8, 8}));
    g.push_back(random_tensor({8, 8}));
  }
  const Tensor x = random_tensor({4, 8});
  Tensor y;
  plan([&] {
    for (int i = 0; i < 3; ++i) p[i].sub_(g[i] * 0.1);
    y = kiln::matmul(x, p[1]);  // reads p[1] after its update, before the others
    for (int i = 3; i < 6; ++i) p[i].sub_(g[i] * 0.1);
    p[0].add_(kiln::sum(y) * 0.0);  // and p[0] again
  });
  EXPECT_GE(combos(), 1u) << plan_.str(program_);
}
#endif  // KILN_WITH_CUDA

// ---------------------------------------------------------------- on the GPU

Device gpu() { return kiln::cuda_device(); }
const DType kF32 = DType::Float32;

class JitCudaHorizontal : public TracerTest {
 protected:
  void SetUp() override {
    TracerTest::SetUp();
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
    tr::config().jit = true;
    tr::set_enabled(false);
  }
};

bool has_note(const tr::TraceReport& t, const std::string& part) {
  for (const std::string& n : t.notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

// The one trace's "cuda horizontal: N kernels launched as M combo kernel(s)" note: N (0
// without it); checks it compiled with nvrtc, replayed as a graph, fell back nowhere.
int combo_kernels(int replays_at_least) {
  const tr::ExplainReport r = tr::explain();
  EXPECT_EQ(r.traces.size(), 1u) << r.table();
  if (r.traces.empty()) return 0;
  const tr::TraceReport& t = r.traces[0];
  EXPECT_EQ(t.backend, "nvrtc") << r.table();
  EXPECT_GE(t.replays, replays_at_least) << r.table();
  EXPECT_FALSE(has_note(t, "cuda graph off")) << r.table();
  EXPECT_FALSE(has_note(t, "fell back")) << r.table();
  EXPECT_FALSE(has_note(t, "given up")) << r.table();
  for (const std::string& n : t.notes) {
    const std::string key = "cuda horizontal: ";
    if (n.rfind(key, 0) == 0) return std::stoi(n.substr(key.size()));
  }
  return 0;
}

// The kernel-node updates of the one trace's graphs (its "cuda graph: ..." note), or -1.
int64_t kernel_node_updates() {
  const tr::ExplainReport r = tr::explain();
  if (r.traces.empty()) return -1;
  for (const std::string& n : r.traces[0].notes) {
    const size_t at = n.find(" kernel-node and");
    if (at == std::string::npos) continue;
    size_t b = at;
    while (b > 0 && std::isdigit(static_cast<unsigned char>(n[b - 1]))) --b;
    return std::stoll(n.substr(b, at - b));
  }
  return -1;
}

const std::vector<Dims> kParams = {{64, 33}, {128},    {7, 9, 5}, {1000},    {16, 64},
                                   {3},      {33, 17}, {256},     {2, 3, 4}, {50, 20},
                                   {384},    {96, 96}, {5},       {4096},    {17},
                                   {31, 31}, {640},    {8, 8, 8}, {1},       {300, 7}};

// SGD with momentum and weight decay in a plain loop over 20 parameters of varied shapes,
// fresh gradients (new tensors: the combo's words are patched) and a new learning rate
// every step; against float64 on the host and eager CUDA.
TEST_F(JitCudaHorizontal, PlainLoopSgdWithMomentumMatchesFloat64AndEager) {
  const size_t n = kParams.size();
  std::vector<Host> ph, mh;
  std::vector<Tensor> p, m, pe, me;
  for (const Dims& d : kParams) {
    ph.push_back(random_host(d, kF32));
    mh.push_back(Host(d));
    p.push_back(make(ph.back(), kF32, gpu()));
    pe.push_back(make(ph.back(), kF32, gpu()));
    m.push_back(kiln::zeros(d, kiln::TensorOptions(kF32, gpu())));
    me.push_back(kiln::zeros(d, kiln::TensorOptions(kF32, gpu())));
  }
  auto step = [&](std::vector<Tensor>& params, std::vector<Tensor>& bufs,
                  const std::vector<Tensor>& grads, double lr) {
    for (size_t i = 0; i < n; ++i) {
      bufs[i].mul_(0.9).add_(grads[i] + params[i] * 1e-2);
      params[i].sub_(bufs[i] * lr);
    }
  };
  const int steps = 8;
  for (int it = 0; it < steps; ++it) {
    const double lr = 0.05 / (it + 1);
    std::vector<Host> gh;
    std::vector<Tensor> g;
    for (const Dims& d : kParams) {
      gh.push_back(random_host(d, kF32));
      g.push_back(make(gh.back(), kF32, gpu()));
    }
    {
      tr::Region region;
      step(p, m, g, lr);
    }
    eager([&] {
      step(pe, me, g, lr);
      return 0;
    });
    for (size_t i = 0; i < n; ++i)
      for (size_t e = 0; e < ph[i].v.size(); ++e) {
        const double gf = static_cast<double>(static_cast<float>(gh[i].v[e]));
        mh[i].v[e] = 0.9 * mh[i].v[e] + (gf + ph[i].v[e] * 1e-2);
        ph[i].v[e] -= mh[i].v[e] * lr;
      }
  }
  EXPECT_GE(combo_kernels(3), static_cast<int>(n));
  // New gradients every call: the combo's node is patched (not re-recorded) each replay.
  EXPECT_GE(kernel_node_updates(), 3) << tr::explain().table();
  const Tol tol{2e-5, 1e-6};
  for (size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(all_close(p[i], ph[i], tol)) << "param " << i << " vs float64";
    EXPECT_TRUE(all_close(m[i], mh[i], tol)) << "momentum " << i << " vs float64";
    EXPECT_TRUE(all_close(p[i], read(pe[i]), tol)) << "param " << i << " vs eager CUDA";
  }
}

// clip_grad_norm_ over 16 gradients: per-tensor norms (row kernels), their stack and the
// total norm, then every gradient scaled by the clip coefficient; the output of every
// replay checked against float64 (the gradients are new each call).
TEST_F(JitCudaHorizontal, ClipGradNormPerTensorNormsAndScalesMatchFloat64) {
  const std::vector<Dims> shapes(kParams.begin(), kParams.begin() + 16);
  const double max_norm = 2.0;
  for (int it = 0; it < 6; ++it) {
    std::vector<Host> gh;
    std::vector<Tensor> g;
    for (const Dims& d : shapes) {
      gh.push_back(random_host(d, kF32));
      g.push_back(make(gh.back(), kF32, gpu()));
    }
    Tensor total;
    {
      tr::Region region;
      std::vector<Tensor> norms;
      for (const Tensor& x : g) norms.push_back(kiln::sqrt(kiln::sum(x * x)));
      const Tensor stacked = kiln::stack(norms);
      total = kiln::sqrt(kiln::sum(stacked * stacked));
      const Tensor coef = kiln::clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
      for (Tensor& x : g) x.mul_(coef);
    }
    double sq = 0;
    for (const Host& h : gh)
      for (double v : h.v) sq += v * v;
    const double norm = std::sqrt(sq), coef = std::min(max_norm / (norm + 1e-6), 1.0);
    EXPECT_TRUE(all_close(total, Host({}, {norm}), Tol{1e-5, 1e-6})) << "total norm, call " << it;
    for (size_t i = 0; i < g.size(); ++i)
      EXPECT_TRUE(all_close(g[i], map(gh[i], [&](double v) { return v * coef; }), Tol{2e-5, 1e-7}))
          << "gradient " << i << ", call " << it;
  }
  EXPECT_GE(combo_kernels(3), 2 * static_cast<int>(shapes.size()));
}

// A per-parameter chain in one loop (a norm, then an update reading it) and a matmul
// reading one updated parameter in the middle: dependences across the combos, against
// eager CUDA and float64.
TEST_F(JitCudaHorizontal, ChainsAndALibraryReaderKeepTheirOrder) {
  const size_t n = 12;
  std::vector<Host> ph, gh;
  std::vector<Tensor> p, g, pe;
  for (size_t i = 0; i < n; ++i) {
    ph.push_back(random_host(kParams[i], kF32));
    gh.push_back(random_host(kParams[i], kF32));
    p.push_back(make(ph.back(), kF32, gpu()));
    pe.push_back(make(ph.back(), kF32, gpu()));
    g.push_back(make(gh.back(), kF32, gpu()));
  }
  const Host xh = random_host({4, 64}, kF32);
  const Tensor x = make(xh, kF32, gpu());
  auto step = [&](std::vector<Tensor>& params) {
    for (size_t i = 0; i < n; ++i) {
      const Tensor s = kiln::sum(g[i] * g[i]);
      params[i].sub_(g[i] * s * 1e-3);
    }
    return kiln::matmul(x, params[0]);  // [4, 64] @ [64, 33]
  };
  Tensor y, ye;
  const int steps = 6;
  for (int it = 0; it < steps; ++it) {
    {
      tr::Region region;
      y = step(p);
    }
    ye = eager([&] { return step(pe); });
    for (size_t i = 0; i < n; ++i) {
      double s = 0;
      for (double v : gh[i].v) s += v * v;
      for (size_t e = 0; e < ph[i].v.size(); ++e) ph[i].v[e] -= gh[i].v[e] * s * 1e-3;
    }
  }
  EXPECT_GE(combo_kernels(3), static_cast<int>(n));
  for (size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(all_close(p[i], ph[i], Tol{1e-4, 1e-6})) << "param " << i << " vs float64";
    EXPECT_TRUE(all_close(p[i], read(pe[i]), Tol{1e-5, 1e-6})) << "param " << i << " vs eager";
  }
  // y sums 64 products of size ~1 that cancel to ~0.05: its error scales with the terms.
  EXPECT_TRUE(all_close(y, read(ye), Tol{1e-4, 1e-4})) << "matmul of the updated parameter";
}

}  // namespace
