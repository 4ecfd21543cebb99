// runtime/cuda_context.h over the CUDA runtime API (cudart, linked statically; never the
// driver library, so a binary starts on a machine without a driver).
//
// Detection: cudaGetDeviceCount once (std::call_once); "no driver" (35), "no device"
// (100) and any other failure mean zero devices, never an exception.
//
// Streams: one non-blocking stream per device, created on first use. Every kiln op on a
// device runs on it, so work on a device is totally ordered.
//
// Allocator: a caching allocator per device. Requests are rounded up (512 B granularity
// up to 1 MiB, 2 MiB granularity above) and released blocks go to a size-keyed free list
// and are handed out again; cudaMalloc runs only on a miss and cudaFree only when the
// cache is emptied. Reusing a block right after its release is safe without events
// because the freed block's last users and its next users are all on the device's one
// stream (stream order). On cudaErrorMemoryAllocation the cache is emptied and the
// allocation retried once; a second failure clears the error and throws
// OutOfMemoryError naming the request, kiln's usage and the device.
//
// Process exit: the per-device state is intentionally leaked (never destroyed), so that
// tensors destroyed during static destruction only push blocks onto free lists and no
// CUDA call runs after the CUDA runtime has been torn down.
#include "runtime/cuda_context.h"

#include <algorithm>
#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "runtime/cuda/device_errors.h"
#include "runtime/cuda/pinned_staging.h"
#include "runtime/error.h"

namespace kiln::cuda_context {
namespace {

constexpr size_t kSmallLimit = size_t{1} << 20;  // up to 1 MiB: 512 B granularity
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t{2} << 20;  // above: 2 MiB granularity

size_t round_block(size_t nbytes) {
  size_t g = nbytes <= kSmallLimit ? kSmallRound : kLargeRound;
  return (nbytes + g - 1) / g * g;
}

std::string error_text(cudaError_t e) {
  return detail::cat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

void throw_on_error(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the runtime stays usable
  throw BackendError(detail::cat("[cuda] ", what, " failed: ", error_text(e)));
}

}  // namespace

DeviceScope::DeviceScope(int device) {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    cudaGetLastError();
    previous_ = -1;
  }
  if (previous_ != device) throw_on_error(cudaSetDevice(device), "cudaSetDevice");
}

DeviceScope::~DeviceScope() {
  int now = -1;
  if (previous_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != previous_)
    cudaSetDevice(previous_);
}

struct CapturePool::State {
  int device = 0;
  std::unordered_set<void*> owned;  // allocated while the pool was open
  // Released by their tensors, held for the graph: block size -> block. While the pool
  // is open they serve its next allocations (the capture is one stream's work, so a block
  // freed earlier in it is free for what the graph runs later, as in the cache); they go
  // back to the cache only when the pool dies.
  std::multimap<size_t, void*> released;
};

namespace {

struct DeviceState {
  std::once_flag stream_once;
  cudaStream_t stream = nullptr;

  std::mutex mutex;                               // guards everything below
  std::multimap<size_t, void*> free_blocks;       // block size -> block
  std::unordered_map<void*, size_t> live_blocks;  // block -> block size
  size_t cached = 0;                              // bytes in free_blocks
  size_t allocated = 0;                           // bytes in live_blocks
  size_t peak_allocated = 0;  // the most `allocated` reached since start or the last reset
  CapturePool::State* capturing = nullptr;                 // the open capture pool, if any
  std::unordered_map<void*, CapturePool::State*> pool_of;  // block -> its capture pool
};

struct Devices {
  int count = 0;
  std::vector<DeviceState*> states;  // leaked on purpose (see the header comment)
};

const Devices& devices() {
  static Devices* d = [] {
    auto* out = new Devices();
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      // cudaErrorInsufficientDriver (35) and cudaErrorNoDevice (100) are the expected
      // answers on a machine without a GPU; anything else is treated the same way.
      cudaGetLastError();
      n = 0;
    }
    out->count = n;
    for (int i = 0; i < n; ++i) out->states.push_back(new DeviceState());
    return out;
  }();
  return *d;
}

DeviceState& state(int device) {
  const Devices& d = devices();
  KILN_CHECK(d.count > 0, DeviceError, "[cuda] cuda:", device,
             " was requested but no CUDA device is available (no GPU or no driver)");
  KILN_CHECK(device >= 0 && device < d.count, DeviceError, "[cuda] device cuda:", device,
             " does not exist (", d.count, " CUDA device", d.count == 1 ? "" : "s", ")");
  return *d.states[static_cast<size_t>(device)];
}

// Frees every cached block of one device. Caller holds s.mutex.
void free_cached_locked(DeviceState& s, int device) {
  if (s.free_blocks.empty()) return;
  DeviceScope scope(device);
  // cudaFree synchronizes the device anyway; sync first so errors are attributed here.
  if (s.stream) cudaStreamSynchronize(s.stream);
  for (auto& [size, ptr] : s.free_blocks) cudaFree(ptr);
  s.free_blocks.clear();
  s.cached = 0;
  cudaGetLastError();
}

// The largest free block a rounded request of `block` bytes may take: the exact size for
// small blocks, at most 25% larger for large ones (blocks are never split).
size_t reuse_limit(size_t block) { return block <= kSmallLimit ? block : block + block / 4; }

// Finds a cached block for a rounded request (reuse_limit).
void* take_cached_locked(DeviceState& s, size_t block) {
  auto it = s.free_blocks.lower_bound(block);
  if (it == s.free_blocks.end()) return nullptr;
  if (it->first > reuse_limit(block)) return nullptr;
  void* p = it->second;
  s.cached -= it->first;
  s.allocated += it->first;
  s.peak_allocated = std::max(s.peak_allocated, s.allocated);
  s.live_blocks.emplace(p, it->first);
  s.free_blocks.erase(it);
  return p;
}

void adopt_locked(DeviceState& s, void* p) {
  s.capturing->owned.insert(p);
  s.pool_of[p] = s.capturing;
}

}  // namespace

