// options.hpp — every configuration knob of the allocator in one table, each read once from one
// environment variable (mimalloc style). Values are defaults for pools created afterwards; most can
// also be changed at run time through the C ABI.
#pragma once
#include <cstddef>
#include <cstdint>

namespace zico {

struct Options {
  // ZICO_BUDGET_BYTES: initial device budget in bytes (0 or unset = no budget).
  uint64_t budget_bytes;
  // ZICO_BUDGET_WAIT_S: how long an allocation blocked by the budget waits for other jobs' frees
  // before failing (seconds; 0 = fail at once).
  double budget_wait_s;
  // ZICO_TRACE: 1 records every alloc/free/mark in the trace ring, 0 records nothing.
  bool trace_enabled;
  // ZICO_TRACE_CAPACITY: records kept per pool before the oldest are overwritten.
  size_t trace_capacity;
  // ZICO_HOST_CAPACITY_BYTES: physical capacity of the host upstream when install passes none.
  uint64_t host_capacity_bytes;
  // ZICO_AGENT_CHUNK_BYTES: the device agent's chunk, the unit it grants and moves between job
  // processes (bytes; a multiple of 4096; suffixes K/M/G or KiB/MiB/GiB accepted). Default 2 MiB,
  // the size of the pool's small segments, so a small segment is exactly one chunk.
  uint64_t agent_chunk_bytes;
  // Non-empty when ZICO_AGENT_CHUNK_BYTES is malformed: names the variable and the accepted forms;
  // zico_agent_create then fails with it instead of guessing.
  const char* agent_chunk_error;
};

// Reads the environment once (thread-safe); later calls return the same values.
const Options& options();

}  // namespace zico
