// ptr_map.hpp — the pool's table of live allocations: block address -> Block*, open addressing
// with linear probing in a power-of-two table (one multiply and a mask per lookup, no node per
// entry, no division). Not thread-safe: DevicePool holds the lock.
//
// Why not std::unordered_map: its lookup reduces the hash modulo a prime (a division) and each
// entry is a separate node; on a pool hit the table is touched twice (insert at the allocation,
// find + erase at the free), which made it the second cost of the pair after the free sets.
// Deletion shifts the following run back (no tombstones), so lookups never slow down with churn.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace zico {

struct Block;

class PtrMap {
 public:
  explicit PtrMap(size_t initial_capacity = 1024) { rehash(round_up_pow2(initial_capacity)); }

  // Inserts key -> value; the key must not be present (a pool never hands out one address twice).
  void insert(const void* key, Block* value) {
    if (2 * (size_ + 1) > slots_.size()) rehash(2 * slots_.size());
    size_t i = home(key);
    while (slots_[i].key) i = (i + 1) & mask_;
    slots_[i] = Slot{key, value};
    ++size_;
  }
  // The value stored for `key`, or nullptr.
  Block* find(const void* key) const {
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return slots_[i].value;
      if (!slots_[i].key) return nullptr;
    }
  }
  // Removes `key` and returns its value, or nullptr when absent.
  Block* erase(const void* key) {
    size_t i = home(key);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) break;
      if (!slots_[i].key) return nullptr;
    }
    Block* out = slots_[i].value;
    // Backward-shift deletion: move later entries of the run into the hole when their home
    // position allows it, so every remaining key stays reachable from its home slot.
    for (size_t j = (i + 1) & mask_; slots_[j].key; j = (j + 1) & mask_) {
      const size_t h = home(slots_[j].key);
      if (((j - h) & mask_) >= ((j - i) & mask_)) {  // h is not in (i, j]: the entry may move to i
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{};
    --size_;
    return out;
  }
  size_t size() const { return size_; }

 private:
  struct Slot {
    const void* key = nullptr;
    Block* value = nullptr;
  };
  static size_t round_up_pow2(size_t n) {
    size_t p = 16;
    while (p < n) p <<= 1;
    return p;
  }
  // Fibonacci hashing of the address (blocks are 512-byte aligned: the low bits carry nothing).
  size_t home(const void* key) const {
    const uint64_t k = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(key)) >> 9;
    return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void rehash(size_t capacity) {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    shift_ = 64;
    for (size_t c = capacity; c > 1; c >>= 1) --shift_;
    size_ = 0;
    for (const Slot& s : old)
      if (s.key) insert(s.key, s.value);
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  unsigned shift_ = 64;
  size_t size_ = 0;
};

}  // namespace zico
