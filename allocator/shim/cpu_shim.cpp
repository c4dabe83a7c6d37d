// cpu_shim.cpp — the CPU shim (part of libzico_torch_shim.so): a c10::Allocator installed with
// c10::SetCPUAllocator that routes CPU tensor allocations through the Zico host pool (device -1),
// so real CPU training exercises the real allocator. Built against the installed torch's c10
// headers by zico_allocator.build, cached per torch version.
//
// Scope (zico_cpu_shim_set_scope): 0 = pass everything to torch's previous CPU allocator,
// 1 = route only threads bound to a job (zico_bind_thread), 2 = route every allocation (unbound
// threads are charged to job 0, "unattributed"). Every pointer carries its own deleter, so
// switching scope at run time is safe.
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <string>

#include "zico/zico.h"

namespace {

c10::DeleterFnPtr g_previous_raw_deleter = nullptr;

void zico_delete(void* ptr) { zico_free(ptr, 0, ZICO_HOST_DEVICE, nullptr); }

// raw_deallocate() callers (e.g. some CPU kernels' scratch buffers) hand back pointers from
// raw_allocate(), which may have come from the previous allocator when the thread was unbound.
void raw_delete(void* ptr) {
  if (!zico_try_free(ptr, ZICO_HOST_DEVICE, nullptr) && g_previous_raw_deleter) g_previous_raw_deleter(ptr);
}

class ZicoCpuAllocator final : public c10::Allocator {
 public:
  explicit ZicoCpuAllocator(c10::Allocator* previous) : previous_(previous) {}

  c10::DataPtr allocate(size_t n) override {
    const int scope = scope_.load(std::memory_order_relaxed);
    if (scope == 0 || (scope == 1 && zico_thread_job() == 0)) return previous_->allocate(n);
    if (n == 0) return {nullptr, nullptr, &zico_delete, c10::Device(c10::DeviceType::CPU)};
    void* p = zico_malloc(n, ZICO_HOST_DEVICE, nullptr);
    if (!p) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, "Zico CPU pool: failed to allocate ", n,
                       " bytes: ", zico_last_error());
    }
    return {p, p, &zico_delete, c10::Device(c10::DeviceType::CPU)};
  }

  // Non-null so raw_allocate/raw_deallocate work; requires the previous allocator to have one too.
  c10::DeleterFnPtr raw_deleter() const override { return g_previous_raw_deleter ? &raw_delete : nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  std::atomic<int> scope_{1};

 private:
  c10::Allocator* previous_;
};

ZicoCpuAllocator* g_allocator = nullptr;

}  // namespace

extern "C" {

// Installs the shim as torch's CPU allocator (idempotent). The host pool must be installed first.
// Returns 0, or -1 when no host pool exists.
int zico_cpu_shim_install(int scope) {
  if (!zico_is_installed(ZICO_HOST_DEVICE)) return -1;
  if (!g_allocator) {
    // Leaked on purpose: tensors freed during interpreter shutdown still reach a live allocator.
    c10::Allocator* previous = c10::GetCPUAllocator();
    g_previous_raw_deleter = previous->raw_deleter();
    g_allocator = new ZicoCpuAllocator(previous);
    c10::SetCPUAllocator(g_allocator, /*priority=*/100);
  }
  g_allocator->scope_.store(scope);
  return 0;
}

int zico_cpu_shim_set_scope(int scope) {
  if (!g_allocator || scope < 0 || scope > 2) return -1;
  g_allocator->scope_.store(scope);
  return 0;
}

int zico_cpu_shim_scope(void) { return g_allocator ? g_allocator->scope_.load() : -1; }

}  // extern "C"
