// agent_server.cpp — AgentServer: the server thread, the grant rules, scrub and transfer
// accounting (header: agent_server.hpp; wire format: agent_protocol.hpp; OS calls: chunk_os.cpp).
#include "agent_server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "chunk_os.hpp"
#include "json.hpp"
#include "options.hpp"

namespace zico {

using namespace agent;

namespace {
constexpr uint64_t kNone = UINT64_MAX;
std::string mib(uint64_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}
}  // namespace

AgentServer* AgentServer::create(const zico_chunk_ops& ops, uint64_t capacity, uint64_t budget, uint64_t chunk,
                                 std::string* why) {
  if (!ops.create || !ops.scrub || !ops.destroy) {
    *why = "chunk ops need create, scrub and destroy";
    return nullptr;
  }
  if (chunk == 0 || chunk % 4096 != 0) {
    *why = "chunk_bytes must be a positive multiple of 4096 (the page size), got " + std::to_string(chunk);
    return nullptr;
  }
  if (capacity < chunk || capacity == kNone) {
    *why = "capacity_bytes must be at least one chunk (" + std::to_string(chunk) + " bytes) and finite";
    return nullptr;
  }
  if (budget == 0) {
    *why = "budget_bytes must be positive (UINT64_MAX for none)";
    return nullptr;
  }
  const uint64_t chunks = capacity / chunk;
  uint64_t have = 0;
  if (!ensure_fd_limit(chunks + 256, &have)) {
    *why = "the agent keeps one memfd per chunk: " + std::to_string(chunks) + " chunks need about " +
           std::to_string(chunks + 256) + " open files, but RLIMIT_NOFILE allows " + std::to_string(have) +
           " (raise it, or use larger chunks)";
    return nullptr;
  }
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    *why = std::string("pipe2 failed: ") + std::strerror(errno);
    return nullptr;
  }
  return new AgentServer(ops, chunks, budget, chunk, wake);
}

AgentServer::AgentServer(const zico_chunk_ops& ops, uint64_t chunks, uint64_t budget, uint64_t chunk_bytes,
                         int wake[2])
    : ops_(ops),
      chunk_(chunk_bytes), chunks_(chunks), budget_(budget), wait_s_(options().budget_wait_s) {
  wake_[0] = wake[0];
  wake_[1] = wake[1];
  free_.reserve(chunks);
  for (uint64_t i = chunks; i-- > 0;) free_.push_back(static_cast<uint32_t>(i));  // id 0 first
  thread_ = std::thread([this] { loop(); });
}

AgentServer::~AgentServer() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  wake();
  thread_.join();
  for (auto& kv : jobs_)
    if (kv.second.fd >= 0) close(kv.second.fd);
  for (int fd : closing_) close(fd);
  for (Chunk& c : chunks_)
    if (c.fd >= 0) ops_.destroy(ops_.ctx, c.fd, c.handle);
  close(wake_[0]);
  close(wake_[1]);
}

void AgentServer::wake() {
  char b = 1;
  (void)!write(wake_[1], &b, 1);
}

int AgentServer::add_job(int64_t job, int64_t tenant, std::string* why) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = jobs_.find(job);
  if (it != jobs_.end() && it->second.connected) {
    *why = "job " + std::to_string(job) + " is already connected to this agent";
    return -1;
  }
  int sv[2];
  if (!seqpacket_pair(sv)) {
    *why = std::string("socketpair failed: ") + std::strerror(errno);
    return -1;
  }
  Msg hello = make_msg(kHello, chunk_, chunks_.size() * chunk_, static_cast<uint64_t>(job));
  if (!send_packet(sv[0], &hello, sizeof(hello), nullptr, 0)) {
    *why = std::string("could not greet the job: ") + std::strerror(errno);
    close(sv[0]);
    close(sv[1]);
    return -1;
  }
  fcntl(sv[0], F_SETFL, O_NONBLOCK);  // a job that stops reading never blocks the agent
  Job& j = jobs_[job];
  j = Job();  // a disconnected earlier run of the same job id starts afresh
  j.id = job;
  j.tenant = tenant;
  j.fd = sv[0];
  j.connected = true;
  wake();
  return sv[1];
}

