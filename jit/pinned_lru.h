// PinnedLru<T>: the in-memory table of loaded kernels both JITs keep (the LLVM JIT's
// linked objects, NVRTC's loaded libraries): key -> shared_ptr<T>, at most max_entries()
// of them. Beyond the limit the least recently used entry that nobody else holds is
// dropped (its T's destructor unlinks / unloads the code); an entry a compiled trace
// still pins (use_count() > 1) always stays, so the table may exceed its limit by those.
// The limit starts at KILN_KERNEL_CACHE_ENTRIES (default 1024). Not thread-safe: each
// compiler calls it under its own mutex.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::jit {

template <class T>
class PinnedLru {
 public:
  PinnedLru() {
    if (const char* v = std::getenv("KILN_KERNEL_CACHE_ENTRIES"); v && *v) {
      char* end = nullptr;
      const long long n = std::strtoll(v, &end, 10);
      if (*end == '\0' && n > 0) max_entries_ = static_cast<size_t>(n);
    }
  }

  // The entry for key (now the most recently used), or null.
  std::shared_ptr<T> find(const std::string& key) {
    auto it = entries_.find(key);
    if (it == entries_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second.place);
    return it->second.value;
  }

  // Adds value as the most recent entry, then drops the least recently used entries no
  // one else holds until the table fits its limit again. Returns how many it dropped.
  // With `dropped`, the dropped values are moved there instead of destroyed, so the
  // caller can destroy them (unload code) after releasing its lock.
  int64_t insert(const std::string& key, std::shared_ptr<T> value,
                 std::vector<std::shared_ptr<T>>* dropped_values = nullptr) {
    order_.push_front(key);
    entries_[key] = Entry{std::move(value), order_.begin()};
    int64_t dropped = 0;
    auto it = order_.end();
    while (entries_.size() > max_entries_ && --it != order_.begin()) {  // the new one stays
      auto e = entries_.find(*it);
      if (e->second.value.use_count() > 1) continue;  // a compiled trace holds it
      if (dropped_values) dropped_values->push_back(std::move(e->second.value));
      entries_.erase(e);
      it = order_.erase(it);
      ++dropped;
    }
    return dropped;
  }

  size_t size() const { return entries_.size(); }
  size_t max_entries() const { return max_entries_; }
  // Applied from the next insert().
  void set_max_entries(size_t n) { max_entries_ = std::max<size_t>(n, 1); }

 private:
  struct Entry {
    std::shared_ptr<T> value;
    std::list<std::string>::iterator place;  // in order_
  };
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> order_;  // keys, most recently used first
  size_t max_entries_ = 1024;
};

}  // namespace kiln::jit
