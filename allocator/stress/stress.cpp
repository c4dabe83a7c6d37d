// stress.cpp — multi-threaded stress of the C ABI, built with ASan+UBSan or TSan by
// tests/allocator/test_allocator_sanitizers.py. Threads bound to different jobs allocate, write,
// verify and free blocks (some freed by another thread), mark iterations, change the budget and
// read every report, while the pool's invariants are checked. Exits non-zero on any violation.
//
// Usage: zico_stress [threads=4] [ops_per_thread=4000] [seed=1]
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "zico/zico.h"

namespace {

constexpr int kDevice = ZICO_HOST_DEVICE;
std::atomic<int> g_failures{0};
std::mutex g_exchange_mu;
std::vector<std::pair<unsigned char*, size_t>> g_exchange;  // blocks handed to another thread to free

void fail(const char* what) {
  std::fprintf(stderr, "stress failure: %s (%s)\n", what, zico_last_error());
  g_failures.fetch_add(1);
}

bool intact(const unsigned char* p, size_t n, unsigned char tag) {
  // Check the first and last 64 bytes (the whole block would be slow under TSan).
  for (size_t i = 0; i < n && i < 64; ++i) if (p[i] != tag) return false;
  for (size_t i = n > 64 ? n - 64 : 0; i < n; ++i) if (p[i] != tag) return false;
  return true;
}

void fill(unsigned char* p, size_t n, unsigned char tag) {
  std::memset(p, tag, n < 64 ? n : 64);
  if (n > 64) std::memset(p + (n > 128 ? n - 64 : 64), tag, n > 128 ? 64 : n - 64);
}

void worker(int index, int ops, unsigned seed) {
  const int64_t job = 1 + index % 3;
  zico_bind_thread(job, nullptr);
  std::mt19937_64 rng(seed * 7919u + index);
  std::uniform_real_distribution<double> log_size(9.0, 23.0);  // 512 B .. 8 MiB
  struct Live { unsigned char* p; size_t n; unsigned char tag; };
  std::vector<Live> live;
  int64_t iteration = 0;
  zico_mark(job, ZICO_MARK_ITERATION_START, iteration);
  for (int op = 0; op < ops; ++op) {
    const int r = static_cast<int>(rng() % 100);
    if (r < 50 || live.empty()) {
      size_t n = static_cast<size_t>(std::exp2(log_size(rng)));
      auto* p = static_cast<unsigned char*>(zico_malloc(n, kDevice, nullptr));
      if (!p) continue;  // budget/capacity OOM is a legal answer
      unsigned char tag = static_cast<unsigned char>(1 + rng() % 250);
      fill(p, n, tag);
      live.push_back({p, n, tag});
    } else if (r < 85) {
      size_t i = rng() % live.size();
      if (!intact(live[i].p, live[i].n, live[i].tag)) fail("a live block was overwritten (overlap)");
      zico_free(live[i].p, live[i].n, kDevice, nullptr);
      live[i] = live.back();
      live.pop_back();
    } else if (r < 90) {
      size_t i = rng() % live.size();
      if (!intact(live[i].p, live[i].n, live[i].tag)) fail("a live block was overwritten (overlap)");
      std::lock_guard<std::mutex> lk(g_exchange_mu);
      g_exchange.emplace_back(live[i].p, live[i].n);  // another thread frees it: charged to `job`
      live[i] = live.back();
      live.pop_back();
    } else if (r < 93) {
      std::pair<unsigned char*, size_t> x{nullptr, 0};
      {
        std::lock_guard<std::mutex> lk(g_exchange_mu);
        if (!g_exchange.empty()) { x = g_exchange.back(); g_exchange.pop_back(); }
      }
      if (x.first) zico_free(x.first, x.second, kDevice, nullptr);
    } else if (r < 95) {
      zico_mark(job, ZICO_MARK_ITERATION_END, iteration);
      zico_mark(job, ZICO_MARK_ITERATION_START, ++iteration);
    } else if (r < 97) {
      if (zico_check_invariants(kDevice) != 0) fail("invariants");
    } else if (r < 98) {
      char* s = zico_memory_stats_json(kDevice, job, static_cast<int>(rng() % 2));
      if (!s) fail("stats"); else zico_string_free(s);
      s = zico_memory_snapshot_json(kDevice);
      if (!s) fail("snapshot"); else zico_string_free(s);
    } else if (r < 99) {
      zico_trace_record buf[64];
      zico_drain_trace(buf, 64);
    } else {
      uint64_t budget = (rng() % 2) ? ZICO_UNLIMITED : (64u << 20) + (rng() % 4) * (32u << 20);
      zico_set_budget(kDevice, budget);
    }
  }
  zico_mark(job, ZICO_MARK_ITERATION_END, iteration);
  for (auto& l : live) {
    if (!intact(l.p, l.n, l.tag)) fail("a live block was overwritten (overlap)");
    zico_free(l.p, l.n, kDevice, nullptr);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 4;
  const int ops = argc > 2 ? std::atoi(argv[2]) : 4000;
  const unsigned seed = argc > 3 ? static_cast<unsigned>(std::atoi(argv[3])) : 1u;
  if (zico_install_host(kDevice, 1ull << 30) != 0) { fail("install"); return 2; }
  zico_set_budget_wait(kDevice, 0.002);
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker, i, ops, seed);
  for (auto& t : pool) t.join();
  for (auto& x : g_exchange) zico_free(x.first, x.second, kDevice, nullptr);
  g_exchange.clear();
  if (zico_check_invariants(kDevice) != 0) fail("final invariants");
  char* s = zico_memory_stats_json(kDevice, 0, 0);
  if (s && !std::strstr(s, "\"allocated_bytes.all.current\":0,")) fail("memory left allocated at the end");
  if (s) { std::printf("%s\n", s); zico_string_free(s); }
  zico_empty_cache(kDevice);
  std::printf("stress: %d threads x %d ops, %d failures\n", threads, ops, g_failures.load());
  return g_failures.load() == 0 ? 0 : 1;
}
