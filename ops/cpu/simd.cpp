// Picks the vector kernel set once, from the CPU's features (see ops/cpu/simd.h).
#include "ops/cpu/simd.h"

#include <cstdlib>
#include <cstring>

namespace kiln::cpu::simd {
namespace {

enum class Level { Sse2, Avx2, Avx512 };

Level cpu_level() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return Level::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Level::Avx2;
  return Level::Sse2;
}

// KILN_CPU_ARCH caps the level (it never raises it above what the CPU has).
Level requested_level(Level have) {
  const char* env = std::getenv("KILN_CPU_ARCH");
  if (!env) return have;
  Level want = have;
  if (std::strcmp(env, "sse2") == 0) want = Level::Sse2;
  if (std::strcmp(env, "avx2") == 0) want = Level::Avx2;
  return want < have ? want : have;
}

KernelSet select_set() {
  KernelSet set;
  switch (requested_level(cpu_level())) {
    case Level::Avx512:
      fill_avx512(&set);
      break;
    case Level::Avx2:
      fill_avx2(&set);
      break;
    case Level::Sse2:
      fill_sse2(&set);
      break;
  }
  return set;
}

}  // namespace

const KernelSet& kernels() {
  static const KernelSet set = select_set();
  return set;
}

}  // namespace kiln::cpu::simd
