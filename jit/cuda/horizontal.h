// Horizontal fusion: independent small fused kernels of one compiled CUDA trace launched
// as one "combo" kernel (one CUDA graph node, one launch) instead of one each, the way
// multi-tensor optimizers do: a plain-loop AdamW or SGD over 50 parameters, the per-
// parameter norms of clip_grad_norm_, any list of per-tensor updates.
//
// Which kernels (plan_combos): a kernel step is a candidate when its launch does not fill
// the GPU by itself (grid * threads per block at most kResidentThreadsPerSm per SM: one
// wave of resident threads; a bigger kernel already keeps every SM busy and gains only its
// launch) and its words fit kMaxPartWords. Within one replay segment (segments.h) the
// steps are scanned in order. Steps conflict when one reads what the other writes or
// writes what the other touches (storage roots: an external's first alias, a view or
// in-place op's base). A candidate is delayed into the first open group of its block shape
// (blockDim x, y: pointwise parts, block-mode rows of one width, warp-mode rows) that it
// does not conflict with and that need not launch before a group it conflicts with; the
// open groups it conflicts with must launch before that one.
// A step launched in place (a library call, a big kernel; a view does nothing on the GPU)
// closes the groups it conflicts with: they launch right before it, their predecessors
// first; a group holding a big value (over kBigValueBytes) launches right after that
// value's last reader (a delay never keeps an activation alive longer: a small reduction
// over a big input, such as a weight gradient, delayed to the segment's end would keep
// that input in the arena until then); the rest launch at the segment's end. So each group launches
// where all its parts' inputs are ready and before any step that reads or overwrites what they
// touch: a topological order in which library steps and big kernels keep their places. A per-
// parameter chain (norm_i, then scale_i) gives one combo of norms then one of scales.
// plan.launch_at records the moves; plan_memory keeps what a delayed step reads and
// writes alive until its launch.
// A combo has at most kMaxComboParts parts and kMaxComboWords argument words (16 KiB:
// half of the 32,764 bytes of kernel parameters CUDA 12.1+ allows on sm_70+ in launches
// and graph kernel nodes; the classic limit was 4 KiB).
//
// The combo kernel (emit_combo): each different part's code once, as emit_cuda_part's
// __device__ __noinline__ function (the kernel's own code; identical parts share it, so
// NVRTC compiles what it compiled before plus a small dispatch), then
//   extern "C" __global__ void name(const __grid_constant__ KilnArgs<N> a)
//   a.v[0, P)          the end block of each part (part p runs blocks [end[p-1], end[p]))
//   a.v[word_at[p]...] part p's words, laid out as cuda_codegen.h says
// A block finds its part, copies the part's words to shared memory and calls it with its
// block index and count within the part, so every part runs exactly as it does alone
// (same grid, same order, same results). Graph updates rewrite the whole argument block
// (combo_args: the parts' words at their places).
//
// KILN_CUDA_HORIZONTAL=0 turns it off (every kernel launched on its own) for A/B runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "jit/fusion.h"
#include "jit/kernel_ir.h"

namespace kiln::jit::cuda_backend {

bool horizontal_enabled();  // KILN_CUDA_HORIZONTAL != 0, read once

inline constexpr size_t kMaxComboParts = 64;
inline constexpr int kMaxComboWords = 2048;             // 16 KiB of arguments
inline constexpr int kMaxPartWords = 512;               // a part's words, staged in shared memory
inline constexpr int64_t kResidentThreadsPerSm = 2048;  // sm_70 .. sm_90
// A value over this many bytes is never kept alive past its last reader by a delay.
inline constexpr int64_t kBigValueBytes = int64_t{1} << 20;

// A kernel step's launch, as plan_combos sees it.
struct ComboCandidate {
  bool kernel = false;  // a fused kernel step with work to do
  unsigned grid = 1, block = 1, block_y = 1;
  int words = 0;
};

// Whether a launch this size is worth combining on a GPU of `sms` multiprocessors.
bool worth_combining(const ComboCandidate& c, int sms);

// Small kernels launched later than their own place: `parts` (increasing steps; one
// part: launched alone, more: as one combo kernel) right after step `after`'s launch.
struct DelayedLaunch {
  std::vector<size_t> parts;
  size_t after = 0;
};

// Every small kernel step's delayed launch, in launch order (launches after the same step
// in this order); sets plan.launch_at (left empty when there is none).
std::vector<DelayedLaunch> plan_combos(const tracer::TraceProgram& program, FusionPlan& plan,
                                       const std::vector<ComboCandidate>& steps, int sms);

struct ComboLayout {
  std::vector<int> word_at;  // per part: its first word
  int words = 0;             // in all
};
ComboLayout combo_layout(const std::vector<int>& part_words);

// The combo's definition: `parts` with the function names `part_names` (their
// kernel_name(): identical parts, one name, defined once per program).
std::string emit_combo(const std::vector<const Kernel*>& parts,
                       const std::vector<std::string>& part_names, const std::string& name);

// The combo's argument words from each part's grid and words.
void combo_args(const ComboLayout& layout, const std::vector<unsigned>& grids,
                const std::vector<const std::vector<int64_t>*>& part_args,
                std::vector<int64_t>& out);

// "combo of 24: fused mul,... [384, 1536] x12, fused abs,pow,sum,pow [384] rows x12".
std::string combo_label(const std::vector<std::string>& part_labels);

}  // namespace kiln::jit::cuda_backend
