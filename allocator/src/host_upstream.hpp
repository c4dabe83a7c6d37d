// host_upstream.hpp — upstream for host (CPU) memory: page-aligned segments from the C library,
// with an optional capacity standing in for a device's physical memory.
#pragma once
#include <atomic>
#include "upstream.hpp"

namespace zico {

class HostUpstream final : public Upstream {
 public:
  // capacity_bytes: obtain() fails once this many bytes are out (UINT64_MAX = unlimited).
  explicit HostUpstream(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}
  void* obtain(size_t bytes) override;
  void release(void* ptr, size_t bytes) override;
  uint64_t capacity() const override { return capacity_; }
  const char* name() const override { return "host"; }

 private:
  const uint64_t capacity_;
  std::atomic<uint64_t> out_{0};
};

}  // namespace zico
