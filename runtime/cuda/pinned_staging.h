// Host-to-device copies that do not wait for the device (runtime/cuda_context.h's
// copy_host_to_device): the bytes are copied on the host into a pinned staging block at
// once, so the caller's buffer is free to change or go when the call returns, and the
// block is copied to the device asynchronously in stream order. A block is handed out
// again only once the event recorded after its copy has completed. A pageable source
// copied with cudaMemcpyAsync would make the host wait for all the stream's earlier work
// (a training loop's new batch would drain the GPU every step).
#pragma once

#include <cstddef>

namespace kiln::cuda_context::pinned_staging {

// KILN_CUDA_PINNED_STAGING=0 turns staging off (every host-to-device copy waits), for A/B
// measurements.
bool enabled();

// Copies nbytes from host src to device dst on `stream` (a cudaStream_t of `device`, the
// device current). False when it did not (too large for staging, or no pinned memory):
// the caller copies the synchronous way.
bool copy_to_device(void* dst, const void* src, size_t nbytes, int device, void* stream);

// Largest copy staged; larger ones are synchronous (a batch of that size hides the wait).
inline constexpr size_t kMaxStagedBytes = size_t{64} << 20;

}  // namespace kiln::cuda_context::pinned_staging
