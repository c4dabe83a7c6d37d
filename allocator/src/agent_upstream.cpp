// agent_upstream.cpp — AgentUpstream: requests and returns of chunks, segment stitching, and the
// listener and reclaim threads (header: agent_upstream.hpp).
#include "agent_upstream.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "agent_protocol.hpp"
#include "chunk_os.hpp"
#include "device_pool.hpp"

namespace zico {

using namespace agent;

namespace {
void* memfd_map(void*, const int* fds, size_t n, size_t chunk_bytes) {
  return chunks_map(std::vector<int>(fds, fds + n), chunk_bytes);
}
void memfd_unmap(void*, void* base, size_t bytes) { chunks_unmap(base, bytes); }
const zico_chunk_mapper kMemfdMapper = {nullptr, memfd_map, memfd_unmap, nullptr, nullptr, nullptr,
                                        nullptr, nullptr, "agent", 0};
}  // namespace

AgentUpstream* AgentUpstream::connect(int fd, const zico_chunk_mapper* mapper, std::string* why) {
  int type = 0;
  socklen_t len = sizeof(type);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_SEQPACKET) {
    *why = "fd " + std::to_string(fd) + " is not an agent socket (an AF_UNIX SOCK_SEQPACKET from zico_agent_add_job)";
    return nullptr;
  }
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, 10000) != 1) {
    *why = "the agent sent no hello on fd " + std::to_string(fd) + " within 10 s";
    return nullptr;
  }
  Msg m{};
  long n = recv_packet(fd, &m, sizeof(m), nullptr);
  if (n != static_cast<long>(sizeof(m)) || m.magic != kMagic || m.type != kHello || m.a == 0) {
    *why = "fd " + std::to_string(fd) + " did not start with an agent hello (wrong fd, or another Zico version)";
    return nullptr;
  }
  return new AgentUpstream(fd, m.a, m.b, mapper ? *mapper : kMemfdMapper);
}

AgentUpstream::AgentUpstream(int fd, uint64_t chunk, uint64_t capacity, const zico_chunk_mapper& mapper)
    : fd_(fd),
      chunk_(chunk),
      capacity_(mapper.capacity_bytes ? std::min<uint64_t>(capacity, mapper.capacity_bytes) : capacity),
      mapper_(mapper),
      host_(mapper.map == kMemfdMapper.map),
      owner_pid_(static_cast<long>(getpid())) {}

bool AgentUpstream::forked() const { return static_cast<long>(getpid()) != owner_pid_; }

AgentUpstream::~AgentUpstream() {
  // Pools live for the whole process, so this runs only if installing the pool failed.
  shutdown(fd_, SHUT_RDWR);
  {
    std::lock_guard<std::mutex> lk(mu_);
    dead_ = true;
  }
  reclaim_cv_.notify_all();
  if (listener_.joinable()) listener_.join();
  if (reclaimer_.joinable()) reclaimer_.join();
  close(fd_);
}

void AgentUpstream::start(DevicePool* pool) {
  pool_ = pool;
  listener_ = std::thread([this] { listen(); });
  reclaimer_ = std::thread([this] { reclaim_loop(); });
}

std::string AgentUpstream::last_refusal() {
  std::lock_guard<std::mutex> lk(mu_);
  return refusal_;
}

// Note [Fork]
// ~~~~~~~~~~~
// A process forked from the job (a DataLoader worker, say) inherits the socket and a copy of the
// pool, but not the listener: if it spoke on the socket, the agent would take its words for the
// job's — returning chunks the job still maps — and the job's listener would read its replies. So a
// forked child never sends: it takes new segments from the C library (outside the agent's
// accounting, as any allocation of that process) and only unmaps inherited ones.
void* AgentUpstream::request(size_t bytes, bool wait) {
  if (forked()) {
    if (!host_) return nullptr;  // device memory: a forked child gets none
    void* p = nullptr;
    if (posix_memalign(&p, 4096, bytes) != 0) return nullptr;
    std::lock_guard<std::mutex> lk(mu_);
    local_.emplace(p, bytes);
    return p;
  }
  std::lock_guard<std::mutex> one(req_mu_);
  std::unique_lock<std::mutex> lk(mu_);
  if (dead_) {
    refusal_ = "agent refused: the agent's socket is closed (the device agent stopped or removed this job)";
    return nullptr;
  }
  before_request_.store(false);
  const uint64_t seq = ++seq_;
  replied_ = false;
  reply_ids_.clear();
  reply_fds_.clear();
  reply_total_ = 0;
  Msg m = make_msg(kRequest, bytes, wait ? 1 : 0, seq);
  lk.unlock();
  bool sent;
  {
    std::lock_guard<std::mutex> s(send_mu_);
    sent = send_packet(fd_, &m, sizeof(m), nullptr, 0);
  }
  lk.lock();
  if (!sent) {
    refusal_ = std::string("agent refused: could not reach the agent: ") + std::strerror(errno);
    return nullptr;
  }
  cv_.wait(lk, [&] { return replied_ || dead_; });
  if (!replied_) {
    refusal_ = "agent refused: the agent's socket closed while waiting for a grant";
    return nullptr;
  }
  std::vector<uint32_t> ids = std::move(reply_ids_);
  std::vector<int> fds = std::move(reply_fds_);
  if (ids.empty()) {  // refused: refusal_ says why
    if (!wait) before_request_.store(true);  // the pool returns its cache next, then asks again
    return nullptr;
  }
  lk.unlock();
  void* base = mapper_.map(mapper_.ctx, fds.data(), fds.size(), chunk_);
  for (int fd : fds) close(fd);
  lk.lock();
  if (!base) {
    refusal_ = std::string("agent granted the chunks but mapping them failed: ") + std::strerror(errno);
    lk.unlock();
    send_return(ids);
    return nullptr;
  }
  segments_.emplace(base, std::move(ids));
  return base;
}

