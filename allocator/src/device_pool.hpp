// device_pool.hpp — one device's allocator: the Pool (blocks), the Ledger (jobs), the budget and
// deadlock rules, pool statistics, the trace ring and the last out-of-memory report, behind one
// mutex. Every co-located job's allocations on the device go through one DevicePool.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "ledger.hpp"
#include "pool.hpp"
#include "stats.hpp"
#include "trace.hpp"
#include "upstream.hpp"

namespace zico {

// A budget or capacity of this many bytes means "none" (ZICO_UNLIMITED in the C ABI).
constexpr uint64_t kUnlimited = UINT64_MAX;

enum class OomReason { kNone, kBudget, kCapacity, kFragmentation, kAgent };
const char* oom_reason_name(OomReason r);

struct OomReport {
  OomReason reason = OomReason::kNone;
  double timestamp_s = 0;
  int64_t job = 0;
  uint64_t requested_bytes = 0, rounded_bytes = 0;
  int64_t job_allocated_bytes = 0, allocated_bytes = 0, reserved_bytes = 0;
  uint64_t budget_bytes = 0, capacity_bytes = 0;
  uint64_t free_cached_bytes = 0, largest_free_block = 0;
  std::string detail;  // the upstream's own explanation (the agent's refusal), or empty
};

class DevicePool {
 public:
  DevicePool(int device, std::unique_ptr<Upstream> upstream);
  ~DevicePool();

  // Returns a block of >= size bytes charged to `job`, or nullptr (see last_oom()). Thread-safe.
  void* allocate(size_t size, void* stream, int64_t job);
  // Frees `ptr` on `stream`; false if `ptr` is not a live allocation of this pool (counted in
  // num_invalid_frees when count_invalid).
  bool deallocate(void* ptr, void* stream, bool count_invalid = true);

  void set_budget(uint64_t bytes);
  uint64_t budget();
  void set_budget_wait(double seconds);
  double budget_wait();
  bool mark(int64_t job, int kind, int64_t iteration);
  void empty_cache();
  // Returns wholly free cached segments to the upstream until `want` bytes went back (or none
  // is left); the agent upstream's reclaim thread calls it.
  void trim(size_t want);
  std::string last_oom_detail();
  void reset_peak_memory_stats();

  std::string stats_json(bool per_job, int64_t job);
  std::string snapshot_json();
  std::string last_oom_json();
  std::string jobs_json();
  bool check_invariants(std::string* why);
  size_t drain_trace(zico_trace_record* out, size_t max);
  uint64_t trace_dropped();
  const char* upstream_name() const { return up_->name(); }
  int device() const { return device_; }

 private:
  // allocate() after a cache miss: grows, applies the budget and deadlock rules, may wait.
  Block* allocate_miss(std::unique_lock<std::mutex>& lk, size_t size, size_t rounded, void* stream,
                       int64_t job, JobAccount& acct);
  void trace(int kind, int64_t job, int64_t delta, const JobAccount& a);
  void release(size_t want);  // returns cached segments to the upstream, with accounting
  bool grow(size_t bytes, bool small, int64_t job, bool block = false);
  void record_oom(OomReason reason, int64_t job, size_t size, size_t rounded);
  void notify_waiters() { if (waiters_ > 0) cv_.notify_all(); }

  const int device_;
  std::unique_ptr<Upstream> up_;
  std::mutex mu_;
  std::condition_variable cv_;
  Pool pool_;
  Ledger ledger_;
  TraceRing trace_;

  // Pool totals, indexed by PoolKind (all / small_pool / large_pool).
  Stat allocated_bytes_[kNumPoolKinds], reserved_bytes_[kNumPoolKinds], requested_bytes_[kNumPoolKinds];
  Stat allocation_[kNumPoolKinds], segment_[kNumPoolKinds];
  int64_t num_alloc_retries_ = 0, num_ooms_ = 0, num_device_alloc_ = 0, num_device_free_ = 0;
  int64_t num_budget_waits_ = 0, num_budget_overruns_ = 0, num_invalid_frees_ = 0;

  uint64_t budget_;
  double budget_wait_s_;
  int waiters_ = 0;
  OomReport last_oom_;
};

}  // namespace zico
