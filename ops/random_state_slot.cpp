// RandomStateSlot and random_state_scalars (ops/kernels.h): which calls read their
// random state from a device slot while a CUDA trace runs them, and the scope that says
// where the slot is.
#include "ops/kernels.h"

namespace kiln {
namespace {

thread_local const uint64_t* current_slot = nullptr;

}  // namespace

int random_state_scalars(const OpCall& call) {
  // The attention family with dropout: scalars {scale, p, seed, offset}
  // (ops/attention_layout.h).
  return op_info(call.op).family == OpFamily::Attention && call.scalars.size() == 4 ? 2 : -1;
}

bool kernel_draws_random(const OpCall& call) {
  return random_state_scalars(call) >= 0 && call.op != OpId::AttentionOutput;
}

RandomStateSlot::RandomStateSlot(const uint64_t* slot) : previous_(current_slot) {
  current_slot = slot;
}
RandomStateSlot::~RandomStateSlot() { current_slot = previous_; }
const uint64_t* RandomStateSlot::current() { return current_slot; }

}  // namespace kiln
