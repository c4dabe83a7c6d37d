// c_api.cpp — the extern "C" surface declared in include/zico/zico.h: argument checks, error
// messages (thread-local, read with zico_last_error), and no exception ever crossing into C.
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <string>
#include <vector>

#include "host_upstream.hpp"
#include "options.hpp"
#include "registry.hpp"
#include "zico/zico.h"

using namespace zico;

namespace {

thread_local std::string t_error;

int fail(const std::string& msg) {
  t_error = msg;
  return -1;
}

// need_pool's error path, out of line so the hot path is one inline slot load.
__attribute__((noinline)) DevicePool* need_pool_slow(int device) {
  DevicePool* p = pool_for(device);
  if (!p) {
    if (device < -1 || device >= ZICO_MAX_CUDA_DEVICES)
      t_error = "device must be -1 (host) or 0..63, got " + std::to_string(device);
    else if (!options().error.empty())
      t_error = options().error;  // Note [Malformed knobs fail the first install]
    else
      t_error = "no Zico pool is installed on device " + std::to_string(device) +
                (device < 0 ? " (call zico_install_host first)" : " (install the CUDA upstream first)");
  }
  return p;
}

inline DevicePool* need_pool(int device) {
  if (DevicePool* p = pool_for(device)) return p;
  return need_pool_slow(device);
}

char* dup(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (!out) {
    t_error = "out of host memory for a result string";
    return nullptr;
  }
  std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

template <class F>
int guarded(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return fail(std::string("internal error: ") + e.what());
  } catch (...) {
    return fail("internal error");
  }
}

template <class F>
char* guarded_str(int device, F&& f) {
  try {
    DevicePool* p = need_pool(device);
    return p ? dup(f(p)) : nullptr;
  } catch (const std::exception& e) {
    t_error = std::string("internal error: ") + e.what();
    return nullptr;
  }
}

}  // namespace

namespace zico {
void set_last_error(const std::string& msg) { t_error = msg; }
}  // namespace zico

