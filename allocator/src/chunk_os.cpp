// chunk_os.cpp — memfd chunks, chunk stitching and fd passing (see chunk_os.hpp); Linux only.
#include "chunk_os.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#ifndef MFD_ALLOW_SEALING
#define MFD_ALLOW_SEALING 0x0002U
#endif

namespace zico {

int chunk_create(size_t bytes) {
  int fd = memfd_create("zico-chunk", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  // A job may not resize a chunk (a shrink would fault the agent's or another job's mapping).
  fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  return fd;
}

bool chunk_scrub(int fd, size_t bytes) {
  return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(bytes)) == 0;
}

namespace {
int memfd_create_op(void*, size_t bytes, int* fd, uint64_t* handle) {
  *handle = 0;
  *fd = chunk_create(bytes);
  return *fd >= 0 ? 0 : -1;
}
int memfd_scrub_op(void*, size_t bytes, int* fd, uint64_t* handle) {
  chunk_scrub(*fd, bytes);  // the pages go now, even if an earlier holder still maps the old file
  close(*fd);
  return memfd_create_op(nullptr, bytes, fd, handle);
}
void memfd_destroy_op(void*, int fd, uint64_t) {
  if (fd >= 0) close(fd);
}
const zico_chunk_ops kMemfdOps = {nullptr, memfd_create_op, memfd_scrub_op, memfd_destroy_op, "memfd"};
}  // namespace

const zico_chunk_ops* memfd_chunk_ops() { return &kMemfdOps; }

void* chunks_map(const std::vector<int>& fds, size_t chunk_bytes) {
  const size_t total = fds.size() * chunk_bytes;
  void* base = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) return nullptr;
  char* p = static_cast<char*>(base);
  for (size_t i = 0; i < fds.size(); ++i) {
    void* got = mmap(p + i * chunk_bytes, chunk_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE,
                     fds[i], 0);
    if (got == MAP_FAILED) {
      int e = errno;
      munmap(base, total);
      errno = e;
      return nullptr;
    }
  }
  return base;
}

void chunks_unmap(void* base, size_t bytes) { munmap(base, bytes); }

bool seqpacket_pair(int out[2]) {
  return socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, out) == 0;
}

bool send_packet(int sock, const void* buf, size_t len, const int* fds, size_t nfds) {
  iovec iov{const_cast<void*>(buf), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control;
  if (nfds > 0) {
    control.assign(CMSG_SPACE(nfds * sizeof(int)), 0);
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
  }
  for (;;) {
    ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n >= 0) return static_cast<size_t>(n) == len;
    if (errno != EINTR) return false;
  }
}

long recv_packet(int sock, void* buf, size_t len, std::vector<int>* fds) {
  iovec iov{buf, len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(256 * sizeof(int))];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const int* got = reinterpret_cast<const int*>(CMSG_DATA(c));
    for (size_t i = 0; i < count; ++i) {
      if (fds) fds->push_back(got[i]);
      else close(got[i]);
    }
  }
  return static_cast<long>(n);
}

bool ensure_fd_limit(uint64_t need, uint64_t* have) {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return false;
  if (r.rlim_cur != RLIM_INFINITY && r.rlim_cur < need) {
    rlimit want = r;
    want.rlim_cur = (r.rlim_max == RLIM_INFINITY || r.rlim_max >= need) ? need : r.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &want) == 0) r = want;
  }
  *have = r.rlim_cur == RLIM_INFINITY ? UINT64_MAX : r.rlim_cur;
  return *have >= need;
}

}  // namespace zico
