// The nccl backend when kiln is built without CUDA: never available.
#include "runtime/distributed/backends.h"
#include "runtime/error.h"

namespace kiln::distributed {

bool nccl_available() { return false; }

std::unique_ptr<ProcessGroup> make_nccl_group(const Rendezvous&, int) {
  throw DeviceError("[init_process_group] backend='nccl': kiln was built without CUDA");
}

}  // namespace kiln::distributed
