// ledger.cpp — Ledger: per-job accounting, marks and the deadlock rule's choice of job.
#include "ledger.hpp"

#include <algorithm>

#include "zico/zico.h"

namespace zico {

const char* mark_name(int kind) {
  switch (kind) {
    case ZICO_MARK_ITERATION_START: return "iteration_start";
    case ZICO_MARK_FORWARD: return "forward";
    case ZICO_MARK_BACKWARD: return "backward";
    case ZICO_MARK_OPTIMIZER: return "optimizer";
    case ZICO_MARK_ITERATION_END: return "iteration_end";
    default: return nullptr;
  }
}

double JobAccount::progress() const {
  if (allocs_last_iteration > 0)
    return std::min(1.0, static_cast<double>(allocs_in_iteration) / allocs_last_iteration);
  if (phase < 0) return 0.0;
  return (phase - ZICO_MARK_ITERATION_START) / 4.0;
}

bool JobAccount::live(int64_t id) const {
  if (id == 0) return false;  // unattributed memory has no progress to wait for
  if (phase >= 0) return in_iteration;
  return allocated_bytes.current > 0 || waiting;  // never marked: live while it holds memory
}

JobAccount& Ledger::job_slow(int64_t id) {
  last_ = &jobs_[id];
  last_id_ = id;
  return *last_;
}

bool Ledger::mark(JobAccount& a, int kind, int64_t iteration, double now_s) {
  if (!mark_name(kind)) return false;
  if (iteration >= 0) a.iteration = iteration;
  a.phase = kind;
  if (kind == ZICO_MARK_ITERATION_START) {
    a.in_iteration = true;
    a.allocs_in_iteration = 0;
    a.iteration_peak = a.allocated_bytes.current;
    a.iteration_start_s = now_s;
  } else if (kind == ZICO_MARK_ITERATION_END) {
    a.in_iteration = false;
    a.allocs_last_iteration = a.allocs_in_iteration;
    a.history.push_back(IterationRecord{a.iteration, a.iteration_peak, a.iteration_start_s, now_s});
    if (a.history.size() > kHistory) a.history.pop_front();
  }
  return true;
}

bool Ledger::others_live(int64_t self) const {
  for (const auto& kv : jobs_)
    if (kv.first != self && kv.second.live(kv.first)) return true;
  return false;
}

int64_t Ledger::deadlock_winner() const {
  int64_t best = -1;
  double best_progress = -1;
  for (const auto& kv : jobs_) {
    const JobAccount& a = kv.second;
    if (!a.live(kv.first)) continue;
    if (!a.waiting) return -1;  // a live job still runs: its frees may come
    if (a.progress() > best_progress) {  // ties keep the lower job id (map order)
      best = kv.first;
      best_progress = a.progress();
    }
  }
  return best;
}

void Ledger::reset_peaks() {
  for (auto& kv : jobs_) {
    JobAccount& a = kv.second;
    a.allocated_bytes.reset_peak();
    a.requested_bytes.reset_peak();
    a.reserved_bytes.reset_peak();
    a.allocation.reset_peak();
  }
}

}  // namespace zico
