// Zero-copy interop with numpy and DLPack (PyTorch, CuPy, JAX, numpy >= 1.22).
//
// numpy, out:  Tensor.__array_interface__ (CPU tensors). numpy keeps the Tensor object
//              alive as the array's base, so the storage outlives the array's use.
// numpy, in:   _from_array_interface(obj) wraps the array's memory in a Storage whose
//              release callback drops a reference to obj (taking the GIL first).
// DLPack, out: _to_dlpack(t) -> a "dltensor" capsule; its DLManagedTensor owns a copy
//              of the Tensor handle (so the storage lives until the consumer calls the
//              deleter); an unconsumed capsule calls the deleter when collected. CUDA
//              tensors: kiln's stream is synchronized first, so the consumer's stream
//              sees finished data whatever stream it uses.
// copy, in:    _host_copy(t) copies a CPU tensor that wraps foreign memory (the two
//              above) into a fresh tensor at once, outside the tracer: a traced clone
//              could replay lazily and read the memory after its owner wrote it.
// DLPack, in:  _from_dlpack_capsule(cap) wraps dl_tensor.data in a Storage whose release
//              callback runs the producer's deleter (GIL held; for CUDA memory after
//              kiln's stream has finished with it); the capsule is renamed
//              "used_dltensor" so it is consumed exactly once.
#include <dlpack/dlpack.h>

#include <cstring>

#include "common.h"
#include "runtime/cuda_context.h"
#include "runtime/lazy.h"
#include "tracer/api.h"

