// The nccl backend: libnccl.so.2 loaded at run time (libkiln.so does not link it). The
// library is the first that loads of: $KILN_NCCL_LIBRARY; libnccl.so.2 on the loader's
// path (LD_LIBRARY_PATH: kiln.distributed puts PyTorch's nvidia/nccl/lib there for
// you through KILN_NCCL_LIBRARY when it finds one); the CUDA toolkit's
// (/usr/local/cuda/lib64, /usr/local/cuda/lib). The ncclUniqueId goes from rank 0 to
// the others over a tcp group at MASTER_ADDR:MASTER_PORT. Collectives are enqueued on
// kiln's stream of the group's device: ordered with kiln's kernels, the host does not
// wait (barrier() does). The enum values and ncclUniqueId layout are NCCL's stable ABI
// (nccl.h, 2.x), written out so the build needs no nccl.h.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/cuda_context.h"
#include "runtime/distributed/backends.h"
#include "runtime/error.h"

namespace kiln::distributed {
namespace {

struct UniqueId {
  char internal[128];
};
using Comm = void*;
using Stream = void*;
enum NcclType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kInt64 = 4,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9
};
enum NcclOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };

struct Nccl {
  void* lib = nullptr;
  std::string path, error;
  int (*GetVersion)(int*) = nullptr;
  int (*GetUniqueId)(UniqueId*) = nullptr;
  int (*CommInitRank)(Comm*, int, UniqueId, int) = nullptr;
  int (*CommDestroy)(Comm) = nullptr;
  const char* (*GetErrorString)(int) = nullptr;
  int (*AllReduce)(const void*, void*, size_t, int, int, Comm, Stream) = nullptr;
  int (*Broadcast)(const void*, void*, size_t, int, int, Comm, Stream) = nullptr;
  int (*AllGather)(const void*, void*, size_t, int, Comm, Stream) = nullptr;
  int (*ReduceScatter)(const void*, void*, size_t, int, int, Comm, Stream) = nullptr;
};

