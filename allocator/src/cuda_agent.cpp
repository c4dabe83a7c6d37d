// cuda_agent.cpp — the agent pool on a CUDA device (part of libzico_cuda.so): chunk ops for the
// agent (cuMemCreate with POSIX fd handles, zeroed, exported with cuMemExportToShareableHandle)
// and the chunk mapper for a job (import, cuMemAddressReserve, cuMemMap each chunk contiguously,
// cuMemSetAccess), plus the stream rule's events. Driver symbols are resolved at run time with
// cudaGetDriverEntryPointByVersion, so the library still links libcudart alone.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>

#include "zico/zico.h"

namespace {

struct Driver {
  CUresult (*memCreate)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long);
  CUresult (*memRelease)(CUmemGenericAllocationHandle);
  CUresult (*memExport)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long);
  CUresult (*memImport)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType);
  CUresult (*addressReserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*addressFree)(CUdeviceptr, size_t);
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*unmap)(CUdeviceptr, size_t);
  CUresult (*setAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
  CUresult (*granularity)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags);
};

std::string g_error;
std::once_flag g_once;
Driver g_drv{};
bool g_ok = false;

template <class F>
bool resolve(const char* name, F* out) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  // 12000: these VMM entry points have had one ABI since CUDA 10.2.
  const cudaError_t r = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status);
  if (r != cudaSuccess || status != cudaDriverEntryPointSuccess || !fn) {
    cudaGetLastError();
    g_error = std::string("cannot resolve the CUDA driver's ") + name + ": " +
              (r != cudaSuccess ? cudaGetErrorString(r) : "the driver does not provide it");
    return false;
  }
  *out = reinterpret_cast<F>(fn);
  return true;
}

bool driver() {
  std::call_once(g_once, [] {
    g_ok = resolve("cuMemCreate", &g_drv.memCreate) && resolve("cuMemRelease", &g_drv.memRelease) &&
           resolve("cuMemExportToShareableHandle", &g_drv.memExport) &&
           resolve("cuMemImportFromShareableHandle", &g_drv.memImport) &&
           resolve("cuMemAddressReserve", &g_drv.addressReserve) && resolve("cuMemAddressFree", &g_drv.addressFree) &&
           resolve("cuMemMap", &g_drv.map) && resolve("cuMemUnmap", &g_drv.unmap) &&
           resolve("cuMemSetAccess", &g_drv.setAccess) &&
           resolve("cuMemGetAllocationGranularity", &g_drv.granularity);
  });
  return g_ok;
}

CUmemAllocationProp prop_for(int device) {
  CUmemAllocationProp p;
  std::memset(&p, 0, sizeof(p));
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  return p;
}

CUmemAccessDesc access_for(int device) {
  CUmemAccessDesc d;
  std::memset(&d, 0, sizeof(d));
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = device;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d;
}

// Maps handles[0..n) contiguously into a fresh range; 0 on failure (nothing stays mapped).
CUdeviceptr map_handles(int device, const CUmemGenericAllocationHandle* h, size_t n, size_t chunk) {
  const size_t total = n * chunk;
  CUdeviceptr base = 0;
  if (g_drv.addressReserve(&base, total, chunk, 0, 0) != CUDA_SUCCESS) return 0;
  size_t mapped = 0;
  for (; mapped < n; ++mapped)
    if (g_drv.map(base + mapped * chunk, chunk, 0, h[mapped], 0) != CUDA_SUCCESS) break;
  const CUmemAccessDesc access = access_for(device);
  if (mapped < n || g_drv.setAccess(base, total, &access, 1) != CUDA_SUCCESS) {
    for (size_t i = 0; i < mapped; ++i) g_drv.unmap(base + i * chunk, chunk);
    g_drv.addressFree(base, total);
    return 0;
  }
  return base;
}

void unmap_range(CUdeviceptr base, size_t bytes) {
  g_drv.unmap(base, bytes);
  g_drv.addressFree(base, bytes);
}

// --- the agent's chunk ops ---
struct AgentCtx {
  int device;
};

int cuda_create(void* ctx, size_t bytes, int* fd, uint64_t* handle) {
  const int device = static_cast<AgentCtx*>(ctx)->device;
  if (cudaSetDevice(device) != cudaSuccess) return -1;
  CUmemAllocationProp prop = prop_for(device);
  CUmemGenericAllocationHandle h = 0;
  if (g_drv.memCreate(&h, bytes, &prop, 0) != CUDA_SUCCESS) return -1;
  // New physical memory is not promised to be zero: map it here once and clear it, so a chunk
  // always reaches a job reading zeros (Note [Scrub] in agent_server.cpp).
  CUdeviceptr va = map_handles(device, &h, 1, bytes);
  bool zeroed = va && cudaMemset(reinterpret_cast<void*>(va), 0, bytes) == cudaSuccess &&
                cudaDeviceSynchronize() == cudaSuccess;
  if (va) unmap_range(va, bytes);
  int out = -1;
  if (!zeroed || g_drv.memExport(&out, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS) {
    cudaGetLastError();
    g_drv.memRelease(h);
    return -1;
  }
  *fd = out;
  *handle = static_cast<uint64_t>(h);
  return 0;
}

void cuda_destroy(void*, int fd, uint64_t handle) {
  if (fd >= 0) close(fd);
  if (handle) g_drv.memRelease(static_cast<CUmemGenericAllocationHandle>(handle));
}

// A new zeroed allocation replaces the old one; earlier importers keep only the old memory.
int cuda_scrub(void* ctx, size_t bytes, int* fd, uint64_t* handle) {
  cuda_destroy(ctx, *fd, *handle);
  *fd = -1;
  *handle = 0;
  return cuda_create(ctx, bytes, fd, handle);
}

// --- the job's chunk mapper ---
struct JobCtx {
  int device;
};

struct DeviceGuard {
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&prev) == cudaSuccess && prev != device) cudaSetDevice(device);
    else prev = -1;
  }
  ~DeviceGuard() {
    if (prev >= 0) cudaSetDevice(prev);
  }
  int prev = -1;
};

