// The _kiln extension module: the order matters (errors and converters first, then
// the Tensor class, then everything that adds methods to it or takes tensors).
#include <atomic>

#include "common.h"

namespace kiln::python {
namespace {
std::atomic<bool> python_finalized{false};
}  // namespace

bool python_objects_releasable() { return !python_finalized.load(); }

void note_python_alive() {
  Py_AtExit([] { python_finalized.store(true); });
}
}  // namespace kiln::python

BOOST_PYTHON_MODULE(_kiln) {
  using namespace kiln::python;
  note_python_alive();
  bp::docstring_options docs(true, true, false);
  register_errors();
  register_converters();
  register_tensor_class();
  register_tensor_index();
  register_ops();
  register_along_dim_ops();
  register_sample_ops();
  register_recurrent_ops();
  register_interop();
  register_site();
  register_tracer();
  register_profiler();
  register_autograd();
  register_distributed();
  register_module_getattr();
}