template <class F>
bool bind(void* lib, F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

Nccl load() {
  Nccl n;
  std::string candidates[4];
  int k = 0;
  if (const char* pick = std::getenv("KILN_NCCL_LIBRARY"); pick && *pick) candidates[k++] = pick;
  candidates[k++] = "libnccl.so.2";
  candidates[k++] = "/usr/local/cuda/lib64/libnccl.so.2";
  candidates[k++] = "/usr/local/cuda/lib/libnccl.so.2";
  for (int i = 0; i < k && !n.lib; ++i) {
    n.lib = dlopen(candidates[i].c_str(), RTLD_NOW | RTLD_LOCAL);
    if (n.lib) n.path = candidates[i];
  }
  if (!n.lib) {
    n.error = "cannot load libnccl.so.2 (set KILN_NCCL_LIBRARY to its path)";
    return n;
  }
  const bool ok = bind(n.lib, n.GetVersion, "ncclGetVersion") &&
                  bind(n.lib, n.GetUniqueId, "ncclGetUniqueId") &&
                  bind(n.lib, n.CommInitRank, "ncclCommInitRank") &&
                  bind(n.lib, n.CommDestroy, "ncclCommDestroy") &&
                  bind(n.lib, n.GetErrorString, "ncclGetErrorString") &&
                  bind(n.lib, n.AllReduce, "ncclAllReduce") &&
                  bind(n.lib, n.Broadcast, "ncclBroadcast") &&
                  bind(n.lib, n.AllGather, "ncclAllGather") &&
                  bind(n.lib, n.ReduceScatter, "ncclReduceScatter");
  if (!ok) {
    n.error = n.path + " lacks an NCCL 2 entry point";
    n.lib = nullptr;
  }
  return n;
}

const Nccl& nccl() {
  static const Nccl n = load();
  return n;
}

void check(int rc, const char* what) {
  if (rc == 0) return;
  throw BackendError(std::string("[distributed] ") + what +
                     " failed: " + nccl().GetErrorString(rc) + " (NCCL_DEBUG=INFO says more)");
}

int nccl_type(DType d) {
  switch (d) {
    case DType::Bool:
      return kUint8;
    case DType::Int32:
      return kInt32;
    case DType::Int64:
      return kInt64;
    case DType::Float16:
      return kFloat16;
    case DType::BFloat16:
      return kBfloat16;
    case DType::Float32:
      return kFloat32;
    case DType::Float64:
      return kFloat64;
  }
  return kFloat32;
}

int nccl_op(DType d, ReduceOp op) {
  if (d == DType::Bool) return op == ReduceOp::Sum || op == ReduceOp::Max ? kMax : kMin;
  switch (op) {
    case ReduceOp::Sum:
      return kSum;
    case ReduceOp::Avg:
      return kAvg;
    case ReduceOp::Product:
      return kProd;
    case ReduceOp::Min:
      return kMin;
    case ReduceOp::Max:
      return kMax;
  }
  return kSum;
}

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    cudaGetDevice(&previous_);
    if (previous_ != device) cudaSetDevice(device);
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(const Rendezvous& rv, int device)
      : ProcessGroup(rv.rank, rv.world_size), device_(device) {
    UniqueId id{};
    if (rv.rank == 0) check(nccl().GetUniqueId(&id), "ncclGetUniqueId");
    if (rv.world_size > 1) {
      auto tcp = make_tcp_group(rv);
      Tensor buffer = Tensor::make({128}, DType::Bool, kCPU);
      std::memcpy(buffer.data_ptr(), id.internal, sizeof id.internal);
      tcp->broadcast(buffer, 0);
      std::memcpy(id.internal, buffer.data_ptr(), sizeof id.internal);
    }
    DeviceGuard guard(device_);
    check(nccl().CommInitRank(&comm_, rv.world_size, id, rv.rank), "ncclCommInitRank");
  }
  ~NcclGroup() override {
    if (comm_) nccl().CommDestroy(comm_);
  }
  std::string backend() const override { return "nccl"; }

 protected:
  bool serves(Device d) const override { return d.is_cuda() && d.index == device_; }
  bool checks_signatures() const override { return false; }

  void do_all_reduce(void* data, int64_t count, DType dtype, ReduceOp op, Device) override {
    DeviceGuard guard(device_);
    check(nccl().AllReduce(data, data, static_cast<size_t>(count), nccl_type(dtype),
                           nccl_op(dtype, op), comm_, stream()),
          "ncclAllReduce");
  }
  void do_broadcast(void* data, int64_t count, DType dtype, int root, Device) override {
    DeviceGuard guard(device_);
    check(nccl().Broadcast(data, data, static_cast<size_t>(count), nccl_type(dtype), root, comm_,
                           stream()),
          "ncclBroadcast");
  }
  void do_all_gather(const void* input, void* output, int64_t count, DType dtype, Device) override {
    DeviceGuard guard(device_);
    check(nccl().AllGather(input, output, static_cast<size_t>(count), nccl_type(dtype), comm_,
                           stream()),
          "ncclAllGather");
  }
  void do_reduce_scatter(const void* input, void* output, int64_t count, DType dtype, ReduceOp op,
                         Device) override {
    DeviceGuard guard(device_);
    check(nccl().ReduceScatter(input, output, static_cast<size_t>(count), nccl_type(dtype),
                               nccl_op(dtype, op), comm_, stream()),
          "ncclReduceScatter");
  }
  void do_barrier() override {
    Tensor token = Tensor::make({1}, DType::Float32, cuda_device(device_));
    do_all_reduce(token.data_ptr(), 1, DType::Float32, ReduceOp::Sum, token.device());
    cuda_context::synchronize(device_);
  }

 private:
  Stream stream() const { return cuda_context::stream(device_); }
  int device_;
  Comm comm_ = nullptr;
};

}  // namespace

bool nccl_available() { return cuda_context::device_count() > 0 && nccl().lib != nullptr; }

std::unique_ptr<ProcessGroup> make_nccl_group(const Rendezvous& rv, int device) {
  KILN_CHECK(cuda_context::device_count() > 0, DeviceError,
             "[init_process_group] backend='nccl' needs a CUDA GPU; none is present (use "
             "backend='gloo' for CPU tensors)");
  KILN_CHECK(device >= 0 && device < cuda_context::device_count(), DeviceError,
             "[init_process_group] backend='nccl': device cuda:", device, " does not exist (",
             cuda_context::device_count(), " GPUs; LOCAL_RANK picks the device)");
  KILN_CHECK(nccl().lib, BackendError, "[init_process_group] backend='nccl': ", nccl().error);
  return std::make_unique<NcclGroup>(rv, device);
}

}  // namespace kiln::distributed
