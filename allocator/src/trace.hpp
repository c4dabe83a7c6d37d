// trace.hpp — a fixed-size ring of zico_trace_record (timestamp, job, ±bytes, running totals) that
// the profiler and the reporter drain. When full, the oldest record is overwritten and counted as
// dropped. Not thread-safe: DevicePool holds the lock.
#pragma once
#include <cstdint>
#include <vector>

#include "zico/zico.h"

namespace zico {

class TraceRing {
 public:
  // capacity is rounded up to a power of two (index arithmetic is a mask, not a division).
  explicit TraceRing(size_t capacity) : buf_(round_up_pow2(capacity)), mask_(buf_.size() - 1) {}
  void push(const zico_trace_record& r) {
    buf_[(start_ + count_) & mask_] = r;
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
    for (size_t i = 0; i < n; ++i) out[i] = buf_[(start_ + i) & mask_];
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
  std::vector<zico_trace_record> buf_;
  size_t mask_;
  size_t start_ = 0, count_ = 0;
  uint64_t dropped_ = 0;
};

// Seconds since the epoch (CLOCK_REALTIME), the timestamp of every record.
double wall_seconds();

}  // namespace zico