bool AgentServer::remove_job(int64_t job, std::string* why) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) {
    *why = "job " + std::to_string(job) + " was never added to this agent";
    return false;
  }
  disconnect(it->second, /*quarantine=*/true);
  decide();
  wake();
  return true;
}

// Note [A job's own budget]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~
// A job submitted with a budget (its limit: docs/allocator.md, "A job's own budget") holds at most that many
// bytes of the device's pool, whatever is free: the agent checks each request against it before the device's
// rules below, so nothing the job process calls can raise it (it lives here, in the device worker). A request
// that would take the job past it is refused at once, never queued: only the job itself could free what it
// needs, so waiting for a neighbour cannot help, and a queued request could win a deadlock grant (rule 4) and
// take memory a neighbour within its plan needs. The first ask of an allocation does not wait (wait = 0):
// refused, the job's pool returns its wholly free cached segments and asks again with wait = 1, so a job that
// is over its budget only through its cache goes on; the second refusal is final (kJobBudget) and its text,
// which the job's out-of-memory report carries, names the budget and the job's peak. Parked chunks are the
// job's already (Note [Parked chunks]), so they count once.
bool AgentServer::over_own_budget(Job& j) {
  const uint64_t would = (j.held.size() + new_chunks(j)) * chunk_;
  if (j.budget == kNone || would <= j.budget) return false;
  const std::string text = "agent refused: job budget: this job would hold " + mib(would) + ", past its budget of " +
                           mib(j.budget) + " (its peak " + mib(std::max<uint64_t>(j.peak_held, j.held.size() * chunk_)) +
                           ", request " + mib(j.pending.chunks * chunk_) + ")";
  if (!j.pending.wait) {
    refuse(j, kWouldWait, text);
  } else {
    ++j.over_job_budget;
    refuse(j, kJobBudget, text);
  }
  return true;
}

bool AgentServer::set_job_budget(int64_t job, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return false;
  it->second.budget = bytes;
  return true;
}

bool AgentServer::set_job_plan(int64_t job, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return false;
  it->second.plan = bytes;
  return true;
}

void AgentServer::set_budget(uint64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  budget_ = bytes;
  decide();
}

// Note [Yielding jobs]
// ~~~~~~~~~~~~~~~~~~~
// Rule 3 asks a job for its cache only on behalf of a waiter that holds no more than it does, so a
// job that never frees cannot drain a steady neighbour's cache between that neighbour's iterations.
// But a job the device's coordinator holds back at its iteration start (the time shift) is
// *yielding*: the plan says the others run now, and the memory it keeps cached is exactly what they
// need for their forward pass (Zico's sharing: one job's freed memory serves the other's forward).
// The agent marks it (set_yielding, from the coordinator gate in workers/agent/agent.py) while it
// waits there, and through the iteration that follows (Note [Yielding through the iteration] there:
// the plan counts curves, not caches), and any waiter may then reclaim from it, whatever either holds. Without this, a
// larger job waiting for 20 MiB stalled 30 s beside a gated neighbour caching 140 MiB, until its
// request was refused (measured in the demo with each job in its own process).
//
// Note [Held at the gate]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A yielding job held at its gate (kGated) returns what its pool can on RECLAIM: wholly free cached
// segments. What is left, segments it still uses in part (its weights and optimizer state beside blocks
// its last iteration freed), it cannot give back until it runs, and the coordinator does not let it run
// while a neighbour's iteration is in flight. A neighbour inside its iteration that waits for memory beside
// such a job waited out wait_s and was refused: the gate waited for the waiter, the waiter for the gated
// job's memory (measured: tiny-lm refused after 30 s waiting for a 20 MiB segment beside resnet18 held at
// its gate with 168 MiB, at the least budget the gate plans for the pair, docs/experiment.md). So a job held
// at its gate that was asked for memory and has answered (stuck_at_gate: its pool's reclaim thread trimmed
// what it could and sent RETURN b = 2, no chunk ids; or it did not answer within kGateAnswer) counts with
// the waiters in rule 4: it cannot free, so the waiter is in a deadlock, and a lone waiter beside it gets
// the deadlock grant (past the budget, never past capacity, counted) instead of a refusal. The grantee's
// iteration then ends, it frees, held returns under the budget by rule 3, and the gated job runs. A job
// asked for more than it answered is asked again and answers again; one that reaches its gate is asked
// afresh (its pool changed while it ran). Older clients send no answer: kGateAnswer stands for it.
bool AgentServer::set_yielding(int64_t job, int mode) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return false;
  Job& j = it->second;
  j.yielding = mode != kNotYielding;
  const bool gated = mode == kGated;
  if (gated && !j.gated) {  // it reached its gate: asked afresh, its last answer is about the pool it ran with
    j.reclaim_sent = 0;
    j.answered = false;
  }
  j.gated = gated;
  send_reclaims();
  wake();  // the server thread re-decides: a waiter beside a job now held at its gate
  return true;
}

