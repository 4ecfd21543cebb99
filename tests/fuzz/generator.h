// The fuzz program generator. It builds a program step by step and runs every candidate
// step eagerly in each of the program's worlds as it goes, so it knows every value's
// shape, dtype and strides, and keeps only steps that are valid in all worlds (kiln's
// own errors are the bad-input test's business, tests/cpp/test_bad_input.cpp).
//
// It also keeps programs well conditioned, so that a mismatch between legs is a bug and
// not rounding: each world has a shadow copy where the output of every op that rounds
// (arithmetic, transcendental, reductions) is perturbed by a few units in the last place
// of its dtype, about what a fused kernel may legitimately differ by. A step whose value
// differs between a world and its shadow by more than half the comparison tolerance
// (a comparison or a cast to an integer next to its threshold, an argmax tie of rounded
// values, log or a division near 0, a cancellation) is dropped and another one drawn.
#pragma once

#include <cstdint>

#include "program.h"

namespace kfuzz {

struct GenerateOptions {
  std::string device = "cpu";  // the device the program's tensors live on
  int min_steps = 3;
  int max_steps = 24;
};

Program generate(uint64_t seed, const GenerateOptions& options = {});

// True when every step of p runs eagerly without an error in each of p's worlds (the
// shrinker keeps only such candidates).
bool runs_in_all_worlds(const Program& p);

}  // namespace kfuzz