static void release_locked(DeviceState& s, void* ptr);

CapturePool::CapturePool(int device) : state_(new State()) {
  state(device);
  state_->device = device;
}

CapturePool::~CapturePool() {
  DeviceState& s = *devices().states[static_cast<size_t>(state_->device)];
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.capturing == state_) s.capturing = nullptr;
    for (void* p : state_->owned) s.pool_of.erase(p);
    for (const auto& [bytes, p] : state_->released) release_locked(s, p);
  }
  delete state_;
}

void CapturePool::open() {
  DeviceState& s = *devices().states[static_cast<size_t>(state_->device)];
  std::lock_guard<std::mutex> lock(s.mutex);
  s.capturing = state_;
}

void CapturePool::close() {
  DeviceState& s = *devices().states[static_cast<size_t>(state_->device)];
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.capturing == state_) s.capturing = nullptr;
}

bool built_with_cuda() { return true; }

int device_count() { return devices().count; }

bool is_available() { return device_count() > 0; }

std::string device_name(int device) {
  state(device);
  cudaDeviceProp prop;
  throw_on_error(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  return prop.name;
}

void* allocate(size_t nbytes, int device) {
  DeviceState& s = state(device);
  if (nbytes == 0) return nullptr;
  size_t block = round_block(nbytes);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.capturing) {  // a block the open pool's graph freed earlier in this capture
    auto& released = s.capturing->released;
    auto it = released.lower_bound(block);
    if (it != released.end() && it->first <= reuse_limit(block)) {
      void* p = it->second;
      released.erase(it);
      return p;
    }
  }
  if (void* p = take_cached_locked(s, block)) {
    if (s.capturing) adopt_locked(s, p);
    return p;
  }

  DeviceScope scope(device);
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, block);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    free_cached_locked(s, device);
    e = cudaMalloc(&p, block);
  }
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) cudaGetLastError();
    throw OutOfMemoryError(detail::cat(
        "[cuda] out of memory on cuda:", device, ": tried to allocate ", nbytes,
        " bytes; kiln has ", s.allocated, " bytes allocated on this device (cache emptied); ",
        free_b, " of ", total_b, " bytes free on the device"));
  }
  throw_on_error(e, "cudaMalloc");
  s.allocated += block;
  s.peak_allocated = std::max(s.peak_allocated, s.allocated);
  s.live_blocks.emplace(p, block);
  if (s.capturing) adopt_locked(s, p);
  return p;
}

void release(void* ptr, size_t nbytes, int device) {
  if (ptr == nullptr) return;
  const Devices& d = devices();
  if (device < 0 || device >= d.count) return;  // cannot happen for kiln's own blocks
  DeviceState& s = *d.states[static_cast<size_t>(device)];
  std::lock_guard<std::mutex> lock(s.mutex);
  if (auto pool = s.pool_of.find(ptr); pool != s.pool_of.end()) {
    auto block = s.live_blocks.find(ptr);  // a graph may still use it: kept by its pool
    if (block != s.live_blocks.end()) pool->second->released.emplace(block->second, ptr);
    return;
  }
  release_locked(s, ptr);
}

