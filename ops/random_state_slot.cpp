// RandomStateSlot and random_state_scalars (ops/kernels.h): which calls read their
// random state from a device slot while a CUDA trace runs them, and the scope that says
// where the slot is.
#include "ops/kernels.h"

namespace kiln {
namespace {

thread_local const uint64_t* current_slot = nullptr;

}  // namespace

int random_state_scalars(const OpCall& call) {
  // attention / attention_backward with dropout: scalars {scale, p, seed, offset}
  // (ops/attention_layout.h).
  const bool attention = call.op == OpId::Attention || call.op == OpId::AttentionBackward;
  return attention && call.scalars.size() == 4 ? 2 : -1;
}

RandomStateSlot::RandomStateSlot(const uint64_t* slot) : previous_(current_slot) {
  current_slot = slot;
}
RandomStateSlot::~RandomStateSlot() { current_slot = previous_; }
const uint64_t* RandomStateSlot::current() { return current_slot; }

}  // namespace kiln
