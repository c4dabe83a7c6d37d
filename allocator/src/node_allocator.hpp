// node_allocator.hpp — a free-list allocator for the nodes of the pool's std::set / unordered_map,
// so a pool hit does no malloc/free of its own (each container owns one NodeFreeList; used only
// under the DevicePool lock). Requests for more than one object (bucket arrays) go to operator new.
#pragma once
#include <cstddef>
#include <new>
#include <vector>

namespace zico {

class NodeFreeList {
 public:
  NodeFreeList() = default;
  NodeFreeList(const NodeFreeList&) = delete;
  NodeFreeList& operator=(const NodeFreeList&) = delete;
  ~NodeFreeList() {
    for (void* p : free_) ::operator delete(p);
  }
  void* get(size_t bytes) {
    if (node_size_ == 0) node_size_ = bytes;
    if (bytes != node_size_) return ::operator new(bytes);
    if (free_.empty()) return ::operator new(bytes);
    void* p = free_.back();
    free_.pop_back();
    return p;
  }
  void put(void* p, size_t bytes) {
    if (bytes != node_size_ || free_.size() >= kMaxCached) {
      ::operator delete(p);
      return;
    }
    free_.push_back(p);
  }

 private:
  static constexpr size_t kMaxCached = 1 << 16;
  size_t node_size_ = 0;
  std::vector<void*> free_;
};

template <class T>
class NodeAllocator {
 public:
  using value_type = T;
  explicit NodeAllocator(NodeFreeList* list) : list_(list) {}
  template <class U>
  NodeAllocator(const NodeAllocator<U>& o) : list_(o.list_) {}
  T* allocate(size_t n) {
    if (n == 1) return static_cast<T*>(list_->get(sizeof(T)));
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (n == 1) list_->put(p, sizeof(T));
    else ::operator delete(p);
  }
  template <class U>
  bool operator==(const NodeAllocator<U>& o) const { return list_ == o.list_; }
  template <class U>
  bool operator!=(const NodeAllocator<U>& o) const { return list_ != o.list_; }
  NodeFreeList* list_;
};

}  // namespace zico