void AgentUpstream::release(void* ptr, size_t /*bytes*/) {
  std::vector<uint32_t> ids;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto local = local_.find(ptr);
    if (local != local_.end()) {
      std::free(ptr);
      local_.erase(local);
      return;
    }
    auto it = segments_.find(ptr);
    if (it == segments_.end()) return;
    ids = std::move(it->second);
    segments_.erase(it);
  }
  give_back(ptr, ids);
}

bool AgentUpstream::release_part(void* base, size_t offset, size_t bytes) {
  if (!host_ || bytes == 0 || offset % chunk_ || bytes % chunk_ || forked()) return false;
  char* const b = static_cast<char*>(base);
  std::vector<uint32_t> ids;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = segments_.find(base);
    const size_t first = offset / chunk_, n = bytes / chunk_;
    if (it == segments_.end() || first + n > it->second.size()) return false;
    std::vector<uint32_t>& all = it->second;  // chunk i of a segment is mapped at base + i * chunk_
    ids.assign(all.begin() + first, all.begin() + first + n);
    std::vector<uint32_t> after(all.begin() + first + n, all.end());
    all.resize(first);
    if (all.empty()) segments_.erase(it);
    if (!after.empty()) segments_.emplace(b + offset + bytes, std::move(after));
  }
  give_back(b + offset, ids);
  return true;
}

void AgentUpstream::give_back(void* ptr, const std::vector<uint32_t>& ids) {
  const size_t mapped = ids.size() * chunk_;
  mapper_.unmap(mapper_.ctx, ptr, mapped);  // unmapped before the agent hears of it: nothing here touches it again
  if (forked()) return;         // the job still holds these chunks (Note [Fork])
  size_t w = wanted_.load();
  while (w > 0 && !wanted_.compare_exchange_weak(w, w > mapped ? w - mapped : 0)) {}
  send_return(ids, before_request_.load());
}

void AgentUpstream::send_return(const std::vector<uint32_t>& ids, bool before_request) {
  Msg r = make_msg(kReturn, 0, before_request ? 1 : 0);
  for (size_t off = 0; off < ids.size(); off += kMaxIds) {
    r.n = static_cast<uint32_t>(std::min<size_t>(kMaxIds, ids.size() - off));
    std::copy(ids.begin() + off, ids.begin() + off + r.n, r.ids);
    std::lock_guard<std::mutex> s(send_mu_);
    send_packet(fd_, &r, sizeof(r), nullptr, 0);
  }
}

void AgentUpstream::listen() {
  Msg m;
  for (;;) {
    std::vector<int> fds;
    long n = recv_packet(fd_, &m, sizeof(m), &fds);
    if (n <= 0) break;
    if (n != static_cast<long>(sizeof(m)) || m.magic != kMagic) {
      for (int fd : fds) close(fd);
      continue;
    }
    if (m.type == kReclaim) {
      for (int fd : fds) close(fd);
      wanted_.store(m.a);
      std::lock_guard<std::mutex> lk(mu_);
      reclaim_due_ = m.a > 0;
      reclaim_cv_.notify_all();
      continue;
    }
    std::lock_guard<std::mutex> lk(mu_);
    if ((m.type != kGrant && m.type != kRefuse) || m.c != seq_ || replied_) {
      for (int fd : fds) close(fd);
      continue;
    }
    if (m.type == kRefuse) {
      for (int fd : fds) close(fd);
      m.text[sizeof(m.text) - 1] = '\0';
      refusal_ = m.text;
      for (char& ch : refusal_)  // it goes into JSON documents verbatim
        if (ch == '"' || ch == '\\' || static_cast<unsigned char>(ch) < 0x20) ch = '?';
      replied_ = true;
      cv_.notify_all();
      continue;
    }
    const uint32_t k = std::min(m.n, kMaxIds);
    if (fds.size() != k) {  // every chunk id comes with its fd; anything else is not a grant
      for (int fd : fds) close(fd);
      continue;
    }
    reply_ids_.insert(reply_ids_.end(), m.ids, m.ids + k);
    reply_fds_.insert(reply_fds_.end(), fds.begin(), fds.end());
    reply_total_ = m.a;
    if (reply_ids_.size() >= reply_total_) {
      replied_ = true;
      cv_.notify_all();
    }
  }
  std::lock_guard<std::mutex> lk(mu_);
  dead_ = true;
  cv_.notify_all();
  reclaim_cv_.notify_all();
}

// Note [Reclaim in the job]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// The listener never takes the pool's mutex: a thread of this job may hold it while it waits in
// obtain_blocking() for a grant that only the listener can deliver. Reclaims go to this thread,
// which calls DevicePool::trim() (taking the mutex; it may wait for such an allocation, which is
// harmless because the agent never sends RECLAIM to a waiting job's benefit of its own). The
// pool also returns segments on every free while wanted_back() > 0 (DevicePool::deallocate).
void AgentUpstream::reclaim_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    reclaim_cv_.wait(lk, [&] { return reclaim_due_ || dead_; });
    if (dead_ || forked()) return;
    reclaim_due_ = false;
    lk.unlock();
    size_t want = wanted_.load();
    if (want > 0 && pool_) {
      pool_->trim(want);
      // Answered: what could come back has (its RETURNs went first, on the same socket). A job held at its
      // gate that answers so is one the agent knows cannot free more (Note [Held at the gate] there).
      Msg done = make_msg(kReturn, 0, 2);
      std::lock_guard<std::mutex> s(send_mu_);
      send_packet(fd_, &done, sizeof(done), nullptr, 0);
    }
    lk.lock();
  }
}

}  // namespace zico
