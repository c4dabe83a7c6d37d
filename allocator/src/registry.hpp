// registry.hpp — process-wide state: the DevicePool of each device (host = -1, CUDA 0..63), the
// factory the CUDA library registers for CUDA upstreams, the job bindings of threads and streams,
// and the trace switch. Pools live for the whole process (never destroyed), so frees that run
// during interpreter shutdown stay safe.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>

#include "device_pool.hpp"
#include "upstream.hpp"
#include "zico/zico.h"

namespace zico {

using UpstreamFactory = Upstream* (*)(int device);

// The installed pools by slot (host = slot 0, CUDA device d = slot d + 1); read inline by pool_for.
extern std::atomic<DevicePool*> g_pools[ZICO_MAX_CUDA_DEVICES + 1];
// pool_for when the slot is empty: validates, and creates a CUDA pool from the factory.
DevicePool* pool_for_slow(int device);

// The pool of `device`, or nullptr when none is installed. A CUDA pool is created on first use
// when a CUDA factory is registered. An installed pool costs one atomic load (the hot path).
inline DevicePool* pool_for(int device) {
  if (device >= -1 && device < ZICO_MAX_CUDA_DEVICES)
    if (DevicePool* p = g_pools[device + 1].load(std::memory_order_acquire)) return p;
  return pool_for_slow(device);
}
// Installs a pool on `device` with `upstream`; false (and *why) if one is already installed.
bool install_pool(int device, std::unique_ptr<Upstream> upstream, std::string* why);
void for_each_pool(void (*fn)(DevicePool*, void*), void* ctx);
void set_cuda_factory(UpstreamFactory f);

int64_t thread_job();
void set_thread_job(int64_t job);
// Job bound to `stream`, or -1.
int64_t stream_job(void* stream);
int64_t set_stream_job(void* stream, int64_t job);  // job < 0 unbinds; returns the previous

// The trace switch (ZICO_TRACE, zico_set_trace_enabled); read inline on every allocation and free.
extern std::atomic<bool> g_trace_enabled;
inline bool trace_enabled() { return g_trace_enabled.load(std::memory_order_relaxed); }
void set_trace_enabled(bool on);

}  // namespace zico

extern "C" void zico_register_cuda_factory(zico::UpstreamFactory f);
