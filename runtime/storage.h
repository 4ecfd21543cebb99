// Storage: a block of memory on one device, shared by a tensor and all its views.
// Memory comes from the device's allocator (cached blocks) or from outside (numpy,
// DLPack), in which case a release callback frees it when the last view goes away.
#pragma once

#include <cstddef>
#include <memory>

#include "runtime/device.h"

namespace kiln {

class Storage {
 public:
  using ReleaseFn = void (*)(void* ctx, void* data, size_t nbytes, Device device);

  Storage(void* data, size_t nbytes, Device device, ReleaseFn release, void* ctx)
      : data_(data), nbytes_(nbytes), device_(device), release_(release), ctx_(ctx) {}
  ~Storage() {
    if (release_) release_(ctx_, data_, nbytes_, device_);
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // New memory on device (cached allocator). Throws OutOfMemoryError.
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device);
  // Wraps memory owned elsewhere; release(ctx, ...) runs when the storage dies.
  static std::shared_ptr<Storage> wrap(void* data, size_t nbytes, Device device, ReleaseFn release,
                                       void* ctx) {
    return std::make_shared<Storage>(data, nbytes, device, release, ctx);
  }

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t nbytes_;
  Device device_;
  ReleaseFn release_;
  void* ctx_;
};

}  // namespace kiln
