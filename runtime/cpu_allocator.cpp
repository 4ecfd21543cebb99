#include "runtime/cpu_allocator.h"

#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/error.h"

namespace kiln::cpu_allocator {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kSmallMax = 256 * 1024;    // power-of-two classes up to here
constexpr int kSmallClasses = 13;           // 64 B .. 256 KiB
constexpr size_t kSmallKeepPerClass = 256;  // blocks kept per small class

int small_class(size_t n) {
  int c = 0;
  size_t size = kAlignment;
  while (size < n) {
    size <<= 1;
    ++c;
  }
  return c;
}
size_t small_size(int c) { return kAlignment << c; }

// Large blocks round up to 1/8 of the next power of two, so reuse wastes at most 12.5%.
size_t round_large(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  const size_t step = p / 8;
  return (n + step - 1) / step * step;
}
size_t block_size(size_t nbytes) {
  if (nbytes == 0) nbytes = 1;
  return nbytes <= kSmallMax ? small_size(small_class(nbytes)) : round_large(nbytes);
}

struct Cache {
  std::mutex mutex;
  std::vector<void*> small[kSmallClasses];
  std::unordered_map<size_t, std::vector<void*>> large;  // block size -> free blocks
  size_t cached = 0;
  size_t limit = 0;
  Cache() {
    const char* env = std::getenv("KILN_CPU_CACHE_MB");
    limit = (env ? std::strtoull(env, nullptr, 10) : 2048ull) << 20;
  }
};

Cache& cache() {
  static Cache* c = new Cache();  // leaked on purpose: storages may die during exit
  return *c;
}

void* fresh(size_t size) {
  void* p = std::aligned_alloc(kAlignment, size);
  if (!p) {
    empty_cache();
    p = std::aligned_alloc(kAlignment, size);
  }
  KILN_CHECK(p != nullptr, OutOfMemoryError, "[cpu allocator] out of memory: could not allocate ",
             size, " bytes on the host (", cached_bytes(), " bytes cached)");
  return p;
}

}  // namespace

void* allocate(size_t nbytes) {
  const size_t size = block_size(nbytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    std::vector<void*>* list = nullptr;
    if (size <= kSmallMax) {
      list = &c.small[small_class(size)];
    } else {
      auto it = c.large.find(size);
      if (it != c.large.end()) list = &it->second;
    }
    if (list && !list->empty()) {
      void* p = list->back();
      list->pop_back();
      c.cached -= size;
      return p;
    }
  }
  return fresh(size);
}

void release(void* ptr, size_t nbytes) {
  if (!ptr) return;
  const size_t size = block_size(nbytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (c.cached + size <= c.limit) {
      std::vector<void*>& list = size <= kSmallMax ? c.small[small_class(size)] : c.large[size];
      if (size > kSmallMax || list.size() < kSmallKeepPerClass) {
        list.push_back(ptr);
        c.cached += size;
        return;
      }
    }
  }
  std::free(ptr);
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto& list : c.small) {
    for (void* p : list) std::free(p);
    list.clear();
  }
  for (auto& [size, list] : c.large)
    for (void* p : list) std::free(p);
  c.large.clear();
  c.cached = 0;
}

size_t cached_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.cached;
}

}  // namespace kiln::cpu_allocator
