// trace_clock.hpp — the trace's timestamp source: raw TSC ticks read per event (a few cycles), turned
// into CLOCK_REALTIME seconds when the ring is drained; clock_gettime per event where the TSC is
// not a reliable clock. Not thread-safe for to_seconds(): DevicePool holds the lock.
#pragma once
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#define ZICO_HAVE_TSC 1
#endif

namespace zico {

// Note [Trace timestamps]
// ~~~~~~~~~~~~~~~~~~~~~~~
// Rule: every trace record carries CLOCK_REALTIME seconds of the moment the event happened, at
// nanosecond resolution; the hot path (one record per allocation and per free) pays only a TSC read.
//
// Rationale: clock_gettime through the vDSO costs ~20-35 ns on the development VM, i.e. two reads
// per malloc/free pair were a third of the pair's pool-hit latency with tracing on. rdtsc is the
// counter the kernel's own clock is computed from (clocksource "tsc"), read in a few cycles.
//
// Approach: push() stores the raw tick count. At drain, one (TSC, CLOCK_REALTIME, CLOCK_MONOTONIC)
// triple is read "now", and a record of tick count k becomes
//     realtime_now - (tsc_now - k) / rate,   rate = (tsc_now - tsc_0) / (mono_now - mono_0)
// with (tsc_0, mono_0) read when the pool was created: the rate is the long-run ticks per
// monotonic second (immune to realtime steps), the offset is anchored at the drain itself. The error
// of a record of age d is d × the rate's relative error (parts per million once the pool is a
// second old; at most the anchors' read skew before) plus the ~30 ns skew of reading the triple.
//
// Limits: used only when the CPU says its TSC is invariant (CPUID 0x80000007 EDX bit 8) and the
// kernel clocksource is "tsc" (so the kernel checked it is synchronised across CPUs); otherwise
// each event reads CLOCK_REALTIME itself (tick count = nanoseconds), as before. A realtime step
// between an event and its drain shifts the event with it (it is placed relative to the drain).
class TraceClock {
 public:
  TraceClock() : tsc_(tsc_reliable()) {
    if (tsc_) {
      tsc0_ = ticks();
      mono0_ = now_ns(CLOCK_MONOTONIC);
    }
  }
  bool uses_tsc() const { return tsc_; }

  // The hot path: a raw tick count (TSC ticks, or CLOCK_REALTIME nanoseconds without a usable TSC).
  uint64_t ticks() const {
#ifdef ZICO_HAVE_TSC
    if (tsc_) return __rdtsc();
#endif
    return static_cast<uint64_t>(now_ns(CLOCK_REALTIME));
  }

  // Converter for one drain: reads the "now" triple once; to_seconds() maps tick counts.
  struct Converter {
    bool tsc;
    uint64_t tsc_now;
    double real_now_s, ticks_per_s;
    double to_seconds(uint64_t k) const {
      if (!tsc) return static_cast<double>(k) * 1e-9;
      if (ticks_per_s <= 0) return real_now_s;
      return real_now_s - static_cast<double>(static_cast<int64_t>(tsc_now - k)) / ticks_per_s;
    }
  };
  Converter converter() const {
    Converter c{tsc_, 0, 0, 0};
    if (!tsc_) return c;
    c.tsc_now = ticks();
    const int64_t real = now_ns(CLOCK_REALTIME), mono = now_ns(CLOCK_MONOTONIC);
    c.real_now_s = static_cast<double>(real) * 1e-9;
    if (mono > mono0_ && c.tsc_now > tsc0_)
      c.ticks_per_s = static_cast<double>(c.tsc_now - tsc0_) / (static_cast<double>(mono - mono0_) * 1e-9);
    return c;
  }

 private:
  static int64_t now_ns(clockid_t id) {
    timespec ts;
    clock_gettime(id, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }
  static bool tsc_reliable() {
#ifdef ZICO_HAVE_TSC
    unsigned a, b, c, d;
    if (!__get_cpuid(0x80000000, &a, &b, &c, &d) || a < 0x80000007) return false;
    __get_cpuid(0x80000007, &a, &b, &c, &d);
    if (!(d & (1u << 8))) return false;  // invariant TSC
    char name[32] = {0};
    if (FILE* f = std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r")) {
      if (!std::fgets(name, sizeof(name), f)) name[0] = 0;
      std::fclose(f);
    }
    return std::strncmp(name, "tsc\n", 4) == 0 || std::strcmp(name, "tsc") == 0;
#else
    return false;
#endif
  }

  bool tsc_;
  uint64_t tsc0_ = 0;
  int64_t mono0_ = 0;
};

}  // namespace zico
