// upstream.hpp — the only boundary to a memory source: obtain/return one segment, plus the stream
// and event primitives the stream rule needs. Host and CUDA implement it (host_upstream.cpp,
// cuda_upstream.cpp); nothing else in the allocator touches CUDA.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace zico {

class Upstream {
 public:
  virtual ~Upstream() = default;
  // A segment of exactly `bytes` (aligned to >= 512 bytes), or nullptr when the source is out of
  // memory (physical capacity). Never throws.
  virtual void* obtain(size_t bytes) = 0;
  // Like obtain, but a source shared with other processes (the agent) may wait for room; the pool
  // calls it after returning its own cached segments. Sources that cannot wait just obtain.
  virtual void* obtain_blocking(size_t bytes) { return obtain(bytes); }
  virtual void release(void* ptr, size_t bytes) = 0;
  // Bytes at which a segment may be given back in part (release_part); 0: segments go back whole only.
  virtual size_t release_granularity() { return 0; }
  // Gives back [base + offset, base + offset + bytes) of the segment obtained at `base` (offset and bytes
  // multiples of release_granularity(), inside the segment); the source then knows the pieces before and
  // after it as segments of their own, at `base` and at `base + offset + bytes`. false: nothing changed.
  virtual bool release_part(void* /*base*/, size_t /*offset*/, size_t /*bytes*/) { return false; }
  // Bytes the source asks the pool to give back (wholly free cached segments); 0 = none.
  virtual size_t wanted_back() { return 0; }
  // Why the last obtain returned nullptr, when the source can say more than "out of memory".
  virtual std::string last_refusal() { return {}; }
  // Physical capacity in bytes (UINT64_MAX if unknown / unlimited).
  virtual uint64_t capacity() const = 0;
  virtual const char* name() const = 0;

  // Stream/event primitives. On the host they are no-ops: record_event returns nullptr, and a null
  // event counts as completed.
  virtual void* record_event(void* /*stream*/) { return nullptr; }
  virtual bool event_done(void* /*event*/) { return true; }
  virtual void stream_wait(void* /*stream*/, void* /*event*/) {}
  virtual void event_synchronize(void* /*event*/) {}
  virtual void destroy_event(void* /*event*/) {}
};

}  // namespace zico
