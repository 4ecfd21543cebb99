// CachedBlockAllocator: the blocks of objects made and dropped at the op rate (a lazy
// tensor's impl per replayed op, an autograd node and its output's AutogradMeta per
// recorded op), each with its shared_ptr control block (std::allocate_shared), come
// from a small per-thread cache of freed blocks instead of malloc/free. A block freed on
// another thread joins that thread's cache. The cache is drained when its thread ends
// (Closer); blocks freed after that, by thread-local destructors that run later, go back
// to the heap. Sanitizer builds take the heap always (use-after-free stays visible).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

namespace kiln {
namespace block_cache_detail {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kCacheBlocks = false;
#else
constexpr bool kCacheBlocks = true;
#endif

struct BlockCache {  // trivially destructible: still usable while the thread ends
  void* head = nullptr;
  uint32_t count = 0;
  bool closed = false;
};

template <class T>
struct BlockCacheOf {
  static constinit thread_local BlockCache cache;
  // A training step holds a few thousand lazy values and recorded nodes at once (the
  // forward's, kept for the backward): the blocks of a whole step come back to the
  // cache. At most 4,096 blocks and about 2 MB a type (at least 512 blocks).
  static constexpr uint32_t kKept =
      static_cast<uint32_t>(sizeof(T) * 4096 <= (2u << 20)
                                ? 4096
                                : (sizeof(T) * 512 >= (2u << 20) ? 512 : (2u << 20) / sizeof(T)));
  static void drain() {
    BlockCache& c = cache;
    while (c.head) {
      void* next = *static_cast<void**>(c.head);
      ::operator delete(c.head, sizeof(T));
      c.head = next;
    }
    c.count = 0;
    c.closed = true;
  }
  struct Closer {
    ~Closer() { drain(); }
  };
  static thread_local Closer closer;  // constructed when the cache first makes a block
};
template <class T>
constinit thread_local BlockCache BlockCacheOf<T>::cache;
template <class T>
thread_local typename BlockCacheOf<T>::Closer BlockCacheOf<T>::closer;

template <class T>
struct CachedBlockAllocator {
  using value_type = T;
  CachedBlockAllocator() = default;
  template <class U>
  explicit CachedBlockAllocator(const CachedBlockAllocator<U>&) {}

  T* allocate(size_t n) {
    static_assert(sizeof(T) >= sizeof(void*));
    if (kCacheBlocks && n == 1) {
      BlockCache& c = BlockCacheOf<T>::cache;
      if (void* block = c.head) {
        c.head = *static_cast<void**>(block);
        --c.count;
        return static_cast<T*>(block);
      }
      if (!c.closed) (void)&BlockCacheOf<T>::closer;  // its destructor drains the cache
    }
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (kCacheBlocks && n == 1) {
      BlockCache& c = BlockCacheOf<T>::cache;
      if (!c.closed && c.count < BlockCacheOf<T>::kKept) {
        *reinterpret_cast<void**>(p) = c.head;
        c.head = p;
        ++c.count;
        return;
      }
    }
    ::operator delete(p, n * sizeof(T));
  }
  template <class U>
  bool operator==(const CachedBlockAllocator<U>&) const {
    return true;
  }
};

}  // namespace block_cache_detail

using block_cache_detail::CachedBlockAllocator;

}  // namespace kiln
