// kiln.distributed's C++ side: the default process group (runtime/distributed) and the
// gradient reducer behind kiln.nn.parallel.DistributedDataParallel
// (ops/distributed/data_parallel.h). The Python package (kiln/distributed) gives them
// torch.distributed's signatures. Collectives keep the GIL: they may report a trace
// boundary, which reads the Python stack for the user's site.
#include "common.h"
#include "ops/distributed/data_parallel.h"
#include "runtime/distributed/process_group.h"

namespace kiln::python {
namespace {

namespace dist = kiln::distributed;

dist::ReduceOp to_op(int op) {
  KILN_CHECK(op >= 0 && op <= 4, ValueError, "[distributed] unknown ReduceOp ", op);
  return static_cast<dist::ReduceOp>(op);
}

void init(const std::string& backend, int rank, int world_size, const std::string& addr, int port,
          int device, double timeout_s) {
  dist::Options o;
  o.backend = backend;
  o.rank = rank;
  o.world_size = world_size;
  o.master_addr = addr;
  o.master_port = port;
  o.device = device;
  o.timeout_s = timeout_s;
  dist::init_process_group(o);
}

int rank() { return dist::default_group()->rank(); }
int world_size() { return dist::default_group()->world_size(); }
std::string backend() { return dist::default_group()->backend(); }
void all_reduce(const Tensor& t, int op) { dist::default_group()->all_reduce(t, to_op(op)); }
void broadcast(const Tensor& t, int src) { dist::default_group()->broadcast(t, src); }
void all_gather(const Tensor& out, const Tensor& in) { dist::default_group()->all_gather(out, in); }
void reduce_scatter(const Tensor& out, const Tensor& in, int op) {
  dist::default_group()->reduce_scatter(out, in, to_op(op));
}
void barrier() { dist::default_group()->barrier(); }
void broadcast_tensors(const std::vector<Tensor>& ts, int src) {
  dist::broadcast_tensors(*dist::default_group(), ts, src);
}

std::shared_ptr<dist::GradientReducer> make_reducer(const std::vector<Tensor>& params,
                                                    double bucket_cap_mb) {
  KILN_CHECK(bucket_cap_mb > 0, ValueError,
             "[DistributedDataParallel] bucket_cap_mb must be positive, got ", bucket_cap_mb);
  return std::make_shared<dist::GradientReducer>(dist::default_group(), params,
                                                 static_cast<size_t>(bucket_cap_mb * 1024 * 1024));
}
bp::list reducer_buckets(const dist::GradientReducer& r) {
  bp::list out;
  for (const auto& b : r.buckets()) {
    bp::list one;
    for (size_t k : b) one.append(k);
    out.append(one);
  }
  return out;
}

}  // namespace

void register_distributed() {
  bp::def("_dist_init", &init);
  bp::def("_dist_is_initialized", &dist::is_initialized);
  bp::def("_dist_destroy", &dist::destroy_process_group);
  bp::def("_dist_is_backend_available", &dist::is_backend_available);
  bp::def("_dist_rank", &rank);
  bp::def("_dist_world_size", &world_size);
  bp::def("_dist_backend", &backend);
  bp::def("_dist_all_reduce", &all_reduce);
  bp::def("_dist_broadcast", &broadcast);
  bp::def("_dist_all_gather", &all_gather);
  bp::def("_dist_reduce_scatter", &reduce_scatter);
  bp::def("_dist_barrier", &barrier);
  bp::def("_dist_broadcast_tensors", &broadcast_tensors);
  bp::class_<dist::GradientReducer, std::shared_ptr<dist::GradientReducer>, boost::noncopyable>(
      "_GradientReducer", bp::no_init)
      .def("all_reduce_gradients", &dist::GradientReducer::all_reduce_gradients)
      .add_property("buckets", &reducer_buckets);
  bp::def("_make_gradient_reducer", &make_reducer);
}

}  // namespace kiln::python
