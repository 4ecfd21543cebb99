// Tensor: a cheap-to-copy handle (shared ownership) to a TensorImpl, which views a
// Storage through sizes, strides (in elements) and an element offset. Views share the
// storage. Every method that computes something goes through the op dispatcher
// (ops/dispatch.h), so the tracer sees it; metadata accessors do not. Those methods are
// defined one layer up, in ops/ (ops/tensor_methods.cpp, ops/autograd/tensor_methods.cpp):
// nothing in runtime/ calls them, so the runtime builds and links without ops/.
#pragma once

#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/dims.h"
#include "runtime/dtype.h"
#include "runtime/lazy.h"
#include "runtime/scalar.h"
#include "runtime/storage.h"

namespace kiln {

struct AutogradMeta;  // ops/autograd/node.h

struct TensorImpl {
  std::shared_ptr<Storage> storage;  // null while the value is lazy (see runtime/lazy.h)
  int64_t offset = 0;                // in elements
  Dims sizes;
  Dims strides;  // in elements
  DType dtype = DType::Float32;
  Device device;
  int64_t numel = 0;
  bool contiguous = true;
  std::shared_ptr<PendingValue> pending;   // set while a replaying trace owes this value
  std::shared_ptr<AutogradMeta> autograd;  // null unless it requires grad or has a history
  // In-place writes (autograd's check on saved values). Views share their base's count:
  // the first view made of a tensor moves its count into a cell both then point to.
  uint32_t own_version = 0;
  std::shared_ptr<uint32_t> shared_version;
  uint32_t version() const { return shared_version ? *shared_version : own_version; }
  void bump_version() {
    if (shared_version)
      ++*shared_version;
    else
      ++own_version;
  }
  void share_version_with(TensorImpl& view) {
    if (!shared_version) shared_version = std::make_shared<uint32_t>(own_version);
    view.shared_version = shared_version;
  }

  void refresh();  // recomputes numel and contiguous from sizes/strides
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  // A fresh, uninitialized, contiguous tensor (allocates; no op is recorded).
  static Tensor make(const Dims& sizes, DType dtype, Device device);
  // A view of storage (no copy); checks the view fits in the storage.
  static Tensor make_view(std::shared_ptr<Storage> storage, const Dims& sizes, const Dims& strides,
                          int64_t offset, DType dtype);

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& o) const { return impl_ == o.impl_; }

  // ---- metadata
  const Dims& sizes() const { return impl_->sizes; }
  const Dims& shape() const { return impl_->sizes; }
  const Dims& strides() const { return impl_->strides; }
  int64_t dim() const { return static_cast<int64_t>(impl_->sizes.size()); }
  int64_t size(int64_t d) const;    // negative d counts from the end
  int64_t stride(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return impl_->numel; }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->device; }
  int64_t storage_offset() const { return impl_->offset; }
  int64_t element_size() const { return itemsize(impl_->dtype); }
  bool is_contiguous() const { return impl_->contiguous; }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_lazy() const { return impl_->storage == nullptr; }
  // Memory accessors run pending lazy work first, so they never see a missing value.
  // A value a failed traced computation owed (it never comes) is an error to read.
  const std::shared_ptr<Storage>& storage() const {
    if (lazy::tls_pending) lazy::flush();
    if (!impl_->storage) lazy::throw_unavailable("the tensor", impl_->pending.get());
    return impl_->storage;
  }
  void* data_ptr() const {
    if (lazy::tls_pending) lazy::flush();
    if (!impl_->storage) lazy::throw_unavailable("the tensor", impl_->pending.get());
    return static_cast<char*>(impl_->storage->data()) + impl_->offset * element_size();
  }
  template <class T>
  T* data() const {
    return static_cast<T*>(data_ptr());
  }
  // Values, PyTorch-like ("tensor([[1.0000, 2.0000]])"); a sync point.
  std::string str(std::source_location loc = std::source_location::current()) const;
  std::string meta_str() const;  // "float32[2, 3] cpu"

  // ---- views (share storage)
  Tensor view(const Dims& sizes) const;     // one -1 allowed
  Tensor reshape(const Dims& sizes) const;  // view if possible, else a copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // 2-D transpose (or no-op for <2 dims)
  Tensor permute(const Dims& order) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Dims& sizes) const;  // -1 keeps a dim
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;

  // ---- copies and conversions
  Tensor contiguous() const;  // this if already contiguous
  Tensor clone() const;
  Tensor to(Device device) const;  // this if already there
  Tensor to(DType dtype) const;    // this if already that dtype
  Tensor cpu() const { return to(kCPU); }
  Tensor cuda(int index = 0) const;
  // One element as a host number; a sync point (ends the current trace).
  Scalar item(std::source_location loc = std::source_location::current()) const;
  template <class T>
  T item(std::source_location loc = std::source_location::current()) const {
    return item(loc).to<T>();
  }
  // Host copy of all elements converted to T, row-major; a sync point.
  template <class T>
  std::vector<T> to_vector(std::source_location loc = std::source_location::current()) const;

  // ---- in place (return *this)
  Tensor& copy_(const Tensor& src);  // broadcasts src, converts dtype, crosses devices
  Tensor& fill_(const Scalar& value);
  Tensor& zero_();
  Tensor& add_(const Tensor& other);
  Tensor& add_(const Scalar& other);
  Tensor& sub_(const Tensor& other);
  Tensor& sub_(const Scalar& other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(const Scalar& other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(const Scalar& other);
  Tensor& clamp_(const Scalar& min, const Scalar& max);
  Tensor& relu_();

  // ---- autograd (ops/autograd/): reverse mode over the ops that produced a tensor
  bool requires_grad() const;
  // Marks a leaf (floating point only) as needing its gradient; returns *this.
  Tensor& set_requires_grad(bool requires_grad = true);
  bool is_leaf() const;  // no recorded history (user-made, or made without grad)
  // The accumulated gradient (undefined until a backward pass reaches this tensor).
  Tensor grad() const;
  void set_grad(const Tensor& grad);  // undefined clears it
  // Also keep the gradient of a non-leaf in grad() during backward.
  void retain_grad();
  // Runs reverse mode from this tensor: grad defaults to 1 for a one-element tensor.
  void backward(const Tensor& grad = {}, bool retain_graph = false) const;
  // The same values without history (shares storage; never requires grad).
  Tensor detach() const;
  // The name of the op whose backward produces this tensor's gradient ("" for leaves).
  std::string grad_fn_name() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace kiln