namespace kiln::python {
namespace {

// DLPack >= 0.8 has a bool type code; Debian's header (0.6) predates it.
constexpr uint8_t kDLBoolCode = 6;

// ---- numpy

const char* typestr_of(DType d) {
  switch (d) {
    case DType::Bool:
      return "|b1";
    case DType::Int32:
      return "<i4";
    case DType::Int64:
      return "<i8";
    case DType::Float16:
      return "<f2";
    case DType::Float32:
      return "<f4";
    case DType::Float64:
      return "<f8";
    case DType::BFloat16:
      break;
  }
  throw DTypeError("[numpy] numpy has no bfloat16 dtype; convert first with .float()");
}

bp::dict array_interface(const Tensor& t) {
  KILN_CHECK(t.device().is_cpu(), DTypeError, "[numpy] can't convert a ", t.device().str(),
             " tensor to numpy; copy it to the host first with .cpu()");
  lazy::sync("numpy()", SourceSite{});  // a host read: a trace boundary
  if (t.is_lazy()) lazy::throw_unavailable("[numpy] the tensor", t.impl()->pending.get());
  bp::dict d;
  d["version"] = 3;
  d["typestr"] = typestr_of(t.dtype());
  d["shape"] = bp::object(t.sizes());
  if (!t.is_contiguous()) {
    Dims strides = t.strides();
    for (auto& s : strides) s *= t.element_size();
    d["strides"] = bp::object(strides);
  } else {
    d["strides"] = bp::object();
  }
  d["data"] = bp::make_tuple(reinterpret_cast<uintptr_t>(t.data_ptr()), false);
  return d;
}

void release_pyobject(void* ctx, void*, size_t, Device) {
  with_gil_if_releasable([&] { Py_DECREF(static_cast<PyObject*>(ctx)); });
}

DType dtype_from_typestr(const std::string& ts) {
  KILN_CHECK(ts.size() >= 3 && ts[0] != '>', DTypeError, "[from_numpy] unsupported array type '",
             ts, "' (big-endian or malformed)");
  std::string kind = ts.substr(1);
  if (kind == "f4") return DType::Float32;
  if (kind == "f8") return DType::Float64;
  if (kind == "f2") return DType::Float16;
  if (kind == "i4") return DType::Int32;
  if (kind == "i8") return DType::Int64;
  if (kind == "b1") return DType::Bool;
  throw DTypeError(
      detail::cat("[from_numpy] unsupported numpy dtype (typestr '", ts,
                  "'); kiln supports float16, float32, float64, int32, int64 and bool"));
}

// Largest byte offset touched + one element, for non-negative strides; 0 if empty.
size_t extent_bytes(const Dims& sizes, const Dims& strides, int64_t itemsize) {
  int64_t last = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return 0;
    last += (sizes[i] - 1) * strides[i];
  }
  return static_cast<size_t>((last + 1) * itemsize);
}

Tensor from_array_interface(const bp::object& obj) {
  bp::object iface_obj = bp::getattr(obj, "__array_interface__", bp::object());
  KILN_CHECK(!iface_obj.is_none() && PyDict_Check(iface_obj.ptr()), DTypeError,
             "[from_numpy] expected a numpy array (an object with __array_interface__), got ",
             type_name(obj));
  bp::dict iface(iface_obj);
  KILN_CHECK(!iface.has_key("mask") || bp::object(iface["mask"]).is_none(), ValueError,
             "[from_numpy] masked arrays are not supported");
  bp::object data = iface.get("data");
  KILN_CHECK(PyTuple_Check(data.ptr()), ValueError,
             "[from_numpy] the array does not expose a data pointer (__array_interface__['data'])");
  uintptr_t ptr = bp::extract<uintptr_t>(data[0])();
  DType dtype = dtype_from_typestr(bp::extract<std::string>(iface["typestr"])());
  int64_t item = itemsize(dtype);
  Dims sizes = to_dims(iface["shape"], "from_numpy", "shape");
  Dims strides;
  bp::object st = iface.get("strides");
  if (st.is_none()) {
    strides = contiguous_strides(sizes);
  } else {
    Dims bytes = to_dims(st, "from_numpy", "strides");
    for (int64_t b : bytes) {
      KILN_CHECK(b >= 0, ValueError,
                 "[from_numpy] arrays with negative strides are not supported; copy with "
                 "numpy.ascontiguousarray first");
      KILN_CHECK(b % item == 0, ValueError, "[from_numpy] stride of ", b,
                 " bytes is not a multiple of the element size ", item);
      strides.push_back(b / item);
    }
  }
  PyObject* owner = obj.ptr();
  Py_INCREF(owner);
  auto storage = Storage::wrap(reinterpret_cast<void*>(ptr), extent_bytes(sizes, strides, item),
                               kCPU, &release_pyobject, owner);
  return Tensor::make_view(storage, sizes, strides, 0, dtype);
}

// ---- copy of foreign memory

// `src` wraps memory kiln does not own (numpy, a DLPack producer): its owner may write
// it as soon as the call returns, so the copy is made here, element by element along its
// strides, into a fresh tensor (no op, so no trace can defer it). Other devices clone.
Tensor host_copy(const Tensor& src) {
  if (!src.device().is_cpu() || src.is_lazy()) return src.clone();
  Tensor out = Tensor::make(src.sizes(), src.dtype(), kCPU);
  // A fresh tensor and a foreign wrap owe nothing to lazy work (see ops' from_vector).
  lazy::PendingPause fresh(true);
  const Dims sizes = src.sizes(), strides = src.strides();
  const int64_t item = src.element_size(), n = dims_numel(sizes);
  const auto* from = static_cast<const char*>(src.data_ptr());
  auto* to = static_cast<char*>(out.data_ptr());
  if (src.is_contiguous()) {
    if (n > 0) std::memcpy(to, from, static_cast<size_t>(n * item));
    return out;
  }
  Dims index(sizes.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t offset = 0;
    for (size_t d = 0; d < sizes.size(); ++d) offset += index[d] * strides[d];
    std::memcpy(to + i * item, from + offset * item, static_cast<size_t>(item));
    for (size_t d = sizes.size(); d-- > 0;) {
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

// ---- DLPack export

struct ExportContext {
  Tensor tensor;
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed;
};

void export_deleter(DLManagedTensor* self) {
  delete static_cast<ExportContext*>(self->manager_ctx);
}

DLDataType dl_dtype(DType d) {
  switch (d) {
    case DType::Bool:
      return {kDLBoolCode, 8, 1};
    case DType::Int32:
      return {kDLInt, 32, 1};
    case DType::Int64:
      return {kDLInt, 64, 1};
    case DType::Float16:
      return {kDLFloat, 16, 1};
    case DType::BFloat16:
      return {kDLBfloat, 16, 1};
    case DType::Float32:
      return {kDLFloat, 32, 1};
    case DType::Float64:
      return {kDLFloat, 64, 1};
  }
  return {kDLFloat, 32, 1};
}

void capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;  // consumed ("used_dltensor")
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (managed && managed->deleter) managed->deleter(managed);
  PyErr_Restore(type, value, traceback);
}

bp::object to_dlpack(const Tensor& t) {
  // The consumer reads the memory directly: a trace boundary.
  tracer::sync(tracer::BreakCause{tracer::BreakReason::MemoryExport, "__dlpack__()"});
  if (t.is_lazy()) lazy::throw_unavailable("[dlpack] the tensor", t.impl()->pending.get());
  auto* ctx = new ExportContext;
  ctx->tensor = t;
  ctx->shape.assign(t.sizes().begin(), t.sizes().end());
  ctx->strides.assign(t.strides().begin(), t.strides().end());
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = t.data_ptr();
  dl.device.device_type = t.is_cuda() ? kDLCUDA : kDLCPU;
  dl.device.device_id = t.is_cuda() ? t.device().index : 0;
  dl.ndim = static_cast<int>(t.dim());
  dl.dtype = dl_dtype(t.dtype());
  dl.shape = ctx->shape.data();
  dl.strides = ctx->strides.data();
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = &export_deleter;
  if (t.is_cuda()) cuda_context::synchronize(t.device().index);
  PyObject* capsule = PyCapsule_New(&ctx->managed, "dltensor", &capsule_destructor);
  if (!capsule) {
    delete ctx;
    bp::throw_error_already_set();
  }
  return bp::object(bp::handle<>(capsule));
}

bp::tuple dlpack_device(const Tensor& t) {
  if (t.is_cuda()) return bp::make_tuple(static_cast<int>(kDLCUDA), t.device().index);
  return bp::make_tuple(static_cast<int>(kDLCPU), 0);
}

// ---- DLPack import

void release_dlpack(void* ctx, void*, size_t, Device device) {
  auto* managed = static_cast<DLManagedTensor*>(ctx);
  if (device.is_cuda()) {
    try {
      cuda_context::synchronize(device.index);  // kiln's kernels may still read it
    } catch (...) {
    }
  }
  if (!managed->deleter) return;
  with_gil_if_releasable([&] { managed->deleter(managed); });  // it may need Python
}

DType dtype_from_dl(const DLDataType& t) {
  KILN_CHECK(t.lanes == 1, DTypeError, "[from_dlpack] vector types (lanes=", t.lanes,
             ") are not supported");
  if (t.code == kDLFloat && t.bits == 32) return DType::Float32;
  if (t.code == kDLFloat && t.bits == 64) return DType::Float64;
  if (t.code == kDLFloat && t.bits == 16) return DType::Float16;
  if (t.code == kDLBfloat && t.bits == 16) return DType::BFloat16;
  if (t.code == kDLInt && t.bits == 32) return DType::Int32;
  if (t.code == kDLInt && t.bits == 64) return DType::Int64;
  if (t.code == kDLBoolCode && t.bits == 8) return DType::Bool;
  throw DTypeError(detail::cat("[from_dlpack] unsupported DLPack dtype (code ", int(t.code),
                               ", bits ", int(t.bits),
                               "); kiln supports float16/32/64, bfloat16, int32/64 and bool"));
}

Device device_from_dl(const DLDevice& d) {
  switch (d.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      return kCPU;
    case kDLCUDA:
      return cuda_device(d.device_id);
    default:
      break;
  }
  throw DeviceError(detail::cat("[from_dlpack] unsupported DLPack device type ",
                                static_cast<int>(d.device_type), " (kiln takes CPU and CUDA)"));
}

Tensor from_dlpack_capsule(const bp::object& capsule) {
  PyObject* cap = capsule.ptr();
  KILN_CHECK(PyCapsule_IsValid(cap, "dltensor"), ValueError,
             "[from_dlpack] expected an unconsumed DLPack capsule named 'dltensor' (each capsule "
             "can be consumed once), got ",
             type_name(cap));
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
  const DLTensor& dl = managed->dl_tensor;
  DType dtype = dtype_from_dl(dl.dtype);
  Device device = device_from_dl(dl.device);
  Dims sizes(dl.shape, dl.shape + dl.ndim);
  Dims strides;
  if (dl.strides) {
    strides.assign(dl.strides, dl.strides + dl.ndim);
  } else {
    strides = contiguous_strides(sizes);
  }
  for (int64_t i = 0; i < dl.ndim; ++i) {
    KILN_CHECK(strides[i] >= 0 || sizes[i] <= 1, ValueError,
               "[from_dlpack] negative strides are not supported");
    if (sizes[i] <= 1 && strides[i] < 0) strides[i] = 0;
  }
  int64_t item = itemsize(dtype);
  void* data = static_cast<char*>(dl.data) + dl.byte_offset;
  auto storage =
      Storage::wrap(data, extent_bytes(sizes, strides, item), device, &release_dlpack, managed);
  // From here on the storage owns the producer's tensor.
  if (PyCapsule_SetName(cap, "used_dltensor") != 0) bp::throw_error_already_set();
  return Tensor::make_view(storage, sizes, strides, 0, dtype);
}

}  // namespace

void register_interop() {
  bp::object cls(bp::handle<>(bp::borrowed(tensor_type())));
  bp::object property(bp::handle<>(bp::borrowed(reinterpret_cast<PyObject*>(&PyProperty_Type))));
  bp::setattr(cls, "__array_interface__", property(bp::make_function(&array_interface)));
  bp::objects::add_to_namespace(cls, "__dlpack_device__", bp::make_function(&dlpack_device));
  bp::def("_to_dlpack", &to_dlpack);
  bp::def("_from_dlpack_capsule", &from_dlpack_capsule);
  bp::def("_from_array_interface", &from_array_interface);
  bp::def("_host_copy", &host_copy);
}

}  // namespace kiln::python
