// options.hpp — every configuration knob of the allocator in one table, each read once from one
// environment variable (mimalloc style). Values are defaults for pools created afterwards; most can
// also be changed at run time through the C ABI.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace zico {

// Note [Malformed knobs fail the first install]
// A knob that is set but malformed (ZICO_TRACE=maybe, ZICO_BUDGET_BYTES=8 gigs) is never guessed at:
// read_options records a message naming the variable, its value and the accepted forms in
// Options::error, and every call that creates a pool or an agent (zico_install_host, the CUDA
// upstream's first pool, zico_install_agent_client*, zico_agent_create*) fails with it through the
// thread-local error (zico_last_error), which the Python binding raises as ZicoError. Nothing throws
// across the C ABI and nothing aborts; an empty variable counts as unset.
// Accepted forms (one parser per kind, below):
//   bytes:   a non-negative number (integer, decimal or exponent: 1048576, 1.5, 2e9) with an optional
//            case-insensitive unit: B; K/KiB, M/MiB, G/GiB, T/TiB (powers of 1024); KB, MB, GB, TB
//            (powers of 1000), optionally after a space. At most 2^60 bytes; fractions of a byte are
//            truncated. The same forms as the Python side's workers.nvml.parse_bytes.
//   boolean: 1/0, true/false, on/off, yes/no (case-insensitive).
//   seconds: a non-negative decimal number, at most 1e6.
//   count:   a positive integer, at most 2^26.

struct Options {
  // ZICO_BUDGET_BYTES (bytes): initial device budget (0 or unset = no budget).
  uint64_t budget_bytes;
  // ZICO_BUDGET_WAIT_S (seconds): how long an allocation blocked by the budget waits for other jobs'
  // frees before failing (0 = fail at once).
  double budget_wait_s;
  // ZICO_TRACE (boolean): on records every alloc/free/mark in the trace ring, off records nothing.
  bool trace_enabled;
  // ZICO_TRACE_CAPACITY (count): records kept per pool before the oldest are overwritten.
  size_t trace_capacity;
  // ZICO_HOST_CAPACITY_BYTES (bytes): physical capacity of the host upstream when install passes none
  // (0 or unset = unlimited).
  uint64_t host_capacity_bytes;
  // ZICO_AGENT_CHUNK_BYTES (bytes): the device agent's chunk, the unit it grants and moves between
  // job processes; a positive multiple of 4096. Default 2 MiB, the size of the pool's small
  // segments, so a small segment is exactly one chunk.
  uint64_t agent_chunk_bytes;
  // Empty, or the messages of every malformed knob joined by "; " (Note [Malformed knobs fail the
  // first install]); the fields of malformed knobs keep their defaults.
  std::string error;
};

// Reads the environment once (thread-safe); later calls return the same values.
const Options& options();

// Parsers of the accepted forms above; false when `text` is malformed (then *out is unchanged).
bool parse_bytes(const char* text, uint64_t* out);
bool parse_bool(const char* text, bool* out);

}  // namespace zico