void AgentServer::set_wait(double seconds) {
  std::lock_guard<std::mutex> lk(mu_);
  wait_s_ = seconds;
  for (auto& kv : jobs_) {
    Pending& p = kv.second.pending;
    if (p.active && p.wait)
      p.deadline = p.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }
  decide();
  wake();
}

void AgentServer::loop() {
  std::vector<pollfd> fds;
  std::vector<int64_t> ids;
  Msg m;
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    for (int fd : closing_) close(fd);
    closing_.clear();
    fds.assign(1, pollfd{wake_[0], POLLIN, 0});
    ids.assign(1, -1);
    int timeout_ms = -1;
    const auto now = Clock::now();
    for (auto& kv : jobs_) {
      Job& j = kv.second;
      if (!j.connected) continue;
      fds.push_back(pollfd{j.fd, POLLIN, 0});
      ids.push_back(j.id);
      auto until = [&](Clock::time_point t) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - now).count() + 1;
        ms = std::max<long long>(ms, 0);
        if (timeout_ms < 0 || ms < timeout_ms) timeout_ms = static_cast<int>(std::min<long long>(ms, 1 << 30));
      };
      if (j.pending.active && j.pending.wait) until(j.pending.deadline);
      if (j.gated && j.reclaim_sent > 0 && !stuck_at_gate(j, now)) until(j.asked_at + kGateAnswer);
    }
    lk.unlock();
    int n = poll(fds.data(), fds.size(), timeout_ms);
    lk.lock();
    if (n < 0 && errno != EINTR) break;
    if (fds[0].revents) {
      char drain[64];
      while (read(wake_[0], drain, sizeof(drain)) > 0) {}
    }
    for (size_t i = 1; i < fds.size() && n > 0; ++i) {
      if (!fds[i].revents) continue;
      auto it = jobs_.find(ids[i]);
      // Only this thread closes job sockets, so the fd polled is still this job's while connected.
      if (it == jobs_.end() || !it->second.connected || it->second.fd != fds[i].fd) continue;
      Job& j = it->second;
      long len = recv_packet(j.fd, &m, sizeof(m), nullptr);  // a job can never plant fds here
      if (len < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (len <= 0) {
        disconnect(j);
      } else {
        on_message(j, m, len);
      }
    }
    decide();
  }
}

// Note [Parked chunks]
// ~~~~~~~~~~~~~~~~~~~~
// A job's pool whose request was refused without waiting returns its wholly free cached segments,
// then asks again, waiting (rule 2 of Note [Agent grants]). Its RETURN and REQUEST are separate
// packets and the agent decides after each, so when those chunks went to the free list a
// neighbour's waiting request — a greedy job that keeps asking — was granted them first, and the
// job lost its cache, which it needs again next iteration (test_a_greedy_job_gets_none_of_the_
// cache_...: the greedy job was granted all 48 MiB the other job returned; the other job's 20 MiB
// request then went past the budget by rule 4, or, with rule 4's old order, was refused while the
// greedy job took the whole capacity). So such returns carry b = 1 and the chunks are *parked*: still held by the job (counted in its held
// bytes and the pool's), unmapped there, and granted back to it first — its next requests take
// parked chunks before free ones and need room only for the rest. Parked chunks go to the free
// list when the job returns anything without b = 1 (it gives memory back of its own accord: a
// reclaim answered, empty_cache), when it disconnects, and whenever rule 3 would send it a
// RECLAIM (the pool is over the budget, or a waiting job holds no more than it): the agent takes
// parked chunks back at once, as the job's pool would return free cached segments. So max-min
// fairness is kept: parked chunks are the job's holding for every rule, never a way past one.
bool AgentServer::take_back(Job& j, uint32_t id) {
  auto pos = id < chunks_.size() && chunks_[id].holder == j.id ? std::find(j.held.begin(), j.held.end(), id)
                                                                 : j.held.end();
  if (pos == j.held.end()) return false;  // not this job's chunk: ignored, never freed on its word
  *pos = j.held.back();
  j.held.pop_back();
  Chunk& c = chunks_[id];
  c.holder = -1;
  c.last_job = j.id;
  c.last_tenant = j.tenant;
  free_.push_back(id);
  ++j.returned;
  return true;
}

