// cuda_entry.cpp — the two functions torch.cuda.memory.CUDAPluggableAllocator is given when the
// Zico pool becomes torch's CUDA allocator; part of the torch shim (libzico_torch_shim.so).
//
// Why not zico_malloc itself: CUDAPluggableAllocator::allocate does not check the pointer its
// alloc function returns, so a NULL (budget, capacity) would become a tensor at address 0 and an
// illegal-address fault on first use, which poisons the CUDA context. This entry throws
// c10::OutOfMemoryError instead, which torch turns into its ordinary torch.OutOfMemoryError
// (torch/csrc/cuda/CUDAPluggableAllocator.cpp, torch 2.x). That path is common, not exceptional:
// cuDNN's algorithm search asks for workspaces that may not fit and catches the error to try the
// next algorithm. The message is formatted with snprintf and handed to TORCH_CHECK as one C
// string, which c10::str passes through without an ostream.
#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdio>

#include "zico/zico.h"

extern "C" {

void* zico_torch_cuda_malloc(size_t size, int device, void* stream) {
  void* p = zico_malloc(size, device, stream);
  if (!p && size > 0) {
    char msg[512];
    std::snprintf(msg, sizeof msg,
                  "Zico pool on CUDA device %d: failed to allocate %zu bytes: %s "
                  "(zico_allocator.last_oom() has the reason and figures)",
                  device, size, zico_last_error());
    const char* text = msg;
    TORCH_CHECK_WITH(OutOfMemoryError, false, text);
  }
  return p;
}

void zico_torch_cuda_free(void* ptr, size_t size, int device, void* stream) { zico_free(ptr, size, device, stream); }

}  // extern "C"
