#include "runtime/gpu_timer.h"

#include <cuda_runtime_api.h>

#include "runtime/cuda_context.h"

namespace kiln::gpu_timer {

bool capturing(int device) {
  if (!cuda_context::is_available()) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(static_cast<cudaStream_t>(cuda_context::stream(device)), &status) !=
      cudaSuccess)
    return true;  // unknown: leave the stream alone
  return status != cudaStreamCaptureStatusNone;
}

void* record(int device) {
  if (!cuda_context::is_available() || capturing(device)) return nullptr;
  int saved = 0;
  if (cudaGetDevice(&saved) != cudaSuccess) return nullptr;
  if (saved != device && cudaSetDevice(device) != cudaSuccess) return nullptr;
  cudaEvent_t event = nullptr;
  if (cudaEventCreate(&event) == cudaSuccess &&
      cudaEventRecord(event, static_cast<cudaStream_t>(cuda_context::stream(device))) !=
          cudaSuccess) {
    cudaEventDestroy(event);
    event = nullptr;
  }
  if (saved != device) cudaSetDevice(saved);
  return event;
}

double elapsed_ms(void* from, void* to) {
  if (!from || !to) return -1;
  if (cudaEventSynchronize(static_cast<cudaEvent_t>(to)) != cudaSuccess) return -1;
  float ms = 0;
  if (cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from), static_cast<cudaEvent_t>(to)) !=
      cudaSuccess)
    return -1;
  return ms;
}

void destroy(void* event) {
  if (event) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

}  // namespace kiln::gpu_timer
