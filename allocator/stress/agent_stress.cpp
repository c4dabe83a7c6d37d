// agent_stress.cpp — multi-process stress of the agent pool, built with ASan+UBSan or TSan by
// tests/allocator/test_allocator_sanitizers.py. The agent (this process) serves job processes
// (this binary again, spawned with their socket fd); each job runs two threads that allocate,
// write, verify and free blocks, and mark iterations, while the agent changes its budget and reads
// its stats. One job is killed midway. At the end every chunk must be back and held must never
// have passed the capacity. Exits non-zero on any violation.
//
// Usage: zico_agent_stress [jobs=3] [ops_per_thread=1500] [seed=1]
//        zico_agent_stress --job FD JOB OPS SEED   (a job process)
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "zico/zico.h"

extern char** environ;

namespace {

constexpr uint64_t MiB = 1 << 20;

uint64_t field(const std::string& json, const char* key) {
  const std::string k = std::string("\"") + key + "\":";
  size_t at = json.find(k);
  return at == std::string::npos ? UINT64_MAX : std::strtoull(json.c_str() + at + k.size(), nullptr, 10);
}

std::string stats(zico_agent_t* agent) {
  char* s = zico_agent_stats_json(agent);
  std::string out = s ? s : "";
  zico_string_free(s);
  return out;
}

int job_main(int fd, int64_t job, int ops, unsigned seed) {
  if (zico_install_agent_client(fd) != 0) {
    std::fprintf(stderr, "job %lld: install failed: %s\n", static_cast<long long>(job), zico_last_error());
    return 2;
  }
  std::atomic<int> corrupt{0}, refused{0};
  auto worker = [&](unsigned s) {
    zico_bind_thread(job, nullptr);
    std::mt19937 rng(s);
    std::vector<std::pair<unsigned char*, size_t>> held;
    for (int i = 0; i < ops; ++i) {
      if (held.size() < 6 && rng() % 3 != 0) {
        const size_t n = (size_t{4096} << (rng() % 12)) + rng() % 4096;  // 4 KiB .. ~8 MiB
        auto* p = static_cast<unsigned char*>(zico_malloc(n, ZICO_HOST_DEVICE, nullptr));
        if (!p) {
          refused.fetch_add(1);
          continue;
        }
        const unsigned char tag = static_cast<unsigned char>(job * 16 + (i & 15));
        std::memset(p, tag, n);
        held.emplace_back(p, n);
      } else if (!held.empty()) {
        auto [p, n] = held.back();
        held.pop_back();
        const unsigned char tag = p[0];
        if (p[n / 2] != tag || p[n - 1] != tag) corrupt.fetch_add(1);
        zico_free(p, n, ZICO_HOST_DEVICE, nullptr);
      }
      if (i % 50 == 49) zico_mark(job, ZICO_MARK_ITERATION_END, i / 50);
    }
    for (auto& [p, n] : held) zico_free(p, n, ZICO_HOST_DEVICE, nullptr);
  };
  std::thread a(worker, seed), b(worker, seed + 1000);
  a.join();
  b.join();
  zico_empty_cache(ZICO_HOST_DEVICE);
  if (zico_check_invariants(ZICO_HOST_DEVICE) != 0) {
    std::fprintf(stderr, "job %lld: invariants: %s\n", static_cast<long long>(job), zico_last_error());
    return 3;
  }
  std::printf("job %lld: %d refused, %d corrupt\n", static_cast<long long>(job), refused.load(), corrupt.load());
  return corrupt.load() == 0 ? 0 : 4;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::strcmp(argv[1], "--job") == 0)
    return job_main(std::atoi(argv[2]), std::atoll(argv[3]), std::atoi(argv[4]),
                    static_cast<unsigned>(std::atoi(argv[5])));
  const int jobs = argc > 1 ? std::atoi(argv[1]) : 3;
  const int ops = argc > 2 ? std::atoi(argv[2]) : 1500;
  const unsigned seed = argc > 3 ? static_cast<unsigned>(std::atoi(argv[3])) : 1;
  const uint64_t capacity = 96 * MiB;
  zico_agent_t* agent = nullptr;
  if (zico_agent_create(capacity, 64 * MiB, 2 * MiB, &agent) != 0) {
    std::fprintf(stderr, "agent: %s\n", zico_last_error());
    return 1;
  }
  zico_agent_set_wait(agent, 1.0);
  std::vector<pid_t> pids;
  for (int j = 1; j <= jobs; ++j) {
    int fd = -1;
    if (zico_agent_add_job(agent, j, j % 2, &fd) != 0) {
      std::fprintf(stderr, "add_job: %s\n", zico_last_error());
      return 1;
    }
    fcntl(fd, F_SETFD, 0);  // the child inherits it across exec
    std::string sfd = std::to_string(fd), sj = std::to_string(j), so = std::to_string(ops),
                ss = std::to_string(seed * 100 + j);
    char* args[] = {argv[0], const_cast<char*>("--job"), sfd.data(), sj.data(), so.data(), ss.data(), nullptr};
    pid_t pid = -1;
    if (posix_spawn(&pid, argv[0], nullptr, nullptr, args, environ) != 0) {
      std::perror("posix_spawn");
      return 1;
    }
    close(fd);
    pids.push_back(pid);
  }
  std::atomic<bool> done{false};
  uint64_t worst = 0;
  std::thread churn([&] {
    for (int i = 0; !done.load(); ++i) {
      zico_agent_set_budget(agent, (i % 2 ? 48 : 80) * MiB);
      const uint64_t held = field(stats(agent), "held_bytes");
      if (held != UINT64_MAX && held > worst) worst = held;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(pids[0], SIGKILL);  // a job dies while holding memory
  int failures = 0;
  for (size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    waitpid(pids[i], &status, 0);
    const bool ok = i == 0 ? (WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0))
                           : (WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!ok) {
      std::fprintf(stderr, "job %zu ended badly (status %d)\n", i + 1, status);
      ++failures;
    }
  }
  done.store(true);
  churn.join();
  std::string s;
  for (int i = 0; i < 1000; ++i) {  // the last sockets' ends are read within milliseconds
    s = stats(agent);
    if (field(s, "held_bytes") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (field(s, "held_bytes") != 0 || field(s, "chunks_free") != field(s, "chunks_total")) {
    std::fprintf(stderr, "chunks not back: %s\n", s.c_str());
    ++failures;
  }
  if (field(s, "peak_held_bytes") > capacity || worst > capacity) {
    std::fprintf(stderr, "held passed the capacity: %s\n", s.c_str());
    ++failures;
  }
  zico_agent_destroy(agent);
  std::printf("%d jobs x 2 threads x %d ops, %d failures; peak held %llu MiB, transfers %llu, scrubs %llu\n", jobs,
              ops, failures, static_cast<unsigned long long>(field(s, "peak_held_bytes") / MiB),
              static_cast<unsigned long long>(field(s, "transfers")), static_cast<unsigned long long>(field(s, "scrubs")));
  return failures == 0 ? 0 : 1;
}