extern "C" {

void* zico_malloc(size_t size, int device, void* stream) {
  try {
    DevicePool* p = need_pool(device);
    if (!p) return nullptr;
    int64_t job = -1;
    if (device >= 0) job = stream_job(stream);
    if (job < 0) job = thread_job();
    void* out = p->allocate(size, stream, job);
    if (!out) {
      std::string detail = p->last_oom_detail();
      t_error = "out of memory on device " + std::to_string(device) +
                (detail.empty() ? std::string(" (see zico_last_oom_json)") : ": " + detail);
    }
    return out;
  } catch (const std::exception& e) {
    t_error = std::string("internal error: ") + e.what();
    return nullptr;
  }
}

void zico_free(void* ptr, size_t /*size*/, int device, void* stream) {
  if (!ptr) return;
  try {
    DevicePool* p = need_pool(device);
    if (p && !p->deallocate(ptr, stream)) t_error = "zico_free: pointer was not allocated by this pool";
  } catch (...) {
    t_error = "internal error in zico_free";
  }
}

int zico_try_free(void* ptr, int device, void* stream) {
  if (!ptr) return 0;
  try {
    DevicePool* p = pool_for(device);
    return (p && p->deallocate(ptr, stream, /*count_invalid=*/false)) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

int zico_install_host(int device, uint64_t capacity_bytes) {
  return guarded([&] {
    if (device != ZICO_HOST_DEVICE && (device < 0 || device >= ZICO_MAX_CUDA_DEVICES))
      return fail("device must be -1 (host) or 0..63, got " + std::to_string(device));
    if (capacity_bytes == 0) return fail("capacity_bytes must be positive (ZICO_UNLIMITED for none)");
    if (capacity_bytes == ZICO_UNLIMITED) capacity_bytes = options().host_capacity_bytes;
    std::string why;
    if (!install_pool(device, std::make_unique<HostUpstream>(capacity_bytes), &why)) return fail(why);
    return 0;
  });
}

int zico_is_installed(int device) { return pool_for(device) != nullptr; }

const char* zico_config_error(void) { return options().error.c_str(); }

const char* zico_upstream_name(int device) {
  DevicePool* p = pool_for(device);
  return p ? p->upstream_name() : nullptr;
}

int zico_bind_thread(int64_t job, int64_t* previous) {
  if (job < 0) return fail("job id must be >= 0 (0 = unattributed), got " + std::to_string(job));
  if (previous) *previous = thread_job();
  set_thread_job(job);
  return 0;
}

int64_t zico_thread_job(void) { return thread_job(); }

int zico_bind_stream(void* stream, int64_t job, int64_t* previous) {
  return guarded([&] {
    int64_t prev = set_stream_job(stream, job);
    if (previous) *previous = prev;
    return 0;
  });
}

int zico_set_budget(int device, uint64_t bytes) {
  return guarded([&] {
    DevicePool* p = need_pool(device);
    if (!p) return -1;
    if (bytes == 0) return fail("budget must be positive (ZICO_UNLIMITED for none)");
    p->set_budget(bytes);
    return 0;
  });
}

int zico_get_budget(int device, uint64_t* bytes) {
  DevicePool* p = need_pool(device);
  if (!p) return -1;
  if (!bytes) return fail("bytes must not be NULL");
  *bytes = p->budget();
  return 0;
}

int zico_set_budget_wait(int device, double seconds) {
  DevicePool* p = need_pool(device);
  if (!p) return -1;
  if (!(seconds >= 0) || seconds > 1e6) return fail("budget wait must be in [0, 1e6] seconds");
  p->set_budget_wait(seconds);
  return 0;
}

int zico_get_budget_wait(int device, double* seconds) {
  DevicePool* p = need_pool(device);
  if (!p) return -1;
  if (!seconds) return fail("seconds must not be NULL");
  *seconds = p->budget_wait();
  return 0;
}

int zico_mark(int64_t job, int kind, int64_t iteration) {
  return guarded([&] {
    if (job < 0) return fail("job id must be >= 0, got " + std::to_string(job));
    if (!mark_name(kind)) return fail("unknown mark kind " + std::to_string(kind));
    struct Ctx { int64_t job; int kind; int64_t it; int n; } ctx{job, kind, iteration, 0};
    for_each_pool([](DevicePool* p, void* c) {
      auto* x = static_cast<Ctx*>(c);
      x->n += p->mark(x->job, x->kind, x->it);
    }, &ctx);
    if (ctx.n == 0) return fail("no Zico pool is installed; install one before marking");
    return 0;
  });
}

char* zico_memory_stats_json(int device, int64_t job, int per_job) {
  return guarded_str(device, [&](DevicePool* p) { return p->stats_json(per_job != 0, job); });
}

char* zico_memory_snapshot_json(int device) {
  return guarded_str(device, [](DevicePool* p) { return p->snapshot_json(); });
}

char* zico_last_oom_json(int device) {
  return guarded_str(device, [](DevicePool* p) { return p->last_oom_json(); });
}

char* zico_jobs_json(int device) {
  return guarded_str(device, [](DevicePool* p) { return p->jobs_json(); });
}

int zico_reset_peak_memory_stats(int device) {
  return guarded([&] {
    DevicePool* p = need_pool(device);
    if (!p) return -1;
    p->reset_peak_memory_stats();
    return 0;
  });
}

int zico_empty_cache(int device) {
  return guarded([&] {
    DevicePool* p = need_pool(device);
    if (!p) return -1;
    p->empty_cache();
    return 0;
  });
}

int zico_check_invariants(int device) {
  return guarded([&] {
    DevicePool* p = need_pool(device);
    if (!p) return -1;
    std::string why;
    return p->check_invariants(&why) ? 0 : fail(why);
  });
}

size_t zico_drain_trace(zico_trace_record* out, size_t max_records) {
  if (!out) return 0;
  struct Ctx { zico_trace_record* out; size_t left; size_t n; } ctx{out, max_records, 0};
  for_each_pool([](DevicePool* p, void* c) {
    auto* x = static_cast<Ctx*>(c);
    size_t got = p->drain_trace(x->out + x->n, x->left);
    x->n += got;
    x->left -= got;
  }, &ctx);
  return ctx.n;
}

int zico_set_trace_enabled(int enabled) {
  set_trace_enabled(enabled != 0);
  return 0;
}

uint64_t zico_trace_dropped(void) {
  uint64_t n = 0;
  for_each_pool([](DevicePool* p, void* c) { *static_cast<uint64_t*>(c) += p->trace_dropped(); }, &n);
  return n;
}

const char* zico_last_error(void) { return t_error.c_str(); }
void zico_string_free(char* s) { std::free(s); }
const char* zico_version(void) { return "0.1.0"; }

}  // extern "C"
