// CPU allocator: 64-byte aligned blocks. Blocks of 256 KiB and more are kept in
// size-class free lists after release and handed out again, because freshly mapped
// large buffers page-fault on first touch (a 64 MB output costs more to fault in
// than to compute). Cached bytes are capped (KILN_CPU_CACHE_MB, default 2048).
#pragma once

#include <cstddef>

namespace kiln::cpu_allocator {

void* allocate(size_t nbytes);  // throws OutOfMemoryError
void release(void* ptr, size_t nbytes);
void empty_cache();
size_t cached_bytes();

}  // namespace kiln::cpu_allocator
