// Runs fuzz programs through kiln's public C++ API: input data for a world, input
// tensors in each layout, and one step at a time over an environment of values.
#pragma once

#include <vector>

#include "../cpp/reference.h"
#include "program.h"

namespace kfuzz {

using kiln::Device;
using kiln::Tensor;
using kt::Host;

// The values of one input in one world (representable in its dtype; an expanded input
// repeats one row along dim 0).
Host input_data(const Program& p, int input, const World& world);

// An input tensor: `view` is what the program sees (with the declared layout), `base`
// the tensor that owns its storage (refilled between iterations when inputs persist).
struct InputTensor {
  Tensor base;
  Tensor view;
};
InputTensor make_input(const InputDecl& decl, const Host& data, int shape_set, Device device);
// Writes data into an input's storage the way a host loader fills a buffer.
void refill_input(const InputDecl& decl, const InputTensor& input, const Host& data, Device device);

struct Env {
  Device device;
  std::vector<Tensor> inputs;
  std::vector<Tensor> values;
  std::vector<double> scalars;  // item() results

  const Tensor& at(const Ref& r) const;
};

// Runs step s: appends its value or scalar to env, or mutates a tensor in place.
// Throws what kiln throws.
void run_step(const Step& s, Env& env);

// The Scalar a step passes (s0 plus the item() feedback of s.slot, if any).
kiln::Scalar step_scalar(const Step& s, double base, const Env& env);

// The op functions of the unary rows (nullptr for other ops).
using UnaryFn = Tensor (*)(const Tensor&);
UnaryFn unary_fn(OpId op);
bool is_unary(OpId op);
bool is_binary(OpId op);
bool has_in_place_method(OpId op);  // add_, sub_, mul_, div_

}  // namespace kfuzz
