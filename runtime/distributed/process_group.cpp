// The ProcessGroup front end: argument checks, the cross-rank signature check, the
// default group and the environment (runtime/distributed/process_group.h).
#include "runtime/distributed/process_group.h"

#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "runtime/distributed/backends.h"
#include "runtime/error.h"
#include "runtime/lazy.h"

namespace kiln::distributed {
namespace {

enum Kind : int64_t { kAllReduce = 1, kBroadcast, kAllGather, kReduceScatter, kBarrier };
const char* kind_name(int64_t k) {
  static const char* names[] = {"?",          "all_reduce",     "broadcast",
                                "all_gather", "reduce_scatter", "barrier"};
  return k >= 1 && k <= 5 ? names[k] : "an unknown collective";
}

std::mutex registry_mutex;

// Every live group by id (ProcessGroup::find); ids count up and are never reused.
std::mutex ids_mutex;
int64_t last_id = 0;
std::unordered_map<int64_t, ProcessGroup*>& live_groups() {
  static auto* groups = new std::unordered_map<int64_t, ProcessGroup*>();
  return *groups;
}
// Never destroyed: a group left open at exit is not torn down during static destruction
// (after CUDA or MPI may be gone); destroy_process_group() releases it properly.
std::shared_ptr<ProcessGroup>& registry() {
  static auto* group = new std::shared_ptr<ProcessGroup>();
  return *group;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  KILN_CHECK(end && *end == '\0', ValueError, "[init_process_group] environment variable ", name,
             "='", v, "' is not an integer");
  return static_cast<int>(n);
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "SUM";
    case ReduceOp::Avg:
      return "AVG";
    case ReduceOp::Product:
      return "PRODUCT";
    case ReduceOp::Min:
      return "MIN";
    case ReduceOp::Max:
      return "MAX";
  }
  return "?";
}

ProcessGroup::ProcessGroup(int rank, int world_size) : rank_(rank), world_size_(world_size) {
  std::lock_guard lock(ids_mutex);
  id_ = ++last_id;
  live_groups()[id_] = this;
}

ProcessGroup::~ProcessGroup() {
  std::lock_guard lock(ids_mutex);
  live_groups().erase(id_);
}

ProcessGroup& ProcessGroup::find(int64_t id, const char* op) {
  std::lock_guard lock(ids_mutex);
  auto it = live_groups().find(id);
  KILN_CHECK(it != live_groups().end(), ValueError, "[", op, "] process group ", id,
             " no longer exists (destroy_process_group() ran); a traced collective needs "
             "the group it was recorded with");
  return *it->second;
}

void ProcessGroup::prepare(const char* op, const Tensor& t, const char* arg, const Loc& loc) const {
  KILN_CHECK(t.defined(), ValueError, "[", op, "] ", arg, " is an undefined tensor");
  // A write the tracer cannot see: end the trace here and run what it owes first.
  lazy::sync(op, SourceSite::from(loc), lazy::SyncKind::HostRead);
  KILN_CHECK(t.is_contiguous(), ValueError, "[", op, "] ", arg,
             " must be contiguous (got strides of a non-contiguous ", t.meta_str(),
             "); call .contiguous() first");
  KILN_CHECK(serves(t.device()), DeviceError, "[", op, "] the ", backend(),
             " backend does not serve ", t.device().str(), " tensors (", arg, " is ", t.meta_str(),
             ")");
}

void ProcessGroup::check_signature(const char* op, int kind, DType dtype, int64_t count, int root) {
  if (world_size_ == 1 || !checks_signatures()) return;
  const int64_t mine[3] = {kind, static_cast<int64_t>(dtype) * 1000000 + root, count};
  std::vector<int64_t> all(3 * static_cast<size_t>(world_size_));
  do_all_gather(mine, all.data(), 3, DType::Int64, kCPU);
  for (int r = 0; r < world_size_; ++r) {
    const int64_t* s = &all[3 * static_cast<size_t>(r)];
    if (s[0] == mine[0] && s[1] == mine[1] && s[2] == mine[2]) continue;
    const auto describe = [](const int64_t* sig) {
      const auto dt = static_cast<DType>(sig[1] / 1000000);
      const int64_t extra = sig[1] % 1000000;
      std::string what =
          detail::cat(kind_name(sig[0]), " of ", sig[2], " ", dtype_name(dt), " elements");
      if (sig[0] == kBroadcast) what += detail::cat(" from src ", extra);
      if (sig[0] == kAllReduce || sig[0] == kReduceScatter)
        what += detail::cat(" with ReduceOp.", reduce_op_name(static_cast<ReduceOp>(extra)));
      return what;
    };
    throw ValueError(detail::cat("[", op, "] ranks disagree: rank ", rank_, " called ",
                                 describe(mine), " but rank ", r, " called ", describe(s),
                                 "; every rank must pass the same dtype and shape"));
  }
}

void ProcessGroup::check_all_reduce(const Tensor& t, ReduceOp op) const {
  KILN_CHECK(t.is_contiguous(), ValueError,
             "[all_reduce] tensor must be contiguous (got strides of a non-contiguous ",
             t.meta_str(), "); call .contiguous() first");
  KILN_CHECK(serves(t.device()), DeviceError, "[all_reduce] the ", backend(),
             " backend does not serve ", t.device().str(), " tensors (tensor is ", t.meta_str(),
             ")");
  check_reducible("all_reduce", t.dtype(), op);
}

void ProcessGroup::run_all_reduce(const Tensor& tensor, ReduceOp op) {
  check_all_reduce(tensor, op);
  check_signature("all_reduce", kAllReduce, tensor.dtype(), tensor.numel(), static_cast<int>(op));
  if (tensor.numel() > 0)
    do_all_reduce(tensor.data_ptr(), tensor.numel(), tensor.dtype(), op, tensor.device());
}

void ProcessGroup::broadcast(const Tensor& tensor, int root, Loc loc) {
  prepare("broadcast", tensor, "tensor", loc);
  KILN_CHECK(root >= 0 && root < world_size_, ValueError, "[broadcast] src=", root,
             " is not a rank of this group (world size ", world_size_, ")");
  check_signature("broadcast", kBroadcast, tensor.dtype(), tensor.numel(), root);
  if (tensor.numel() > 0)
    do_broadcast(tensor.data_ptr(), tensor.numel(), tensor.dtype(), root, tensor.device());
  tensor.impl()->bump_version();
}

void ProcessGroup::all_gather(const Tensor& output, const Tensor& input, Loc loc) {
  prepare("all_gather", input, "input", loc);
  prepare("all_gather", output, "output", loc);
  KILN_CHECK(output.dtype() == input.dtype() && output.device() == input.device(), ValueError,
             "[all_gather] output ", output.meta_str(), " and input ", input.meta_str(),
             " must have the same dtype and device");
  KILN_CHECK(output.numel() == input.numel() * world_size_, ValueError,
             "[all_gather] output must have world_size (", world_size_, ") times the ",
             input.numel(), " elements of input, got ", output.numel());
  check_signature("all_gather", kAllGather, input.dtype(), input.numel(), 0);
  if (input.numel() > 0)
    do_all_gather(input.data_ptr(), output.data_ptr(), input.numel(), input.dtype(),
                  input.device());
  output.impl()->bump_version();
}

void ProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op, Loc loc) {
  prepare("reduce_scatter", input, "input", loc);
  prepare("reduce_scatter", output, "output", loc);
  check_reducible("reduce_scatter", input.dtype(), op);
  KILN_CHECK(output.dtype() == input.dtype() && output.device() == input.device(), ValueError,
             "[reduce_scatter] output ", output.meta_str(), " and input ", input.meta_str(),
             " must have the same dtype and device");
  KILN_CHECK(input.numel() == output.numel() * world_size_, ValueError,
             "[reduce_scatter] input must have world_size (", world_size_, ") times the ",
             output.numel(), " elements of output, got ", input.numel());
  check_signature("reduce_scatter", kReduceScatter, input.dtype(), output.numel(),
                  static_cast<int>(op));
  if (output.numel() > 0)
    do_reduce_scatter(input.data_ptr(), output.data_ptr(), output.numel(), input.dtype(), op,
                      input.device());
  output.impl()->bump_version();
}

