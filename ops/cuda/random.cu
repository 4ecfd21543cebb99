// rand / randn: element i (row-major index) is philox::rand_value / randn_value(seed,
// offset, i) (ops/philox.h), a double converted to out's dtype, as on the CPU.
// scalars[0] = seed, scalars[1] = offset (uint64 bit patterns carried as integers).
//
// The uniform draws are bit-identical to the CPU's. randn's Box-Muller uses the device's
// double log/cos/sqrt (CUDA's libdevice: log and cos within 1 ulp in double), so a double
// randn value may differ from glibc's in the last bit; after rounding to float such a
// difference is visible only in rare ties.
#include "ops/cuda/common.cuh"
#include "ops/cuda/generate.cuh"
#include "ops/philox.h"

namespace kiln::cuda_impl {
namespace {

template <class T>
struct RandGen {
  uint64_t seed, offset;
  __device__ T operator()(int64_t i) const {
    return convert<T>(
        philox::rand_value(seed, offset, static_cast<uint64_t>(i), philox::uniform_bits<T>()));
  }
};

template <class T>
struct RandnGen {
  uint64_t seed, offset;
  __device__ T operator()(int64_t i) const {
    return convert<T>(philox::randn_value(seed, offset, static_cast<uint64_t>(i)));
  }
};

}  // namespace
}  // namespace kiln::cuda_impl

namespace kiln::cuda {

void random(const OpCall& call, const Tensor& out) {
  using namespace cuda_impl;
  const uint64_t seed = static_cast<uint64_t>(call.scalars[0].to_int());
  const uint64_t offset = static_cast<uint64_t>(call.scalars[1].to_int());
  visit_floating(out.dtype(), call.name(), [&](auto tag) {
    using T = decltype(tag);
    if (call.op == OpId::Randn)
      launch_generate<T>(out, RandnGen<T>{seed, offset}, call.name());
    else
      launch_generate<T>(out, RandGen<T>{seed, offset}, call.name());
  });
}

}  // namespace kiln::cuda
