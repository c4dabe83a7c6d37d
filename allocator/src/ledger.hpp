// ledger.hpp — the per-job ledger: each job's allocated / requested / reserved bytes (current and
// peak), its per-iteration peaks, and its progress from marks (which the deadlock rule reads).
// Not thread-safe: DevicePool holds the lock. Job 0 is the "unattributed" account.
#pragma once
#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>

#include "stats.hpp"

namespace zico {

struct IterationRecord {
  int64_t iteration;
  int64_t peak_allocated_bytes;  // the job's allocated bytes at their highest during the iteration
  double start_s, end_s;         // CLOCK_REALTIME seconds
};

struct JobAccount {
  Stat allocated_bytes;  // block bytes of live allocations charged to the job
  Stat requested_bytes;  // bytes the job asked for (before rounding)
  Stat reserved_bytes;   // bytes of segments the job's requests obtained from the upstream
  Stat allocation;       // count of live allocations
  int64_t num_alloc_retries = 0, num_ooms = 0, num_budget_waits = 0, num_budget_overruns = 0;
  double budget_wait_s = 0;

  // Progress from zico_mark(): iteration number, phase (a ZICO_MARK_* kind, -1 = never marked).
  int64_t iteration = -1;
  int phase = -1;
  bool in_iteration = false;
  int64_t allocs_in_iteration = 0;    // allocations since the last iteration_start
  int64_t allocs_last_iteration = 0;  // allocations of the last complete iteration
  int64_t iteration_peak = 0;
  double iteration_start_s = 0;
  std::deque<IterationRecord> history;  // most recent iterations, oldest first (bounded)

  bool waiting = false;  // blocked in allocate() by the budget

  // Fraction of the current iteration done, in [0, 1]: allocations so far over the last complete
  // iteration's count when one is known, else the phase's rank (start 0 ... end 1).
  double progress() const;
  // Has work in flight that will eventually free memory (see Note [Deadlock rule]).
  bool live(int64_t id) const;
};

class Ledger {
 public:
  static constexpr size_t kHistory = 256;
  // The account of job `id`, created on first use. The last job's account is cached: a pool hit
  // then skips the map lookup (accounts are never erased and map nodes never move, so the cached
  // pointer stays valid).
  JobAccount& job(int64_t id) {
    if (__builtin_expect(last_ != nullptr && last_id_ == id, 1)) return *last_;
    return job_slow(id);
  }
  const std::map<int64_t, JobAccount>& jobs() const { return jobs_; }

  void on_alloc(JobAccount& a, int64_t block_bytes, int64_t requested) {
    a.allocated_bytes.increase(block_bytes);
    a.requested_bytes.increase(requested);
    a.allocation.increase(1);
    a.allocs_in_iteration += 1;
    a.iteration_peak = std::max(a.iteration_peak, a.allocated_bytes.current);
  }
  void on_free(JobAccount& a, int64_t block_bytes, int64_t requested) {
    a.allocated_bytes.decrease(block_bytes);
    a.requested_bytes.decrease(requested);
    a.allocation.decrease(1);
  }
  // Applies a mark of `kind` (ZICO_MARK_*); false if `kind` is not a mark.
  bool mark(JobAccount& a, int kind, int64_t iteration, double now_s);
  // True when some live job other than `self` could free memory.
  bool others_live(int64_t self) const;
  // The job the deadlock rule lets past the budget, or -1 when there is no deadlock.
  int64_t deadlock_winner() const;
  void reset_peaks();

 private:
  JobAccount& job_slow(int64_t id);  // the map lookup (or insertion), then caches it
  std::map<int64_t, JobAccount> jobs_;
  int64_t last_id_ = 0;
  JobAccount* last_ = nullptr;
};

const char* mark_name(int kind);  // "iteration_start" ... or nullptr

}  // namespace zico
