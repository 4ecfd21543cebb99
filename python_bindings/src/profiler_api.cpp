// The profiler's Python surface (kiln/_profiler.py wraps it as kiln.profile()).
#include "common.h"
#include "tracer/profiler.h"

namespace kiln::python {
namespace {

using profiler::Profile;

bp::dict event_dict(const profiler::Event& e) {
  bp::dict d;
  d["kind"] = profiler::kind_name(e.kind);
  d["name"] = e.name;
  d["device"] = e.device;
  d["start_us"] = e.start_ns / 1e3;
  d["dur_us"] = e.end_ns < e.start_ns ? 0.0 : (e.end_ns - e.start_ns) / 1e3;
  if (e.gpu_start_ns >= 0) {
    d["gpu_start_us"] = e.gpu_start_ns / 1e3;
    d["gpu_dur_us"] = (e.gpu_end_ns - e.gpu_start_ns) / 1e3;
  }
  if (e.kind == profiler::Kind::Replay || e.kind == profiler::Kind::Compile) {
    d["trace"] = e.trace_id;
    d["backend"] = e.backend;
    d["kernels"] = e.kernels;
    d["ops"] = e.ops;
  }
  if (e.kind == profiler::Kind::GraphBreak) {
    d["reason"] = e.reason;
    d["file"] = e.file;
    d["line"] = e.line;
    d["function"] = e.function;
    d["eager_ops"] = e.ops;
    d["eager_ms"] = e.eager_ns / 1e6;
  }
  return d;
}

bp::list events(const Profile& p) {
  bp::list out;
  for (const profiler::Event& e : p.events()) out.append(event_dict(e));
  return out;
}

bp::list break_costs(const Profile& p) {
  bp::list out;
  for (const profiler::BreakCost& b : p.break_costs()) {
    bp::dict d;
    d["reason"] = b.reason;
    d["file"] = b.file;
    d["line"] = b.line;
    d["function"] = b.function;
    d["site"] = b.site();
    d["count"] = b.count;
    d["eager_ops"] = b.eager_ops;
    d["eager_ms"] = b.eager_ms;
    d["est_saving_ms"] = b.est_saving_ms < 0 ? bp::object() : bp::object(b.est_saving_ms);
    out.append(d);
  }
  return out;
}

}  // namespace

void register_profiler() {
  bp::class_<Profile, boost::noncopyable>("_Profile", "A running profile of this thread.",
                                          bp::init<>())
      .def("stop", &Profile::stop)
      .add_property("running", &Profile::running)
      .def("wall_ms", &Profile::wall_ms)
      .def("table", &Profile::table)
      .def("chrome_trace_json", &Profile::chrome_trace_json)
      .def("export_chrome_trace", &Profile::export_chrome_trace)
      .def("replay_ns_per_op", &Profile::replay_ns_per_op)
      .def("events", &events)
      .def("break_costs", &break_costs);
}

}  // namespace kiln::python
