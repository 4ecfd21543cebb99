#include "runtime/storage.h"

#include "runtime/cpu_allocator.h"
#include "runtime/cuda_context.h"

namespace kiln {
namespace {

void release_cpu(void*, void* data, size_t nbytes, Device) { cpu_allocator::release(data, nbytes); }
void release_cuda(void*, void* data, size_t nbytes, Device device) {
  cuda_context::release(data, nbytes, device.index);
}

}  // namespace

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  if (device.is_cpu()) {
    return std::make_shared<Storage>(cpu_allocator::allocate(nbytes), nbytes, device, release_cpu,
                                     nullptr);
  }
  void* p = cuda_context::allocate(nbytes, device.index);
  return std::make_shared<Storage>(p, nbytes, device, release_cuda, nullptr);
}

}  // namespace kiln
