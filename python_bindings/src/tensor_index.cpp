// Tensor.__getitem__ / __setitem__ with numpy / PyTorch semantics:
//
//   ints (negative from the end)     select (a view)
//   slices with positive steps       slice (a view)
//   None                             unsqueeze (a view)
//   ...                              skips the dims not named
//   an int tensor or a list of ints  a gather (index_select), result dims in place
//                                    of the indexed dim; negative indices wrap
//   a bool tensor or list of bools   a mask over the next mask.ndim dims (reads the
//                                    mask on the host: a sync point, like torch)
//
// One tensor/list index per expression (x[i] or x[:, i, 1:]); numpy's rule that the
// gathered dims move to the front when int/tensor indices are separated by a slice is
// followed. Assignment writes through the same view (copy_ broadcasts tensors, fill_
// takes numbers); `x[mask] = v` with a bool tensor mask becomes x.copy_(where(mask, v, x)).
#include "common.h"

namespace kiln::python {
namespace {

enum class Kind { None, Ellipsis, Int, Slice, IntTensor, BoolTensor };

struct Item {
  Kind kind = Kind::None;
  PyObject* obj = nullptr;
  int64_t int_value = 0;
  Tensor tensor;  // IntTensor / BoolTensor (lists are converted)
  bool maybe_negative = true;
};

bool is_bool_list(PyObject* obj) {
  Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
  if (n == 0) return false;
  PyObject** items = PySequence_Fast_ITEMS(obj);
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!PyBool_Check(items[i])) return false;
  return true;
}

// A list of ints or bools -> a CPU tensor (nested lists through kiln.tensor).
Tensor list_index(PyObject* obj, bool* any_negative) {
  Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
  PyObject** items = PySequence_Fast_ITEMS(obj);
  Dims sizes{static_cast<int64_t>(n)};
  *any_negative = true;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (PyTuple_Check(items[i]) || PyList_Check(items[i])) {
      bp::object list(bp::handle<>(bp::borrowed(obj)));
      bp::object t = bp::import("kiln").attr("tensor")(list);
      return tensor_of(t.ptr());
    }
  }
  if (is_bool_list(obj)) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = items[i] == Py_True;
    return from_vector(v, sizes).to(DType::Bool);
  }
  std::vector<int64_t> v(static_cast<size_t>(n));
  *any_negative = false;
  for (Py_ssize_t i = 0; i < n; ++i) {
    v[static_cast<size_t>(i)] = to_int(items[i], "index", "list element");
    *any_negative |= v[static_cast<size_t>(i)] < 0;
  }
  return from_vector(v, sizes);
}

std::vector<Item> parse_index(PyObject* index) {
  std::vector<Item> items;
  auto classify = [&](PyObject* obj) {
    Item it;
    it.obj = obj;
    if (obj == Py_None) {
      it.kind = Kind::None;
    } else if (obj == Py_Ellipsis) {
      it.kind = Kind::Ellipsis;
    } else if (PySlice_Check(obj)) {
      it.kind = Kind::Slice;
    } else if (is_tensor(obj)) {
      it.tensor = tensor_of(obj);
      if (it.tensor.dtype() == DType::Bool) {
        it.kind = Kind::BoolTensor;
      } else {
        KILN_CHECK(is_integral(it.tensor.dtype()), IndexError,
                   "[index] tensors used as indices must be long, int or bool tensors, got ",
                   dtype_name(it.tensor.dtype()));
        it.kind = Kind::IntTensor;
      }
    } else if (PyList_Check(obj)) {
      bool neg = true;
      it.tensor = list_index(obj, &neg);
      it.maybe_negative = neg;
      if (it.tensor.dtype() == DType::Bool) {
        it.kind = Kind::BoolTensor;
      } else {
        KILN_CHECK(is_integral(it.tensor.dtype()), IndexError,
                   "[index] lists used as indices must hold ints or bools");
        it.kind = Kind::IntTensor;
      }
    } else if (PyBool_Check(obj)) {
      throw IndexError("[index] a Python bool is not a valid index; use a bool tensor mask");
    } else if (PyIndex_Check(obj) && !PyFloat_Check(obj)) {
      it.kind = Kind::Int;
      it.int_value = to_int(obj, "index", "index");
    } else {
      throw IndexError(detail::cat(
          "[index] only integers, slices (`:`), ellipsis (`...`), None and long or bool "
          "tensors are valid indices, got ",
          type_name(obj)));
    }
    items.push_back(std::move(it));
  };
  if (PyTuple_Check(index)) {
    Py_ssize_t n = PyTuple_GET_SIZE(index);
    items.reserve(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) classify(PyTuple_GET_ITEM(index, i));
  } else {
    classify(index);
  }
  return items;
}

