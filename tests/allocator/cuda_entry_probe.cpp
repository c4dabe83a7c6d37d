// cuda_entry_probe.cpp — built and run by test_allocator_torch_shim.py: drives the torch shim's
// CUDAPluggableAllocator entry points against a host-backed pool (no GPU needed) and reports
// whether a refused request raised c10::OutOfMemoryError, as torch needs, rather than returning NULL.
#include <c10/util/Exception.h>

#include <cstdio>

#include "zico/zico.h"

extern "C" void* zico_torch_cuda_malloc(size_t size, int device, void* stream);
extern "C" void zico_torch_cuda_free(void* ptr, size_t size, int device, void* stream);

int main() {
  const int device = 5;  // a host-backed stand-in for a CUDA device
  if (zico_install_host(device, 64ull << 20) != 0) return 2;
  void* ok = zico_torch_cuda_malloc(1 << 20, device, nullptr);
  std::printf("served: %s\n", ok ? "yes" : "no");
  try {
    zico_torch_cuda_malloc(128ull << 20, device, nullptr);  // beyond the 64 MiB capacity
    std::printf("refused request returned\n");
  } catch (const c10::OutOfMemoryError& e) {
    std::printf("raised OutOfMemoryError: %s\n", e.what_without_backtrace());
  }
  zico_torch_cuda_free(ok, 1 << 20, device, nullptr);
  char* stats = zico_memory_stats_json(device, 0, 0);
  std::printf("%s\n", stats);
  zico_string_free(stats);
  return 0;
}
