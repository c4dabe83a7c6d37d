// pool.hpp — the block pool: segments from an Upstream split into blocks, best fit with coalescing,
// PyTorch's size rounding, and the stream rule. Not thread-safe: DevicePool holds the lock.
//
// Glossary (PyTorch's words): a *segment* is one range obtained from the upstream; a *block* is a
// piece of a segment, either allocated (a live tensor) or free (cached for reuse). Blocks of one
// segment form a doubly linked list in address order, so neighbours coalesce on free.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "free_bins.hpp"
#include "node_allocator.hpp"
#include "pool_types.hpp"
#include "ptr_map.hpp"
#include "upstream.hpp"

namespace zico {

// What a free or a release did, so the caller can account for it.
struct FreedBlock {
  int64_t job;
  size_t size;
  size_t requested;
  bool small;
};
struct ReleasedSegment {
  int64_t owner_job;
  size_t size;
  bool small;
  int kept = 0;  // segments left in place of the one this was cut from (0: it went whole; 1 or 2: a part went)
};

class Pool {
 public:
  explicit Pool(Upstream* upstream)
      : up_(upstream), large_free_(BySize(), FreeSetAlloc(&large_nodes_)) {}
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Best-fit cached block of >= `rounded` bytes for `stream`, split if worthwhile and marked
  // allocated to `job`; nullptr if none is cached. Applies the stream rule (see Note in pool.cpp).
  Block* take(size_t rounded, size_t requested, void* stream, int64_t job);
  // Obtains a segment of `bytes` from the upstream and caches it as one free block; false when
  // the upstream is out of memory. block: use the upstream's obtain_blocking (may wait for room).
  bool grow(size_t bytes, bool small, int64_t owner_job, bool block = false);
  // Frees the allocated block at `ptr` (recording an event on `stream`), coalescing neighbours.
  // Returns false if `ptr` is not an allocated block of this pool.
  bool free(void* ptr, void* stream, FreedBlock* out);
  // Returns wholly free segments to the upstream, largest first, until at least `want` bytes went
  // back (SIZE_MAX: all of them); then, if that was not enough and the upstream can take parts of a
  // segment back, the free middles of partly used large segments (Note [Giving back part of a segment]).
  std::vector<ReleasedSegment> release_free_segments(size_t want);

  bool owns(void* ptr) const { return live_.find(ptr) != nullptr; }
  size_t largest_free_block(bool small) const;
  size_t free_bytes() const;                // bytes in free blocks
  size_t free_bytes(bool small) const;      // ...of the small or the large pool
  size_t inactive_split_bytes(int kind) const;  // free blocks in partly used segments
  size_t inactive_split_blocks(int kind) const;
  const std::unordered_map<char*, Segment*>& segments() const { return segments_; }
  // Checks the structural invariants; on failure writes a message and returns false.
  bool check(std::string* why) const;

 private:
  // Orders free blocks by (size, address); a bare size compares below every block of that size,
  // so lower_bound(size) is the best fit without building a key Block.
  struct BySize {
    using is_transparent = void;
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
    bool operator()(const Block* a, size_t size) const { return a->size < size; }
    bool operator()(size_t size, const Block* b) const { return size <= b->size; }
  };
  using FreeSetAlloc = NodeAllocator<Block*>;
  using FreeSet = std::set<Block*, BySize, FreeSetAlloc>;
  // Caches / uncaches free block `b` in its pool's free blocks: the small pool's bins (Note
  // [Small-pool bins] in free_bins.hpp) or the large pool's set (one tree descent: keys are unique,
  // so find, not equal_range).
  void insert_free(Block* b) {
    if (b->segment->small) small_bins_.insert(b);
    else large_free_.insert(b);
  }
  void erase_free(Block* b) {
    if (b->segment->small) small_bins_.remove(b);
    else large_free_.erase(large_free_.find(b));
  }
  // Calls fn(block) for every free block of the small pool, the large pool, or both (kind: a PoolKind).
  template <class F>
  void for_each_free(int kind, F&& fn) const {
    if (kind != 2) small_bins_.for_each(fn);
    if (kind != 1)
      for (const Block* b : large_free_) fn(b);
  }
  // The stream rule for `b` handed to `stream` (Note [Stream rule] in pool.cpp); a block with no
  // pending event (every host block, every CUDA reuse whose events completed) costs one test.
  void apply_stream_rule(Block* b, void* stream) {
    if (!b->events.empty()) wait_for_events(b, stream);
  }
  void wait_for_events(Block* b, void* stream);
  Block* new_block();
  void delete_block(Block* b);
  Block* merge(Block* dst, Block* src);  // src follows dst; returns dst
  Block* cut(Block* b, char* at);        // b ends at `at`; returns the new block holding the rest
  size_t release_parts(size_t want, std::vector<ReleasedSegment>* out);
  size_t release_part_of(Block* b, size_t granule, size_t want, std::vector<ReleasedSegment>* out);

  Upstream* up_;
  NodeFreeList large_nodes_;  // declared before the set using it
  SmallFreeBins small_bins_;  // free blocks of the small pool
  FreeSet large_free_;        // free blocks of the large pool, by (size, address)
  PtrMap live_;  // allocated blocks by address
  std::unordered_map<char*, Segment*> segments_;
  std::vector<Block*> spare_blocks_;  // recycled Block objects, to keep new/delete off the hot path
};

}  // namespace zico