void AgentServer::unpark(Job& j) {
  for (uint32_t id : j.parked) take_back(j, id);
  j.parked.clear();
}

void AgentServer::on_message(Job& j, const Msg& m, long len) {
  if (static_cast<size_t>(len) != sizeof(Msg) || m.magic != kMagic) {
    ++j.bad_messages;
    return;
  }
  if (m.type == kRequest) {
    if (j.pending.active || m.a == 0) {
      ++j.bad_messages;
      Msg r = make_msg(kRefuse, kInvalid, 0, m.c);
      std::snprintf(r.text, sizeof(r.text), "agent refused: malformed request (%s)",
                    m.a == 0 ? "zero bytes" : "one is already pending");
      send_packet(j.fd, &r, sizeof(r), nullptr, 0);
      return;
    }
    const uint64_t chunks = (m.a + chunk_ - 1) / chunk_;
    j.pending = Pending{true, m.b != 0, chunks, m.c, Clock::now(), Clock::now()};
    j.pending.deadline = j.pending.start +
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(wait_s_));
    if (m.a > chunks_.size() * chunk_) {
      refuse(j, kCapacity, "agent refused: capacity: request of " + mib(m.a) + " is larger than the pool (" +
                               mib(chunks_.size() * chunk_) + ")");
      return;
    }
    if (over_own_budget(j)) return;
    decide();
    if (j.pending.active && j.pending.wait) ++j.waits;
  } else if (m.type == kReturn) {
    if (m.b == 2) {  // its answer to a RECLAIM: it returned what it could (Note [Held at the gate])
      j.answered = true;  // the loop decides next
      return;
    }
    const bool park = m.b == 1;  // Note [Parked chunks]
    const uint32_t n = std::min(m.n, kMaxIds);
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t id = m.ids[i];
      const bool held = id < chunks_.size() && chunks_[id].holder == j.id &&
                        std::find(j.parked.begin(), j.parked.end(), id) == j.parked.end();
      if (!held) {  // not this job's chunk (or one it returned already): ignored, never freed on its word
        ++j.bad_messages;
      } else if (park) {
        j.parked.push_back(id);
      } else {
        take_back(j, id);
      }
    }
    if (!park) unpark(j);  // it gives memory back of its own accord
  } else {
    ++j.bad_messages;
  }
}

void AgentServer::disconnect(Job& j, bool quarantine) {
  if (!j.connected) return;
  for (uint32_t id : j.held) {
    Chunk& c = chunks_[id];
    c.holder = -1;
    c.last_job = j.id;
    c.last_tenant = quarantine ? kQuarantined : j.tenant;
    free_.push_back(id);
    ++j.returned;
  }
  j.held.clear();
  j.parked.clear();
  if (j.pending.active) finish_wait(j);
  j.pending.active = false;
  j.connected = false;
  shutdown(j.fd, SHUT_RDWR);  // the job sees the end of its socket at once
  closing_.push_back(j.fd);   // closed by the server thread, which alone polls job sockets
  j.fd = -1;
}

void AgentServer::finish_wait(Job& j) {
  if (j.pending.wait) j.wait_s += std::chrono::duration<double>(Clock::now() - j.pending.start).count();
  j.pending.active = false;
}

