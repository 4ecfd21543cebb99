#include "runtime/cpu_allocator.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>

#include "runtime/error.h"

namespace kiln::cpu_allocator {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kCachedMin = 256 * 1024;  // smaller blocks go straight to malloc

// Size classes for cached blocks: rounded up to a multiple of 1/8 of the next power of
// two, so a reused block wastes at most 12.5%.
size_t round_size(size_t n) {
  if (n < kCachedMin) return (n + kAlignment - 1) / kAlignment * kAlignment;
  size_t p = 1;
  while (p < n) p <<= 1;
  const size_t step = p / 8;
  return (n + step - 1) / step * step;
}

struct Cache {
  std::mutex mutex;
  std::multimap<size_t, void*> free_blocks;  // size class -> block
  size_t cached = 0;
  size_t limit = 0;
  Cache() {
    const char* env = std::getenv("KILN_CPU_CACHE_MB");
    limit = (env ? std::strtoull(env, nullptr, 10) : 2048ull) << 20;
  }
  ~Cache() {
    for (auto& [size, p] : free_blocks) std::free(p);
  }
};

Cache& cache() {
  static Cache* c = new Cache();  // leaked on purpose: storages may die during exit
  return *c;
}

}  // namespace

void* allocate(size_t nbytes) {
  const size_t size = round_size(nbytes == 0 ? kAlignment : nbytes);
  if (size >= kCachedMin) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.free_blocks.find(size);
    if (it != c.free_blocks.end()) {
      void* p = it->second;
      c.free_blocks.erase(it);
      c.cached -= size;
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlignment, size);
  if (!p) {
    empty_cache();
    p = std::aligned_alloc(kAlignment, size);
  }
  KILN_CHECK(p != nullptr, OutOfMemoryError, "[cpu allocator] out of memory: could not allocate ",
             nbytes, " bytes on the host");
  return p;
}

void release(void* ptr, size_t nbytes) {
  if (!ptr) return;
  const size_t size = round_size(nbytes == 0 ? kAlignment : nbytes);
  if (size >= kCachedMin) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.cached + size <= c.limit) {
      c.free_blocks.emplace(size, ptr);
      c.cached += size;
      return;
    }
  }
  std::free(ptr);
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto& [size, p] : c.free_blocks) std::free(p);
  c.free_blocks.clear();
  c.cached = 0;
}

size_t cached_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.cached;
}

}  // namespace kiln::cpu_allocator
