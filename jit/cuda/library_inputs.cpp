// Staging buffers and random-state slots of a CUDA trace's library calls (see
// library_inputs.h).
#include "jit/cuda/library_inputs.h"

#include "ops/kernels.h"

namespace kiln::jit::cuda_backend {
namespace {

// The elements a view spans in its storage, from its first element: numel for a dense
// layout in any order (a transpose), more for a slice of a larger tensor; -1 when a
// stride is negative.
int64_t span_of(const Tensor& t) {
  int64_t last = 0;
  for (size_t d = 0; d < t.sizes().size(); ++d) {
    if (t.strides()[d] < 0) return -1;
    last += (t.sizes()[d] - 1) * t.strides()[d];
  }
  return last + 1;
}

}  // namespace

void LibraryInputs::stage_moving_inputs(int s, OpCall& call, const Tensor& result,
                                        std::map<int, std::vector<StageCopy>>& out) {
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
      fresh.id = next_id_++;
      fresh.storage =
          Storage::allocate(static_cast<size_t>(span) * itemsize(t.dtype()), t.device());
      fresh.buffer = Tensor::make_view(fresh.storage, t.sizes(), t.strides(), 0, t.dtype());
      st = stages_.emplace(slot, std::move(fresh)).first;
    }
    const Stage& stage = st->second;
    if (!stageable || t.sizes() != stage.buffer.sizes() || t.strides() != stage.buffer.strides() ||
        t.dtype() != stage.buffer.dtype())
      continue;  // the guards make this impossible; read it in place then
    out[s].push_back(StageCopy{stage.id, stage.buffer.data_ptr(), t.data_ptr(),
                               static_cast<size_t>(span) * itemsize(t.dtype())});
    t = stage.buffer;
  }
}

const RandomSlot* LibraryInputs::random_slot(int s, const OpCall& call) {
  if (!kernel_draws_random(call) || !write_random_state_kernel()) return nullptr;
  auto it = random_slots_.find(s);
  if (it == random_slots_.end()) {
    RandomSlot fresh;
    fresh.id = next_id_++;
    fresh.slot = Tensor::make({2}, DType::Int64, device_);
    it = random_slots_.emplace(s, std::move(fresh)).first;
  }
  return &it->second;
}

}  // namespace kiln::jit::cuda_backend
