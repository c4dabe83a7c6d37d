// options.cpp — parses the ZICO_* environment variables declared in options.hpp, one parser per kind
// of value (bytes, boolean, seconds, count), recording malformed ones in Options::error.
#include "options.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

namespace zico {
namespace {

constexpr const char* kBytesForms =
    "a byte count such as 1048576, 512MiB, 8GiB, 2e9 or 1.5GB (units B, K/KiB, M/MiB, G/GiB, T/TiB = powers "
    "of 1024, KB/MB/GB/TB = powers of 1000, case-insensitive; at most 2^60)";
constexpr const char* kBoolForms = "1/0, true/false, on/off or yes/no";
constexpr const char* kSecondsForms = "a non-negative number of seconds up to 1e6, e.g. 30 or 0.5";
constexpr const char* kCountForms = "a positive integer up to 67108864 (2^26), e.g. 65536";
constexpr uint64_t kMaxCount = 1ull << 26;
constexpr uint64_t kMaxBytes = 1ull << 60;

std::string lower(const char* s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Length of the decimal number at the start of `s` ("12", "1.5", "2e9", ".5e-3"), 0 if none; no sign,
// no hex, no inf/nan (strtod alone would take them all).
size_t number_length(const char* s, bool* integral) {
  size_t i = 0, digits = 0;
  *integral = true;
  while (std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
  if (s[i] == '.') {
    *integral = false;
    ++i;
    while (std::isdigit(static_cast<unsigned char>(s[i]))) ++i, ++digits;
  }
  if (digits == 0) return 0;
  if (s[i] == 'e' || s[i] == 'E') {
    size_t j = i + 1;
    if (s[j] == '+' || s[j] == '-') ++j;
    if (!std::isdigit(static_cast<unsigned char>(s[j]))) return 0;
    while (std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
    *integral = false;
    i = j;
  }
  return i;
}

struct Reader {
  Options* o;
  void bad(const char* name, const char* value, const char* forms) {
    if (!o->error.empty()) o->error += "; ";
    o->error += std::string(name) + "='" + value + "' is malformed; accepted: " + forms;
  }
  // Each returns the parsed value, or `fallback` when the variable is unset, empty or malformed.
  uint64_t bytes(const char* name, uint64_t fallback) {
    const char* v = std::getenv(name);
    if (!v || !*v) return fallback;
    uint64_t x = 0;
    if (!parse_bytes(v, &x)) return bad(name, v, kBytesForms), fallback;
    return x;
  }
  bool boolean(const char* name, bool fallback) {
    const char* v = std::getenv(name);
    if (!v || !*v) return fallback;
    bool x = fallback;
    if (!parse_bool(v, &x)) return bad(name, v, kBoolForms), fallback;
    return x;
  }
  double seconds(const char* name, double fallback) {
    const char* v = std::getenv(name);
    if (!v || !*v) return fallback;
    bool integral = false;
    size_t n = number_length(v, &integral);
    double x = n ? std::strtod(v, nullptr) : -1;
    if (n == 0 || v[n] != '\0' || !(x >= 0 && x <= 1e6)) return bad(name, v, kSecondsForms), fallback;
    return x;
  }
  uint64_t count(const char* name, uint64_t fallback) {
    const char* v = std::getenv(name);
    if (!v || !*v) return fallback;
    bool integral = false;
    size_t n = number_length(v, &integral);
    errno = 0;
    unsigned long long x = (n && integral) ? std::strtoull(v, nullptr, 10) : 0;
    if (n == 0 || !integral || v[n] != '\0' || errno != 0 || x == 0 || x > kMaxCount)
      return bad(name, v, kCountForms), fallback;
    return x;
  }
};

Options read_options() {
  Options o;
  Reader r{&o};
  const uint64_t unlimited = std::numeric_limits<uint64_t>::max();
  o.budget_bytes = r.bytes("ZICO_BUDGET_BYTES", 0);
  if (o.budget_bytes == 0) o.budget_bytes = unlimited;
  o.budget_wait_s = r.seconds("ZICO_BUDGET_WAIT_S", 30.0);
  o.trace_enabled = r.boolean("ZICO_TRACE", true);
  o.trace_capacity = static_cast<size_t>(r.count("ZICO_TRACE_CAPACITY", 1u << 16));
  o.host_capacity_bytes = r.bytes("ZICO_HOST_CAPACITY_BYTES", 0);
  if (o.host_capacity_bytes == 0) o.host_capacity_bytes = unlimited;
  o.agent_chunk_bytes = 2u << 20;
  if (const char* v = std::getenv("ZICO_AGENT_CHUNK_BYTES"); v && *v) {
    uint64_t x = 0;
    if (!parse_bytes(v, &x) || x == 0 || x % 4096 != 0)
      r.bad("ZICO_AGENT_CHUNK_BYTES", v, "a positive multiple of 4096 bytes, e.g. 2097152, 2M or 4MiB (same units "
            "as every byte knob)");
    else
      o.agent_chunk_bytes = x;
  }
  return o;
}

}  // namespace

bool parse_bytes(const char* text, uint64_t* out) {
  if (!text) return false;
  bool integral = false;
  size_t n = number_length(text, &integral);
  if (n == 0) return false;
  size_t u = n;
  while (text[u] == ' ') ++u;  // "512 MiB" as well as "512MiB"
  const std::string unit = lower(text + u);
  uint64_t mult = 0;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kib") mult = 1ull << 10;
  else if (unit == "m" || unit == "mib") mult = 1ull << 20;
  else if (unit == "g" || unit == "gib") mult = 1ull << 30;
  else if (unit == "t" || unit == "tib") mult = 1ull << 40;
  else if (unit == "kb") mult = 1000ull;
  else if (unit == "mb") mult = 1000ull * 1000;
  else if (unit == "gb") mult = 1000ull * 1000 * 1000;
  else if (unit == "tb") mult = 1000ull * 1000 * 1000 * 1000;
  else return false;
  if (integral) {  // exact for every integer, no detour through double
    errno = 0;
    unsigned long long x = std::strtoull(text, nullptr, 10);
    if (errno != 0 || x > kMaxBytes / mult) return false;
    *out = x * mult;
    return true;
  }
  long double x = std::strtold(text, nullptr) * static_cast<long double>(mult);
  if (!(x >= 0) || x > static_cast<long double>(kMaxBytes)) return false;
  *out = static_cast<uint64_t>(x);
  return true;
}

bool parse_bool(const char* text, bool* out) {
  if (!text) return false;
  const std::string s = lower(text);
  if (s == "1" || s == "true" || s == "on" || s == "yes") return *out = true, true;
  if (s == "0" || s == "false" || s == "off" || s == "no") return *out = false, true;
  return false;
}

const Options& options() {
  static const Options o = read_options();
  return o;
}

}  // namespace zico
