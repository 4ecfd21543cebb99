// The tracer's Python surface (kiln/_tracer.py wraps it): regions, explain(), reset(),
// the automatic-tracing switch, tracer settings, and kiln.GraphBreakError.
#include "common.h"
#include "ops/autograd/grad_mode.h"
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

// kiln.compile's skip mode (region_plan.h): the plan of the region call that just
// ended, or None.
bp::object take_region_plan() {
  tracer::RegionPlan plan = tracer::Tracer::current().take_region_plan();
  if (!plan.trace) return bp::object();
  return bp::object(std::move(plan));
}

// The index of the op whose value is t (-1: none of the plan's ops made it).
int plan_output_of(const tracer::RegionPlan& plan, const Tensor& t) {
  for (size_t i = 0; i < plan.outputs.size(); ++i)
    if (!plan.outputs[i].expired() && plan.outputs[i].lock().get() == t.impl())
      return static_cast<int>(i);
  return -1;
}

// Launches the plan on these inputs: ("", values of the wanted ops), or (the guard that
// failed, ()) with nothing run.
bp::tuple plan_launch(const tracer::RegionPlan& plan, const std::vector<Tensor>& externals,
                      const bp::object& wanted) {
  std::vector<int> ops;
  const Py_ssize_t n = bp::len(wanted);
  for (Py_ssize_t i = 0; i < n; ++i) ops.push_back(bp::extract<int>(wanted[i]));
  std::vector<Tensor> values;
  if (autograd::grad_enabled()) {
    for (const Tensor& t : externals)
      if (t.requires_grad()) return bp::make_tuple("an input requires grad", bp::tuple());
  }
  const std::string failed = tracer::launch(plan, externals, ops, &values);
  return bp::make_tuple(failed, tensor_tuple(values));
}

// kiln.compile's skip mode: whether every module's state (kiln/_skip.py _module_state:
// each __dict__ value, then per container dict named in `containers` its length, keys and
// values) is still, object for object, `state`. The per-call guard of module state, in
// C++ because a model has hundreds of such objects.
bool module_state_is(const bp::list& modules, const bp::tuple& containers, const bp::list& state) {
  PyObject* expected = state.ptr();
  const Py_ssize_t total = PyList_GET_SIZE(expected);
  Py_ssize_t at = 0;
  auto same = [&](PyObject* o) { return at < total && PyList_GET_ITEM(expected, at++) == o; };
  for (Py_ssize_t m = 0; m < PyList_GET_SIZE(modules.ptr()); ++m) {
    PyObject** dict_slot = _PyObject_GetDictPtr(PyList_GET_ITEM(modules.ptr(), m));
    PyObject* dict = dict_slot ? *dict_slot : nullptr;
    if (!dict || !PyDict_Check(dict)) return false;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(dict, &pos, &key, &value))
      if (!same(value)) return false;
    for (Py_ssize_t c = 0; c < PyTuple_GET_SIZE(containers.ptr()); ++c) {
      PyObject* container = PyDict_GetItem(dict, PyTuple_GET_ITEM(containers.ptr(), c));
      if (!container || !PyDict_Check(container) || PyDict_GET_SIZE(container) == 0) continue;
      PyObject* size = PyList_GET_ITEM(expected, at);
      if (at >= total || !PyLong_Check(size) ||
          PyLong_AsSsize_t(size) != PyDict_GET_SIZE(container))
        return false;
      ++at;
      pos = 0;
      while (PyDict_Next(container, &pos, &key, &value))
        if (!same(key)) return false;
      pos = 0;
      while (PyDict_Next(container, &pos, &key, &value))
        if (!same(value)) return false;
    }
  }
  return at == total;
}

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
  } else if (name == "warm_start") {
    c.warm_start = bp::extract<bool>(value);
  } else if (name == "symbolic_shapes") {
    c.symbolic_shapes = bp::extract<bool>(value);
  } else if (name == "cpu_attention") {
    c.cpu_attention = bp::extract<bool>(value);
  } else if (name == "jit_disable") {
    c.jit_disable.clear();
    const std::string list = bp::extract<std::string>(value);
    size_t at = 0;
    while (at < list.size()) {
      const size_t comma = std::min(list.find(',', at), list.size());
      if (comma > at) c.jit_disable.push_back(list.substr(at, comma - at));
      at = comma + 1;
    }
  } else if (name == "logs") {
    bp::extract<std::string> spec(value);
    c.log_mask =
        spec.check() ? tracer::parse_log_categories(spec()) : bp::extract<unsigned>(value)();
  } else {
    throw ValueError(
        "[set_config] unknown tracer setting '" + name +
        "' (expected warmup, recompile_limit, max_trace_length, verify, "
        "background_compile, warm_start, symbolic_shapes, cpu_attention, jit_disable or "
        "logs)");
  }
}

bp::object get_config(const std::string& name) {
  const tracer::TracerConfig& c = tracer::config();
  if (name == "warmup") return bp::object(c.warmup);
  if (name == "recompile_limit") return bp::object(c.recompile_limit);
  if (name == "max_trace_length") return bp::object(c.max_trace_length);
  if (name == "verify") return bp::object(c.verify);
  if (name == "background_compile") return bp::object(c.background_compile);
  if (name == "warm_start") return bp::object(c.warm_start);
  if (name == "symbolic_shapes") return bp::object(c.symbolic_shapes);
  if (name == "cpu_attention") return bp::object(c.cpu_attention);
  if (name == "jit_disable") {
    std::string list;
    for (const std::string& pass : c.jit_disable) list += (list.empty() ? "" : ",") + pass;
    return bp::object(list);
  }
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
  set_graph_break_error_class(type);  // translated with kiln's other errors (errors.cpp)

  // kiln's own Python loops over parameters (zero_grad, clip_grad_norm_): no loop closes
  // inside, like the C++ optimizers' LibraryLoopScope.
  bp::def(
      "_library_loop", +[](bool enter) { autograd::tls_library_loop_depth += enter ? 1 : -1; });
  bp::def("_region_enter", &region_enter);
  bp::def("_region_exit", &region_exit);
  bp::def("_explain", &explain);
  bp::class_<tracer::RegionPlan>("_RegionPlan", bp::no_init)
      .add_property(
          "externals", +[](const tracer::RegionPlan& p) { return tensor_tuple(p.externals); })
      .add_property(
          "num_ops", +[](const tracer::RegionPlan& p) { return p.trace->program.ops.size(); })
      .add_property(
          "trace_id", +[](const tracer::RegionPlan& p) { return p.trace->id; })
      .def("output_of", &plan_output_of)
      .def("launch", &plan_launch);
  bp::def("_take_region_plan", &take_region_plan);
  bp::def("_module_state_is", &module_state_is);
  bp::def(
      "_keep_region_plans", +[](bool on) { tracer::Tracer::current().keep_region_plans(on); });
  // The identity of a tensor's C++ handle (two Python objects may hold one).
  bp::def(
      "_tensor_impl_key", +[](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.impl()); });
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