std::string AgentServer::describe(uint64_t request_bytes) const {
  return "budget " + (budget_ == kNone ? std::string("none") : mib(budget_)) + ", held " + mib(held_bytes()) +
         ", capacity " + mib(chunks_.size() * chunk_) + ", request " + mib(request_bytes);
}

void AgentServer::refuse(Job& j, RefuseReason reason, const std::string& text) {
  Msg r = make_msg(kRefuse, reason, 0, j.pending.seq);
  std::snprintf(r.text, sizeof(r.text), "%s", text.c_str());
  finish_wait(j);
  if (reason != kWouldWait) ++j.refused;
  if (!send_packet(j.fd, &r, sizeof(r), nullptr, 0)) disconnect(j);
}

// Note [Agent grants]
// ~~~~~~~~~~~~~~~~~~~
// The pool is capacity / chunk_bytes chunks; held = chunks granted and not returned. Rules:
//   1. A request fits when held + request <= budget and enough chunks are free. Among waiting
//      requests that fit, the job holding the fewest chunks goes first (max-min fairness; ties go
//      to the earlier request), so a job that never frees cannot overtake one that holds less.
//   2. A request asked with wait = 0 that does not fit is refused at once (the job then returns its
//      own cached free segments and asks again with wait = 1: its pool does that in one
//      allocation, see DevicePool::allocate). Those returns are parked: the job's next requests
//      get them back first, and no one else gets them unless rule 3 would (Note [Parked chunks]).
//   3. While a request waits, every job that is not waiting and holds at least as much as the waiter
//      (or is yielding: Note [Yielding jobs]) is sent RECLAIM(shortfall); while held > budget (after a
//      deadlock grant or a lowered budget)
//      every job is sent RECLAIM(held - budget). A job answers by returning wholly free cached
//      segments (at once from its listener thread, and again on each free): RETURN messages.
//   4. Deadlock: when at least two jobs wait, or one waits beside jobs held at their gates that have
//      returned what they can (Note [Held at the gate]), and no other connected job holds a chunk,
//      nobody can free. Of the waiting requests that fit in the free chunks, the one of the
//      job holding least is granted past the budget (ties: the smaller request, then the earlier)
//      — never past capacity: only free chunks are ever granted. If none fits, the waiter holding
//      least is refused (its job's error path frees; the others, nearer their peaks, keep
//      waiting). A lone waiter that no other holder could help is refused at once: the budget is
//      its limit. Note [Deadlock grants, max-min]: the grant used to go to the smallest request,
//      and a job that retries after every refusal with small requests (a greedy one) beside a
//      waiting job won one grant after another, up to the capacity, and the other job was refused
//      (test_a_retrying_job_in_a_deadlock_...: 4 grants, 48 MiB past a 48 MiB budget). Holding
//      least first is rule 1's max-min order, and it gives the grant to the job that frees at the
//      end of its iteration rather than to one that never frees.
//   5. A waiting request is refused when it has waited wait_s (ZICO_BUDGET_WAIT_S by default).
// Bounds: held <= capacity at all times (worst case: the whole capacity, reached only through
// rule-4 grants; each grant adds one request, and the next one needs every holder waiting again).
// Past the budget only by rule 4, which needs two waiting jobs or a waiter beside settled gated
// ones: a job alone, or one that keeps asking while another job could free, never gets past the
// budget, and a job holding more than another waiter never gets a rule-4 grant. Once held >
// budget, rule 1 grants nothing and rule 3 makes every free return segments, so held comes back
// under the budget as the grantee frees (within the iteration that caused it).
void AgentServer::decide() {
  unpark_wanted();
  for (;;) {
    const uint64_t held = held_bytes();
    auto fits = [&](const Job& j) {
      const uint64_t k = new_chunks(j), want = k * chunk_;
      return free_.size() >= k && (budget_ == kNone || (want <= budget_ && held <= budget_ - want));
    };
    auto smaller = [](const Job* a, const Job* b) {
      return !b || a->held.size() < b->held.size() ||
             (a->held.size() == b->held.size() && a->pending.start < b->pending.start);
    };
    Job* best = nullptr;
    for (auto& kv : jobs_) {
      Job& j = kv.second;
      if (j.connected && j.pending.active && fits(j) && smaller(&j, best)) best = &j;
    }
    if (best) {
      grant(*best, false);
      continue;
    }
    std::vector<Job*> waiting;
    bool freer = false, stuck = false;
    const auto now = Clock::now();
    for (auto& kv : jobs_) {
      Job& j = kv.second;
      if (!j.connected) continue;
      if (j.pending.active && !j.pending.wait) {
        // It will return its own cached segments and ask again: still a job that can free.
        refuse(j, kWouldWait, "agent refused: no room now (" + describe(j.pending.chunks * chunk_) + ")");
        if (!j.held.empty()) freer = true;
      } else if (j.pending.active) {
        waiting.push_back(&j);
      } else if (stuck_at_gate(j, now)) {
        stuck = true;  // Note [Held at the gate]: it frees nothing until a waiter's iteration ends
      } else if (!j.held.empty()) {
        freer = true;
      }
    }
    if (waiting.empty() || freer) break;
    if (waiting.size() == 1 && !stuck) {
      refuse(*waiting[0], kBudget, "agent refused: budget: no other job holds memory that could come back (" +
                                       describe(waiting[0]->pending.chunks * chunk_) + ")");
      break;
    }
    // Deadlock: of the waiting requests that fit in the free chunks, the job holding least goes past
    // the budget (ties: the smaller request, then the earlier) — Note [Deadlock grants, max-min] — unless the
    // grant would take it past its own plan (Note [Deadlock grants within a plan]).
    // Note [Deadlock grants within a plan]
    // ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    // Rule 4 assumes the grantee frees at the end of its iteration, which holds for a job within what its
    // gate planned for it (the device's coordinator plans each job's curve, and the plan's peak is its held
    // peak: set_job_plan, from the gate's planning curve). A job past its plan is the cause of the overrun, not
    // its victim: a leaker that never frees won one grant after another beside a neighbour held at its gate,
    // 17 grants, 506 MiB held on a 323 MiB budget (tests/workers/test_containment_suite.py). So a waiter whose
    // grant would take it past its plan gets none; when no other waiter can be granted, the one past its plan
    // (holding most) is refused, and its neighbours, within theirs, keep the budget. A job without a plan (not
    // gated) keeps rule 4 as it was.
    auto past_plan = [&](const Job* j) {
      return j->plan != kNone && (j->held.size() + new_chunks(*j)) * chunk_ > j->plan;
    };
    Job* g = nullptr;
    Job* cause = nullptr;
    for (Job* j : waiting) {
      if (past_plan(j)) {
        if (!cause || j->held.size() > cause->held.size()) cause = j;
        continue;
      }
      if (free_.size() < new_chunks(*j)) continue;
      if (!g || j->held.size() < g->held.size() ||
          (j->held.size() == g->held.size() &&
           (new_chunks(*j) < new_chunks(*g) || (new_chunks(*j) == new_chunks(*g) && smaller(j, g)))))
        g = j;
    }
    if (g) {
      grant(*g, true);
      continue;
    }
    if (cause) {
      ++cause->over_plan;
      refuse(*cause, kBudget, "agent refused: budget: this job would hold " +
                                  mib((cause->held.size() + new_chunks(*cause)) * chunk_) + ", past the " +
                                  mib(cause->plan) + " its plan gives it, while its neighbours wait (" +
                                  describe(cause->pending.chunks * chunk_) + ")");
      continue;
    }
    // No room below capacity for any of them: refuse the one holding least (the latest request
    // among equals), so its job's error path frees and the others, nearer their peaks, go on.
    Job* r = nullptr;
    for (Job* j : waiting)
      if (!r || j->held.size() < r->held.size() ||
          (j->held.size() == r->held.size() && j->pending.start > r->pending.start))
        r = j;
    refuse(*r, kCapacity, "agent refused: capacity: every job holding memory waits and no room is left (" +
                              describe(r->pending.chunks * chunk_) + ")");
  }
  const auto now = Clock::now();
  for (auto& kv : jobs_) {
    Job& j = kv.second;
    if (j.connected && j.pending.active && j.pending.wait && j.pending.deadline <= now)
      refuse(j, kTimeout, "agent refused: budget: waited " + std::to_string(wait_s_) + " s for room (" +
                              describe(j.pending.chunks * chunk_) + ")");
  }
  send_reclaims();
}

