#include "runtime/tensor.h"

#include <algorithm>

#include "runtime/error.h"

namespace kiln {

void TensorImpl::refresh() {
  numel = dims_numel(sizes);
  contiguous = true;
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) {
      contiguous = numel == 0;
      break;
    }
    expected *= sizes[i];
  }
}

Tensor Tensor::make(const Dims& sizes, DType dtype, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype;
  // Sizes come from shape rules that allow up to 2^63 elements; their byte count may
  // still overflow (2^62 float32s): that is an allocation no machine can make.
  int64_t numel = 1, bytes = 0;
  bool overflow = false;
  for (int64_t s : sizes) overflow |= __builtin_mul_overflow(numel, s, &numel);
  if (std::find(sizes.begin(), sizes.end(), 0) != sizes.end()) numel = 0, overflow = false;
  overflow |= __builtin_mul_overflow(numel, static_cast<int64_t>(itemsize(dtype)), &bytes);
  KILN_CHECK(!overflow && numel >= 0, OutOfMemoryError, "cannot allocate a ", dtype_name(dtype),
             " tensor of shape ", dims_str(sizes), ": its size in bytes does not fit in 63 bits");
  impl->numel = numel;
  impl->contiguous = true;
  impl->device = device;
  impl->storage = Storage::allocate(static_cast<size_t>(bytes), device);
  return Tensor(std::move(impl));
}

Tensor Tensor::make_view(std::shared_ptr<Storage> storage, const Dims& sizes, const Dims& strides,
                         int64_t offset, DType dtype) {
  KILN_CHECK(sizes.size() == strides.size(), ShapeError, "[view] sizes ", dims_str(sizes),
             " and strides ", dims_str(strides), " have different ranks");
  int64_t last = offset;
  bool empty = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    KILN_CHECK(sizes[i] >= 0 && strides[i] >= 0, ShapeError, "[view] invalid sizes ",
               dims_str(sizes), " or strides ", dims_str(strides));
    if (sizes[i] == 0)
      empty = true;
    else
      last += (sizes[i] - 1) * strides[i];
  }
  const int64_t capacity = static_cast<int64_t>(storage->nbytes()) / itemsize(dtype);
  KILN_CHECK(offset >= 0 && (empty || last < capacity), IndexError, "[view] a view of sizes ",
             dims_str(sizes), ", strides ", dims_str(strides), " and offset ", offset,
             " reaches element ", last, " of a storage holding ", capacity, " elements");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->offset = offset;
  impl->sizes = sizes;
  impl->strides = strides;
  impl->dtype = dtype;
  impl->device = impl->storage->device();
  impl->refresh();
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const { return impl_->sizes[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return impl_->strides[wrap_dim(d, dim(), "stride")]; }

std::string Tensor::meta_str() const {
  return detail::cat(dtype_name(dtype()), dims_str(sizes()), " ", device().str());
}

}  // namespace kiln
