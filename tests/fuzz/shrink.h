// Shrinks a failing fuzz program to a small one that still fails (delta debugging):
// drops steps (chunks, then one at a time, with the steps that use what they made),
// unused inputs and iterations, then shrinks input shapes, simplifies dtypes to float32,
// layouts to contiguous and scalars to constants. Every candidate must still run
// eagerly in all its worlds; `fails` decides whether it still reproduces the bug.
#pragma once

#include <functional>

#include "program.h"

namespace kfuzz {

struct ShrinkBudget {
  int max_candidates = 400;
  double max_seconds = 120.0;
};

struct ShrinkStats {
  int candidates = 0;  // programs tried
  int accepted = 0;    // edits kept
};

Program shrink(const Program& failing, const std::function<bool(const Program&)>& fails,
               const ShrinkBudget& budget = {}, ShrinkStats* stats = nullptr);

// p without the steps in `drop` and every later step that reads a value or scalar they
// produced; references are renumbered.
Program remove_steps(const Program& p, const std::vector<bool>& drop);
// p without the inputs no step reads.
Program remove_unused_inputs(const Program& p);

}  // namespace kfuzz
