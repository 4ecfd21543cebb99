// A fuzz program: plain data that the generator writes, the interpreter runs, the
// shrinker edits, and program_text.h saves and reads back (tests/fuzz_cases/*.fuzz).
//
// A program declares its inputs (dtype, a shape per shape set, a memory layout, the
// range of their random values) and a list of steps; each step is one call of kiln's
// public C++ API (ops/api.h, Tensor methods) over earlier values. It runs for several
// iterations; iteration i runs in world schedule[i]: a shape set (the input shapes) and
// a data seed (input values and the random ops' seed). Inputs are either created fresh
// each iteration or kept in the same storage across iterations (holders) and refilled.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ops/registry.h"

namespace kfuzz {

using kiln::Dims;
using kiln::DType;
using kiln::OpId;

// A reference to a tensor: input `index` or the value of an earlier step.
struct Ref {
  bool input = true;
  int index = 0;
  bool operator==(const Ref& o) const { return input == o.input && index == o.index; }
};

// How an input's memory is laid out (the tracer guards on strides).
enum class Layout : uint8_t { Contiguous, Transposed, Stepped, Offset, Expanded };

struct InputDecl {
  DType dtype = DType::Float32;
  std::vector<Dims> shapes;  // one per shape set
  Layout layout = Layout::Contiguous;
  double lo = -2.0, hi = 2.0;  // floats: uniform in [lo, hi]; integers: [round(lo), round(hi)]
};

// Which API spelling of an op a step calls.
enum class Form : uint8_t {
  Call,           // kiln::op(tensors...) / t.view(...) / kiln::full(...)
  ScalarRight,    // kiln::op(t, s)
  ScalarLeft,     // kiln::op(s, t)
  InPlace,        // t.op_(u) / t.relu_() / t.clamp_(lo, hi)
  InPlaceScalar,  // t.op_(s)
  Copy,           // t.copy_(u)            (Cast into t)
  Fill,           // t.fill_(s) / zero_()  (Full into t)
  Clone,          // t.clone()
  Contiguous,     // t.contiguous()
  Item,           // s_k = t.item<double>() of a one-element tensor: a graph break
  HostRead,       // t.to_vector<double>(): a graph break, value unused
};

struct Step {
  OpId op = OpId::Add;
  Form form = Form::Call;
  std::vector<Ref> args;
  Dims ints;                // dims, sizes, permutation, index values, normalized shape
  int64_t a = 0;            // dim / start / kernel ...; meaning per op (interpret.cpp)
  int64_t b = 0;            // end / stride ...
  int64_t c = 0;            // step / padding / correction ...
  double s0 = 0.0;          // scalar operand, min, fill value, start
  double s1 = 0.0;          // max, end
  double s2 = 0.0;          // arange step
  int slot = -1;            // >= 0: scalar operand s0 + 0.01 * tanh(slot value) (an item() result)
  bool int_scalar = false;  // scalars are integers (Scalar(int64_t)), else doubles
  bool flag = false;        // keepdim, approximate_tanh, has_min, with bias, ...
  bool flag2 = false;       // has_max, with weight, ...
  DType dtype = DType::Float32;  // cast target, factory dtype
};

struct World {
  int shape_set = 0;
  uint64_t data_seed = 0;
};

struct Program {
  uint64_t seed = 0;  // the generator's seed (informative once shrunk)
  std::string device = "cpu";
  std::vector<InputDecl> inputs;
  std::vector<Step> steps;
  std::vector<World> worlds;
  std::vector<int> schedule;        // world of each iteration
  bool fresh_inputs = false;        // new input tensors every iteration (else refilled holders)
  bool read_each_iteration = true;  // read every value at the end of each iteration
};

// What a step leaves behind: a tensor value, a host scalar, or nothing (in place, reads).
enum class Produces { Value, Scalar, Nothing };
Produces produces(const Step& s);

// The number of values and scalars the steps before step `upto` produce.
int count_values(const Program& p, size_t upto);
int count_scalars(const Program& p, size_t upto);

const char* form_name(Form f);
bool parse_form(const std::string& s, Form* out);
const char* layout_name(Layout l);
bool parse_layout(const std::string& s, Layout* out);

}  // namespace kfuzz
