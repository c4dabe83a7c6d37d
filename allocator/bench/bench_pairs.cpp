// bench_pairs.cpp — malloc/free pair latency of the Zico host pool versus glibc malloc and
// PyTorch's default CPU allocator (c10::GetDefaultCPUAllocator), over the same log-uniform size
// mix, with one and with two threads. Built and run by bench_alloc.py; prints one JSON line per
// (allocator, threads) with nanosecond percentiles of individual pairs, and one for the timer alone
// (allocator "timer": the two clock reads every pair's figure includes).
//
// Usage: bench_pairs <pairs_per_thread> <min_log2> <max_log2> <seed>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "zico/zico.h"

namespace {

using Clock = std::chrono::steady_clock;
struct Allocator {
  std::string name;
  std::function<void*(size_t)> alloc;
  std::function<void(void*)> free;
};

std::vector<size_t> size_mix(int n, double lo, double hi, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<size_t> out(n);
  for (auto& s : out) s = static_cast<size_t>(std::exp2(d(rng)));
  return out;
}

// Times each pair on its own; the first pass warms caches (the pool-hit case is the second pass).
std::vector<double> run(const Allocator& a, const std::vector<size_t>& sizes) {
  for (size_t s : sizes) a.free(a.alloc(s));
  std::vector<double> ns;
  ns.reserve(sizes.size());
  for (size_t s : sizes) {
    auto t0 = Clock::now();
    void* p = a.alloc(s);
    a.free(p);
    auto t1 = Clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  return ns;
}

// The timer alone: two clock reads with nothing between them, as inside every timed pair.
std::vector<double> timer_floor(size_t n) {
  std::vector<double> ns;
  ns.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    auto t1 = Clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  return ns;
}

double pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: bench_pairs <pairs_per_thread> <min_log2> <max_log2> <seed>\n");
    return 2;
  }
  const int n = std::atoi(argv[1]);
  const double lo = std::atof(argv[2]), hi = std::atof(argv[3]);
  const unsigned seed = static_cast<unsigned>(std::atoi(argv[4]));
  if (zico_install_host(ZICO_HOST_DEVICE, ZICO_UNLIMITED) != 0) {
    std::fprintf(stderr, "install failed: %s\n", zico_last_error());
    return 1;
  }
  c10::Allocator* c10_default = c10::GetDefaultCPUAllocator();
  std::vector<Allocator> allocators = {
      {"glibc", [](size_t s) { return std::malloc(s); }, [](void* p) { std::free(p); }},
      {"torch_default_cpu", [=](size_t s) { return c10_default->raw_allocate(s); },
       [=](void* p) { c10_default->raw_deallocate(p); }},
      {"zico", [](size_t s) { return zico_malloc(s, ZICO_HOST_DEVICE, nullptr); },
       [](void* p) { zico_free(p, 0, ZICO_HOST_DEVICE, nullptr); }},
      {"zico_trace_off", [](size_t s) { return zico_malloc(s, ZICO_HOST_DEVICE, nullptr); },
       [](void* p) { zico_free(p, 0, ZICO_HOST_DEVICE, nullptr); }},
  };
  {
    const std::vector<double> t = timer_floor(static_cast<size_t>(n));
    std::printf("{\"allocator\":\"timer\",\"threads\":1,\"pairs\":%zu,\"p50_ns\":%.1f,\"p90_ns\":%.1f,\"p99_ns\":%.1f}\n",
                t.size(), pct(t, 0.5), pct(t, 0.9), pct(t, 0.99));
  }
  for (int threads : {1, 2}) {
    for (const Allocator& a : allocators) {
      zico_set_trace_enabled(a.name != "zico_trace_off");
      std::vector<std::vector<double>> per(threads);
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t)
        ts.emplace_back([&, t] { per[t] = run(a, size_mix(n, lo, hi, seed + 17 * t)); });
      for (auto& t : ts) t.join();
      std::vector<double> all;
      for (auto& v : per) all.insert(all.end(), v.begin(), v.end());
      std::printf("{\"allocator\":\"%s\",\"threads\":%d,\"pairs\":%zu,\"p50_ns\":%.1f,\"p90_ns\":%.1f,\"p99_ns\":%.1f}\n",
                  a.name.c_str(), threads, all.size(), pct(all, 0.5), pct(all, 0.9), pct(all, 0.99));
      zico_trace_record sink[256];
      while (zico_drain_trace(sink, 256) == 256) {}
    }
  }
  zico_set_trace_enabled(1);
  return 0;
}
