// device_pool_reports.cpp — DevicePool's read-only views: torch-style statistics, the snapshot,
// the last OOM report and per-job iterations as JSON, and the invariant audit the tests rely on.
#include "device_pool.hpp"
#include "json.hpp"

namespace zico {

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
  w.limit("budget_bytes", budget_).limit("capacity_bytes", up_->capacity());
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
    w.limit("budget_bytes", o.budget_bytes).limit("capacity_bytes", o.capacity_bytes);
    w.num("free_cached_bytes", o.free_cached_bytes).num("largest_free_block", o.largest_free_block);
    if (!o.detail.empty()) w.str("detail", o.detail);
    else w.null("detail");
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

}  // namespace zico
