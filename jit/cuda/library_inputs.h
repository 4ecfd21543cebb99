// What a CUDA trace's library calls (cuBLAS, eager kernels inside its graphs) read at
// stable addresses, so that a captured call stays valid across replays:
//  - staging buffers: a library call's input that arrives at a new address on a later
//    run (a new batch tensor each step, a value the user receives fresh each run) would
//    change what the captured call reads and force a re-capture on every replay. Once an
//    input slot has moved, the call reads it from a buffer owned by the trace instead,
//    with the same strides, and a copy node (patched per replay, no re-capture) fills it
//    with the bytes the view spans just before the call. Inputs that never move
//    (parameters, arena values) are read in place; a view spanning over 4x its elements
//    (a column of a large tensor) is not staged.
//  - random-state slots: a call whose kernel draws random numbers (ops/kernels.h,
//    RandomStateSlot) reads its (seed, offset) from a device slot of its own, written by
//    a kernel node just before the call, so the call stays the same while the
//    generator advances.
// Both get graph node ids from first_node_id on (after the steps' own ids).
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "ops/registry.h"
#include "runtime/storage.h"

namespace kiln::jit::cuda_backend {

struct StageCopy {
  int id;  // the copy node's id
  void* dst;
  const void* src;
  size_t bytes;
};

struct RandomSlot {
  int id = 0;   // the writing kernel node's id
  Tensor slot;  // int64 [2]: seed, offset
};

class LibraryInputs {
 public:
  LibraryInputs(Device device, int first_node_id) : device_(device), next_id_(first_node_id) {}

  // Library step s's call: points the inputs that have moved since an earlier run at
  // their staging buffers and appends the copies that fill them to out[s]. `result` is
  // the call's output (inputs sharing its storage are read in place).
  void stage_moving_inputs(int s, OpCall& call, const Tensor& result,
                           std::map<int, std::vector<StageCopy>>& out);
  // Step s's slot when its call draws random numbers through one (else null).
  const RandomSlot* random_slot(int s, const OpCall& call);
  size_t staged() const { return stages_.size(); }

 private:
  struct Stage {
    int id = 0;                        // its copy node's id
    std::shared_ptr<Storage> storage;  // the moving input's span, copied before each call
    Tensor buffer;                     // the input's view of it, as the library call reads
  };
  Device device_;
  int next_id_;
  std::map<std::pair<int, int>, Stage> stages_;            // by (step, input)
  std::map<std::pair<int, int>, const void*> last_input_;  // until a slot moves
  std::map<int, RandomSlot> random_slots_;                 // by step
};

}  // namespace kiln::jit::cuda_backend
