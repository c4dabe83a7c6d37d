// stats.hpp — the {current, peak, allocated, freed} counter PyTorch's memory_stats() reports
// (c10/core/CachingDeviceAllocator.h `Stat`), shared by the pool totals and the per-job ledger.
#pragma once
#include <algorithm>
#include <cstdint>

namespace zico {

struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;  // cumulative increases
  int64_t freed = 0;      // cumulative decreases

  void increase(int64_t n) {
    current += n;
    allocated += n;
    peak = std::max(peak, current);
  }
  void decrease(int64_t n) {
    current -= n;
    freed += n;
  }
  void reset_peak() { peak = current; }
};

// Index of the per-pool-kind arrays, named as in torch: all / small_pool / large_pool.
enum PoolKind { kAll = 0, kSmall = 1, kLarge = 2, kNumPoolKinds = 3 };
inline const char* pool_kind_name(int k) {
  return k == kAll ? "all" : (k == kSmall ? "small_pool" : "large_pool");
}

}  // namespace zico
