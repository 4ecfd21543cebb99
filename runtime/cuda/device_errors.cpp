// Device-side error records (runtime/cuda_context.h, runtime/cuda/device_errors.h): one
// record per device in device memory and one pinned host copy, both allocated once and
// kept for the process (like the device states of cuda_context.cpp). A record costs the
// host reads of a device nothing until a kernel asks for it (armed); from then on each
// host read copies its 32 bytes along, in the same stream synchronization.
#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/cuda/device_errors.h"
#include "runtime/cuda_context.h"
#include "runtime/error.h"

namespace kiln::cuda_context {
namespace {

struct Slot {
  DeviceErrorRecord* record = nullptr;  // device memory
  DeviceErrorRecord* host = nullptr;    // pinned host memory, the fetched copy
  std::atomic<bool> armed{false};
  std::atomic<bool> fetched{false};
};

Slot& slot(int device) {
  static std::vector<Slot>* slots = new std::vector<Slot>(  // kept: see cuda_context.cpp
      static_cast<size_t>(device_count()));
  return (*slots)[static_cast<size_t>(device)];
}

std::mutex& names_mutex() {
  static std::mutex m;
  return m;
}

std::vector<std::string>& names() {
  static auto* n = new std::vector<std::string>{"a kernel"};
  return *n;
}

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw BackendError(detail::cat("[cuda] ", what, " failed: ", cudaGetErrorName(e)));
}

}  // namespace

unsigned int device_error_op_code(const char* op) {
  std::lock_guard<std::mutex> lock(names_mutex());
  std::vector<std::string>& n = names();
  for (size_t i = 0; i < n.size(); ++i)
    if (n[i] == op) return static_cast<unsigned int>(i);
  n.emplace_back(op);
  return static_cast<unsigned int>(n.size() - 1);
}

DeviceErrorRecord* device_error_record(int device) {
  stream(device);  // checks the device and makes sure the record exists
  Slot& s = slot(device);
  s.armed.store(true, std::memory_order_relaxed);
  return s.record;
}

namespace device_errors {

void prepare(int device, void* stream) {
  Slot& s = slot(device);
  void* record = nullptr;
  void* host = nullptr;
  check(cudaMalloc(&record, sizeof(DeviceErrorRecord)), "cudaMalloc (device error record)");
  check(cudaMallocHost(&host, sizeof(DeviceErrorRecord)), "cudaMallocHost (device error record)");
  check(cudaMemsetAsync(record, 0, sizeof(DeviceErrorRecord), static_cast<cudaStream_t>(stream)),
        "cudaMemsetAsync (device error record)");
  s.record = static_cast<DeviceErrorRecord*>(record);
  s.host = static_cast<DeviceErrorRecord*>(host);
}

void fetch(int device, void* stream) {
  Slot& s = slot(device);
  if (!s.armed.load(std::memory_order_relaxed)) return;
  check(cudaMemcpyAsync(s.host, s.record, sizeof(DeviceErrorRecord), cudaMemcpyDeviceToHost,
                        static_cast<cudaStream_t>(stream)),
        "cudaMemcpyAsync (device error record)");
  s.fetched.store(true, std::memory_order_relaxed);
}

void raise_fetched(int device, void* stream) {
  Slot& s = slot(device);
  if (!s.fetched.exchange(false, std::memory_order_relaxed) || s.host->flag == 0) return;
  const DeviceErrorRecord r = *s.host;
  *s.host = DeviceErrorRecord{};
  check(cudaMemsetAsync(s.record, 0, sizeof(DeviceErrorRecord), static_cast<cudaStream_t>(stream)),
        "cudaMemsetAsync (device error record)");
  std::string op;
  {
    std::lock_guard<std::mutex> lock(names_mutex());
    op = r.op < names().size() ? names()[r.op] : names()[0];
  }
  throw IndexError(detail::cat("[", op, "] index ", r.value, " is out of range for dim ", r.dim,
                               " with size ", r.limit, " (found on cuda:", device,
                               " by a kernel launched earlier; raised at this host read)"));
}

}  // namespace device_errors
}  // namespace kiln::cuda_context
