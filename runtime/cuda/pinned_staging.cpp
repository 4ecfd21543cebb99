#include "runtime/cuda/pinned_staging.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::cuda_context::pinned_staging {
namespace {

constexpr size_t kMinBlock = size_t{64} << 10;
// Pinned bytes a device's pool may hold; past it, a copy waits for the oldest block.
constexpr size_t kPoolLimit = size_t{256} << 20;

struct Block {
  void* host = nullptr;
  size_t size = 0;
  cudaEvent_t done = nullptr;   // recorded after the block's last copy
  unsigned long long used = 0;  // when it was last handed out (a counter)
};

size_t block_size(size_t nbytes) {
  size_t s = kMinBlock;
  while (s < nbytes) s *= 2;
  return s;
}

// One device's blocks. Leaked at exit with the rest of the CUDA state (cuda_context.cpp).
struct Pool {
  std::mutex mutex;
  std::vector<Block> blocks;
  size_t bytes = 0;
  unsigned long long clock = 0;

  // A block of at least nbytes whose last copy has completed, or nullptr.
  Block* take(size_t nbytes) {
    Block* best = nullptr;
    for (Block& b : blocks)
      if (b.size >= nbytes && (!best || b.size < best->size) &&
          cudaEventQuery(b.done) == cudaSuccess)
        best = &b;
    cudaGetLastError();  // cudaEventQuery's cudaErrorNotReady is not sticky; clear it
    if (best) return best;
    const size_t size = block_size(nbytes);
    if (bytes + size > kPoolLimit) {
      // Full: wait for the least recently used block big enough (or give up).
      Block* oldest = nullptr;
      for (Block& b : blocks)
        if (b.size >= nbytes && (!oldest || b.used < oldest->used)) oldest = &b;
      if (!oldest || cudaEventSynchronize(oldest->done) != cudaSuccess) return nullptr;
      return oldest;
    }
    Block b;
    b.size = size;
    if (cudaHostAlloc(&b.host, size, cudaHostAllocDefault) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    if (cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      cudaFreeHost(b.host);
      return nullptr;
    }
    blocks.push_back(b);
    bytes += size;
    return &blocks.back();
  }
};

Pool& pool(int device) {
  static std::mutex mutex;
  static auto* pools = new std::map<int, Pool>();  // leaked: see Pool
  std::lock_guard<std::mutex> lock(mutex);
  return (*pools)[device];
}

}  // namespace

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_CUDA_PINNED_STAGING");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

bool copy_to_device(void* dst, const void* src, size_t nbytes, int device, void* stream) {
  if (nbytes > kMaxStagedBytes || !enabled()) return false;
  auto st = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  // A captured copy would replay from a block handed out again: never stage in a capture.
  if (cudaStreamIsCapturing(st, &capture) != cudaSuccess ||
      capture != cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    return false;
  }
  Pool& p = pool(device);
  std::lock_guard<std::mutex> lock(p.mutex);
  Block* b = p.take(nbytes);
  if (!b) return false;
  std::memcpy(b->host, src, nbytes);
  b->used = ++p.clock;
  if (cudaMemcpyAsync(dst, b->host, nbytes, cudaMemcpyHostToDevice, st) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  // Recording can only fail on a broken context; the next take() then sees an error and
  // does not hand the block out while its copy may still run.
  cudaEventRecord(b->done, st);
  return true;
}

}  // namespace kiln::cuda_context::pinned_staging
