// ImplMap: tensor identity -> slot, for the values and external inputs of the current
// walk. Walks are cleared at every trace boundary (once per loop iteration), so this is
// a flat vector searched from the back (recent values are the likely inputs), with a
// hash index built only once a walk grows long. Clearing costs nothing for short walks.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "runtime/tensor.h"

namespace kiln::tracer {

class ImplMap {
 public:
  struct Entry {
    const TensorImpl* key;
    std::weak_ptr<TensorImpl> impl;  // detects a dead tensor whose address was reused
    int index;
  };

  // The slot of a live tensor, or -1.
  int find(const TensorImpl* key) const {
    if (!index_.empty()) {
      auto it = index_.find(key);
      return it == index_.end() ? -1 : live(entries_[it->second]);
    }
    for (size_t i = entries_.size(); i-- > 0;)
      if (entries_[i].key == key) return live(entries_[i]);
    return -1;
  }
  void set(const std::shared_ptr<TensorImpl>& impl, int index) {
    const TensorImpl* key = impl.get();
    if (!index_.empty()) {
      auto it = index_.find(key);
      if (it != index_.end()) {
        entries_[it->second] = Entry{key, impl, index};
        return;
      }
    } else {
      for (size_t i = entries_.size(); i-- > 0;) {
        if (entries_[i].key == key) {
          entries_[i] = Entry{key, impl, index};
          return;
        }
      }
    }
    entries_.push_back(Entry{key, impl, index});
    if (!index_.empty()) {
      index_[key] = entries_.size() - 1;
    } else if (entries_.size() > kIndexAbove) {
      for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].key] = i;
    }
  }
  void clear() {
    entries_.clear();
    if (!index_.empty()) index_ = {};
  }

 private:
  static constexpr size_t kIndexAbove = 48;
  static int live(const Entry& e) { return e.impl.expired() ? -1 : e.index; }

  std::vector<Entry> entries_;
  std::unordered_map<const TensorImpl*, size_t> index_;
};

}  // namespace kiln::tracer
