// kiln::copy_across_devices (ops/kernels.h), the ToDevice family's kernel: CPU<->CUDA and
// CUDA<->CUDA copies of whole tensors. A strided source is first packed on its own device
// (kernel_contiguous), so only dense byte ranges cross the bus. Built with or without CUDA:
// without it, no CUDA tensor can exist (allocating one throws), so only CPU->CPU runs, and
// runtime/no_cuda's copy functions throw DeviceError.
#include <cstring>

#include "ops/kernels.h"
#include "runtime/cuda_context.h"
#include "runtime/error.h"

namespace kiln {

void copy_across_devices(const Tensor& src, const Tensor& out) {
  KILN_CHECK(src.sizes() == out.sizes() && src.dtype() == out.dtype() && out.is_contiguous(), Error,
             "[to_device] internal: copy_across_devices needs the same shape and dtype "
             "and a contiguous destination, got ",
             src.meta_str(), " -> ", out.meta_str());
  if (out.numel() == 0) return;
  Tensor packed = kernel_contiguous(src);
  size_t nbytes = static_cast<size_t>(packed.numel() * packed.element_size());
  Device from = packed.device(), to = out.device();
  if (from.is_cpu() && to.is_cpu()) {
    std::memcpy(out.data_ptr(), packed.data_ptr(), nbytes);
  } else if (from.is_cpu()) {
    cuda_context::copy_host_to_device(out.data_ptr(), packed.data_ptr(), nbytes, to.index);
  } else if (to.is_cpu()) {
    cuda_context::copy_device_to_host(out.data_ptr(), packed.data_ptr(), nbytes, from.index);
  } else {
    cuda_context::copy_device_to_device(out.data_ptr(), to.index, packed.data_ptr(), from.index,
                                        nbytes);
  }
}

}  // namespace kiln
