// The mpi backend: Open MPI's libmpi.so.40, loaded at run time (so libkiln.so neither
// needs MPI to build nor to start), the way ops/cpu/onednn_gemm.cpp loads oneDNN.
// KILN_MPI_LIBRARY names another file with Open MPI's ABI. Handles are Open MPI's:
// MPI_COMM_WORLD, the datatypes and the ops are addresses of exported objects
// (ompi_mpi_comm_world, ompi_mpi_float, ompi_mpi_op_sum, ...), MPI_IN_PLACE is (void*)1.
// MPICH's ABI (integer handles) is not supported. The group works on a duplicate of
// MPI_COMM_WORLD with MPI_ERRORS_RETURN, so an MPI error is a BackendError, not an
// abort. MPI_Init runs once per process; MPI_Finalize at exit (MPI cannot start again).
#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/distributed/backends.h"
#include "runtime/error.h"

namespace kiln::distributed {
namespace {

using Handle = void*;  // MPI_Comm, MPI_Datatype, MPI_Op, MPI_Errhandler: pointers
void* const kInPlace = reinterpret_cast<void*>(1);

struct Mpi {
  void* lib = nullptr;
  int (*Init)(int*, char***) = nullptr;
  int (*Initialized)(int*) = nullptr;
  int (*Finalized)(int*) = nullptr;
  int (*Finalize)() = nullptr;
  int (*Comm_dup)(Handle, Handle*) = nullptr;
  int (*Comm_free)(Handle*) = nullptr;
  int (*Comm_rank)(Handle, int*) = nullptr;
  int (*Comm_size)(Handle, int*) = nullptr;
  int (*Comm_set_errhandler)(Handle, Handle) = nullptr;
  int (*Error_string)(int, char*, int*) = nullptr;
  int (*Allreduce)(const void*, void*, int, Handle, Handle, Handle) = nullptr;
  int (*Bcast)(void*, int, Handle, int, Handle) = nullptr;
  int (*Allgather)(const void*, int, Handle, void*, int, Handle, Handle) = nullptr;
  int (*Reduce_scatter_block)(const void*, void*, int, Handle, Handle, Handle) = nullptr;
  int (*Barrier)(Handle) = nullptr;
  Handle world = nullptr, errors_return = nullptr;
  Handle byte = nullptr, f32 = nullptr, f64 = nullptr, i32 = nullptr, i64 = nullptr,
         c_bool = nullptr;
  Handle sum = nullptr, prod = nullptr, max = nullptr, min = nullptr, lor = nullptr, land = nullptr;
  std::string error;  // why loading failed
};

template <class F>
bool bind(void* lib, F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

Mpi load() {
  Mpi m;
  const char* pick = std::getenv("KILN_MPI_LIBRARY");
  const std::string name = pick && *pick ? pick : "libmpi.so.40";
  // RTLD_GLOBAL: Open MPI's plugins resolve libmpi's symbols through the global scope.
  m.lib = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!m.lib) {
    m.error = "cannot load " + name + " (install Open MPI: apt-get install libopenmpi-dev " +
              "openmpi-bin, or set KILN_MPI_LIBRARY)";
    return m;
  }
  bool ok = bind(m.lib, m.Init, "MPI_Init") && bind(m.lib, m.Initialized, "MPI_Initialized") &&
            bind(m.lib, m.Finalized, "MPI_Finalized") && bind(m.lib, m.Finalize, "MPI_Finalize") &&
            bind(m.lib, m.Comm_dup, "MPI_Comm_dup") && bind(m.lib, m.Comm_free, "MPI_Comm_free") &&
            bind(m.lib, m.Comm_rank, "MPI_Comm_rank") &&
            bind(m.lib, m.Comm_size, "MPI_Comm_size") &&
            bind(m.lib, m.Comm_set_errhandler, "MPI_Comm_set_errhandler") &&
            bind(m.lib, m.Error_string, "MPI_Error_string") &&
            bind(m.lib, m.Allreduce, "MPI_Allreduce") && bind(m.lib, m.Bcast, "MPI_Bcast") &&
            bind(m.lib, m.Allgather, "MPI_Allgather") &&
            bind(m.lib, m.Reduce_scatter_block, "MPI_Reduce_scatter_block") &&
            bind(m.lib, m.Barrier, "MPI_Barrier");
  const std::pair<Handle*, const char*> objects[] = {
      {&m.world, "ompi_mpi_comm_world"}, {&m.errors_return, "ompi_mpi_errors_return"},
      {&m.byte, "ompi_mpi_byte"},        {&m.f32, "ompi_mpi_float"},
      {&m.f64, "ompi_mpi_double"},       {&m.i32, "ompi_mpi_int32_t"},
      {&m.i64, "ompi_mpi_int64_t"},      {&m.c_bool, "ompi_mpi_c_bool"},
      {&m.sum, "ompi_mpi_op_sum"},       {&m.prod, "ompi_mpi_op_prod"},
      {&m.max, "ompi_mpi_op_max"},       {&m.min, "ompi_mpi_op_min"},
      {&m.lor, "ompi_mpi_op_lor"},       {&m.land, "ompi_mpi_op_land"}};
  for (const auto& [slot, sym] : objects) ok = ok && (*slot = dlsym(m.lib, sym)) != nullptr;
  if (!ok) {
    m.error = name +
              " does not have Open MPI's ABI (a symbol such as ompi_mpi_comm_world "
              "is missing)";
    m.lib = nullptr;
  }
  return m;
}

const Mpi& mpi() {
  static const Mpi m = load();
  return m;
}

void check(int rc, const char* what) {
  if (rc == 0) return;
  char text[512];
  int len = 0;
  if (mpi().Error_string(rc, text, &len) != 0) len = 0;
  throw BackendError(std::string("[distributed] ") + what +
                     " failed: " + std::string(text, static_cast<size_t>(len)));
}

class MpiGroup final : public ProcessGroup {
 public:
  MpiGroup(Handle comm, int rank, int size) : ProcessGroup(rank, size), comm_(comm) {}
  ~MpiGroup() override {
    int finalized = 0;
    mpi().Finalized(&finalized);
    if (!finalized) mpi().Comm_free(&comm_);
  }
  std::string backend() const override { return "mpi"; }

