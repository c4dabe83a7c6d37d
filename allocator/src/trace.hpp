// trace.hpp — a fixed-size ring of zico_trace_record (timestamp, job, ±bytes, running totals) that
// the profiler and the reporter drain. When full, the oldest record is overwritten and counted as
// dropped. Records hold raw clock ticks until drained (see Note [Trace timestamps] in
// trace_clock.hpp). Not thread-safe: DevicePool holds the lock.
#pragma once
#include <cstdint>
#include <vector>

#include "trace_clock.hpp"
#include "zico/zico.h"

namespace zico {

class TraceRing {
 public:
  // capacity is rounded up to a power of two (index arithmetic is a mask, not a division).
  explicit TraceRing(size_t capacity) : buf_(round_up_pow2(capacity)), mask_(buf_.size() - 1) {}
  // Appends one record, stamped with the current tick count (its timestamp_s is filled in at
  // drain). Written field by field into a 64-byte slot: no record is built and copied.
  void push(int kind, int64_t job, int64_t delta, int64_t job_allocated, int64_t pool_allocated,
            int64_t pool_reserved, int64_t iteration, int device) {
    Entry& e = buf_[(start_ + count_) & mask_];
    e.ticks = clock_.ticks();
    e.job = job;
    e.delta_bytes = delta;
    e.job_allocated_bytes = job_allocated;
    e.pool_allocated_bytes = pool_allocated;
    e.pool_reserved_bytes = pool_reserved;
    e.iteration = iteration;
    e.device = device;
    e.kind = kind;
    if (count_ < buf_.size()) {
      ++count_;
    } else {
      start_ = (start_ + 1) & mask_;
      ++dropped_;
    }
  }
  // Moves up to `max` oldest records into `out`; returns how many.
  size_t drain(zico_trace_record* out, size_t max) {
    size_t n = count_ < max ? count_ : max;
    const TraceClock::Converter now = clock_.converter();
    for (size_t i = 0; i < n; ++i) {
      const Entry& e = buf_[(start_ + i) & mask_];
      zico_trace_record& r = out[i];
      r.timestamp_s = now.to_seconds(e.ticks);
      r.job = e.job;
      r.delta_bytes = e.delta_bytes;
      r.job_allocated_bytes = e.job_allocated_bytes;
      r.pool_allocated_bytes = e.pool_allocated_bytes;
      r.pool_reserved_bytes = e.pool_reserved_bytes;
      r.iteration = e.iteration;
      r.device = e.device;
      r.kind = e.kind;
    }
    start_ = (start_ + n) & mask_;
    count_ -= n;
    return n;
  }
  size_t size() const { return count_; }
  uint64_t dropped() const { return dropped_; }

 private:
  static size_t round_up_pow2(size_t n) {
    size_t p = 1;
    while (p < n) p <<= 1;
    return p;
  }
  // zico_trace_record with the raw tick count where the timestamp goes: one cache line per slot.
  struct alignas(64) Entry {
    uint64_t ticks;
    int64_t job, delta_bytes, job_allocated_bytes, pool_allocated_bytes, pool_reserved_bytes, iteration;
    int32_t device, kind;
  };
  static_assert(sizeof(Entry) == 64, "a trace slot is one cache line");
  TraceClock clock_;
  std::vector<Entry> buf_;
  size_t mask_;
  size_t start_ = 0, count_ = 0;
  uint64_t dropped_ = 0;
};

// Seconds since the epoch (CLOCK_REALTIME), read directly: marks' iteration times, OOM reports.
double wall_seconds();

}  // namespace zico
