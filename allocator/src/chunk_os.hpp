// chunk_os.hpp — the OS boundary of the agent pool: memfd chunks (create, scrub), stitching
// chunks into one virtual range, and SOCK_SEQPACKET messages carrying fds (SCM_RIGHTS).
// Every function returns false / -1 with errno set instead of throwing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "zico/zico.h"

namespace zico {

// A memfd of `bytes` (close-on-exec, sealed against shrinking). -1 on failure.
int chunk_create(size_t bytes);
// Drops the chunk's pages (fallocate PUNCH_HOLE|KEEP_SIZE): later reads of the file see zeros.
bool chunk_scrub(int fd, size_t bytes);

// The agent's default chunk ops (zico_chunk_ops): memfd chunks; scrub = punch hole, then a fresh
// memfd in place of the old one (Note [Scrub] in agent_server.cpp).
const zico_chunk_ops* memfd_chunk_ops();

// Reserves one range of fds.size() * chunk_bytes (PROT_NONE) and maps each memfd MAP_SHARED|
// MAP_FIXED read-write at consecutive offsets, prefaulted (MAP_POPULATE: one pass maps the pages a
// same-tenant chunk brings, instead of one fault per page later — 0.25x the cost of fresh pages in
// bench_agent.py). nullptr on failure (nothing stays mapped).
void* chunks_map(const std::vector<int>& fds, size_t chunk_bytes);
void chunks_unmap(void* base, size_t bytes);

// Creates an AF_UNIX SOCK_SEQPACKET pair, both ends close-on-exec.
bool seqpacket_pair(int out[2]);
// Sends one packet of `len` bytes with `nfds` fds attached. false on error (EPIPE: peer gone).
bool send_packet(int sock, const void* buf, size_t len, const int* fds, size_t nfds);
// Receives one packet into buf (returns its length, 0 = peer closed, -1 = error). Attached fds
// are appended to *fds when fds is non-null (received close-on-exec); with fds null any attached
// fd is closed, so a peer can never plant descriptors in this process.
long recv_packet(int sock, void* buf, size_t len, std::vector<int>* fds);

// Raises RLIMIT_NOFILE's soft limit towards the hard one so that `need` fds fit; false if not.
bool ensure_fd_limit(uint64_t need, uint64_t* have);

}  // namespace zico
