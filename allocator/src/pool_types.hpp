// pool_types.hpp — the pool's vocabulary: PyTorch's size classes and rounding, and the Block and
// Segment records that the pool (pool.hpp) and its small-pool bins (free_bins.hpp) link together.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

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
  Block* free_prev = nullptr;  // neighbours in a small-pool bin while free (free_bins.hpp)
  Block* free_next = nullptr;
};

struct Segment {
  char* base = nullptr;
  size_t size = 0;
  bool small = false;
  int64_t owner_job = 0;    // the job whose request obtained it; charged its reserved bytes
  size_t allocated_blocks = 0;
  Block* first = nullptr;
};

}  // namespace zico