bool AgentServer::grant(Job& j, bool over_budget) {
  const uint64_t k = j.pending.chunks;
  // The job's own parked chunks first (Note [Parked chunks]): held by it already.
  const size_t reuse = std::min<size_t>(k, j.parked.size());
  std::vector<uint32_t> again(j.parked.end() - reuse, j.parked.end());
  j.parked.resize(j.parked.size() - reuse);
  // Then chunks this tenant held last (or never used): no scrub, and their pages are resident.
  std::vector<uint32_t> pick;
  pick.reserve(k - reuse);
  for (size_t i = free_.size(); i-- > 0 && pick.size() < k - reuse;) {
    const Chunk& c = chunks_[free_[i]];
    if (c.last_tenant == j.tenant || c.last_tenant == -1) pick.push_back(free_[i]);
  }
  for (size_t i = free_.size(); i-- > 0 && pick.size() < k - reuse;) {
    const Chunk& c = chunks_[free_[i]];
    if (c.last_tenant != j.tenant && c.last_tenant != -1) pick.push_back(free_[i]);
  }
  for (uint32_t id : pick) {
    Chunk& c = chunks_[id];
    // Note [Scrub]: a chunk moving to another tenant loses its pages (so it reads zeros), and its
    // backing is replaced (memfd: punch hole, then a fresh memfd; CUDA: a new zeroed allocation):
    // a previous holder that kept a mapping or a copy of the fd must never see the next tenant's
    // data through it. Same tenant: the pages move as they are (no scrub).
    if (c.fd >= 0 && c.last_tenant != -1 && c.last_tenant != j.tenant) {
      const auto t0 = Clock::now();
      if (ops_.scrub(ops_.ctx, chunk_, &c.fd, &c.handle) != 0) c.fd = -1;
      scrub_s_ += std::chrono::duration<double>(Clock::now() - t0).count();
      ++scrubs_;
    }
    if (c.fd < 0 && ops_.create(ops_.ctx, chunk_, &c.fd, &c.handle) != 0) c.fd = -1;
    if (c.fd < 0) {
      j.parked.insert(j.parked.end(), again.begin(), again.end());
      refuse(j, kCapacity, std::string("agent refused: capacity: creating a ") + ops_.name + " chunk failed: " +
                               std::strerror(errno));
      return false;
    }
  }
  std::vector<char> chosen(chunks_.size(), 0);
  for (uint32_t id : pick) chosen[id] = 1;
  free_.erase(std::remove_if(free_.begin(), free_.end(), [&](uint32_t id) { return chosen[id] != 0; }), free_.end());
  for (uint32_t id : pick) {
    Chunk& c = chunks_[id];
    if (c.last_job != -1 && c.last_job != j.id) ++transfers_;
    c.holder = j.id;
    j.held.push_back(id);
  }
  pick.insert(pick.begin(), again.begin(), again.end());
  j.granted += k;
  j.peak_held = std::max<uint64_t>(j.peak_held, j.held_bytes(chunk_));
  peak_held_ = std::max(peak_held_, held_bytes());
  if (budget_ != kNone && held_bytes() > budget_) over_budget_peak_ = std::max(over_budget_peak_, held_bytes() - budget_);
  if (over_budget) {
    ++deadlock_grants_;
    ++j.deadlock_grants;
  }
  finish_wait(j);
  for (size_t off = 0; off < pick.size(); off += kMaxIds) {
    Msg g = make_msg(kGrant, k, 0, j.pending.seq);
    g.n = static_cast<uint32_t>(std::min<size_t>(kMaxIds, pick.size() - off));
    std::vector<int> fds;
    for (uint32_t i = 0; i < g.n; ++i) {
      g.ids[i] = pick[off + i];
      fds.push_back(chunks_[pick[off + i]].fd);
    }
    if (!send_packet(j.fd, &g, sizeof(g), fds.data(), fds.size())) {
      disconnect(j);
      return false;
    }
  }
  return true;
}

