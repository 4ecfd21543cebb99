// ImplMap: tensor identity -> slot, for the values and external inputs of the current
// walk. Walks are cleared at every trace boundary (once per loop iteration), so this is
// a flat vector searched from the back (recent values are the likely inputs), with a
// hash index built only once a walk grows long. The index is open addressing in one
// flat array (no allocation per entry) whose memory is kept across walks; clearing costs
// nothing for short walks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/pointer_hash.h"
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
    if (indexed_) {
      const Slot& s = slots_[probe(key)];
      return s.key == nullptr ? -1 : live(entries_[s.entry]);
    }
    for (size_t i = entries_.size(); i-- > 0;)
      if (entries_[i].key == key) return live(entries_[i]);
    return -1;
  }
  void set(const std::shared_ptr<TensorImpl>& impl, int index) {
    const TensorImpl* key = impl.get();
    if (indexed_) {
      Slot& s = slots_[probe(key)];
      if (s.key != nullptr) {
        entries_[s.entry] = Entry{key, impl, index};
        return;
      }
      s = Slot{key, static_cast<uint32_t>(entries_.size())};
      entries_.push_back(Entry{key, impl, index});
      if (entries_.size() * 2 > slots_.size()) rebuild(slots_.size() * 2);
      return;
    }
    for (size_t i = entries_.size(); i-- > 0;) {
      if (entries_[i].key == key) {
        entries_[i] = Entry{key, impl, index};
        return;
      }
    }
    entries_.push_back(Entry{key, impl, index});
    if (entries_.size() > kIndexAbove) rebuild(kFirstTable);
  }
  void clear() {
    if (indexed_) {
      // Keep the table for the next walk unless it is far larger than this one needed.
      if (slots_.size() > 8 * entries_.size())
        slots_ = {};
      else
        std::fill(slots_.begin(), slots_.end(), Slot{});
      indexed_ = false;
    }
    entries_.clear();
  }

 private:
  struct Slot {
    const TensorImpl* key = nullptr;
    uint32_t entry = 0;
  };
  static constexpr size_t kIndexAbove = 48;
  static constexpr size_t kFirstTable = 256;  // slots, a power of two above 2 * kIndexAbove
  static int live(const Entry& e) { return e.impl.expired() ? -1 : e.index; }

  // The slot holding key, or the empty slot where it would go (linear probing; the table
  // is at most half full).
  size_t probe(const TensorImpl* key) const {
    const size_t mask = slots_.size() - 1;
    size_t i =
        static_cast<size_t>((reinterpret_cast<uintptr_t>(key) >> 4) * 0x9E3779B97F4A7C15ull) >>
        shift_;
    while (slots_[i].key != nullptr && slots_[i].key != key) i = (i + 1) & mask;
    return i;
  }
  // Indexes every entry in a table of at least `capacity` slots (a power of two).
  void rebuild(size_t capacity) {
    while (capacity < 2 * entries_.size()) capacity *= 2;
    if (slots_.size() < capacity) {
      slots_.assign(capacity, Slot{});
    } else if (indexed_) {
      std::fill(slots_.begin(), slots_.end(), Slot{});
    }
    shift_ = 64;
    for (size_t n = slots_.size(); n > 1; n >>= 1) --shift_;
    indexed_ = true;
    for (size_t e = 0; e < entries_.size(); ++e)
      slots_[probe(entries_[e].key)] = Slot{entries_[e].key, static_cast<uint32_t>(e)};
  }

  std::vector<Entry> entries_;
  std::vector<Slot> slots_;  // the index once indexed_ (a power of two, at most half full)
  int shift_ = 64;
  bool indexed_ = false;
};

// FirstSlots: pointer -> the first slot recorded for it (the walk's external inputs by
// storage: which earlier input a new one shares memory with). Up to kLinear entries in
// a small array searched in order (a short walk clears nothing more); past that, open
// addressing in one flat array kept across walks. A walk's inputs keep their storage
// while it lasts.
class FirstSlots {
 public:
  int find(const void* key) const {
    if (!indexed_) {
      for (size_t i = 0; i < size_; ++i)
        if (linear_[i].key == key) return linear_[i].value;
      return -1;
    }
    const Slot& s = slots_[probe(key)];
    return s.key == nullptr ? -1 : s.value;
  }
  // Records slot for key unless key has one already.
  void insert_first(const void* key, int slot) {
    if (!indexed_) {
      for (size_t i = 0; i < size_; ++i)
        if (linear_[i].key == key) return;
      if (size_ < kLinear) {
        linear_[size_++] = Slot{key, slot};
        return;
      }
      if (slots_.size() < kFirstTable) slots_.assign(kFirstTable, Slot{});
      indexed_ = true;
      for (size_t i = 0; i < size_; ++i) slots_[probe(linear_[i].key)] = linear_[i];
    }
    if (2 * (size_ + 1) > slots_.size()) grow();
    Slot& s = slots_[probe(key)];
    if (s.key != nullptr) return;
    s = Slot{key, slot};
    ++size_;
  }
  void clear() {
    if (indexed_) {
      if (slots_.size() > 8 * size_ && slots_.size() > kFirstTable)
        slots_ = {};
      else
        std::fill(slots_.begin(), slots_.end(), Slot{});
      indexed_ = false;
    }
    size_ = 0;
  }

 private:
  struct Slot {
    const void* key = nullptr;
    int value = 0;
  };
  static constexpr size_t kLinear = 16;
  static constexpr size_t kFirstTable = 64;  // a power of two above 2 * kLinear

  size_t probe(const void* key) const {
    const size_t mask = slots_.size() - 1;
    size_t i = pointer_hash_slot(key, mask);
    while (slots_[i].key != nullptr && slots_[i].key != key) i = (i + 1) & mask;
    return i;
  }
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    for (const Slot& s : old)
      if (s.key != nullptr) slots_[probe(s.key)] = s;
  }

  Slot linear_[kLinear];
  std::vector<Slot> slots_;  // once indexed_: a power of two, at most half full
  size_t size_ = 0;
  bool indexed_ = false;
};

}  // namespace kiln::tracer
