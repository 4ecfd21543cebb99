// Horizontal fusion of a compiled CUDA trace's small independent kernels (see horizontal.h).
#include "jit/cuda/horizontal.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>

#include "jit/cuda/cuda_codegen.h"
#include "jit/cuda/segments.h"

namespace kiln::jit::cuda_backend {

using tracer::InputRef;
using tracer::TraceOp;

bool horizontal_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_CUDA_HORIZONTAL");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

bool worth_combining(const ComboCandidate& c, int sms) {
  const int64_t threads = static_cast<int64_t>(c.grid) * c.block * c.block_y;
  return c.kernel && c.words <= kMaxPartWords &&
         threads <= static_cast<int64_t>(std::max(sms, 1)) * kResidentThreadsPerSm;
}

namespace {

// The storage a step reads and writes: an external's first alias (-1 - slot) or the op
// whose tensor holds a value (views and in-place results: their base's).
struct Access {
  std::vector<int64_t> reads, writes;
};

std::vector<Access> step_access(const tracer::TraceProgram& program, const FusionPlan& plan) {
  const size_t n = program.ops.size();
  std::vector<int64_t> root(n, 0);
  auto of = [&](const InputRef& r) -> int64_t {
    if (r.kind == InputRef::Kind::External) {
      const int alias = external_guard(program, r.index).alias_of;
      return -1 - static_cast<int64_t>(alias >= 0 ? alias : r.index);
    }
    const int c = plan.canonical[r.index];
    return c >= 0 ? root[c] : r.index;
  };
  for (size_t i = 0; i < n; ++i) {
    if (plan.canonical[i] != static_cast<int>(i)) continue;
    const TraceOp& op = program.ops[i];
    root[i] = op.in_place ? of(op.target)
              : op_info(op.op).family == OpFamily::View && !op.inputs.empty()
                  ? of(op.inputs[0])
                  : static_cast<int64_t>(i);
  }
  // Every op counts for the step computing it: a kernel group's ops, a library step's op
  // and, in a folded GEMM step (matmul_epilogue.h), the matmul and add it absorbed.
  std::vector<Access> out(plan.steps.size());
  for (size_t i = 0; i < n; ++i) {
    if (plan.canonical[i] != static_cast<int>(i) || plan.step_of[i] < 0) continue;
    const size_t s = static_cast<size_t>(plan.step_of[i]);
    if (plan.steps[s].kind == Step::Kind::View) continue;  // a view on the host; no GPU work
    const TraceOp& op = program.ops[i];
    Access& a = out[s];
    for (const InputRef& r : op.inputs) a.reads.push_back(of(r));
    if (op.in_place) a.reads.push_back(of(op.target));
    a.writes.push_back(root[i]);
  }
  for (Access& a : out)
    for (std::vector<int64_t>* v : {&a.reads, &a.writes}) {
      std::sort(v->begin(), v->end());
      v->erase(std::unique(v->begin(), v->end()), v->end());
    }
  return out;
}

bool meets(const std::vector<int64_t>& keys, const std::set<int64_t>& set) {
  for (int64_t k : keys)
    if (set.count(k)) return true;
  return false;
}

}  // namespace

std::vector<DelayedLaunch> plan_combos(const tracer::TraceProgram& program, FusionPlan& plan,
                                       const std::vector<ComboCandidate>& steps, int sms) {
  std::vector<DelayedLaunch> out;
  plan.launch_at.clear();
  if (!horizontal_enabled()) return out;
  const std::vector<Access> access = step_access(program, plan);
  // Per value (an op's storage), the last step that reads it, and whether it is big: a
  // group holding a big value's last reader launches right after that step, so delaying
  // small kernels never keeps a big value alive longer (the memory plan follows launch_at).
  std::map<int64_t, size_t> last_read;
  for (size_t s = 0; s < access.size(); ++s)
    for (int64_t k : access[s].reads) last_read[k] = s;
  auto big = [&](int64_t k) {
    if (k < 0 || static_cast<size_t>(k) >= program.ops.size()) return false;
    const OutputMeta& m = program.ops[static_cast<size_t>(k)].meta;
    int64_t numel = 1;
    for (int64_t d : m.sizes) numel *= d;
    return numel * itemsize(m.dtype) > kBigValueBytes;
  };
  struct Group {
    std::vector<size_t> parts;
    std::set<int64_t> writes, touched;  // what the parts write; read or write
    int words = 0;
    std::pair<unsigned, unsigned> shape;
    bool closed = false;
    std::vector<size_t> before;  // open groups that must launch before this one
  };
  std::vector<Group> groups;
  // Group g launches after step `after`, its predecessors first.
  std::function<void(size_t, size_t)> close = [&](size_t g, size_t after) {
    if (groups[g].closed) return;
    groups[g].closed = true;
    for (size_t p : groups[g].before) close(p, after);
    out.push_back(DelayedLaunch{groups[g].parts, after});
  };
  // Whether group a must launch before group b (b waits on a, directly or not).
  std::function<bool(size_t, size_t)> precedes = [&](size_t a, size_t b) {
    for (size_t p : groups[b].before)
      if (p == a || (!groups[p].closed && precedes(a, p))) return true;
    return false;
  };
  // After step s: the open groups reading a big value whose last reader is s launch now.
  auto end_big_reads = [&](size_t s) {
    for (int64_t k : access[s].reads) {
      if (last_read[k] != s || !big(k)) continue;
      for (size_t g = 0; g < groups.size(); ++g)
        if (!groups[g].closed && groups[g].touched.count(k)) close(g, s);
    }
  };
  for (const SegmentCut& cut : cut_segments(program, plan).cuts) {
    groups.clear();
    for (size_t s = cut.first_step; s < cut.end_step; ++s) {
      if (plan.steps[s].kind == Step::Kind::View) continue;
      const Access& a = access[s];
      // The open groups this step reads from or writes into: they launch before it.
      std::vector<size_t> conflicts;
      for (size_t g = 0; g < groups.size(); ++g)
        if (!groups[g].closed &&
            (meets(a.reads, groups[g].writes) || meets(a.writes, groups[g].touched)))
          conflicts.push_back(g);
      if (s >= steps.size() || !worth_combining(steps[s], sms)) {
        for (size_t g : conflicts) close(g, s - 1);  // launched in place: they go first
        end_big_reads(s);
        continue;
      }
      // A small kernel: delayed into the first open group of its block shape that has room,
      // that it does not conflict with, and that need not launch before a group it
      // conflicts with (those launch before it); else a new group.
      const ComboCandidate& k = steps[s];
      const std::pair<unsigned, unsigned> shape{k.block, k.block_y};
      size_t d = 0;
      for (; d < groups.size(); ++d) {
        const Group& g = groups[d];
        bool ok = !g.closed && g.shape == shape && g.parts.size() < kMaxComboParts &&
                  g.words + k.words + 1 <= kMaxComboWords;
        for (size_t c = 0; ok && c < conflicts.size(); ++c)
          ok = conflicts[c] != d && !precedes(d, conflicts[c]);
        if (ok) break;
      }
      if (d == groups.size()) {
        groups.emplace_back();
        groups.back().shape = shape;
      }
      Group& g = groups[d];
      for (size_t c : conflicts)
        if (std::find(g.before.begin(), g.before.end(), c) == g.before.end()) g.before.push_back(c);
      g.parts.push_back(s);
      g.words += k.words + 1;  // 1: the part's end block
      g.writes.insert(a.writes.begin(), a.writes.end());
      g.touched.insert(a.writes.begin(), a.writes.end());
      g.touched.insert(a.reads.begin(), a.reads.end());
      end_big_reads(s);
    }
    for (size_t g = 0; g < groups.size(); ++g) close(g, cut.end_step - 1);
  }
  if (!out.empty()) {
    plan.launch_at.resize(plan.steps.size());
    for (size_t s = 0; s < plan.steps.size(); ++s) plan.launch_at[s] = static_cast<int>(s);
    for (const DelayedLaunch& l : out)
      for (size_t s : l.parts) plan.launch_at[s] = static_cast<int>(l.after);
  }
  return out;
}

ComboLayout combo_layout(const std::vector<int>& part_words) {
  ComboLayout l;
  l.words = static_cast<int>(part_words.size());  // the end blocks
  for (int w : part_words) {
    l.word_at.push_back(l.words);
    l.words += w;
  }
  return l;
}

std::string emit_combo(const std::vector<const Kernel*>& parts,
                       const std::vector<std::string>& part_names, const std::string& name) {
  std::string out =
      "#ifndef KILN_COMBO_WORDS\n#define KILN_COMBO_WORDS\n"
      "// A part's words into shared memory, for every thread of the block.\n"
      "__device__ __forceinline__ void kiln_combo_words(long long* dst, const long long* src, "
      "int n) {\n"
      "  for (int i = threadIdx.y * blockDim.x + threadIdx.x; i < n; i += blockDim.x * "
      "blockDim.y) dst[i] = src[i];\n"
      "  __syncthreads();\n}\n#endif\n";
  std::vector<int> words;
  std::set<std::string> defined;
  int most = 1;
  for (size_t p = 0; p < parts.size(); ++p) {
    words.push_back(args_layout(*parts[p]).words());
    most = std::max(most, words.back());
    if (!defined.insert(part_names[p]).second) continue;
    const std::string guard = "KILN_PART_" + part_names[p];
    out += "#ifndef " + guard + "\n#define " + guard + "\n" +
           emit_cuda_part(*parts[p], part_names[p]) + "#endif\n";
  }
  const ComboLayout l = combo_layout(words);
  out += "extern \"C\" __global__ void __launch_bounds__(256) " + name +
         "(const __grid_constant__ KilnArgs<" + std::to_string(l.words) + "> a) {\n";
  out += "  __shared__ long long kiln_w[" + std::to_string(most) + "];\n";
  out += "  const long long b = blockIdx.x;\n";
  for (size_t p = 0; p < parts.size(); ++p) {
    const std::string end = "a.v[" + std::to_string(p) + "]";
    const std::string begin = p == 0 ? "0LL" : "a.v[" + std::to_string(p - 1) + "]";
    out += "  if (b < " + end + ") {\n";
    out += "    kiln_combo_words(kiln_w, a.v + " + std::to_string(l.word_at[p]) + ", " +
           std::to_string(words[p]) + ");\n";
    out += "    " + part_names[p] + "(kiln_w, static_cast<unsigned>(b - " + begin +
           "), static_cast<unsigned>(" + end + " - " + begin + "));\n";
    out += "    return;\n  }\n";
  }
  out += "}\n";
  return out;
}

void combo_args(const ComboLayout& layout, const std::vector<unsigned>& grids,
                const std::vector<const std::vector<int64_t>*>& part_args,
                std::vector<int64_t>& out) {
  out.assign(static_cast<size_t>(layout.words), 0);
  int64_t end = 0;
  for (size_t p = 0; p < grids.size(); ++p) {
    end += grids[p];
    out[p] = end;
    std::copy(part_args[p]->begin(), part_args[p]->end(), out.begin() + layout.word_at[p]);
  }
}

std::string combo_label(const std::vector<std::string>& part_labels) {
  std::vector<std::pair<std::string, int>> counts;  // in order of first appearance
  for (const std::string& l : part_labels) {
    auto it =
        std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == l; });
    if (it == counts.end())
      counts.push_back({l, 1});
    else
      ++it->second;
  }
  std::string out = "combo of " + std::to_string(part_labels.size()) + ":";
  for (size_t i = 0; i < counts.size(); ++i)
    out += (i ? ", " : " ") + counts[i].first +
           (counts[i].second > 1 ? " x" + std::to_string(counts[i].second) : "");
  return out;
}

}  // namespace kiln::jit::cuda_backend
