// The backends behind runtime/distributed/process_group.h (internal: users go through
// init_process_group). Each factory joins the group or throws; each *_available never
// throws.
#pragma once

#include <memory>
#include <string>

#include "runtime/distributed/process_group.h"

namespace kiln::distributed {

// Where the tcp backend and the NCCL rendezvous meet: rank 0 listens at addr:port.
struct Rendezvous {
  int rank = 0;
  int world_size = 1;
  std::string addr = "127.0.0.1";
  int port = 29500;
  double timeout_s = 300;
};

// kiln's own sockets: every rank connects to rank 0, which reduces and sends back.
std::unique_ptr<ProcessGroup> make_tcp_group(const Rendezvous& rv);

// libmpi.so.40 (Open MPI's ABI), loaded at run time; rank and size are MPI's.
bool mpi_available();
bool launched_by_mpirun();  // OMPI_COMM_WORLD_SIZE (or PMI_SIZE) is set
std::unique_ptr<ProcessGroup> make_mpi_group();

// libnccl.so.2, loaded at run time (KILN_NCCL_LIBRARY, then the search list in
// runtime/cuda/nccl_group.cpp); the unique id travels over a tcp group.
bool nccl_available();
std::unique_ptr<ProcessGroup> make_nccl_group(const Rendezvous& rv, int device);

// Host-side reduction (tcp, and what MPI cannot do itself): acc[i] = op(acc[i], in[i]);
// Avg accumulates as Sum, finish_average divides by world_size afterwards.
void reduce_into(void* acc, const void* in, int64_t count, DType dtype, ReduceOp op);
void finish_average(void* data, int64_t count, DType dtype, int world_size);
// DTypeError unless op can reduce dtype (Avg: floating only; Sum/Product/Min/Max: any but
// bool, which takes Max/Min as "or"/"and" and Sum as "or", as torch does).
void check_reducible(const char* op_name, DType dtype, ReduceOp op);

}  // namespace kiln::distributed
