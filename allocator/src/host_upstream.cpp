// host_upstream.cpp — HostUpstream: posix_memalign'd segments, counted against a capacity.
#include "host_upstream.hpp"

#include <cstdlib>

namespace zico {

void* HostUpstream::obtain(size_t bytes) {
  uint64_t before = out_.fetch_add(bytes);
  if (before + bytes > capacity_ || before + bytes < before) {
    out_.fetch_sub(bytes);
    return nullptr;
  }
  void* p = nullptr;
  // 4 KiB alignment: pages for segments, and more than c10's 64-byte CPU alignment.
  if (posix_memalign(&p, 4096, bytes) != 0) {
    out_.fetch_sub(bytes);
    return nullptr;
  }
  return p;
}

void HostUpstream::release(void* ptr, size_t bytes) {
  std::free(ptr);
  out_.fetch_sub(bytes);
}

}  // namespace zico
