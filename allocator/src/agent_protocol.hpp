// agent_protocol.hpp — the wire format between the device agent (agent_server.cpp) and a job
// process (agent_upstream.cpp): fixed-size messages on an AF_UNIX SOCK_SEQPACKET socket, one
// message per packet, chunk memfds attached with SCM_RIGHTS. Both sides include this file only.
#pragma once
#include <cstddef>
#include <cstdint>

namespace zico {
namespace agent {

constexpr uint32_t kMagic = 0x5a494331;  // "ZIC1"; bumped when the layout changes
// Chunk ids (and fds) per message: below the kernel's SCM_MAX_FD (253) fds per sendmsg.
constexpr uint32_t kMaxIds = 200;

enum MsgType : uint32_t {
  // agent -> job, once, first thing on the socket: a = chunk_bytes, b = capacity_bytes, c = job id.
  kHello = 1,
  // job -> agent: a = bytes wanted (rounded up to chunks by the agent), b = 1 to wait for room
  // (bounded by the agent's wait), 0 to be refused at once when there is none; c = sequence number.
  kRequest = 2,
  // agent -> job: one part of a grant; a = chunks in the whole grant, c = the request's sequence
  // number, ids[0..n) the chunk ids of this part, each with one memfd attached (same order).
  kGrant = 3,
  // agent -> job: the request c was refused; a = RefuseReason, text = the agent's explanation.
  kRefuse = 4,
  // job -> agent: the chunks ids[0..n) are unmapped and come back to the agent's free list. b = 1:
  // the job returns them on its way to a waiting request (its pool gives back its cached segments
  // first); they reach the free list when that request (any next message) arrives, so no other
  // job's request is granted them in between (Note [Returns before a request] in agent_server.cpp).
  // b = 2, no ids: the answer to a RECLAIM: everything the job could return has been (Note [Held at
  // the gate] in agent_server.cpp).
  kReturn = 5,
  // agent -> job: please return wholly free cached segments up to a bytes (0 = no longer needed).
  kReclaim = 6,
};

enum RefuseReason : uint32_t {
  kWouldWait = 1,  // no room now and the request asked not to wait
  kBudget = 2,     // over the budget and no other job holds memory that could come back
  kCapacity = 3,   // larger than the agent's capacity, or a deadlock with no room left
  kTimeout = 4,    // waited the agent's whole budget wait without room appearing
  kInvalid = 5,    // malformed request (zero bytes, one already pending)
  kJobBudget = 6,  // the job would hold more than its own budget (Note [A job's own budget], agent_server.cpp)
};

struct Msg {
  uint32_t magic;
  uint32_t type;
  uint64_t a;
  uint64_t b;
  uint64_t c;
  uint32_t n;
  uint32_t reserved;
  uint32_t ids[kMaxIds];
  char text[192];
};
static_assert(sizeof(Msg) < 2048, "one agent message must stay one small packet");

inline Msg make_msg(MsgType type, uint64_t a = 0, uint64_t b = 0, uint64_t c = 0) {
  Msg m{};
  m.magic = kMagic;
  m.type = type;
  m.a = a;
  m.b = b;
  m.c = c;
  return m;
}

}  // namespace agent
}  // namespace zico
