// CPU allocator: 64-byte aligned blocks kept in size-class free lists after release and
// handed out again. Small blocks (power-of-two classes up to 256 KiB) make a tiny op's
// allocation a list pop instead of an aligned malloc; large blocks (1/8-power-of-two
// classes) matter more: freshly mapped buffers page-fault on first touch, and a 64 MB
// output costs more to fault in than to compute. Cached bytes are capped
// (KILN_CPU_CACHE_MB, default 2048).
#pragma once

#include <cstddef>

namespace kiln::cpu_allocator {

void* allocate(size_t nbytes);  // throws OutOfMemoryError
void release(void* ptr, size_t nbytes);
void empty_cache();
size_t cached_bytes();

}  // namespace kiln::cpu_allocator
