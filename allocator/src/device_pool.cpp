// device_pool.cpp — DevicePool: the allocate/free paths with the budget and deadlock rules, and
// accounting into pool totals, the ledger and the trace (reports: device_pool_reports.cpp).
#include "device_pool.hpp"

#include <chrono>
#include <limits>

#include "options.hpp"
#include "registry.hpp"

namespace zico {

namespace {
int kind_of(bool small) { return small ? kSmall : kLarge; }
}  // namespace

double wall_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

const char* oom_reason_name(OomReason r) {
  switch (r) {
    case OomReason::kBudget: return "budget";
    case OomReason::kCapacity: return "capacity";
    case OomReason::kFragmentation: return "fragmentation";
    case OomReason::kAgent: return "agent";
    default: return "none";
  }
}

DevicePool::DevicePool(int device, std::unique_ptr<Upstream> upstream)
    : device_(device),
      up_(std::move(upstream)),
      pool_(up_.get()),
      trace_(options().trace_capacity),
      budget_(options().budget_bytes),
      budget_wait_s_(options().budget_wait_s) {}

DevicePool::~DevicePool() = default;

void DevicePool::trace(int kind, int64_t job, int64_t delta, const JobAccount& a) {
  if (!trace_enabled()) return;
  // Stamped by the ring (Note [Trace timestamps]).
  trace_.push(kind, job, delta, a.allocated_bytes.current, allocated_bytes_[kAll].current,
              reserved_bytes_[kAll].current, a.iteration, device_);
}

bool DevicePool::grow(size_t bytes, bool small, int64_t job, bool block) {
  if (!pool_.grow(bytes, small, job, block)) return false;
  const int64_t n = static_cast<int64_t>(bytes);
  for (int k : {static_cast<int>(kAll), kind_of(small)}) {
    reserved_bytes_[k].increase(n);
    segment_[k].increase(1);
  }
  ++num_device_alloc_;
  JobAccount& owner = ledger_.job(job);
  owner.reserved_bytes.increase(n);
  trace(ZICO_TRACE_SEGMENT_ALLOC, job, n, owner);
  return true;
}

void DevicePool::release(size_t want) {
  for (const ReleasedSegment& s : pool_.release_free_segments(want)) {
    const int64_t n = static_cast<int64_t>(s.size);
    for (int k : {static_cast<int>(kAll), kind_of(s.small)}) {
      reserved_bytes_[k].decrease(n);
      if (s.kept > 1) segment_[k].increase(s.kept - 1);  // a part went: its segment became kept ones
      else if (s.kept == 0) segment_[k].decrease(1);
    }
    ++num_device_free_;
    JobAccount& owner = ledger_.job(s.owner_job);
    owner.reserved_bytes.decrease(n);
    trace(ZICO_TRACE_SEGMENT_FREE, s.owner_job, -n, owner);
  }
}

void DevicePool::record_oom(OomReason reason, int64_t job, size_t size, size_t rounded) {
  // Enough cached bytes in the request's pool (small or large) but no block fits: the cause is
  // fragmentation, whichever limit was hit.
  const uint64_t free_cached = pool_.free_bytes(is_small(rounded));
  std::string detail = reason == OomReason::kCapacity ? up_->last_refusal() : std::string();
  if (!detail.empty()) reason = OomReason::kAgent;
  else if (free_cached >= rounded) reason = OomReason::kFragmentation;
  JobAccount& a = ledger_.job(job);
  ++num_ooms_;
  ++a.num_ooms;
  last_oom_ = OomReport{reason, wall_seconds(), job, size, rounded, a.allocated_bytes.current,
                        allocated_bytes_[kAll].current, reserved_bytes_[kAll].current, budget_,
                        up_->capacity(), free_cached, pool_.largest_free_block(is_small(rounded)),
                        std::move(detail)};
  trace(ZICO_TRACE_OOM, job, static_cast<int64_t>(size), a);
}

// Note [Budget rule]
// ~~~~~~~~~~~~~~~~~~
// Rule: the pool's reserved bytes never exceed the device budget, with one exception, the deadlock
// grant below. A request that needs a new segment which would cross the budget
//   1. reuses a cached block if one fits (best fit; coalesced on every free),
//   2. returns wholly free cached segments to the upstream (smallest one that is enough, else
//      largest first) — counted in num_alloc_retries — and grows if that made room,
//   3. waits, at most budget_wait_s, for other jobs' frees (every free and mark wakes waiters),
//   4. fails (NULL; reason "budget", or "fragmentation" when enough bytes are cached but split):
//      at once if budget_wait_s is 0 or no other live job exists to free anything; otherwise when
//      the wait times out.
// Frees that leave reserved over the budget (after a grant, or after set_budget lowered it) return
// wholly free segments at once, so reserved comes back under the budget as soon as it can.
// When the upstream itself fails (physical capacity), all free cached segments are released and
// the request retried once; then it fails with reason "capacity" (or "fragmentation").
//
// Note [Deadlock rule]
// ~~~~~~~~~~~~~~~~~~~~
// Rule: when every live job is waiting on the budget, the waiting job furthest through its
// iteration (JobAccount::progress) is let past the budget — up to physical capacity — and counted
// in num_budget_overruns; ties go to the lower job id.
//
// Rationale: co-located jobs in lockstep (both mid-forward) can each hold memory the other needs;
// no free will come, and waiting forever is never acceptable. The job furthest through its
// iteration is the closest to its backward pass, where it frees its activations and so unblocks
// the others; letting it through is the cheapest way out (the Zico paper's time shift then pulls
// the jobs apart so it does not recur).
//
// A job is live when it is inside an iteration (between iteration_start and iteration_end marks);
// a job that never marked is live while it holds memory. Job 0 (unattributed) is never live, never
// granted, and only waits while some live job may free. Progress is the job's allocation count so
// far over its last complete iteration's count, or the phase rank before one iteration completed.
// Limits: the rule only sees memory; a job blocked elsewhere (a lock, a coordinator gate) while
// inside an iteration still counts as live and not waiting, so others wait for it (bounded).
//
// Note [Pool-hit fast path]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// Rule: a request served from the cache (a pool hit) and its free make no system call and, in the
// steady state, no heap allocation (a live-map rehash or a CUDA event list may still allocate), and
// look up nothing beyond the pool's own two containers, with tracing on or off.
//
// What a hit costs, in order (instruction counts: docs/benchmarks.md, "The pool-hit fast path
// (measured)"): the lock; best fit:
// for the small pool a bit scan of its size bins (Note [Small-pool bins] in free_bins.hpp), for the
// large pool one lower_bound on a bare size (BySize is transparent); when split, the remainder is
// binned (small) or inserted (large); the live-pointer table insert (ptr_map.hpp: open addressing,
// a multiply and a mask, no node); the pool totals (all + the request's pool kind) and the job's
// account (Ledger::job caches the last job inline, so one job's run of requests skips std::map);
// one trace record written in place into a 64-byte slot, stamped with a TSC read (Note [Trace
// timestamps]). The free mirrors it: one table erase, coalescing with each free neighbour (an O(1)
// unlink from its bin, or one tree descent in the large pool), one insert. Tree nodes and Block
// objects are recycled (node_allocator.hpp, spare_blocks_). Everything that can wait (growing, the
// budget, the deadlock rule, the agent) is in allocate_miss, out of line: a hit never reads a clock
// for the budget wait and never touches the condition variable unless someone waits.
// Every record is still written (nothing is sampled or dropped to be fast). The TSC read is the
// largest single cost left with tracing on; the curves need it: they place every allocation at
// its fraction of the iteration (workers/curves/trace.py), so the clock must resolve well under
// the shortest phase of a millisecond-long CPU iteration, which rules out CLOCK_MONOTONIC_COARSE
// (cheaper, but one kernel tick of resolution: milliseconds).
void* DevicePool::allocate(size_t size, void* stream, int64_t job) {
  std::unique_lock<std::mutex> lk(mu_);
  const size_t rounded = round_size(size);
  const bool small = is_small(rounded);
  JobAccount& acct = ledger_.job(job);
  Block* b = pool_.take(rounded, size, stream, job);
  if (__builtin_expect(b == nullptr, 0)) {
    b = allocate_miss(lk, size, rounded, stream, job, acct);
    if (!b) return nullptr;
  }
  const int64_t n = static_cast<int64_t>(b->size);
  for (int k : {static_cast<int>(kAll), kind_of(small)}) {
    allocated_bytes_[k].increase(n);
    requested_bytes_[k].increase(static_cast<int64_t>(size));
    allocation_[k].increase(1);
  }
  ledger_.on_alloc(acct, n, static_cast<int64_t>(size));
  trace(ZICO_TRACE_ALLOC, job, n, acct);
  return b->ptr;
}

__attribute__((noinline)) Block* DevicePool::allocate_miss(std::unique_lock<std::mutex>& lk, size_t size,
                                                           size_t rounded, void* stream, int64_t job,
                                                           JobAccount& acct) {
  const bool small = is_small(rounded);
  bool granted = false, waited = false, timed_out = false;
  std::chrono::steady_clock::time_point start;  // read only once a wait begins
  Block* b = nullptr;
  for (bool first = true;; first = false) {
    if (!first) {  // allocate() already tried the cache once
      b = pool_.take(rounded, size, stream, job);
      if (b) break;
    }
    const size_t seg = segment_size(rounded);
    auto fits = [&] {
      const uint64_t r = static_cast<uint64_t>(reserved_bytes_[kAll].current);
      return budget_ == kUnlimited || (seg <= budget_ && r <= budget_ - seg);
    };
    if (!granted && !fits()) {
      const uint64_t r = static_cast<uint64_t>(reserved_bytes_[kAll].current);
      const size_t over = seg > budget_ ? std::numeric_limits<size_t>::max() : r + seg - budget_;
      if (pool_.free_bytes() > 0 && over != std::numeric_limits<size_t>::max()) {
        ++num_alloc_retries_;
        ++acct.num_alloc_retries;
        release(over);
      }
    }
    if (granted || fits()) {
      if (!grow(seg, small, job)) {
        ++num_alloc_retries_;
        ++acct.num_alloc_retries;
        release(std::numeric_limits<size_t>::max());
        // A shared source (the agent) may now wait for other processes' returns.
        if (!grow(seg, small, job, /*block=*/true)) {
          record_oom(OomReason::kCapacity, job, size, rounded);
          break;
        }
      }
      b = pool_.take(rounded, size, stream, job);
      break;
    }
    // Blocked by the budget.
    if (timed_out || budget_wait_s_ <= 0 || !ledger_.others_live(job)) {
      record_oom(OomReason::kBudget, job, size, rounded);
      break;
    }
    if (!waited) {
      waited = true;
      start = std::chrono::steady_clock::now();
      acct.waiting = true;
      ++waiters_;
      ++num_budget_waits_;
      ++acct.num_budget_waits;
      trace(ZICO_TRACE_BUDGET_WAIT, job, static_cast<int64_t>(size), acct);
      cv_.notify_all();  // others re-evaluate the deadlock rule now that this job waits
    }
    if (ledger_.deadlock_winner() == job) {
      granted = true;
      ++num_budget_overruns_;
      ++acct.num_budget_overruns;
      trace(ZICO_TRACE_BUDGET_OVERRUN, job, static_cast<int64_t>(size), acct);
      continue;
    }
    const auto deadline = start + std::chrono::duration<double>(budget_wait_s_);
    if (cv_.wait_until(lk, deadline) == std::cv_status::timeout) timed_out = true;
  }
  if (waited) {
    acct.waiting = false;
    --waiters_;
    acct.budget_wait_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return b;
}

bool DevicePool::deallocate(void* ptr, void* stream, bool count_invalid) {
  std::lock_guard<std::mutex> lk(mu_);
  FreedBlock f;
  if (!pool_.free(ptr, stream, &f)) {
    if (count_invalid) ++num_invalid_frees_;
    return false;
  }
  const int64_t n = static_cast<int64_t>(f.size);
  for (int k : {static_cast<int>(kAll), kind_of(f.small)}) {
    allocated_bytes_[k].decrease(n);
    requested_bytes_[k].decrease(static_cast<int64_t>(f.requested));
    allocation_[k].decrease(1);
  }
  JobAccount& a = ledger_.job(f.job);
  ledger_.on_free(a, n, static_cast<int64_t>(f.requested));
  trace(ZICO_TRACE_FREE, f.job, -n, a);
  const uint64_t r = static_cast<uint64_t>(reserved_bytes_[kAll].current);
  if (budget_ != kUnlimited && r > budget_) release(r - budget_);
  if (size_t want = up_->wanted_back()) release(want);  // the agent asked for cached segments
  notify_waiters();
  return true;
}

void DevicePool::set_budget(uint64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  budget_ = bytes;
  const uint64_t r = static_cast<uint64_t>(reserved_bytes_[kAll].current);
  if (budget_ != kUnlimited && r > budget_) release(r - budget_);
  notify_waiters();
}

uint64_t DevicePool::budget() {
  std::lock_guard<std::mutex> lk(mu_);
  return budget_;
}

void DevicePool::set_budget_wait(double seconds) {
  std::lock_guard<std::mutex> lk(mu_);
  budget_wait_s_ = seconds;
  notify_waiters();
}

double DevicePool::budget_wait() {
  std::lock_guard<std::mutex> lk(mu_);
  return budget_wait_s_;
}

bool DevicePool::mark(int64_t job, int kind, int64_t iteration) {
  std::lock_guard<std::mutex> lk(mu_);
  JobAccount& a = ledger_.job(job);
  if (!ledger_.mark(a, kind, iteration, wall_seconds())) return false;
  trace(kind, job, 0, a);
  if (kind == ZICO_MARK_ITERATION_END)
    if (size_t want = up_->wanted_back()) release(want);  // iteration end: give back what others wait for
  notify_waiters();  // liveness changed: the deadlock rule may now apply
  return true;
}

void DevicePool::trim(size_t want) {
  std::lock_guard<std::mutex> lk(mu_);
  release(want);
}

std::string DevicePool::last_oom_detail() {
  std::lock_guard<std::mutex> lk(mu_);
  return last_oom_.detail;
}

void DevicePool::empty_cache() {
  std::lock_guard<std::mutex> lk(mu_);
  release(std::numeric_limits<size_t>::max());
}

void DevicePool::reset_peak_memory_stats() {
  std::lock_guard<std::mutex> lk(mu_);
  for (int k = 0; k < kNumPoolKinds; ++k) {
    allocated_bytes_[k].reset_peak();
    reserved_bytes_[k].reset_peak();
    requested_bytes_[k].reset_peak();
    allocation_[k].reset_peak();
    segment_[k].reset_peak();
  }
  ledger_.reset_peaks();
}

size_t DevicePool::drain_trace(zico_trace_record* out, size_t max) {
  std::lock_guard<std::mutex> lk(mu_);
  return trace_.drain(out, max);
}

uint64_t DevicePool::trace_dropped() {
  std::lock_guard<std::mutex> lk(mu_);
  return trace_.dropped();
}

}  // namespace zico
