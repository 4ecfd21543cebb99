// The _kiln extension module: the order matters (errors and converters first, then
// the Tensor class, then everything that adds methods to it or takes tensors).
#include "common.h"

BOOST_PYTHON_MODULE(_kiln) {
  using namespace kiln::python;
  bp::docstring_options docs(true, true, false);
  register_errors();
  register_converters();
  register_tensor_class();
  register_tensor_index();
  register_ops();
  register_interop();
  register_site();
  register_tracer();
  register_profiler();
  register_autograd();
}