// Gathers along dim d with an int index of any shape: result dims replace dim d.
Tensor gather(const Tensor& r, int64_t d, Tensor idx, bool maybe_negative) {
  if (idx.device() != r.device()) idx = idx.to(r.device());
  if (idx.dtype() != DType::Int64) idx = idx.to(DType::Int64);
  int64_t size = r.size(d);
  if (maybe_negative) idx = where(idx < int64_t{0}, idx + size, idx);
  Tensor out = index_select(r, d, idx.reshape({-1}));
  Dims sizes(r.sizes().begin(), r.sizes().begin() + d);
  sizes.insert(sizes.end(), idx.sizes().begin(), idx.sizes().end());
  sizes.insert(sizes.end(), r.sizes().begin() + d + 1, r.sizes().end());
  return out.view(sizes);
}

// Selects the elements of dims [d, d + mask.ndim) where mask is true (one result dim).
Tensor mask_select(const Tensor& r, int64_t d, const Tensor& mask) {
  int64_t k = mask.dim();
  KILN_CHECK(d + k <= r.dim(), IndexError, "[index] too many indices for tensor of dimension ",
             r.dim());
  for (int64_t i = 0; i < k; ++i) {
    KILN_CHECK(mask.size(i) == r.size(d + i), IndexError, "[index] the shape of the mask ",
               dims_str(mask.sizes()), " does not match the shape of the indexed tensor ",
               dims_str(r.sizes()), " at dim ", d + i);
  }
  std::vector<int64_t> flags = mask.to_vector<int64_t>();  // a host sync, like torch
  std::vector<int64_t> positions;
  for (size_t i = 0; i < flags.size(); ++i)
    if (flags[i]) positions.push_back(static_cast<int64_t>(i));
  Tensor flat = k == 0 ? r.unsqueeze(d) : r.flatten(d, d + k - 1);
  Tensor idx = from_vector(positions, Dims{static_cast<int64_t>(positions.size())}, r.device());
  return index_select(flat, d, idx);
}

struct Indexed {
  Tensor result;
  bool advanced = false;
};

