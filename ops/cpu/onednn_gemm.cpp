#include "ops/cpu/onednn_gemm.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace kiln::cpu::onednn {
namespace {

// dnnl_sgemm's C signature, the same in oneDNN 2.x and 3.x (dnnl_dim_t is int64_t and
// dnnl_status_t an int-sized enum whose success value is 0).
using SgemmFn = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                        const float*, int64_t, float, float*, int64_t);
using GetThreadsFn = int (*)();
using SetThreadsFn = void (*)(int);

struct Library {
  SgemmFn sgemm = nullptr;
  GetThreadsFn omp_get_max_threads = nullptr;
  SetThreadsFn omp_set_num_threads = nullptr;
};

Library load() {
  Library lib;
  if (const char* pick = std::getenv("KILN_CPU_GEMM"); pick && std::strcmp(pick, "openblas") == 0)
    return lib;
  for (const char* name : {"libdnnl.so.2", "libdnnl.so.3"}) {
    void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!handle) continue;
    lib.sgemm = reinterpret_cast<SgemmFn>(dlsym(handle, "dnnl_sgemm"));
    // Resolved through oneDNN's own dependencies: an OpenMP build links libgomp (or
    // libiomp5); a build on another runtime has neither and needs no thread setting.
    lib.omp_get_max_threads = reinterpret_cast<GetThreadsFn>(dlsym(handle, "omp_get_max_threads"));
    lib.omp_set_num_threads = reinterpret_cast<SetThreadsFn>(dlsym(handle, "omp_set_num_threads"));
    if (lib.sgemm) return lib;
    dlclose(handle);
  }
  return Library{};
}

const Library& library() {
  static const Library lib = load();
  return lib;
}

}  // namespace

bool sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const Library& lib = library();
  if (!lib.sgemm) return false;
  const bool set_threads = lib.omp_get_max_threads && lib.omp_set_num_threads;
  const int saved = set_threads ? lib.omp_get_max_threads() : 1;
  if (set_threads && saved != 1) lib.omp_set_num_threads(1);
  const int status = lib.sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, 1.0f, a, lda, b,
                               ldb, beta, c, ldc);
  if (set_threads && saved != 1) lib.omp_set_num_threads(saved);
  if (status != 0) {
    throw std::runtime_error("matmul: oneDNN's dnnl_sgemm failed with status " +
                             std::to_string(status) + " for m=" + std::to_string(m) +
                             " n=" + std::to_string(n) + " k=" + std::to_string(k));
  }
  return true;
}

}  // namespace kiln::cpu::onednn
