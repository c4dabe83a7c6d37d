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
  // Appends `r`, stamped with the current tick count (its timestamp_s is filled in at drain).
  void push(const zico_trace_record& r) {
    Entry& e = buf_[(start_ + count_) & mask_];
    e.ticks = clock_.ticks();
    e.record = r;
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
      out[i] = e.record;
      out[i].timestamp_s = now.to_seconds(e.ticks);
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
  struct Entry {
    uint64_t ticks;
    zico_trace_record record;
  };
  TraceClock clock_;
  std::vector<Entry> buf_;
  size_t mask_;
  size_t start_ = 0, count_ = 0;
  uint64_t dropped_ = 0;
};

// Seconds since the epoch (CLOCK_REALTIME), read directly: marks' iteration times, OOM reports.
double wall_seconds();

}  // namespace zico
