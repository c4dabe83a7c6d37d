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

#include "node_allocator.hpp"
#include "upstream.hpp"

namespace zico {

// Size classes from PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp).
constexpr size_t kMinBlockSize = 512;       // every block is a multiple of this
constexpr size_t kSmallSize = 1 << 20;      // requests <= 1 MiB come from the small pool
constexpr size_t kSmallBuffer = 2 << 20;    // small-pool segments are 2 MiB
constexpr size_t kLargeBuffer = 20 << 20;   // requests in (1 MiB, 10 MiB) get 20 MiB segments
constexpr size_t kMinLargeAlloc = 10 << 20; // requests >= 10 MiB get their own segment...
constexpr size_t kRoundLarge = 2 << 20;     // ...rounded up to 2 MiB

// Block size for a request of `size` bytes (multiple of 512, at least 512).
size_t round_size(size_t size);
// Segment size to obtain when no cached block fits a request of `size` bytes.
size_t segment_size(size_t size);
inline bool is_small(size_t size) { return size <= kSmallSize; }

// An event recorded on a stream when a block was freed; shared by the pieces of a split block.
struct PendingEvent {
  void* stream;
  std::shared_ptr<void> event;  // deleter returns it to the upstream
};

struct Segment;
struct Block {
  char* ptr = nullptr;
  size_t size = 0;       // block bytes (rounded)
  size_t requested = 0;  // bytes the caller asked for (allocated blocks only)
  Segment* segment = nullptr;
  Block* prev = nullptr;
  Block* next = nullptr;
  bool allocated = false;
  int64_t job = 0;          // job charged while allocated
  void* stream = nullptr;   // stream of the allocation (or of the last free)
  std::vector<PendingEvent> events;  // non-empty only on free blocks awaiting their frees' events
};

struct Segment {
  char* base = nullptr;
  size_t size = 0;
  bool small = false;
  int64_t owner_job = 0;    // the job whose request obtained it; charged its reserved bytes
  size_t allocated_blocks = 0;
  Block* first = nullptr;
};

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
};

class Pool {
 public:
  explicit Pool(Upstream* upstream)
      : up_(upstream),
        small_free_(BySize(), FreeSetAlloc(&small_nodes_)),
        large_free_(BySize(), FreeSetAlloc(&large_nodes_)),
        live_(1024, std::hash<void*>(), std::equal_to<void*>(), LiveAlloc(&live_nodes_)) {}
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
  // back (SIZE_MAX: all of them).
  std::vector<ReleasedSegment> release_free_segments(size_t want);

  bool owns(void* ptr) const { return live_.count(ptr) != 0; }
  size_t largest_free_block(bool small) const;
  size_t free_bytes() const;                // bytes in free blocks
  size_t free_bytes(bool small) const;      // ...of the small or the large pool
  size_t inactive_split_bytes(int kind) const;  // free blocks in partly used segments
  size_t inactive_split_blocks(int kind) const;
  const std::unordered_map<char*, Segment*>& segments() const { return segments_; }
  // Checks the structural invariants; on failure writes a message and returns false.
  bool check(std::string* why) const;

 private:
  struct BySize {
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };
  using FreeSetAlloc = NodeAllocator<Block*>;
  using FreeSet = std::set<Block*, BySize, FreeSetAlloc>;
  using LiveAlloc = NodeAllocator<std::pair<void* const, Block*>>;
  using LiveMap = std::unordered_map<void*, Block*, std::hash<void*>, std::equal_to<void*>, LiveAlloc>;
  FreeSet& free_set(bool small) { return small ? small_free_ : large_free_; }
  void apply_stream_rule(Block* b, void* stream);
  Block* new_block();
  void delete_block(Block* b);
  Block* merge(Block* dst, Block* src);  // src follows dst; returns dst

  Upstream* up_;
  NodeFreeList small_nodes_, large_nodes_, live_nodes_;  // declared before the containers using them
  FreeSet small_free_, large_free_;
  LiveMap live_;
  std::unordered_map<char*, Segment*> segments_;
  std::vector<Block*> spare_blocks_;  // recycled Block objects, to keep new/delete off the hot path
};

}  // namespace zico
