// agent_server.hpp — the device agent's memory pool: a fixed set of chunks (memfds) shared by job
// processes, each connected by one SOCK_SEQPACKET socket. A server thread answers the jobs'
// requests under the budget, reclaim and deadlock rules (Note [Agent grants] in agent_server.cpp),
// scrubs chunks that move between tenants, and takes a closed socket's chunks back.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent_protocol.hpp"
#include "zico/zico.h"

namespace zico {

class AgentServer {
 public:
  static constexpr int64_t kQuarantined = -2;
  // capacity_bytes: the pool's size (floor to whole chunks); budget_bytes: UINT64_MAX = none;
  // chunk_bytes: a multiple of the page size; ops: how chunks are made (memfd_chunk_ops() for host
  // memory). nullptr (and *why) on bad arguments or OS errors.
  static AgentServer* create(const zico_chunk_ops& ops, uint64_t capacity_bytes, uint64_t budget_bytes,
                             uint64_t chunk_bytes, std::string* why);
  ~AgentServer();  // stops the server thread, closes every socket and chunk
  AgentServer(const AgentServer&) = delete;
  AgentServer& operator=(const AgentServer&) = delete;

  // The job's end of a new socketpair (close-on-exec set; the caller passes it on), or -1.
  int add_job(int64_t job, int64_t tenant, std::string* why);
  bool remove_job(int64_t job, std::string* why);
  void set_budget(uint64_t bytes);
  void set_wait(double seconds);
  // Note [Yielding jobs] and Note [Held at the gate] in agent_server.cpp: kNotYielding, kYielding (through its
  // iteration) or kGated (held back at its iteration start); false for an unknown job.
  enum YieldMode { kNotYielding = 0, kYielding = 1, kGated = 2 };
  bool set_yielding(int64_t job, int mode);
  // The most bytes this job may hold (UINT64_MAX: none, the default): Note [A job's own budget] in
  // agent_server.cpp. False for an unknown job.
  bool set_job_budget(int64_t job, uint64_t bytes);
  bool set_job_plan(int64_t job, uint64_t bytes);
  std::string stats_json();

 private:
  using Clock = std::chrono::steady_clock;
  struct Chunk {
    int fd = -1;             // created on first grant
    uint64_t handle = 0;     // the chunk ops' own state (CUDA: the allocation handle)
    int64_t holder = -1;     // job holding it, -1 = free
    int64_t last_job = -1;   // job that held it last (transfers)
    int64_t last_tenant = -1;  // tenant that held it last (scrub); kQuarantined: scrub for anyone
  };
  struct Pending {
    bool active = false;
    bool wait = false;
    uint64_t chunks = 0, seq = 0;
    Clock::time_point start, deadline;
  };
  struct Job {
    int64_t id = 0, tenant = 0;
    int fd = -1;
    bool connected = false;
    bool yielding = false;  // held back by the device's coordinator: its cache is anyone's (Note [Yielding jobs])
    bool gated = false;     // waiting at its coordinator gate: it frees nothing more (Note [Held at the gate])
    bool answered = false;       // answered its last RECLAIM: returned all it could (RETURN b = 2)
    Clock::time_point asked_at;  // when it was last sent a larger RECLAIM
    std::vector<uint32_t> held;  // chunk ids
    std::vector<uint32_t> parked;  // held ids the job unmapped on its way to a request (RETURN b = 1)
    Pending pending;
    uint64_t reclaim_sent = 0;
    uint64_t budget = UINT64_MAX;  // the job's own budget (bytes): Note [A job's own budget]
    uint64_t plan = UINT64_MAX;    // the most its gate plans it to hold (bytes): Note [Deadlock grants within a plan]
    uint64_t peak_held = 0, granted = 0, returned = 0, waits = 0, refused = 0, deadlock_grants = 0;
    uint64_t over_job_budget = 0;  // requests refused for its own budget
    uint64_t over_plan = 0;        // deadlock grants it was denied, past its plan (Note [Deadlock grants within a plan])
    uint64_t bad_messages = 0;
    double wait_s = 0;
    uint64_t held_bytes(uint64_t chunk) const { return held.size() * chunk; }
  };

  AgentServer(const zico_chunk_ops& ops, uint64_t chunks, uint64_t budget, uint64_t chunk_bytes, int wake[2]);
  void loop();
  void wake();
  void on_message(Job& j, const agent::Msg& m, long len);
  bool take_back(Job& j, uint32_t id);  // a chunk j holds -> the free list; false if j does not hold it
  void unpark(Job& j);                  // j's parked chunks -> the free list
  void unpark_wanted();                 // unpark where rule 3 would reclaim (Note [Parked chunks])
  // Chunks j's pending request needs beyond its parked ones (those need no room: j holds them).
  uint64_t new_chunks(const Job& j) const {
    return j.pending.chunks > j.parked.size() ? j.pending.chunks - j.parked.size() : 0;
  }
  // Takes the job's chunks back. quarantine: the process may still map them (remove_job on a live
  // job), so each is scrubbed before its next grant, whatever the tenant.
  void disconnect(Job& j, bool quarantine = false);
  void decide();
  bool grant(Job& j, bool over_budget);
  void refuse(Job& j, agent::RefuseReason reason, const std::string& text);
  bool over_own_budget(Job& j);  // refuses j's new request when it would pass j's own budget
  void finish_wait(Job& j);
  void send_reclaims();
  // Held at its gate, asked for memory, and it has returned all it can: it answered the RECLAIM, or did not
  // within kGateAnswer (Note [Held at the gate]).
  bool stuck_at_gate(const Job& j, Clock::time_point now) const {
    return j.gated && !j.held.empty() && j.reclaim_sent > 0 && (j.answered || now - j.asked_at >= kGateAnswer);
  }
  static constexpr std::chrono::milliseconds kGateAnswer{1000};
  uint64_t held_bytes() const { return (chunks_.size() - free_.size()) * chunk_; }
  std::string describe(uint64_t request_bytes) const;

  const zico_chunk_ops ops_;
  const uint64_t chunk_;
  std::vector<Chunk> chunks_;
  std::vector<uint32_t> free_;  // free chunk ids, most recently returned last
  std::map<int64_t, Job> jobs_;
  std::mutex mu_;
  uint64_t budget_;
  double wait_s_;
  int wake_[2];
  std::vector<int> closing_;  // job sockets to close on the server thread
  bool stop_ = false;
  uint64_t peak_held_ = 0, transfers_ = 0, scrubs_ = 0, deadlock_grants_ = 0, over_budget_peak_ = 0;
  uint64_t reclaims_sent_ = 0;
  double scrub_s_ = 0;  // seconds spent scrubbing (punch hole + a fresh memfd), for the docs' cost figures
  std::thread thread_;
};

}  // namespace zico
