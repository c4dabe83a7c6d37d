// free_bins.hpp — the small pool's free blocks: one bin per block size (512 B steps up to the 2 MiB
// small segment), each an intrusive doubly linked list through Block::free_prev/free_next, and a
// two-level bitmap of the non-empty bins. Best fit, insert and remove are O(1): a bit scan, no
// tree descent, no node to allocate. Not thread-safe: DevicePool holds the lock.
//
// Note [Small-pool bins]
// ~~~~~~~~~~~~~~~~~~~~~~
// Rule: a small request gets the smallest free small block that fits (best fit by size, as the
// large pool's ordered set gives); among free blocks of that size, the one freed last (LIFO).
// Rationale: the small pool serves most requests (every tensor <= 1 MiB) and on a pool hit the free
// set was the largest cost: a red-black tree descent for the best fit, an erase and an insert on
// the split, two more on the coalescing free. Every small block is a multiple of 512 B and at most
// 2 MiB (a small segment), so there are only 4096 sizes: a bin per size makes best fit exact.
// Limits: within one size the choice is the most recently freed block, not the lowest address
// (PyTorch orders ties by address); sizes decide fragmentation, so best fit is unchanged.
#pragma once
#include <cstddef>
#include <cstdint>

#include "pool_types.hpp"

namespace zico {

class SmallFreeBins {
 public:
  static constexpr size_t kBins = kSmallBuffer / kMinBlockSize;  // sizes 512 B .. 2 MiB
  static_assert(kBins == 64 * 64, "two bitmap levels of 64 bits cover every bin");

  // The free block of the smallest size >= `size` (the last freed of that size), or nullptr.
  Block* best_fit(size_t size) const {
    size_t i = bin(size);
    if (i >= kBins) return nullptr;
    size_t w = i >> 6;
    uint64_t bits = words_[w] & (~uint64_t{0} << (i & 63));
    if (!bits) {
      const uint64_t above = (w + 1 < 64) ? summary_ & (~uint64_t{0} << (w + 1)) : 0;
      if (!above) return nullptr;
      w = static_cast<size_t>(__builtin_ctzll(above));
      bits = words_[w];
    }
    return heads_[(w << 6) | static_cast<size_t>(__builtin_ctzll(bits))];
  }
  void insert(Block* b) {
    const size_t i = bin(b->size);
    Block* head = heads_[i];
    b->free_prev = nullptr;
    b->free_next = head;
    if (head) head->free_prev = b;
    else set_bit(i);
    heads_[i] = b;
    bytes_ += b->size;
    ++count_;
  }
  void remove(Block* b) {
    const size_t i = bin(b->size);
    if (b->free_prev) b->free_prev->free_next = b->free_next;
    else heads_[i] = b->free_next;
    if (b->free_next) b->free_next->free_prev = b->free_prev;
    if (!heads_[i]) clear_bit(i);
    b->free_prev = b->free_next = nullptr;
    bytes_ -= b->size;
    --count_;
  }
  size_t bytes() const { return bytes_; }  // bytes in free small blocks
  size_t size() const { return count_; }   // number of free small blocks
  size_t largest() const {
    if (!summary_) return 0;
    const size_t w = 63 - static_cast<size_t>(__builtin_clzll(summary_));
    const size_t i = (w << 6) | (63 - static_cast<size_t>(__builtin_clzll(words_[w])));
    return (i + 1) * kMinBlockSize;
  }
  // Calls fn(block) for every free small block (reports and audits, not the hot path).
  template <class F>
  void for_each(F&& fn) const {
    for (size_t w = 0; w < 64; ++w)
      for (uint64_t bits = words_[w]; bits; bits &= bits - 1)
        for (Block* b = heads_[(w << 6) | static_cast<size_t>(__builtin_ctzll(bits))]; b; b = b->free_next) fn(b);
  }

 private:
  static size_t bin(size_t size) { return size / kMinBlockSize - 1; }
  void set_bit(size_t i) {
    words_[i >> 6] |= uint64_t{1} << (i & 63);
    summary_ |= uint64_t{1} << (i >> 6);
  }
  void clear_bit(size_t i) {
    words_[i >> 6] &= ~(uint64_t{1} << (i & 63));
    if (!words_[i >> 6]) summary_ &= ~(uint64_t{1} << (i >> 6));
  }

  Block* heads_[kBins] = {};
  uint64_t words_[64] = {};
  uint64_t summary_ = 0;
  size_t bytes_ = 0, count_ = 0;
};

}  // namespace zico
