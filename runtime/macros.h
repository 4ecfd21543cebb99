// Portability macros shared by host C++, CUDA and NVRTC sources. NVRTC compiles without
// the standard library: there, the fixed-width integer types are declared here.
#pragma once

#if defined(__CUDACC_RTC__)
using int32_t = int;
using int64_t = long long;
using uint16_t = unsigned short;
using uint32_t = unsigned int;
using uint64_t = unsigned long long;
#else
#include <cstdint>
#endif

#if defined(__CUDACC__)
#define KILN_HD __host__ __device__ __forceinline__
#else
#define KILN_HD inline
#endif
