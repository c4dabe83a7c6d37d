// registry.cpp — the device→pool table, job bindings and global switches declared in registry.hpp.
#include "registry.hpp"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "options.hpp"
#include "zico/zico.h"

namespace zico {
namespace {

constexpr int kSlots = ZICO_MAX_CUDA_DEVICES + 1;  // slot 0 is the host
std::mutex g_install_mu;
std::atomic<UpstreamFactory> g_cuda_factory{nullptr};
thread_local int64_t t_job = 0;
std::mutex g_stream_mu;
std::unordered_map<void*, int64_t>& stream_jobs() {
  static auto* m = new std::unordered_map<void*, int64_t>();  // leaked on purpose: outlives exit
  return *m;
}

int slot(int device) { return device + 1; }
bool valid(int device) { return device >= -1 && device < ZICO_MAX_CUDA_DEVICES; }

}  // namespace

std::atomic<DevicePool*> g_pools[kSlots];

DevicePool* pool_for_slow(int device) {
  if (!valid(device)) return nullptr;
  DevicePool* p = g_pools[slot(device)].load(std::memory_order_acquire);
  if (p || device < 0) return p;
  UpstreamFactory f = g_cuda_factory.load();
  if (!f) return nullptr;
  if (!options().error.empty()) return nullptr;  // Note [Malformed knobs fail the first install]
  std::lock_guard<std::mutex> lk(g_install_mu);
  p = g_pools[slot(device)].load();
  if (p) return p;
  Upstream* up = f(device);
  if (!up) return nullptr;
  p = new DevicePool(device, std::unique_ptr<Upstream>(up));
  g_pools[slot(device)].store(p, std::memory_order_release);
  return p;
}

bool install_pool(int device, std::unique_ptr<Upstream> upstream, std::string* why) {
  if (!valid(device)) {
    *why = "device must be -1 (host) or 0..63, got " + std::to_string(device);
    return false;
  }
  if (!options().error.empty()) {  // Note [Malformed knobs fail the first install]
    *why = options().error;
    return false;
  }
  std::lock_guard<std::mutex> lk(g_install_mu);
  if (g_pools[slot(device)].load()) {
    *why = "a pool is already installed on device " + std::to_string(device);
    return false;
  }
  g_pools[slot(device)].store(new DevicePool(device, std::move(upstream)), std::memory_order_release);
  return true;
}

void for_each_pool(void (*fn)(DevicePool*, void*), void* ctx) {
  for (int i = 0; i < kSlots; ++i)
    if (DevicePool* p = g_pools[i].load(std::memory_order_acquire)) fn(p, ctx);
}

void set_cuda_factory(UpstreamFactory f) { g_cuda_factory.store(f); }

int64_t thread_job() { return t_job; }
void set_thread_job(int64_t job) { t_job = job; }

int64_t stream_job(void* stream) {
  std::lock_guard<std::mutex> lk(g_stream_mu);
  auto it = stream_jobs().find(stream);
  return it == stream_jobs().end() ? -1 : it->second;
}

int64_t set_stream_job(void* stream, int64_t job) {
  std::lock_guard<std::mutex> lk(g_stream_mu);
  auto& m = stream_jobs();
  auto it = m.find(stream);
  int64_t prev = it == m.end() ? -1 : it->second;
  if (job < 0) {
    if (it != m.end()) m.erase(it);
  } else {
    m[stream] = job;
  }
  return prev;
}

std::atomic<bool> g_trace_enabled{options().trace_enabled};
void set_trace_enabled(bool on) { g_trace_enabled.store(on); }

}  // namespace zico

extern "C" void zico_register_cuda_factory(zico::UpstreamFactory f) { zico::set_cuda_factory(f); }
