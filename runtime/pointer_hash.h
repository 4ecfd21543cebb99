// The slot of a pointer key in an open-addressing table of a power-of-two size (linear
// probing): the pointer's address bits past its alignment, multiplied by the 64-bit
// golden-ratio constant, and the product's well mixed bits (shifted down by 29) masked.
// Used by the tracer's value index (tracer/impl_map.h) and the autograd engine's node table.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

inline size_t pointer_hash_slot(const void* key, size_t mask) {
  const uint64_t h = (reinterpret_cast<uintptr_t>(key) >> 4) * 0x9E3779B97F4A7C15ull;
  return static_cast<size_t>(h >> 29) & mask;
}

}  // namespace kiln
