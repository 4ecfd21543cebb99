// Runs a fuzz program in each leg (eager on the CPU is the reference; traced and
// interpreted; traced and JIT-compiled; eager and JIT on CUDA when the program asks for
// it) and compares what each leg produced: every value of every iteration (or of the
// last one, when the program reads at the end), the inputs it mutated, or the error kiln
// threw. Tolerances by dtype; NaN equals NaN; integers and bools compare exactly.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "../cpp/run_modes.h"
#include "interpret.h"

namespace kfuzz {

using kt::RunMode;

struct Outcome {
  std::vector<Host> values;
  std::vector<std::string> labels;  // "iteration 2 v5", "input in1"
  std::vector<DType> dtypes;
  std::string error;     // set when kiln threw: "ShapeError: [add] ..."
  std::string error_at;  // "iteration 1 step 4"
};

// symbolic_shapes: the tracer's symbolic sizes (tracer/symbolic_shapes.h) on for the run.
Outcome run_program(const Program& p, RunMode mode, Device device, bool symbolic_shapes = false);

struct Leg {
  std::string name;  // "cpu/jit"
  RunMode mode;
  Device device;
  bool symbolic_shapes = false;
};
// cpu/eager (the reference), cpu/interpreted, cpu/jit, cpu/jit-symbolic (symbolic sizes
// on: the shape sets of a program change sizes between iterations); with cuda:
// cuda/eager, cuda/jit.
std::vector<Leg> legs_for(bool with_cuda);

// Tolerance for float values of a program: by its least precise float dtype.
kt::Tol program_tolerance(const Program& p);

struct Mismatch {
  std::string leg;
  std::string detail;
};
// The first leg whose outcome differs from cpu/eager, or nothing.
std::optional<Mismatch> find_mismatch(const Program& p, const std::vector<Leg>& legs);

}  // namespace kfuzz
