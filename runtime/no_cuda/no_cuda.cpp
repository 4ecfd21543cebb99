// The CUDA side of the runtime when kiln is built without the CUDA toolkit: every
// cuda_context function behaves as on a machine with no GPU (ops/no_cuda/cuda_kernels.cpp
// is the kernels' side).
#include "runtime/cuda_context.h"
#include "runtime/error.h"

namespace kiln {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  throw DeviceError(detail::cat("[", what, "] kiln was built without CUDA"));
}

}  // namespace

namespace cuda_context {

bool built_with_cuda() { return false; }
int device_count() { return 0; }
bool is_available() { return false; }
std::string device_name(int device) { no_cuda("cuda"); }
void* allocate(size_t nbytes, int device) { no_cuda("cuda"); }
void release(void* ptr, size_t nbytes, int device) {}
void empty_cache() {}
size_t cached_bytes(int device) { return 0; }
size_t allocated_bytes(int device) { return 0; }
size_t peak_allocated_bytes(int device) { return 0; }
void reset_peak_allocated(int device) {}
void* stream(int device) { no_cuda("cuda"); }
void synchronize(int device) { no_cuda("cuda"); }
void synchronize_checked(int device) { no_cuda("cuda"); }
void copy_host_to_device(void* dst, const void* src, size_t nbytes, int device) { no_cuda("cuda"); }
void copy_device_to_host(void* dst, const void* src, size_t nbytes, int device) { no_cuda("cuda"); }
void copy_device_to_device(void* dst, int dst_device, const void* src, int src_device,
                           size_t nbytes) {
  no_cuda("cuda");
}
void check_last_launch(const char* op) {}
DeviceErrorRecord* device_error_record(int device) { no_cuda("cuda"); }
unsigned int device_error_op_code(const char* op) { return 0; }
DeviceScope::DeviceScope(int device) {}
DeviceScope::~DeviceScope() = default;
struct CapturePool::State {};
CapturePool::CapturePool(int device) : state_(nullptr) { no_cuda("cuda"); }
CapturePool::~CapturePool() = default;
void CapturePool::open() {}
void CapturePool::close() {}

}  // namespace cuda_context

}  // namespace kiln
