// The interface compiled traces plug into. A TraceProgram is what the recorder hands a
// backend: the ops of a hot trace with their wiring, how many external inputs and
// scalar arguments it takes, and which values were live (held by the user) at the
// boundary. A backend turns it into an Executable; the interpreting backend here runs
// the ops one by one through the eager kernels, the LLVM and CUDA backends (jit/) fuse.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tracer/trace_op.h"

namespace kiln::tracer {

struct TraceProgram {
  std::vector<TraceOp> ops;
  int num_externals = 0;
  int num_scalars = 0;
  std::vector<bool> live;  // per op: its value was held by the user at the boundary
};

class Executable {
 public:
  virtual ~Executable() = default;
  // Computes the trace for these inputs. values[i] receives op i's result where the
  // caller may need it (live outputs; in-place ops write into their targets).
  virtual void run(const std::vector<Tensor>& externals, const std::vector<Scalar>& scalars,
                   std::vector<Tensor>& values) const = 0;
  virtual int kernel_count() const = 0;
  virtual const char* backend_name() const = 0;
};

class TraceBackend {
 public:
  virtual ~TraceBackend() = default;
  // Returns nullptr when it cannot compile the program (the trace then stays eager).
  virtual std::unique_ptr<Executable> compile(const TraceProgram& program) = 0;
};

// Runs ops [0, count) of a program eagerly, in order: the side-exit path, and the whole
// of the interpreting backend.
void interpret(const TraceProgram& program, size_t count, const std::vector<Tensor>& externals,
               const std::vector<Scalar>& scalars, std::vector<Tensor>& values);

TraceBackend& interpreting_backend();

}  // namespace kiln::tracer
