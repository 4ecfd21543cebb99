// kiln.nn.Module's attribute lookup from C (the per-op path from Python: a layer's
// forward reads its parameters and submodules, `self.weight`, `self.c_attn`, about 25
// times per transformer block).
//
// Module keeps its parameters, buffers and submodules in _parameters / _buffers /
// _modules, as torch.nn.Module does, and finds them in __getattr__. On CPython 3.11 a
// class with a Python __getattr__ gets the generic slot hook: every such read first
// fails the generic lookup, which formats an AttributeError message, raises it, then
// clears it, and calls __getattr__ as a Python function (about 4,400 instructions a
// read). module_getattro does the same lookups without the exception: the generic
// lookup with AttributeError suppressed, then the three dicts of the instance's
// __dict__. Anything unusual (a name that is not exactly a str, one of the three not a
// dict or OrderedDict, a name not found) calls Module.__getattr__ itself, so the result
// and the error are the same as before.
//
// Installed per class (Module.__init_subclass__) and only where the class's lookup of
// __getattr__ is Module's and of __getattribute__ is object's: a subclass defining
// either keeps CPython's slot. Assigning either on a class later makes CPython
// recompute the slot (update_slot), which drops this one.
#include "common.h"

namespace kiln::python {
namespace {

PyObject* g_module_getattr = nullptr;               // Module.__getattr__ (a Python function)
PyObject* g_object_getattribute = nullptr;          // object.__getattribute__ (its slot wrapper)
PyObject* g_ordered_dict = nullptr;                 // collections.OrderedDict
PyObject* g_keys[3] = {nullptr, nullptr, nullptr};  // _parameters, _buffers, _modules

PyObject* call_module_getattr(PyObject* self, PyObject* name) {
  return PyObject_CallFunctionObjArgs(g_module_getattr, self, name, nullptr);
}

PyObject* module_getattro(PyObject* self, PyObject* name) {
  PyObject* found = _PyObject_GenericGetAttrWithDict(self, name, nullptr, 1);
  if (found || PyErr_Occurred()) return found;
  if (!PyUnicode_CheckExact(name)) return call_module_getattr(self, name);
  PyObject* dict = PyObject_GenericGetDict(self, nullptr);  // new reference: self.__dict__
  if (!dict) return nullptr;
  PyObject* result = nullptr;
  bool fallback = !PyDict_CheckExact(dict);
  for (int k = 0; k < 3 && !fallback && !result; ++k) {
    PyObject* where = PyDict_GetItemWithError(dict, g_keys[k]);  // borrowed
    if (!where) {
      if (PyErr_Occurred()) fallback = true;
      continue;
    }
    if (!PyDict_CheckExact(where) &&
        Py_TYPE(where) != reinterpret_cast<PyTypeObject*>(g_ordered_dict)) {
      fallback = true;
      break;
    }
    result = PyDict_GetItemWithError(where, name);  // borrowed
    if (!result && PyErr_Occurred()) fallback = true;
  }
  Py_XINCREF(result);
  Py_DECREF(dict);
  if (result) return result;
  PyErr_Clear();
  return call_module_getattr(self, name);  // not found (or unusual): Module's own answer
}

// Installs module_getattro on cls when its lookups are Module's; says whether it did.
bool fast_module_getattr(const bp::object& cls_obj, const bp::object& module_getattr) {
  PyObject* cls = cls_obj.ptr();
  if (!PyType_Check(cls)) return false;
  auto* type = reinterpret_cast<PyTypeObject*>(cls);
  if (!g_module_getattr) {
    g_module_getattr = bp::incref(module_getattr.ptr());
    g_object_getattribute =
        bp::incref(_PyType_Lookup(&PyBaseObject_Type, bp::str("__getattribute__").ptr()));
    const bp::object ordered_dict = bp::import("collections").attr("OrderedDict");
    g_ordered_dict = bp::incref(ordered_dict.ptr());
    const char* names[3] = {"_parameters", "_buffers", "_modules"};
    for (int k = 0; k < 3; ++k) g_keys[k] = PyUnicode_InternFromString(names[k]);
  }
  if (module_getattr.ptr() != g_module_getattr) return false;
  PyObject* getattr = _PyType_Lookup(type, bp::str("__getattr__").ptr());
  PyObject* getattribute = _PyType_Lookup(type, bp::str("__getattribute__").ptr());
  if (getattr != g_module_getattr || getattribute != g_object_getattribute) return false;
  type->tp_getattro = module_getattro;
  return true;
}

}  // namespace

void register_module_getattr() {
  bp::def("_fast_module_getattr", &fast_module_getattr, (bp::arg("cls"), bp::arg("getattr")),
          "Installs kiln.nn.Module's attribute lookup in C on cls (module_getattr.cpp).");
}

}  // namespace kiln::python