void AgentServer::unpark_wanted() {
  const uint64_t held = held_bytes();
  const bool over = budget_ != kNone && held > budget_;
  for (auto& kv : jobs_) {
    Job& x = kv.second;
    if (!x.connected || x.parked.empty() || (x.pending.active && !over)) continue;
    bool wanted = over;
    for (auto& kw : jobs_) {  // rule 3: a waiter holding no more than x, whose request does not fit
      const Job& w = kw.second;
      if (&w == &x || !w.connected || !w.pending.active || !w.pending.wait) continue;
      if (w.held.size() > x.held.size() && !x.yielding) continue;  // as rule 3 (Note [Yielding jobs])
      const uint64_t k = new_chunks(w);
      if (free_.size() < k || (budget_ != kNone && held + k * chunk_ > budget_)) wanted = true;
    }
    if (wanted) unpark(x);
  }
}

void AgentServer::send_reclaims() {
  const uint64_t held = held_bytes();
  const uint64_t over = (budget_ != kNone && held > budget_) ? held - budget_ : 0;
  for (auto& kv : jobs_) {
    Job& x = kv.second;
    if (!x.connected) continue;
    uint64_t want = over;
    if (!x.pending.active) {
      for (auto& kw : jobs_) {
        const Job& w = kw.second;
        if (&w == &x || !w.connected || !w.pending.active || !w.pending.wait) continue;
        if (w.held.size() > x.held.size() && !x.yielding) continue;  // Note [Yielding jobs]
        const uint64_t need = w.pending.chunks * chunk_;
        uint64_t shortfall = 0;
        if (budget_ != kNone && held + need > budget_) shortfall = held + need - budget_;
        if (free_.size() < w.pending.chunks) shortfall = std::max<uint64_t>(shortfall, (w.pending.chunks - free_.size()) * chunk_);
        want = std::max(want, shortfall);
      }
    }
    if (want == x.reclaim_sent) continue;
    Msg r = make_msg(kReclaim, want);
    if (send_packet(x.fd, &r, sizeof(r), nullptr, 0)) {
      if (want > x.reclaim_sent) {  // asked for more than it answered: its answer is awaited again
        x.answered = false;
        x.asked_at = Clock::now();
      }
      x.reclaim_sent = want;
      if (want > 0) ++reclaims_sent_;
    }
  }
}