void ProcessGroup::barrier(Loc loc) {
  lazy::sync("barrier", SourceSite::from(loc), lazy::SyncKind::HostRead);
  check_signature("barrier", kBarrier, DType::Bool, 0, 0);
  do_barrier();
}

std::shared_ptr<ProcessGroup> init_process_group(const Options& options) {
  std::lock_guard lock(registry_mutex);
  KILN_CHECK(!registry(), ValueError,
             "[init_process_group] the default process group is already initialized (",
             registry()->backend(), ", rank ", registry()->rank(), " of ", registry()->world_size(),
             "); call destroy_process_group() first");
  std::string backend = options.backend.empty() ? "gloo" : options.backend;
  for (char& c : backend) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (backend == "gloo") backend = launched_by_mpirun() ? "mpi" : "tcp";
  KILN_CHECK(backend == "mpi" || backend == "tcp" || backend == "nccl", ValueError,
             "[init_process_group] backend='", options.backend,
             "' is not one of 'gloo', 'mpi', 'tcp', 'nccl'");
  std::shared_ptr<ProcessGroup> group;
  if (backend == "mpi") {
    group = make_mpi_group();
  } else {
    Rendezvous rv;
    rv.rank =
        options.rank >= 0 ? options.rank : env_int("RANK", env_int("OMPI_COMM_WORLD_RANK", -1));
    rv.world_size = options.world_size >= 0
                        ? options.world_size
                        : env_int("WORLD_SIZE", env_int("OMPI_COMM_WORLD_SIZE", -1));
    KILN_CHECK(rv.rank >= 0 && rv.world_size >= 1, ValueError,
               "[init_process_group] rank and world_size are not set: pass them or set "
               "RANK and WORLD_SIZE (python -m kiln.distributed.run sets them)");
    KILN_CHECK(rv.rank < rv.world_size, ValueError, "[init_process_group] rank ", rv.rank,
               " is not below world_size ", rv.world_size);
    const char* addr = std::getenv("MASTER_ADDR");
    rv.addr = !options.master_addr.empty() ? options.master_addr
              : (addr && *addr)            ? addr
                                           : "127.0.0.1";
    rv.port = options.master_port >= 0 ? options.master_port : env_int("MASTER_PORT", 29500);
    rv.timeout_s = options.timeout_s;
    if (backend == "tcp") {
      group = make_tcp_group(rv);
    } else {
      const int device = options.device >= 0 ? options.device : env_int("LOCAL_RANK", 0);
      group = make_nccl_group(rv, device);
    }
  }
  registry() = group;
  return group;
}

bool is_initialized() {
  std::lock_guard lock(registry_mutex);
  return registry() != nullptr;
}

std::shared_ptr<ProcessGroup> default_group() {
  std::lock_guard lock(registry_mutex);
  KILN_CHECK(registry(), Error,
             "Default process group has not been initialized, please make sure to call "
             "init_process_group.");
  return registry();
}

void destroy_process_group() {
  std::lock_guard lock(registry_mutex);
  registry().reset();
}

bool is_backend_available(const std::string& backend) {
  if (backend == "tcp" || backend == "gloo") return true;
  if (backend == "mpi") return mpi_available();
  if (backend == "nccl") return nccl_available();
  return false;
}

}  // namespace kiln::distributed
