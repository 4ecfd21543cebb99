// Out-of-range indices found by a kernel, with no host sync: the first one is recorded in
// the device's DeviceErrorRecord (runtime/cuda_context.h) and the next host read raises
// IndexError "[op] index 7 is out of range for dim 0 with size 5". The kernel reading a bad
// index must not touch memory through it (a gather writes a zero, a scatter skips it).
// Shared by index_select and the gather/scatter family, so that they can be captured in a
// CUDA graph and replayed without stalling the stream.
#pragma once

#include <cstdint>

#include "runtime/cuda_context.h"

namespace kiln::cuda_impl {

// Where a kernel reports: the device's record, the op's code and the indexed dim.
struct BadIndexReport {
  cuda_context::DeviceErrorRecord* record;
  unsigned int op;
  int64_t dim;
};

// The report for op `op` (a name, as the error will print it) indexing `dim` on `device`.
inline BadIndexReport bad_index_report(const char* op, int device, int64_t dim) {
  return BadIndexReport{cuda_context::device_error_record(device),
                        cuda_context::device_error_op_code(op), dim};
}

// Records value (valid: [0, size)); an earlier error is kept.
__device__ inline void report_bad_index(const BadIndexReport& r, int64_t value, int64_t size) {
  if (atomicCAS(&r.record->flag, 0u, 1u) != 0u) return;
  r.record->op = r.op;
  r.record->value = value;
  r.record->limit = size;
  r.record->dim = r.dim;
}

}  // namespace kiln::cuda_impl