 protected:
  void do_all_reduce(void* data, int64_t count, DType dtype, ReduceOp op, Device) override {
    if (dtype == DType::Float16 || dtype == DType::BFloat16) {  // MPI has no 16-bit floats
      visit_dtype(dtype, [&](auto zero) {
        using T = decltype(zero);
        if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
          T* p = static_cast<T*>(data);
          std::vector<float> wide(p, p + count);
          do_all_reduce(wide.data(), count, DType::Float32, op, kCPU);
          for (int64_t i = 0; i < count; ++i) p[i] = T(wide[static_cast<size_t>(i)]);
        }
      });
      return;
    }
    const int64_t step = INT_MAX / 2;
    char* p = static_cast<char*>(data);
    for (int64_t done = 0; done < count; done += step) {
      const int n = static_cast<int>(std::min(step, count - done));
      check(mpi().Allreduce(kInPlace, p + done * itemsize(dtype), n, type(dtype), mpi_op(dtype, op),
                            comm_),
            "MPI_Allreduce");
    }
    if (op == ReduceOp::Avg) finish_average(data, count, dtype, world_size());
  }

  void do_broadcast(void* data, int64_t count, DType dtype, int root, Device) override {
    check(mpi().Bcast(data, as_int(count * itemsize(dtype)), mpi().byte, root, comm_), "MPI_Bcast");
  }

  void do_all_gather(const void* input, void* output, int64_t count, DType dtype, Device) override {
    const int bytes = as_int(count * itemsize(dtype));
    check(mpi().Allgather(input, bytes, mpi().byte, output, bytes, mpi().byte, comm_),
          "MPI_Allgather");
  }

  void do_reduce_scatter(const void* input, void* output, int64_t count, DType dtype, ReduceOp op,
                         Device) override {
    if (dtype == DType::Float16 || dtype == DType::BFloat16) {  // reduce all, keep a block
      std::vector<char> all(static_cast<const char*>(input),
                            static_cast<const char*>(input) + count * world_size() * 2);
      do_all_reduce(all.data(), count * world_size(), dtype, op, kCPU);
      std::memcpy(output, all.data() + count * rank() * 2, static_cast<size_t>(count) * 2);
      return;
    }
    check(mpi().Reduce_scatter_block(input, output, as_int(count), type(dtype), mpi_op(dtype, op),
                                     comm_),
          "MPI_Reduce_scatter_block");
    if (op == ReduceOp::Avg) finish_average(output, count, dtype, world_size());
  }

  void do_barrier() override { check(mpi().Barrier(comm_), "MPI_Barrier"); }

 private:
  static int as_int(int64_t n) {
    KILN_CHECK(n <= INT_MAX, ValueError, "[distributed] the mpi backend takes at most ", INT_MAX,
               " bytes per rank in one broadcast or all_gather, got ", n);
    return static_cast<int>(n);
  }
  static Handle type(DType d) {
    switch (d) {
      case DType::Float32:
        return mpi().f32;
      case DType::Float64:
        return mpi().f64;
      case DType::Int32:
        return mpi().i32;
      case DType::Int64:
        return mpi().i64;
      case DType::Bool:
        return mpi().c_bool;
      default:
        throw DTypeError(std::string("[distributed] the mpi backend cannot reduce ") +
                         dtype_name(d));
    }
  }
  static Handle mpi_op(DType d, ReduceOp op) {
    if (d == DType::Bool)
      return op == ReduceOp::Sum || op == ReduceOp::Max ? mpi().lor : mpi().land;
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        return mpi().sum;
      case ReduceOp::Product:
        return mpi().prod;
      case ReduceOp::Min:
        return mpi().min;
      case ReduceOp::Max:
        return mpi().max;
    }
    return mpi().sum;
  }

  Handle comm_;
};

}  // namespace

bool mpi_available() { return mpi().lib != nullptr; }

bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    const char* s = std::getenv(v);
    if (s && *s) return true;
  }
  return false;
}

std::unique_ptr<ProcessGroup> make_mpi_group() {
  const Mpi& m = mpi();
  KILN_CHECK(m.lib, BackendError, "[init_process_group] backend='mpi': ", m.error);
  int initialized = 0, finalized = 0;
  check(m.Initialized(&initialized), "MPI_Initialized");
  check(m.Finalized(&finalized), "MPI_Finalized");
  KILN_CHECK(!finalized, BackendError,
             "[init_process_group] backend='mpi': MPI was finalized in this process already");
  if (!initialized) {
    check(m.Init(nullptr, nullptr), "MPI_Init");
    std::atexit([] {
      int done = 0;
      mpi().Finalized(&done);
      if (!done) mpi().Finalize();
    });
  }
  Handle comm = nullptr;
  check(m.Comm_dup(m.world, &comm), "MPI_Comm_dup");
  check(m.Comm_set_errhandler(comm, m.errors_return), "MPI_Comm_set_errhandler");
  int rank = 0, size = 1;
  check(m.Comm_rank(comm, &rank), "MPI_Comm_rank");
  check(m.Comm_size(comm, &size), "MPI_Comm_size");
  return std::make_unique<MpiGroup>(comm, rank, size);
}

}  // namespace kiln::distributed
