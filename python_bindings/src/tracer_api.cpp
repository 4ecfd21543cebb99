// The tracer's Python surface (kiln/_tracer.py wraps it): regions, explain(), reset(),
// the automatic-tracing switch, tracer settings, and kiln.GraphBreakError.
#include "common.h"
#include "ops/autograd/record.h"
#include "tracer/api.h"
#include "tracer/config.h"

namespace kiln::python {
namespace {

void region_enter(const std::string& name, int warmup, bool fullgraph) {
  tracer::RegionOptions options;
  options.name = name;
  options.warmup = warmup;
  options.fullgraph = fullgraph;
  tracer::Tracer::current().region_enter(options, tracer::capture_site());
}

void region_exit(bool by_exception) { tracer::Tracer::current().region_exit(by_exception); }

bp::tuple explain() {
  const tracer::ExplainReport report = tracer::explain();
  return bp::make_tuple(report.table(), report.json());
}

void set_config(const std::string& name, const bp::object& value) {
  tracer::TracerConfig& c = tracer::config();
  if (name == "warmup") {
    c.warmup = std::max(1, bp::extract<int>(value)());
  } else if (name == "recompile_limit") {
    c.recompile_limit = bp::extract<int>(value);
  } else if (name == "max_trace_length") {
    c.max_trace_length = std::max(2, bp::extract<int>(value)());
  } else if (name == "verify") {
    c.verify = bp::extract<bool>(value);
  } else if (name == "background_compile") {
    c.background_compile = bp::extract<bool>(value);
  } else if (name == "symbolic_shapes") {
    c.symbolic_shapes = bp::extract<bool>(value);
  } else if (name == "logs") {
    bp::extract<std::string> spec(value);
    c.log_mask =
        spec.check() ? tracer::parse_log_categories(spec()) : bp::extract<unsigned>(value)();
  } else {
    throw ValueError("[set_config] unknown tracer setting '" + name +
                     "' (expected warmup, recompile_limit, max_trace_length, verify, "
                     "background_compile, symbolic_shapes or logs)");
  }
}

bp::object get_config(const std::string& name) {
  const tracer::TracerConfig& c = tracer::config();
  if (name == "warmup") return bp::object(c.warmup);
  if (name == "recompile_limit") return bp::object(c.recompile_limit);
  if (name == "max_trace_length") return bp::object(c.max_trace_length);
  if (name == "verify") return bp::object(c.verify);
  if (name == "background_compile") return bp::object(c.background_compile);
  if (name == "symbolic_shapes") return bp::object(c.symbolic_shapes);
  if (name == "logs") return bp::object(c.log_mask);
  throw ValueError("[get_config] unknown tracer setting '" + name + "'");
}

}  // namespace

void register_tracer() {
  PyObject* base = bp::object(bp::scope().attr("KilnError")).ptr();
  PyObject* bases = PyTuple_Pack(2, base, PyExc_RuntimeError);
  PyObject* type = PyErr_NewExceptionWithDoc(
      "kiln.GraphBreakError", "A graph break inside a region compiled with fullgraph=True.", bases,
      nullptr);
  Py_DECREF(bases);
  if (!type) bp::throw_error_already_set();
  bp::scope().attr("GraphBreakError") = bp::object(bp::handle<>(bp::borrowed(type)));
  bp::register_exception_translator<GraphBreakError>(
      [type](const GraphBreakError& e) { PyErr_SetString(type, e.what()); });

  // kiln's own Python loops over parameters (zero_grad, clip_grad_norm_): no loop closes
  // inside, like the C++ optimizers' LibraryLoopScope.
  bp::def(
      "_library_loop", +[](bool enter) { autograd::tls_library_loop_depth += enter ? 1 : -1; });
  bp::def("_region_enter", &region_enter);
  bp::def("_region_exit", &region_exit);
  bp::def("_explain", &explain);
  bp::def("_reset", &tracer::reset);
  bp::def("_wait_for_compiles", &tracer::wait_for_compiles);
  bp::def(
      "_compiles_in_flight", +[] { return tracer::Tracer::current().compiles_in_flight(); });
  bp::def("_flush", &tracer::flush);
  bp::def("_set_tracing", &tracer::set_enabled);
  bp::def("_tracing_enabled", &tracer::enabled);
  bp::def("_set_config", &set_config);
  bp::def("_get_config", &get_config);
}

}  // namespace kiln::python
