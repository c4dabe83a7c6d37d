// options.cpp — parses the ZICO_* environment variables declared in options.hpp.
#include "options.hpp"

#include <cstdlib>
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
  return o;
}

}  // namespace

const Options& options() {
  static const Options o = read_options();
  return o;
}

}  // namespace zico
