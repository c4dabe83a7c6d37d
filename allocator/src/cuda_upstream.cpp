// cuda_upstream.cpp — the CUDA upstream (libzico_cuda.so): segments from cudaMalloc, events and
// stream waits for the stream rule. With cuda_agent.cpp (the agent pool on CUDA, which resolves
// its driver symbols at run time) the only files that call CUDA; the library links libcudart
// alone, so no libcuda stub is needed to link. Loading the library does nothing; zico_cuda_register() tells the core to build CUDA pools with this upstream.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "registry.hpp"
#include "upstream.hpp"

namespace zico {
namespace {

// Makes `device` current for the scope of a call, restoring the caller's device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&prev_) == cudaSuccess && prev_ != device) {
      cudaSetDevice(device);
    } else {
      prev_ = -1;
    }
  }
  ~DeviceGuard() {
    if (prev_ >= 0) cudaSetDevice(prev_);
  }

 private:
  int prev_ = -1;
};

class CudaUpstream final : public Upstream {
 public:
  explicit CudaUpstream(int device) : device_(device) {
    DeviceGuard g(device_);
    size_t free_b = 0, total_b = 0;
    capacity_ = cudaMemGetInfo(&free_b, &total_b) == cudaSuccess ? total_b : UINT64_MAX;
  }
  ~CudaUpstream() override {
    for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  }

  void* obtain(size_t bytes) override {
    DeviceGuard g(device_);
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free error so PyTorch does not see it later
      return nullptr;
    }
    return p;
  }
  void release(void* ptr, size_t) override {
    DeviceGuard g(device_);
    cudaFree(ptr);
  }
  uint64_t capacity() const override { return capacity_; }
  const char* name() const override { return "cuda"; }

  void* record_event(void* stream) override {
    DeviceGuard g(device_);
    cudaEvent_t e = take_event();
    if (!e) return nullptr;
    if (cudaEventRecord(e, static_cast<cudaStream_t>(stream)) != cudaSuccess) {
      cudaGetLastError();
      give_event(e);
      return nullptr;
    }
    return e;
  }
  bool event_done(void* event) override {
    if (!event) return true;
    cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (r == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    return true;
  }
  void stream_wait(void* stream, void* event) override {
    if (event) cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0);
  }
  void event_synchronize(void* event) override {
    if (event) cudaEventSynchronize(static_cast<cudaEvent_t>(event));
  }
  void destroy_event(void* event) override {
    if (event) give_event(static_cast<cudaEvent_t>(event));
  }

 private:
  cudaEvent_t take_event() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!spare_events_.empty()) {
        cudaEvent_t e = spare_events_.back();
        spare_events_.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return e;
  }
  void give_event(cudaEvent_t e) {
    std::lock_guard<std::mutex> lk(mu_);
    spare_events_.push_back(e);
  }

  const int device_;
  uint64_t capacity_;
  std::mutex mu_;
  std::vector<cudaEvent_t> spare_events_;
};

Upstream* make_cuda_upstream(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || device >= n) {
    cudaGetLastError();
    return nullptr;
  }
  return new CudaUpstream(device);
}

}  // namespace
}  // namespace zico

namespace {
const char* g_cuda_error = "";
}

extern "C" {
// Registers the CUDA upstream with the core; returns the number of visible CUDA devices, or -1
// when the CUDA runtime cannot start (zico_cuda_error() says why, e.g. a driver too old for it).
int zico_cuda_register(void) {
  int n = 0;
  cudaError_t r = cudaGetDeviceCount(&n);
  if (r != cudaSuccess) {
    g_cuda_error = cudaGetErrorString(r);
    cudaGetLastError();
    return -1;
  }
  zico_register_cuda_factory(&zico::make_cuda_upstream);
  return n;
}

const char* zico_cuda_error(void) { return g_cuda_error; }
}