static void release_locked(DeviceState& s, void* ptr) {
  auto it = s.live_blocks.find(ptr);
  if (it == s.live_blocks.end()) return;  // not ours: ignore rather than corrupt the cache
  size_t block = it->second;
  s.live_blocks.erase(it);
  s.allocated -= block;
  s.cached += block;
  s.free_blocks.emplace(block, ptr);
}

void empty_cache() {
  const Devices& d = devices();
  for (int i = 0; i < d.count; ++i) {
    DeviceState& s = *d.states[static_cast<size_t>(i)];
    std::lock_guard<std::mutex> lock(s.mutex);
    free_cached_locked(s, i);
  }
}

size_t cached_bytes(int device) {
  const Devices& d = devices();
  if (device < 0 || device >= d.count) return 0;
  DeviceState& s = *d.states[static_cast<size_t>(device)];
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.cached;
}

size_t allocated_bytes(int device) {
  const Devices& d = devices();
  if (device < 0 || device >= d.count) return 0;
  DeviceState& s = *d.states[static_cast<size_t>(device)];
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.allocated;
}

size_t peak_allocated_bytes(int device) {
  const Devices& d = devices();
  if (device < 0 || device >= d.count) return 0;
  DeviceState& s = *d.states[static_cast<size_t>(device)];
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.peak_allocated;
}

void reset_peak_allocated(int device) {
  const Devices& d = devices();
  if (device < 0 || device >= d.count) return;
  DeviceState& s = *d.states[static_cast<size_t>(device)];
  std::lock_guard<std::mutex> lock(s.mutex);
  s.peak_allocated = s.allocated;
}

void* stream(int device) {
  DeviceState& s = state(device);
  std::call_once(s.stream_once, [&] {
    DeviceScope scope(device);
    throw_on_error(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking),
                   "cudaStreamCreateWithFlags");
    device_errors::prepare(device, s.stream);
  });
  return s.stream;
}

void synchronize(int device) {
  auto st = static_cast<cudaStream_t>(stream(device));
  throw_on_error(cudaStreamSynchronize(st), "cudaStreamSynchronize");
}

// The user's host reads (synchronize_checked, copies to the host) also raise what kernels
// recorded in the device's DeviceErrorRecord, fetched within the same synchronization.
void synchronize_checked(int device) {
  auto st = static_cast<cudaStream_t>(stream(device));
  DeviceScope scope(device);
  device_errors::fetch(device, st);
  throw_on_error(cudaStreamSynchronize(st), "cudaStreamSynchronize");
  device_errors::raise_fetched(device, st);
}

void copy_host_to_device(void* dst, const void* src, size_t nbytes, int device) {
  if (nbytes == 0) return;
  auto st = static_cast<cudaStream_t>(stream(device));
  DeviceScope scope(device);
  if (pinned_staging::copy_to_device(dst, src, nbytes, device, st)) return;
  throw_on_error(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, st),
                 "cudaMemcpyAsync (host to device)");
  throw_on_error(cudaStreamSynchronize(st), "cudaStreamSynchronize (host to device)");
}

void copy_device_to_host(void* dst, const void* src, size_t nbytes, int device) {
  if (nbytes == 0) return;
  auto st = static_cast<cudaStream_t>(stream(device));
  DeviceScope scope(device);
  throw_on_error(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, st),
                 "cudaMemcpyAsync (device to host)");
  device_errors::fetch(device, st);
  throw_on_error(cudaStreamSynchronize(st), "cudaStreamSynchronize (device to host)");
  device_errors::raise_fetched(device, st);
}

void copy_device_to_device(void* dst, int dst_device, const void* src, int src_device,
                           size_t nbytes) {
  if (nbytes == 0) return;
  auto src_stream = static_cast<cudaStream_t>(stream(src_device));
  if (dst_device == src_device) {
    DeviceScope scope(src_device);
    throw_on_error(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, src_stream),
                   "cudaMemcpyAsync (device to device)");
    return;
  }
  // Across devices: the destination block may still be read or written by earlier work
  // on its own stream, and later work there must see the data, so wait on both sides.
  auto dst_stream = static_cast<cudaStream_t>(stream(dst_device));
  {
    DeviceScope scope(dst_device);
    throw_on_error(cudaStreamSynchronize(dst_stream), "cudaStreamSynchronize (peer copy)");
  }
  DeviceScope scope(src_device);
  throw_on_error(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, nbytes, src_stream),
                 "cudaMemcpyPeerAsync");
  throw_on_error(cudaStreamSynchronize(src_stream), "cudaStreamSynchronize (peer copy)");
}

void check_last_launch(const char* op) {
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return;
  throw BackendError(detail::cat("[", op, "] CUDA kernel launch failed: ", error_text(e)));
}

}  // namespace kiln::cuda_context
