// Collective communication between processes (data-parallel training), the C++ side of
// kiln.distributed. One ProcessGroup per process; every rank calls the same collectives
// in the same order with tensors of the same dtype and element count, as with
// torch.distributed.
//
// Contract of every collective:
//   - the tensor arguments are contiguous and defined; all_reduce and broadcast work in
//     place, all_gather / reduce_scatter write `output` (world_size times / one
//     world_size-th the elements of `input`); outputs' autograd versions are bumped;
//   - all_reduce is an op (ops.def's all_reduce, Collective family): the tracer records
//     it, so a training step with its gradient all-reduce is one trace (on CUDA captured
//     in the step's CUDA graph); ProcessGroup::all_reduce is defined in ops/distributed/
//     collective_ops.cpp, which dispatches it. broadcast, all_gather, reduce_scatter and
//     barrier stay trace boundaries (the tracer cannot see a write that is not an op):
//     each runs pending lazy work before touching memory;
//   - CPU backends ("mpi", "tcp") are synchronous: the result is there on return. The
//     NCCL backend enqueues on kiln's stream of the tensor's device (ordered with kiln's
//     kernels), so the host does not wait, as in PyTorch;
//   - on the CPU backends each call first exchanges a 24-byte signature (collective,
//     dtype, element count, root) with every rank and throws ValueError naming both ranks'
//     arguments when they differ, instead of hanging or corrupting memory (NCCL: not
//     checked, the exchange would cost a device sync per call).
// Errors: ValueError for mismatches and bad arguments, DTypeError for a dtype a backend
// cannot reduce, DeviceError for a tensor on a device the backend does not serve,
// BackendError when the library (libmpi, libnccl) is missing or fails.
#pragma once

#include <cstdint>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace kiln::distributed {

enum class ReduceOp { Sum, Avg, Product, Min, Max };
const char* reduce_op_name(ReduceOp op);  // "SUM", ... (torch.distributed.ReduceOp's names)

// How to join the group. Unset fields come from the environment, read once in
// init_process_group: RANK / WORLD_SIZE (torchrun, kiln.distributed.run) or
// OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (mpirun), LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT.
struct Options {
  // "mpi" (libmpi, loaded at run time; the processes are started by mpirun),
  // "tcp" (kiln's own sockets, star through rank 0 at master_addr:master_port),
  // "gloo" (the CPU backend: "mpi" when started by mpirun, else "tcp"),
  // "nccl" (libnccl.so.2, loaded at run time; CUDA tensors; rendezvous over tcp).
  std::string backend = "gloo";
  int rank = -1;            // -1: from the environment
  int world_size = -1;      // -1: from the environment
  std::string master_addr;  // "": MASTER_ADDR, else 127.0.0.1
  int master_port = -1;     // -1: MASTER_PORT, else 29500
  int device = -1;          // nccl: the CUDA device index; -1: LOCAL_RANK, else 0
  double timeout_s = 300;   // rendezvous and socket waits
};

class ProcessGroup {
 public:
  ProcessGroup(int rank, int world_size);
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  virtual std::string backend() const = 0;  // "mpi", "tcp", "nccl"
  // This group's id in the process (1, 2, ...; never reused): what a traced all_reduce
  // names (attrs.count), so a trace never holds a group alive. find(id) is the group
  // while it exists; a trace replayed after its group was destroyed raises ValueError.
  int64_t id() const { return id_; }
  static ProcessGroup& find(int64_t id, const char* op);

  using Loc = std::source_location;
  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum, Loc loc = Loc::current());
  void broadcast(const Tensor& tensor, int root, Loc loc = Loc::current());
  // output.numel() == world_size * input.numel(); rank r's input lands in the r-th block.
  void all_gather(const Tensor& output, const Tensor& input, Loc loc = Loc::current());
  // input.numel() == world_size * output.numel(); rank r gets block r of the reduction.
  void reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum,
                      Loc loc = Loc::current());
  void barrier(Loc loc = Loc::current());

  // The all_reduce op's side (ops/distributed/collective_ops.cpp), no trace boundary:
  // check_all_reduce validates (contiguous, a device this backend serves, a dtype op can
  // reduce); run_all_reduce exchanges the signature (CPU backends) and calls the backend
  // on the tensor's memory now (NCCL: enqueues on kiln's stream, capturable).
  void check_all_reduce(const Tensor& tensor, ReduceOp op) const;
  void run_all_reduce(const Tensor& tensor, ReduceOp op);

 protected:
  // The backends: contiguous buffers of `count` elements of dtype on device.
  virtual void do_all_reduce(void* data, int64_t count, DType dtype, ReduceOp op,
                             Device device) = 0;
  virtual void do_broadcast(void* data, int64_t count, DType dtype, int root, Device device) = 0;
  virtual void do_all_gather(const void* input, void* output, int64_t count, DType dtype,
                             Device device) = 0;
  virtual void do_reduce_scatter(const void* input, void* output, int64_t count, DType dtype,
                                 ReduceOp op, Device device) = 0;
  virtual void do_barrier() = 0;
  // Which devices' memory the backend works on (CPU backends: the CPU).
  virtual bool serves(Device device) const { return device.is_cpu(); }
  // Whether collectives exchange signatures first (see the contract above).
  virtual bool checks_signatures() const { return true; }

 private:
  void prepare(const char* op, const Tensor& t, const char* arg, const Loc& loc) const;
  void check_signature(const char* op, int kind, DType dtype, int64_t count, int root);

  int rank_;
  int world_size_;
  int64_t id_;
};

// The process's default group (torch.distributed's "WORLD"). init_process_group throws
// ValueError when one exists already; default_group throws Error ("... call
// init_process_group first") when none does. destroy_process_group drops the default
// group (it lives on while someone else holds it; MPI itself is finalized at exit).
std::shared_ptr<ProcessGroup> init_process_group(const Options& options = {});
bool is_initialized();
std::shared_ptr<ProcessGroup> default_group();
void destroy_process_group();

// Whether a backend can run here: "mpi" (libmpi.so.40 loads), "tcp"/"gloo" (always),
// "nccl" (a CUDA build, libnccl.so.2 loads and a GPU is present).
bool is_backend_available(const std::string& backend);

}  // namespace kiln::distributed
