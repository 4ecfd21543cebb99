// The CUDA side of the runtime when kiln is built without the CUDA toolkit: every
// cuda_context function behaves as on a machine with no GPU, every kiln::cuda kernel
// throws DeviceError, and copy_across_devices only knows the CPU.
#include <cstring>

#include "ops/kernels.h"
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
void* stream(int device) { no_cuda("cuda"); }
void synchronize(int device) { no_cuda("cuda"); }
void copy_host_to_device(void* dst, const void* src, size_t nbytes, int device) { no_cuda("cuda"); }
void copy_device_to_host(void* dst, const void* src, size_t nbytes, int device) { no_cuda("cuda"); }
void copy_device_to_device(void* dst, int dst_device, const void* src, int src_device,
                           size_t nbytes) {
  no_cuda("cuda");
}
void check_last_launch(const char* op) {}
struct CapturePool::State {};
CapturePool::CapturePool(int device) : state_(nullptr) { no_cuda("cuda"); }
CapturePool::~CapturePool() = default;
void CapturePool::open() {}
void CapturePool::close() {}

}  // namespace cuda_context

namespace cuda {

#define KILN_NO_CUDA_KERNEL(fn) \
  void fn(const OpCall& call, const Tensor& out) { no_cuda(call.name()); }
KILN_NO_CUDA_KERNEL(unary)
KILN_NO_CUDA_KERNEL(clamp)
KILN_NO_CUDA_KERNEL(binary)
KILN_NO_CUDA_KERNEL(where)
KILN_NO_CUDA_KERNEL(reduce)
KILN_NO_CUDA_KERNEL(softmax)
KILN_NO_CUDA_KERNEL(layer_norm)
KILN_NO_CUDA_KERNEL(matmul)
KILN_NO_CUDA_KERNEL(linear)
KILN_NO_CUDA_KERNEL(conv2d)
KILN_NO_CUDA_KERNEL(pool2d)
KILN_NO_CUDA_KERNEL(unfold)
KILN_NO_CUDA_KERNEL(cat)
KILN_NO_CUDA_KERNEL(index_select)
KILN_NO_CUDA_KERNEL(gather)
KILN_NO_CUDA_KERNEL(scatter)
KILN_NO_CUDA_KERNEL(sort)
KILN_NO_CUDA_KERNEL(scan)
KILN_NO_CUDA_KERNEL(multinomial)
KILN_NO_CUDA_KERNEL(nonzero)
KILN_NO_CUDA_KERNEL(factory)
KILN_NO_CUDA_KERNEL(random)
#undef KILN_NO_CUDA_KERNEL

}  // namespace cuda

void copy_across_devices(const Tensor& src, const Tensor& out) {
  KILN_CHECK(src.sizes() == out.sizes() && src.dtype() == out.dtype() && out.is_contiguous(), Error,
             "[to_device] internal: copy_across_devices needs the same shape and dtype "
             "and a contiguous destination, got ",
             src.meta_str(), " -> ", out.meta_str());
  if (!src.device().is_cpu() || !out.device().is_cpu()) no_cuda("to_device");
  if (out.numel() == 0) return;
  Tensor packed = kernel_contiguous(src);
  std::memcpy(out.data_ptr(), packed.data_ptr(),
              static_cast<size_t>(packed.numel() * packed.element_size()));
}

}  // namespace kiln
