// The CUDA side of the runtime: GPU detection at run time (no link against the
// driver; a machine with no driver or no GPU simply reports zero devices), one
// stream per device, a caching device allocator (no cudaMalloc per op), copies.
// Work is asynchronous on each device's stream; synchronize() and the copies to the
// host are the only places the host waits. When kiln is built without the CUDA toolkit,
// every function here behaves as on a machine with no GPU.
#pragma once

#include <cstddef>
#include <string>

namespace kiln::cuda_context {

bool built_with_cuda();
int device_count();   // 0 without a driver or GPU (never throws)
bool is_available();  // device_count() > 0
std::string device_name(int device);

// Throws DeviceError when the device does not exist, OutOfMemoryError (naming the
// size asked for and the memory in use) when even after freeing the cache it fails.
void* allocate(size_t nbytes, int device);
void release(void* ptr, size_t nbytes, int device);
void empty_cache();
size_t cached_bytes(int device);
size_t allocated_bytes(int device);  // bytes of the blocks in use (block sizes)
// The most allocated_bytes reached since the process started or the last reset (which
// sets it to the bytes in use now).
size_t peak_allocated_bytes(int device);
void reset_peak_allocated(int device);

// A private pool for CUDA Graph capture: while one is open on a device, the blocks
// allocated there belong to it, and releasing them is deferred until the pool is
// destroyed, because a captured graph keeps using every address it saw (an op's
// temporary freed during capture must not be handed to anyone else while the graph can
// replay). Within the capture the pool reuses its own released blocks (the graph runs its
// work in the captured stream order, like the cache), so it holds the most temporaries
// alive at once, not their sum. Blocks still in use when the pool dies go back to the
// cache on their release.
class CapturePool {
 public:
  explicit CapturePool(int device);
  ~CapturePool();
  CapturePool(const CapturePool&) = delete;
  CapturePool& operator=(const CapturePool&) = delete;
  void open();   // allocations on the device from now on belong to this pool
  void close();  // ... until here
  struct State;

 private:
  State* state_;
};

// Makes `device` current for the calling thread for the scope and restores the previous
// one: every host call that launches or captures work for a device holds one, whatever
// device the thread had current (a DDP rank on cuda:1 keeps cuda:0 current). Throws
// BackendError when the device cannot be made current. Without CUDA: does nothing.
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

// The stream every kiln op on this device runs on (a cudaStream_t).
void* stream(int device);
// Waits for the device's stream (kiln's own waits: before unloading code, freeing memory).
void synchronize(int device);
// The user's synchronize (kiln.cuda.synchronize): waits, then raises what kernels
// recorded in the device's DeviceErrorRecord (see below).
void synchronize_checked(int device);

// Copies. Host to device does not wait for the device: the bytes go through a pinned
// staging block (runtime/cuda/pinned_staging.h), and the source may change once the call
// returns; copies over 64 MiB and copies while the stream captures a graph synchronize.
// Device to host synchronizes the stream before returning.
void copy_host_to_device(void* dst, const void* src, size_t nbytes, int device);
void copy_device_to_host(void* dst, const void* src, size_t nbytes, int device);
void copy_device_to_device(void* dst, int dst_device, const void* src, int src_device,
                           size_t nbytes);

// Throws BackendError with the CUDA error's name if the last launch failed.
void check_last_launch(const char* op);

// Bad input found by a kernel (an out-of-range index) without a host sync and without a
// device assert (which would poison the context): the kernel claims the device's record
// (atomicCAS on flag 0 -> 1; the first error wins) and fills it in. The next host read on
// that device (copy_device_to_host, synchronize_checked) raises IndexError naming the op, the
// bad value and its range, and clears the record, so the runtime stays usable. kiln's
// internal waits (synchronize) leave the record for the user's next read.
struct DeviceErrorRecord {
  unsigned int flag;  // 0: no error; 1: the fields below hold the first one
  unsigned int op;    // device_error_op_code(name)
  long long value;    // the bad index
  long long limit;    // valid values are [0, limit)
  long long dim;      // the dimension it indexes
};
// The device's record (device memory, allocated with the device's stream, never during
// a graph capture). Asking for it arms the checks at host reads on that device.
DeviceErrorRecord* device_error_record(int device);
// A small code for an op name, to store in DeviceErrorRecord::op.
unsigned int device_error_op_code(const char* op);

}  // namespace kiln::cuda_context