std::string AgentServer::stats_json() {
  std::lock_guard<std::mutex> lk(mu_);
  JsonWriter w;
  w.open('{').key("pool").open('{');
  w.num("capacity_bytes", chunks_.size() * chunk_).limit("budget_bytes", budget_).num("chunk_bytes", chunk_);
  w.num("chunks_total", chunks_.size()).num("chunks_free", free_.size()).num("held_bytes", held_bytes());
  w.num("peak_held_bytes", peak_held_).num("transfers", transfers_).num("transfer_bytes", transfers_ * chunk_);
  w.num("scrubs", scrubs_).num("scrub_s", scrub_s_).num("deadlock_grants", deadlock_grants_).num("over_budget_bytes_peak", over_budget_peak_);
  w.num("reclaims_sent", reclaims_sent_).num("wait_s", wait_s_);
  w.close('}').key("jobs").open('[');
  for (auto& kv : jobs_) {
    const Job& j = kv.second;
    w.open('{').num("job_id", j.id).num("tenant_id", j.tenant).num("held_bytes", j.held_bytes(chunk_));
    w.num("peak_held_bytes", j.peak_held).num("parked_bytes", j.parked.size() * chunk_);
    w.num("chunks_granted", j.granted).num("chunks_returned", j.returned);
    w.num("waits", j.waits).num("wait_s", j.wait_s).num("refused", j.refused);
    w.num("deadlock_grants", j.deadlock_grants).num("bad_messages", j.bad_messages).num("over_plan", j.over_plan);
    w.num("job_budget_bytes", j.budget == kNone ? 0 : j.budget).num("over_job_budget", j.over_job_budget);
    w.boolean("waiting", j.pending.active && j.pending.wait).boolean("connected", j.connected);
    w.close('}');
  }
  w.close(']').close('}');
  return w.take();
}

}  // namespace zico
