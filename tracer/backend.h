// The interface compiled traces plug into. A TraceProgram is what the tracer hands a
// backend to compile: the ops of a hot trace with their wiring, how many external inputs and
// scalar arguments it takes, and which values were live (held by the user) at the
// boundary. A backend turns it into an Executable; the interpreting backend here runs
// the ops one by one through the eager kernels, the LLVM and CUDA backends (jit/) fuse.
#pragma once

#include <cstddef>
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
  // Per op: the user still held its value 64+ ops after its last reader in the trace, on
  // the walk the trace was compiled from (a loss kept across a micro-step), though not at
  // the boundary (values autograd keeps for backward are dropped after their reader). A
  // plan keeps such values in memory (its arena), so a replay launched in parts
  // (PartialRun) can go on past them while the user holds them.
  std::vector<bool> held;
};

// The device a trace's work runs on: its first op not on the CPU, else the CPU. Host-side
// ops (a batch built on the CPU and copied in) may come before it and beside it.
inline Device home_device(const TraceProgram& program) {
  for (const TraceOp& op : program.ops)
    if (!op.meta.device.is_cpu()) return op.meta.device;
  return program.ops.empty() ? Device() : program.ops[0].meta.device;
}

// A replay launched in parts while the walk still runs the user's code (pipelined replay,
// replay.h): each part as soon as the walk has passed its last op, so the device computes
// while the host walks. Made by Executable::start_partial(); holds the trace for its
// run. The tracer calls launch_through() as the walk goes on, then finish() where the walk
// ends at the trace's end, or abandon() where it leaves the trace.
class PartialRun {
 public:
  virtual ~PartialRun() = default;
  // The walk depth (ops walked) at which the next part may launch; SIZE_MAX when none.
  virtual size_t next_launch_at() const = 0;
  // Launches every part the walk has passed (`depth` ops walked) with the inputs and
  // scalars seen so far. A part whose ops' values the user holds (`outputs`, per op) but
  // the plan does not keep is not launched, nor any after it: they run at finish().
  virtual void launch_through(size_t depth, const std::vector<Tensor>& externals,
                              const std::vector<Scalar>& scalars,
                              const std::vector<std::weak_ptr<TensorImpl>>& outputs) = 0;
  // The rest, as Executable::run would have done the whole.
  virtual void finish(const std::vector<Tensor>& externals, const std::vector<Scalar>& scalars,
                      std::vector<Tensor>& values, const std::vector<bool>& wanted) = 0;
  // The walk left the trace: values[i] for the ops [0, returned) that ran (every value a
  // later op reads); the caller runs the rest.
  virtual size_t abandon(const std::vector<Tensor>& externals, std::vector<Tensor>& values) = 0;
};

class Executable {
 public:
  virtual ~Executable() = default;
  // Computes the trace for these inputs. values[i] receives op i's result for every op
  // with wanted[i] set (the values the user holds now; in-place ops write into their
  // targets). A value wanted now that was not live when the trace was compiled must still
  // come out right (a fused backend may fall back to interpreting for it).
  virtual void run(const std::vector<Tensor>& externals, const std::vector<Scalar>& scalars,
                   std::vector<Tensor>& values, const std::vector<bool>& wanted) const = 0;
  virtual int kernel_count() const = 0;
  virtual const char* backend_name() const = 0;
  // What stayed unfused or fell back, and why (shown by explain()).
  virtual std::vector<std::string> notes() const { return {}; }
  // A run launched in parts (PartialRun), or nullptr where the backend launches a trace
  // only as a whole.
  virtual std::unique_ptr<PartialRun> start_partial() const { return nullptr; }
  // Gives back the memory kept between runs for intermediates (a fused trace's arena; the
  // next run allocates it again). A symbolic trace's size bindings (symbolic_shapes.h)
  // call it after each run: up to 64 bindings each keeping an arena of its own sizes held
  // memory that the next size could reuse from the CPU allocator's cache, warm.
  virtual void release_scratch() const {}
  // Bytes of the memory its intermediates take in each run (a fused trace's arena).
  virtual int64_t arena_bytes() const { return 0; }
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
// Runs ops [start, count), with values[0, start) holding what they read (PartialRun::abandon).
void interpret_from(const TraceProgram& program, size_t start, size_t count,
                    const std::vector<Tensor>& externals, const std::vector<Scalar>& scalars,
                    std::vector<Tensor>& values);

TraceBackend& interpreting_backend();

// Fused backends (jit/) register themselves at load time; compile_trace() tries them in
// order and falls back to the interpreter when none takes the program, or when KILN_JIT=0.
void register_backend(TraceBackend* backend);
// For tests: a backend tried before the registered ones, and its removal.
void register_backend_first(TraceBackend* backend);
void unregister_backend(TraceBackend* backend);
std::unique_ptr<Executable> compile_trace(const TraceProgram& program);

}  // namespace kiln::tracer
