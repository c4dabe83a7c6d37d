// cuda_entry.cpp — the two functions torch.cuda.memory.CUDAPluggableAllocator is given when the
// Zico pool becomes torch's CUDA allocator; part of the torch shim (libzico_torch_shim.so).
//
// Why not zico_malloc itself: CUDAPluggableAllocator::allocate does not check the pointer its
// alloc function returns, so a NULL (budget, capacity) would become a tensor at address 0 and an
// illegal-address fault on first use, which poisons the CUDA context. This entry throws
// c10::OutOfMemoryError instead, which torch turns into its ordinary torch.OutOfMemoryError
// (torch/csrc/cuda/CUDAPluggableAllocator.cpp, torch 2.x).
#include <c10/util/Exception.h>

#include <cstddef>

#include "zico/zico.h"

extern "C" {

void* zico_torch_cuda_malloc(size_t size, int device, void* stream) {
  void* p = zico_malloc(size, device, stream);
  if (!p && size > 0) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "Zico pool on CUDA device ", device, ": failed to allocate ", size,
                     " bytes: ", zico_last_error(), " (zico_allocator.last_oom() has the reason and figures)");
  }
  return p;
}

void zico_torch_cuda_free(void* ptr, size_t size, int device, void* stream) { zico_free(ptr, size, device, stream); }

}  // extern "C"