void* cuda_map(void* ctx, const int* fds, size_t n, size_t chunk) {
  const int device = static_cast<JobCtx*>(ctx)->device;
  DeviceGuard g(device);
  std::string handles(n * sizeof(CUmemGenericAllocationHandle), '\0');
  auto* h = reinterpret_cast<CUmemGenericAllocationHandle*>(&handles[0]);
  size_t imported = 0;
  for (; imported < n; ++imported) {
    void* shareable = reinterpret_cast<void*>(static_cast<intptr_t>(fds[imported]));
    if (g_drv.memImport(&h[imported], shareable, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS) break;
  }
  CUdeviceptr base = imported == n ? map_handles(device, h, n, chunk) : 0;
  for (size_t i = 0; i < imported; ++i) g_drv.memRelease(h[i]);  // the mappings keep them alive
  return reinterpret_cast<void*>(base);
}

void cuda_unmap(void* ctx, void* base, size_t bytes) {
  DeviceGuard g(static_cast<JobCtx*>(ctx)->device);
  unmap_range(reinterpret_cast<CUdeviceptr>(base), bytes);
}

void* cuda_record(void* ctx, void* stream) {
  DeviceGuard g(static_cast<JobCtx*>(ctx)->device);
  cudaEvent_t e = nullptr;
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  if (cudaEventRecord(e, static_cast<cudaStream_t>(stream)) != cudaSuccess) {
    cudaGetLastError();
    cudaEventDestroy(e);
    return nullptr;
  }
  return e;
}
int cuda_done(void*, void* event) {
  cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (r == cudaErrorNotReady) {
    cudaGetLastError();
    return 0;
  }
  return 1;
}
void cuda_wait(void*, void* stream, void* event) {
  cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0);
}
// Note: a chunk leaves the job only after this returned for every pending event of its segment
// (Pool::release_free_segments synchronizes them before Upstream::release).
void cuda_sync(void*, void* event) { cudaEventSynchronize(static_cast<cudaEvent_t>(event)); }
void cuda_destroy_event(void*, void* event) { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

bool check_chunk(int device, uint64_t chunk_bytes) {
  if (chunk_bytes == 0) chunk_bytes = 2u << 20;
  CUmemAllocationProp prop = prop_for(device);
  size_t gran = 0;
  if (g_drv.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || gran == 0) {
    g_error = "cuMemGetAllocationGranularity failed on device " + std::to_string(device);
    return false;
  }
  if (chunk_bytes % gran != 0) {
    g_error = "chunk_bytes must be a multiple of the device's allocation granularity (" + std::to_string(gran) +
              " bytes), got " + std::to_string(chunk_bytes);
    return false;
  }
  return true;
}

}  // namespace

extern "C" {

// The agent pool on CUDA device `device`: as zico_agent_create, with chunks of device memory.
// -1 with zico_cuda_agent_error() set (no driver VMM support, bad chunk size, agent errors).
int zico_agent_create_cuda(int device, uint64_t capacity_bytes, uint64_t budget_bytes, uint64_t chunk_bytes,
                           zico_agent_t** out) {
  if (!driver()) return -1;
  if (cudaSetDevice(device) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) {
    g_error = "CUDA device " + std::to_string(device) + " did not start: " + cudaGetErrorString(cudaGetLastError());
    return -1;
  }
  if (!check_chunk(device, chunk_bytes)) return -1;
  static std::mutex mu;
  static AgentCtx ctxs[ZICO_MAX_CUDA_DEVICES];
  static zico_chunk_ops ops[ZICO_MAX_CUDA_DEVICES];
  if (device < 0 || device >= ZICO_MAX_CUDA_DEVICES) {
    g_error = "device must be 0..63";
    return -1;
  }
  {
    std::lock_guard<std::mutex> lk(mu);
    ctxs[device].device = device;
    ops[device] = zico_chunk_ops{&ctxs[device], cuda_create, cuda_scrub, cuda_destroy, "cuda"};
  }
  if (zico_agent_create_with(&ops[device], capacity_bytes, budget_bytes, chunk_bytes, out) != 0) {
    g_error = zico_last_error();
    return -1;
  }
  return 0;
}

// In a job process, before its first CUDA allocation: device `device`'s pool takes its segments
// from the agent on `fd` (then install the pool as torch's allocator: zico_allocator.install_cuda).
int zico_install_agent_client_cuda(int device, int fd) {
  if (!driver()) return -1;
  if (device < 0 || device >= ZICO_MAX_CUDA_DEVICES || cudaSetDevice(device) != cudaSuccess) {
    cudaGetLastError();
    g_error = "CUDA device " + std::to_string(device) + " is not usable in this process";
    return -1;
  }
  static JobCtx ctxs[ZICO_MAX_CUDA_DEVICES];
  static zico_chunk_mapper mappers[ZICO_MAX_CUDA_DEVICES];
  ctxs[device].device = device;
  mappers[device] = zico_chunk_mapper{&ctxs[device], cuda_map, cuda_unmap, cuda_record, cuda_done, cuda_wait,
                                      cuda_sync, cuda_destroy_event, "agent-cuda", 0};
  if (zico_install_agent_client_on(device, fd, &mappers[device]) != 0) {
    g_error = zico_last_error();
    return -1;
  }
  return 0;
}

const char* zico_cuda_agent_error(void) { return g_error.c_str(); }

}  // extern "C"
