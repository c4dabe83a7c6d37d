// pool.cpp — Pool: best-fit block cache over upstream segments, with coalescing and the stream rule.
#include "pool.hpp"

#include <algorithm>
#include <sstream>
#include <unordered_set>

namespace zico {

size_t round_size(size_t size) {
  if (size < kMinBlockSize) return kMinBlockSize;
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

size_t segment_size(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

Pool::~Pool() {
  for (auto& kv : segments_) {
    Segment* s = kv.second;
    for (Block* b = s->first; b;) {
      Block* n = b->next;
      for (auto& e : b->events) up_->event_synchronize(e.event.get());
      delete b;
      b = n;
    }
    up_->release(s->base, s->size);
    delete s;
  }
  for (Block* b : spare_blocks_) delete b;
}

Block* Pool::new_block() {
  if (spare_blocks_.empty()) return new Block();
  Block* b = spare_blocks_.back();
  spare_blocks_.pop_back();
  return b;
}

void Pool::delete_block(Block* b) {
  // Every field back to its default, except that the event list keeps its capacity (a recycled
  // block's list then allocates no more).
  b->events.clear();
  b->ptr = nullptr;
  b->size = b->requested = 0;
  b->segment = nullptr;
  b->prev = b->next = b->free_prev = b->free_next = nullptr;
  b->allocated = false;
  b->job = 0;
  b->stream = nullptr;
  spare_blocks_.push_back(b);
}

// Note [Stream rule]
// ~~~~~~~~~~~~~~~~~~
// Rule: a block freed on stream S may serve a request on another stream T only once an event
// recorded on S at the free has completed, or after T has been made to wait on that event.
//
// Rationale: a free on the CPU runs ahead of the GPU; kernels queued on S before the free may still
// read or write the block. Work on S itself is ordered after them, so same-stream reuse is always
// safe (this is all PyTorch's caching allocator allows: it keeps a free list per stream). Zico
// must let job B's stream reuse what job A's stream freed, or co-located jobs could never share.
//
// Approach: Pool::free records an event on the freeing stream and keeps it on the free block
// (coalescing keeps the union of events; splitting shares them). When take() hands the block to
// stream T, every pending event from a stream other than T that has not completed is waited on by
// T (cudaStreamWaitEvent) — the GPU orders the reuse, the CPU never blocks. Completed events and
// events from T itself are simply dropped.
//
// Limits: on the host upstream events are null and the rule is a no-op (CPU frees are synchronous).
// A block released to the upstream first synchronizes its events (cudaFree would anyway).
void Pool::wait_for_events(Block* b, void* stream) {
  for (auto& e : b->events) {
    if (e.stream != stream && !up_->event_done(e.event.get())) up_->stream_wait(stream, e.event.get());
  }
  b->events.clear();
}

Block* Pool::take(size_t rounded, size_t requested, void* stream, int64_t job) {
  const bool small = is_small(rounded);
  Block* b;
  if (small) {
    b = small_bins_.best_fit(rounded);
    if (!b) return nullptr;
    small_bins_.remove(b);
  } else {
    auto it = large_free_.lower_bound(rounded);
    if (it == large_free_.end()) return nullptr;
    b = *it;
    large_free_.erase(it);
  }
  const size_t remaining = b->size - rounded;
  const bool split = small ? remaining >= kMinBlockSize : remaining > kSmallSize;
  if (split) {
    Block* r = new_block();
    r->ptr = b->ptr + rounded;
    r->size = remaining;
    r->segment = b->segment;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    r->stream = b->stream;
    if (!b->events.empty()) r->events = b->events;
    b->size = rounded;
    insert_free(r);
  }
  apply_stream_rule(b, stream);
  b->allocated = true;
  b->requested = requested;
  b->job = job;
  b->stream = stream;
  b->segment->allocated_blocks++;
  live_.insert(b->ptr, b);
  return b;
}

bool Pool::grow(size_t bytes, bool small, int64_t owner_job, bool block) {
  void* p = block ? up_->obtain_blocking(bytes) : up_->obtain(bytes);
  if (!p) return false;
  Segment* s = new Segment();
  s->base = static_cast<char*>(p);
  s->size = bytes;
  s->small = small;
  s->owner_job = owner_job;
  Block* b = new_block();
  b->ptr = s->base;
  b->size = bytes;
  b->segment = s;
  s->first = b;
  segments_.emplace(s->base, s);
  insert_free(b);
  return true;
}

Block* Pool::merge(Block* dst, Block* src) {
  dst->size += src->size;
  dst->next = src->next;
  if (src->next) src->next->prev = dst;
  for (auto& e : src->events) dst->events.push_back(std::move(e));
  delete_block(src);
  return dst;
}

bool Pool::free(void* ptr, void* stream, FreedBlock* out) {
  Block* b = live_.erase(ptr);
  if (!b) return false;
  const bool small = b->segment->small;
  *out = FreedBlock{b->job, b->size, b->requested, small};
  b->allocated = false;
  b->requested = 0;
  b->job = 0;
  b->segment->allocated_blocks--;
  if (void* ev = up_->record_event(stream)) {
    Upstream* up = up_;
    b->events.push_back(PendingEvent{stream, std::shared_ptr<void>(ev, [up](void* e) { up->destroy_event(e); })});
  }
  b->stream = stream;
  if (b->prev && !b->prev->allocated) {
    Block* p = b->prev;
    erase_free(p);
    b = merge(p, b);
  }
  if (b->next && !b->next->allocated) {
    Block* n = b->next;
    erase_free(n);
    b = merge(b, n);
  }
  insert_free(b);
  return true;
}

std::vector<ReleasedSegment> Pool::release_free_segments(size_t want) {
  std::vector<Segment*> idle;
  for (auto& kv : segments_)
    if (kv.second->allocated_blocks == 0) idle.push_back(kv.second);
  // Prefer the smallest single segment that covers `want`; otherwise release largest first.
  std::sort(idle.begin(), idle.end(), [](Segment* a, Segment* b) { return a->size > b->size; });
  auto cover = std::find_if(idle.rbegin(), idle.rend(), [want](Segment* s) { return s->size >= want; });
  if (cover != idle.rend()) idle = {*cover};
  std::vector<ReleasedSegment> out;
  size_t released = 0;
  for (Segment* s : idle) {
    if (released >= want) break;
    Block* b = s->first;  // an idle segment is one coalesced free block
    erase_free(b);
    for (auto& e : b->events) up_->event_synchronize(e.event.get());
    delete_block(b);
    up_->release(s->base, s->size);
    out.push_back(ReleasedSegment{s->owner_job, s->size, s->small});
    released += s->size;
    segments_.erase(s->base);
    delete s;
  }
  if (released < want) release_parts(want - released, &out);
  return out;
}

// Note [Giving back part of a segment]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Rule: when the wholly free segments do not cover what must go back (the budget after a grant past
// it, or the bytes the agent asks for), the free blocks of large segments that are partly in use give
// back their middle in whole granules of the upstream (release_granularity: the agent's chunk), largest
// free block first, no more granules than wanted. The segment is cut there: its pieces before and after
// stay segments of their own, with the same owner, and their free ends stay cached.
//
// Rationale: a backward pass frees most of what its forward allocated, but one live tensor (an
// optimizer state, a saved activation) left in a 20 MiB segment, or in a large segment a bigger block
// was split from, keeps the whole segment reserved. Beside a neighbour that cache is memory the device
// budget counts and no reclaim could return: the agent's only way out was a grant past the budget
// (Note [Deadlock rule] in device_pool.cpp). PyTorch's expandable segments unmap the free pages inside
// a segment for the same reason (c10/cuda/CUDACachingAllocator.cpp).
//
// Limits: only upstreams that can take part of a segment back do it (the agent's host chunks: memfd
// mappings unmapped in part); CUDA chunk mappings go back whole until their address reservation is
// kept per piece. A granule partly in use stays. Events of the cut block are synchronized first, as
// for a whole segment.
size_t Pool::release_parts(size_t want, std::vector<ReleasedSegment>* out) {
  const size_t granule = up_->release_granularity();
  if (!granule) return 0;
  std::vector<Block*> candidates;  // largest first: the fewest cuts for the bytes wanted
  for (auto it = large_free_.rbegin(); it != large_free_.rend(); ++it)
    if ((*it)->segment->allocated_blocks > 0 && (*it)->size >= granule) candidates.push_back(*it);
  size_t released = 0;
  for (Block* b : candidates) {
    if (released >= want) break;
    released += release_part_of(b, granule, want - released, out);
  }
  return released;
}

size_t Pool::release_part_of(Block* b, size_t granule, size_t want, std::vector<ReleasedSegment>* out) {
  Segment* s = b->segment;
  const int64_t owner = s->owner_job;
  const size_t start = static_cast<size_t>(b->ptr - s->base), end = start + b->size, size = s->size;
  const size_t lo = (start + granule - 1) / granule * granule;
  size_t hi = end / granule * granule;
  if (hi <= lo) return 0;
  if (want < hi - lo) hi = lo + (want + granule - 1) / granule * granule;
  for (auto& e : b->events) up_->event_synchronize(e.event.get());
  if (!up_->release_part(s->base, lo, hi - lo)) return 0;
  b->events.clear();
  erase_free(b);
  Block* mid = start < lo ? cut(b, s->base + lo) : b;
  if (hi < end) cut(mid, s->base + hi);
  Block* left = mid != b ? b : nullptr;
  Block* right = hi < end ? mid->next : nullptr;
  if (hi < size) {  // the blocks from hi on: a segment of their own
    Segment* tail = new Segment();
    tail->base = s->base + hi;
    tail->size = size - hi;
    tail->owner_job = s->owner_job;
    tail->first = mid->next;
    tail->first->prev = nullptr;
    for (Block* t = tail->first; t; t = t->next) {
      t->segment = tail;
      if (t->allocated) ++tail->allocated_blocks;
    }
    s->allocated_blocks -= tail->allocated_blocks;
    segments_.emplace(tail->base, tail);
  }
  const int kept = (lo > 0) + (hi < size);
  if (lo > 0) {
    mid->prev->next = nullptr;
    s->size = lo;
  } else {
    segments_.erase(s->base);
    delete s;
  }
  delete_block(mid);
  if (left) insert_free(left);
  if (right) insert_free(right);
  out->push_back(ReleasedSegment{owner, hi - lo, false, kept});
  return hi - lo;
}

Block* Pool::cut(Block* b, char* at) {
  Block* r = new_block();
  r->ptr = at;
  r->size = static_cast<size_t>(b->ptr + b->size - at);
  r->segment = b->segment;
  r->stream = b->stream;
  r->prev = b;
  r->next = b->next;
  if (b->next) b->next->prev = r;
  b->next = r;
  b->size = static_cast<size_t>(at - b->ptr);
  return r;
}

size_t Pool::largest_free_block(bool small) const {
  if (small) return small_bins_.largest();
  return large_free_.empty() ? 0 : (*large_free_.rbegin())->size;
}

size_t Pool::free_bytes() const { return free_bytes(true) + free_bytes(false); }

size_t Pool::free_bytes(bool small) const {
  if (small) return small_bins_.bytes();
  size_t n = 0;
  for (const Block* b : large_free_) n += b->size;
  return n;
}

size_t Pool::inactive_split_bytes(int kind) const {
  size_t n = 0;
  for_each_free(kind, [&](const Block* b) {
    if (b->segment->allocated_blocks > 0) n += b->size;
  });
  return n;
}

size_t Pool::inactive_split_blocks(int kind) const {
  size_t n = 0;
  for_each_free(kind, [&](const Block* b) {
    if (b->segment->allocated_blocks > 0) ++n;
  });
  return n;
}

bool Pool::check(std::string* why) const {
  std::ostringstream err;
  size_t free_blocks = 0, live_blocks = 0;
  std::unordered_set<const Block*> binned;  // the small pool's free blocks, as its bins hold them
  small_bins_.for_each([&](const Block* b) { binned.insert(b); });
  if (binned.size() != small_bins_.size()) err << "small-pool bins hold a block twice or miscount; ";
  std::vector<std::pair<char*, size_t>> ranges;
  for (const auto& kv : segments_) {
    const Segment* s = kv.second;
    ranges.emplace_back(s->base, s->size);
    size_t total = 0, allocated = 0;
    char* expect = s->base;
    const Block* prev = nullptr;
    for (const Block* b = s->first; b; prev = b, b = b->next) {
      if (b->ptr != expect) err << "block " << static_cast<void*>(b->ptr) << " not contiguous; ";
      if (b->prev != prev) err << "broken prev link; ";
      if (b->segment != s) err << "block points at the wrong segment; ";
      if (b->size == 0 || b->size % kMinBlockSize) err << "block size " << b->size << " not a multiple of 512; ";
      if (prev && !prev->allocated && !b->allocated) err << "two adjacent free blocks not coalesced; ";
      if (b->allocated) {
        ++allocated;
        ++live_blocks;
        if (live_.find(b->ptr) != b) err << "allocated block missing from the live map; ";
        if (b->requested > b->size) err << "requested exceeds block size; ";
      } else {
        ++free_blocks;
        const bool cached = s->small ? binned.count(b) != 0 : large_free_.count(const_cast<Block*>(b)) != 0;
        if (!cached) err << "free block missing from its free set; ";
      }
      expect = b->ptr + b->size;
      total += b->size;
    }
    if (total != s->size) err << "blocks cover " << total << " of a " << s->size << "-byte segment; ";
    if (allocated != s->allocated_blocks) err << "segment allocated-block count is off; ";
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i - 1].first + ranges[i - 1].second > ranges[i].first) err << "segments overlap; ";
  if (free_blocks != small_bins_.size() + large_free_.size()) err << "free sets hold stale blocks; ";
  if (live_blocks != live_.size()) err << "live map holds stale blocks; ";
  *why = err.str();
  return why->empty();
}

}  // namespace zico