Indexed apply_index(const Tensor& self, const std::vector<Item>& items, bool for_assignment) {
  int64_t consumed = 0;
  int ellipses = 0;
  int advanced = 0;
  for (const Item& it : items) {
    switch (it.kind) {
      case Kind::Int:
      case Kind::Slice:
      case Kind::IntTensor:
        ++consumed;
        break;
      case Kind::BoolTensor:
        consumed += it.tensor.dim();
        break;
      case Kind::Ellipsis:
        ++ellipses;
        break;
      case Kind::None:
        break;
    }
    if (it.kind == Kind::IntTensor || it.kind == Kind::BoolTensor) ++advanced;
  }
  KILN_CHECK(ellipses <= 1, IndexError, "[index] an index can only have a single ellipsis ('...')");
  KILN_CHECK(consumed <= self.dim(), IndexError,
             "[index] too many indices for tensor of dimension ", self.dim());
  KILN_CHECK(advanced <= 1, IndexError,
             "[index] kiln supports one tensor or list index per indexing expression, got ",
             advanced);
  KILN_CHECK(!(for_assignment && advanced), IndexError,
             "[index] assignment through a tensor or list index is not supported (except "
             "x[bool_mask] = value); gather with index_select and write back with copy_");

  Tensor r = self;
  int64_t d = 0;           // current dim of r
  int64_t source_dim = 0;  // dim of self the next consuming item indexes (for messages)
  int64_t adv_start = -1, adv_ndim = 0;
  // Positions (in items) of int and tensor indices, for numpy's transposition rule.
  int first_adv_pos = -1, last_adv_pos = -1, n_adv_like = 0;
  for (size_t pos = 0; pos < items.size(); ++pos) {
    const Item& it = items[pos];
    switch (it.kind) {
      case Kind::None:
        r = r.unsqueeze(d);
        ++d;
        break;
      case Kind::Ellipsis: {
        int64_t skip = self.dim() - consumed;
        d += skip;
        source_dim += skip;
        break;
      }
      case Kind::Int: {
        int64_t size = r.size(d);
        int64_t i = it.int_value;
        KILN_CHECK(i >= -size && i < size, IndexError, "[index] index ", i,
                   " is out of bounds for dimension ", source_dim, " with size ", size);
        r = r.select(d, i < 0 ? i + size : i);
        ++source_dim;
        break;
      }
      case Kind::Slice: {
        Py_ssize_t start, stop, step;
        if (PySlice_Unpack(it.obj, &start, &stop, &step) < 0) bp::throw_error_already_set();
        KILN_CHECK(step > 0, ValueError, "[index] slice step must be greater than zero, got ",
                   step);
        int64_t size = r.size(d);
        PySlice_AdjustIndices(static_cast<Py_ssize_t>(size), &start, &stop, step);
        if (stop < start) stop = start;
        if (!(start == 0 && stop == size && step == 1)) r = r.slice(d, start, stop, step);
        ++d;
        ++source_dim;
        break;
      }
      case Kind::IntTensor:
        adv_start = d;
        adv_ndim = it.tensor.dim();
        r = gather(r, d, it.tensor, it.maybe_negative);
        d += adv_ndim;
        ++source_dim;
        break;
      case Kind::BoolTensor:
        adv_start = d;
        adv_ndim = 1;
        r = mask_select(r, d, it.tensor);
        d += 1;
        source_dim += it.tensor.dim();
        break;
    }
    if (it.kind == Kind::Int || it.kind == Kind::IntTensor || it.kind == Kind::BoolTensor) {
      if (first_adv_pos < 0) first_adv_pos = static_cast<int>(pos);
      last_adv_pos = static_cast<int>(pos);
      ++n_adv_like;
    }
  }
  // numpy: when int/tensor indices are not next to each other, the gathered dims go first.
  if (adv_start > 0 && last_adv_pos - first_adv_pos + 1 != n_adv_like) {
    Dims order;
    for (int64_t i = adv_start; i < adv_start + adv_ndim; ++i) order.push_back(i);
    for (int64_t i = 0; i < r.dim(); ++i)
      if (i < adv_start || i >= adv_start + adv_ndim) order.push_back(i);
    r = r.permute(order);
  }
  return {r, advanced > 0};
}

Tensor getitem(const Tensor& self, const bp::object& index) {
  PyObject* p = index.ptr();
  // Fast paths: x[i] and x[a:b].
  if (PyLong_Check(p) && !PyBool_Check(p) && self.dim() > 0) {
    int64_t i = to_int(p, "index", "index");
    int64_t size = self.size(0);
    KILN_CHECK(i >= -size && i < size, IndexError, "[index] index ", i,
               " is out of bounds for dimension 0 with size ", size);
    return self.select(0, i < 0 ? i + size : i);
  }
  return apply_index(self, parse_index(p), false).result;
}

void assign(Tensor& target, const bp::object& value) {
  PyObject* v = value.ptr();
  Scalar s;
  if (is_tensor(v)) {
    target.copy_(tensor_of(v));
  } else if (is_number(v)) {
    if (!to_scalar(v, &s)) bp::throw_error_already_set();
    target.fill_(s);
  } else {
    // lists, numpy arrays, ...: through kiln.tensor()
    bp::object t = bp::import("kiln").attr("tensor")(value);
    target.copy_(tensor_of(t.ptr()));
  }
}

void setitem(Tensor& self, const bp::object& index, const bp::object& value) {
  PyObject* p = index.ptr();
  if (is_tensor(p) && tensor_of(p).dtype() == DType::Bool) {
    const Tensor& mask = tensor_of(p);
    PyObject* v = value.ptr();
    Scalar s;
    Tensor updated;
    if (is_tensor(v)) {
      updated = where(mask, tensor_of(v), self);
    } else {
      if (!to_scalar(v, &s)) bp::throw_error_already_set();
      updated = where(mask, s, self);
    }
    self.copy_(updated);
    return;
  }
  Tensor target = apply_index(self, parse_index(p), true).result;
  assign(target, value);
}

}  // namespace

void register_tensor_index() {
  bp::object cls(bp::handle<>(bp::borrowed(tensor_type())));
  bp::objects::add_to_namespace(cls, "__getitem__", bp::make_function(&getitem));
  bp::objects::add_to_namespace(cls, "__setitem__", bp::make_function(&setitem));
}

}  // namespace kiln::python
