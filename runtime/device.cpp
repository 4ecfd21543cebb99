#include "runtime/device.h"

#include <cstdlib>

#include "runtime/error.h"

namespace kiln {

Device Device::parse(const std::string& spec) {
  if (spec == "cpu") return kCPU;
  if (spec == "cuda") return Device(DeviceType::CUDA, 0);
  if (spec.rfind("cuda:", 0) == 0 && spec.size() > 5) {
    char* end = nullptr;
    long index = std::strtol(spec.c_str() + 5, &end, 10);
    if (*end == '\0' && index >= 0 && index < 1024)
      return Device(DeviceType::CUDA, static_cast<int>(index));
  }
  throw ValueError(detail::cat("[device] expected 'cpu', 'cuda' or 'cuda:N', got '", spec, "'"));
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace kiln
