// agent_upstream.hpp — the job side of the agent pool: an Upstream whose segments are chunks
// granted by the device agent over the job's socket (agent_protocol.hpp), each segment one
// virtual range stitched from the chunks' memfds. A listener thread reads the agent's messages;
// a reclaim thread returns cached free segments when the agent asks (Note in agent_upstream.cpp).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "upstream.hpp"
#include "zico/zico.h"

namespace zico {

class DevicePool;

class AgentUpstream final : public Upstream {
 public:
  // Reads the agent's hello on `fd` (waits up to 10 s). mapper: how chunks map (nullptr: memfd
  // mmap into host memory). nullptr and *why when the fd is not an agent socket.
  static AgentUpstream* connect(int fd, const zico_chunk_mapper* mapper, std::string* why);
  ~AgentUpstream() override;

  void* obtain(size_t bytes) override { return request(bytes, false); }
  void* obtain_blocking(size_t bytes) override { return request(bytes, true); }
  void release(void* ptr, size_t bytes) override;
  // Host chunks only (memfd mappings unmap in part); CUDA mappings go back whole.
  size_t release_granularity() override { return host_ ? chunk_ : 0; }
  bool release_part(void* base, size_t offset, size_t bytes) override;
  uint64_t capacity() const override { return capacity_; }
  const char* name() const override { return mapper_.name ? mapper_.name : "agent"; }
  void* record_event(void* stream) override {
    return mapper_.record_event ? mapper_.record_event(mapper_.ctx, stream) : nullptr;
  }
  bool event_done(void* event) override {
    return !event || !mapper_.event_done || mapper_.event_done(mapper_.ctx, event) != 0;
  }
  void stream_wait(void* stream, void* event) override {
    if (event && mapper_.stream_wait) mapper_.stream_wait(mapper_.ctx, stream, event);
  }
  void event_synchronize(void* event) override {
    if (event && mapper_.event_synchronize) mapper_.event_synchronize(mapper_.ctx, event);
  }
  void destroy_event(void* event) override {
    if (event && mapper_.destroy_event) mapper_.destroy_event(mapper_.ctx, event);
  }
  size_t wanted_back() override {
    const size_t w = wanted_.load(std::memory_order_relaxed);
    return (w && forked()) ? 0 : w;  // getpid only when the agent wants bytes back
  }
  std::string last_refusal() override;

  // Starts the listener and reclaim threads; `pool` is the pool this upstream serves.
  void start(DevicePool* pool);
  uint64_t chunk_bytes() const { return chunk_; }

 private:
  AgentUpstream(int fd, uint64_t chunk, uint64_t capacity, const zico_chunk_mapper& mapper);
  bool forked() const;  // true in a child forked from the job: the socket is not ours to use
  void* request(size_t bytes, bool wait);
  void give_back(void* ptr, const std::vector<uint32_t>& ids);  // unmaps [ptr, ids' chunks) and returns them
  // Hands chunks back, kMaxIds a message; before_request: on the way to a waiting request (RETURN b = 1).
  void send_return(const std::vector<uint32_t>& ids, bool before_request = false);
  void listen();
  void reclaim_loop();

  const int fd_;
  const uint64_t chunk_, capacity_;
  const zico_chunk_mapper mapper_;
  const bool host_;  // memfd chunks in host memory (a forked child may fall back to the C library)
  const long owner_pid_;  // the job process; a forked child (a DataLoader worker) must not speak
  std::unordered_map<void*, size_t> local_;  // segments a forked child took from the C library
  DevicePool* pool_ = nullptr;
  std::mutex send_mu_;  // one sender at a time on the socket
  std::mutex req_mu_;   // one request outstanding at a time
  std::mutex mu_;       // reply state below
  std::condition_variable cv_;
  uint64_t seq_ = 0;
  bool replied_ = false, dead_ = false;
  std::vector<uint32_t> reply_ids_;
  std::vector<int> reply_fds_;
  uint64_t reply_total_ = 0;
  std::string refusal_;
  std::unordered_map<void*, std::vector<uint32_t>> segments_;  // base -> chunk ids (under mu_)
  std::atomic<size_t> wanted_{0};
  // Set by a request refused without waiting: the pool now returns its cached segments and asks
  // again, waiting (DevicePool::allocate, under the pool's mutex), so those returns say so.
  std::atomic<bool> before_request_{false};
  std::condition_variable reclaim_cv_;
  bool reclaim_due_ = false;
  std::thread listener_, reclaimer_;
};

}  // namespace zico
