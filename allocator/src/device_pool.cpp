// device_pool.cpp — DevicePool: the allocate/free paths with the budget and deadlock rules,
// accounting into pool totals, the ledger and the trace, and the JSON reports.
#include "device_pool.hpp"

#include <chrono>
#include <limits>

#include "json.hpp"
#include "options.hpp"
#include "registry.hpp"

namespace zico {

namespace {
constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();
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
  zico_trace_record r;
  r.timestamp_s = wall_seconds();
  r.job = job;
  r.delta_bytes = delta;
  r.job_allocated_bytes = a.allocated_bytes.current;
  r.pool_allocated_bytes = allocated_bytes_[kAll].current;
  r.pool_reserved_bytes = reserved_bytes_[kAll].current;
  r.iteration = a.iteration;
  r.device = device_;
  r.kind = kind;
  trace_.push(r);
}

bool DevicePool::grow(size_t bytes, bool small, int64_t job) {
  if (!pool_.grow(bytes, small, job)) return false;
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
      segment_[k].decrease(1);
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
  if (free_cached >= rounded) reason = OomReason::kFragmentation;
  JobAccount& a = ledger_.job(job);
  ++num_ooms_;
  ++a.num_ooms;
  last_oom_ = OomReport{reason, wall_seconds(), job, size, rounded, a.allocated_bytes.current,
                        allocated_bytes_[kAll].current, reserved_bytes_[kAll].current, budget_,
                        up_->capacity(), free_cached, pool_.largest_free_block(is_small(rounded))};
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
void* DevicePool::allocate(size_t size, void* stream, int64_t job) {
  std::unique_lock<std::mutex> lk(mu_);
  const size_t rounded = round_size(size);
  const bool small = is_small(rounded);
  JobAccount& acct = ledger_.job(job);
  bool granted = false, waited = false, timed_out = false;
  std::chrono::steady_clock::time_point start;  // read only once a wait begins (hot path: no clock)
  Block* b = nullptr;
  for (;;) {
    b = pool_.take(rounded, size, stream, job);
    if (b) break;
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
        if (!grow(seg, small, job)) {
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
  if (!b) return nullptr;
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
  notify_waiters();  // liveness changed: the deadlock rule may now apply
  return true;
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

namespace {
void put_stat(JsonWriter& w, const std::string& name, const char* kind, const Stat& s) {
  const std::string p = name + "." + kind + ".";
  w.num(p + "current", s.current).num(p + "peak", s.peak).num(p + "allocated", s.allocated).num(p + "freed", s.freed);
}
}  // namespace

std::string DevicePool::stats_json(bool per_job, int64_t job) {
  std::lock_guard<std::mutex> lk(mu_);
  JsonWriter w;
  w.open('{');
  w.num("device", device_);
  if (per_job) {
    auto it = ledger_.jobs().find(job);
    static const JobAccount empty;
    const JobAccount& a = it == ledger_.jobs().end() ? empty : it->second;
    w.num("job", job);
    put_stat(w, "allocated_bytes", "all", a.allocated_bytes);
    put_stat(w, "active_bytes", "all", a.allocated_bytes);
    put_stat(w, "requested_bytes", "all", a.requested_bytes);
    put_stat(w, "reserved_bytes", "all", a.reserved_bytes);
    put_stat(w, "allocation", "all", a.allocation);
    put_stat(w, "active", "all", a.allocation);
    w.num("num_alloc_retries", a.num_alloc_retries).num("num_ooms", a.num_ooms);
    w.num("num_budget_waits", a.num_budget_waits).num("budget_waited_s", a.budget_wait_s);
    w.num("num_budget_overruns", a.num_budget_overruns);
    w.num("iteration", a.iteration);
    if (mark_name(a.phase)) w.str("phase", mark_name(a.phase)); else w.null("phase");
    w.boolean("in_iteration", a.in_iteration).num("progress", a.progress());
    w.num("last_iteration_peak_bytes", a.history.empty() ? 0 : a.history.back().peak_allocated_bytes);
  } else {
    for (int k = 0; k < kNumPoolKinds; ++k) {
      const char* kn = pool_kind_name(k);
      put_stat(w, "allocated_bytes", kn, allocated_bytes_[k]);
      put_stat(w, "active_bytes", kn, allocated_bytes_[k]);
      put_stat(w, "requested_bytes", kn, requested_bytes_[k]);
      put_stat(w, "reserved_bytes", kn, reserved_bytes_[k]);
      put_stat(w, "allocation", kn, allocation_[k]);
      put_stat(w, "active", kn, allocation_[k]);
      put_stat(w, "segment", kn, segment_[k]);
      w.num(std::string("inactive_split_bytes.") + kn + ".current", pool_.inactive_split_bytes(k));
      w.num(std::string("inactive_split.") + kn + ".current", pool_.inactive_split_blocks(k));
    }
    w.num("num_alloc_retries", num_alloc_retries_).num("num_ooms", num_ooms_);
    w.num("num_device_alloc", num_device_alloc_).num("num_device_free", num_device_free_);
    w.num("num_sync_all_streams", 0).num("max_split_size", -1);
    w.num("num_budget_waits", num_budget_waits_).num("num_budget_overruns", num_budget_overruns_);
    w.num("num_invalid_frees", num_invalid_frees_);
    w.num("trace_dropped", trace_.dropped());
  }
  if (budget_ == kUnlimited) w.null("budget_bytes"); else w.num("budget_bytes", budget_);
  const uint64_t cap = up_->capacity();
  if (cap == kUnlimited) w.null("capacity_bytes"); else w.num("capacity_bytes", cap);
  w.num("budget_wait_s", budget_wait_s_);
  w.close('}');
  return w.take();
}

std::string DevicePool::snapshot_json() {
  std::lock_guard<std::mutex> lk(mu_);
  JsonWriter w;
  w.open('[');
  for (const auto& kv : pool_.segments()) {
    const Segment* s = kv.second;
    size_t allocated = 0, requested = 0;
    for (const Block* b = s->first; b; b = b->next)
      if (b->allocated) { allocated += b->size; requested += b->requested; }
    w.open('{').num("device", device_).num("address", reinterpret_cast<uintptr_t>(s->base));
    w.num("total_size", s->size).num("allocated_size", allocated).num("active_size", allocated);
    w.num("requested_size", requested).str("segment_type", s->small ? "small" : "large");
    w.num("owner_job", s->owner_job).key("blocks").open('[');
    for (const Block* b = s->first; b; b = b->next) {
      w.open('{').num("address", reinterpret_cast<uintptr_t>(b->ptr)).num("size", b->size);
      w.num("requested_size", b->requested).str("state", b->allocated ? "active_allocated" : "inactive");
      w.num("stream", reinterpret_cast<uintptr_t>(b->stream));
      if (b->allocated) w.num("job", b->job); else w.null("job");
      w.close('}');
    }
    w.close(']').close('}');
  }
  w.close(']');
  return w.take();
}

std::string DevicePool::last_oom_json() {
  std::lock_guard<std::mutex> lk(mu_);
  const OomReport& o = last_oom_;
  JsonWriter w;
  w.open('{').num("device", device_);
  if (o.reason == OomReason::kNone) {
    w.null("reason");
  } else {
    w.str("reason", oom_reason_name(o.reason)).num("timestamp_s", o.timestamp_s).num("job", o.job);
    w.num("requested_bytes", o.requested_bytes).num("rounded_bytes", o.rounded_bytes);
    w.num("job_allocated_bytes", o.job_allocated_bytes).num("allocated_bytes", o.allocated_bytes);
    w.num("reserved_bytes", o.reserved_bytes);
    if (o.budget_bytes == kUnlimited) w.null("budget_bytes"); else w.num("budget_bytes", o.budget_bytes);
    if (o.capacity_bytes == kUnlimited) w.null("capacity_bytes"); else w.num("capacity_bytes", o.capacity_bytes);
    w.num("free_cached_bytes", o.free_cached_bytes).num("largest_free_block", o.largest_free_block);
  }
  w.close('}');
  return w.take();
}

std::string DevicePool::jobs_json() {
  std::lock_guard<std::mutex> lk(mu_);
  JsonWriter w;
  w.open('{');
  for (const auto& kv : ledger_.jobs()) {
    const JobAccount& a = kv.second;
    w.key(std::to_string(kv.first)).open('{');
    w.num("allocated_bytes", a.allocated_bytes.current).num("allocated_bytes_peak", a.allocated_bytes.peak);
    w.num("reserved_bytes", a.reserved_bytes.current).num("reserved_bytes_peak", a.reserved_bytes.peak);
    w.num("iteration", a.iteration).boolean("in_iteration", a.in_iteration).boolean("waiting", a.waiting);
    w.key("iterations").open('[');
    for (const IterationRecord& r : a.history)
      w.open('{').num("iteration", r.iteration).num("peak_allocated_bytes", r.peak_allocated_bytes)
          .num("start_s", r.start_s).num("end_s", r.end_s).close('}');
    w.close(']').close('}');
  }
  w.close('}');
  return w.take();
}

bool DevicePool::check_invariants(std::string* why) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!pool_.check(why)) return false;
  int64_t seg_bytes = 0;
  for (const auto& kv : pool_.segments()) seg_bytes += static_cast<int64_t>(kv.second->size);
  int64_t job_alloc = 0, job_reserved = 0;
  for (const auto& kv : ledger_.jobs()) {
    job_alloc += kv.second.allocated_bytes.current;
    job_reserved += kv.second.reserved_bytes.current;
  }
  std::string err;
  if (seg_bytes != reserved_bytes_[kAll].current) err += "reserved_bytes differs from the segments' sum; ";
  if (job_alloc != allocated_bytes_[kAll].current) err += "per-job allocated bytes do not sum to the total; ";
  if (job_reserved != reserved_bytes_[kAll].current) err += "per-job reserved bytes do not sum to the total; ";
  if (allocated_bytes_[kAll].current > reserved_bytes_[kAll].current) err += "allocated exceeds reserved; ";
  // Reserved may exceed the budget only through a deadlock grant or a lowered budget, and then
  // never while a wholly free segment is still cached.
  bool idle_segment = false;
  for (const auto& kv : pool_.segments()) idle_segment |= kv.second->allocated_blocks == 0;
  if (budget_ != kUnlimited && static_cast<uint64_t>(reserved_bytes_[kAll].current) > budget_ && idle_segment)
    err += "reserved exceeds the budget while a free segment is cached; ";
  *why = err;
  return err.empty();
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
