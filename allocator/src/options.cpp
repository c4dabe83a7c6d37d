// options.cpp — parses the ZICO_* environment variables declared in options.hpp.
#include "options.hpp"

#include <cerrno>
#include <cstdlib>
#include <string>
#include <cstring>
#include <limits>

namespace zico {
namespace {

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  unsigned long long x = std::strtoull(v, &end, 10);
  return (end && *end == '\0') ? static_cast<uint64_t>(x) : fallback;
}

double env_double(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  double x = std::strtod(v, &end);
  return (end && *end == '\0' && x >= 0) ? x : fallback;
}

// Bytes with an optional binary suffix ("2097152", "2M", "2MiB", "512K", "1G"); false if malformed.
bool parse_bytes(const char* v, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v, &end, 10);
  if (end == v || errno != 0 || *v == '-') return false;
  uint64_t mult = 1;
  const std::string suffix(end);
  if (suffix == "K" || suffix == "KiB") mult = 1ull << 10;
  else if (suffix == "M" || suffix == "MiB") mult = 1ull << 20;
  else if (suffix == "G" || suffix == "GiB") mult = 1ull << 30;
  else if (!suffix.empty()) return false;
  if (x > UINT64_MAX / mult) return false;
  *out = x * mult;
  return true;
}

Options read_options() {
  Options o;
  const uint64_t unlimited = std::numeric_limits<uint64_t>::max();
  o.budget_bytes = env_u64("ZICO_BUDGET_BYTES", 0);
  if (o.budget_bytes == 0) o.budget_bytes = unlimited;
  o.budget_wait_s = env_double("ZICO_BUDGET_WAIT_S", 30.0);
  o.trace_enabled = env_u64("ZICO_TRACE", 1) != 0;
  o.trace_capacity = static_cast<size_t>(env_u64("ZICO_TRACE_CAPACITY", 1u << 16));
  if (o.trace_capacity == 0) o.trace_capacity = 1;
  o.host_capacity_bytes = env_u64("ZICO_HOST_CAPACITY_BYTES", 0);
  if (o.host_capacity_bytes == 0) o.host_capacity_bytes = unlimited;
  o.agent_chunk_bytes = 2u << 20;
  o.agent_chunk_error = "";
  if (const char* v = std::getenv("ZICO_AGENT_CHUNK_BYTES"); v && *v) {
    uint64_t x = 0;
    if (!parse_bytes(v, &x) || x == 0 || x % 4096 != 0)
      o.agent_chunk_error =
          "ZICO_AGENT_CHUNK_BYTES must be a positive multiple of 4096 bytes, written as an integer with an "
          "optional suffix K, M, G (or KiB, MiB, GiB), e.g. 2097152 or 2M";
    else
      o.agent_chunk_bytes = x;
  }
  return o;
}

}  // namespace

const Options& options() {
  static const Options o = read_options();
  return o;
}

}  // namespace zico
