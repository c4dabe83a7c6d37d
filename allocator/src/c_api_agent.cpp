// c_api_agent.cpp — the agent pool's part of the C ABI (include/zico/zico.h): the device agent's
// calls (zico_agent_*) and the job side's zico_install_agent_client. Same conventions as
// c_api.cpp: return codes, a thread-local message, no exception crossing into C.
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "agent_server.hpp"
#include "agent_upstream.hpp"
#include "chunk_os.hpp"
#include "options.hpp"
#include "registry.hpp"
#include "zico/zico.h"

using namespace zico;

namespace zico {
void set_last_error(const std::string& msg);  // c_api.cpp: the thread-local zico_last_error()
}

struct zico_agent {
  std::unique_ptr<AgentServer> server;
};

namespace {
int agent_fail(const std::string& msg) {
  set_last_error(msg);
  return -1;
}
template <class F>
int agent_guarded(F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return agent_fail(std::string("internal error: ") + e.what());
  } catch (...) {
    return agent_fail("internal error");
  }
}
}  // namespace

extern "C" {

int zico_agent_create(uint64_t capacity_bytes, uint64_t budget_bytes, uint64_t chunk_bytes, zico_agent_t** out) {
  return zico_agent_create_with(memfd_chunk_ops(), capacity_bytes, budget_bytes, chunk_bytes, out);
}

int zico_agent_create_with(const zico_chunk_ops* ops, uint64_t capacity_bytes, uint64_t budget_bytes,
                           uint64_t chunk_bytes, zico_agent_t** out) {
  return agent_guarded([&] {
    if (!out || !ops) return agent_fail("ops and out must not be NULL");
    *out = nullptr;
    // Note [Malformed knobs fail the first install] (options.hpp)
    if (!options().error.empty()) return agent_fail(options().error);
    if (chunk_bytes == 0) chunk_bytes = options().agent_chunk_bytes;
    std::string why;
    AgentServer* s = AgentServer::create(*ops, capacity_bytes, budget_bytes, chunk_bytes, &why);
    if (!s) return agent_fail(why);
    *out = new zico_agent{std::unique_ptr<AgentServer>(s)};
    return 0;
  });
}

int zico_agent_add_job(zico_agent_t* agent, int64_t job_id, int64_t tenant_id, int* out_fd) {
  return agent_guarded([&] {
    if (!agent || !out_fd) return agent_fail("agent and out_fd must not be NULL");
    if (job_id <= 0) return agent_fail("job id must be > 0, got " + std::to_string(job_id));
    if (tenant_id < 0) return agent_fail("tenant id must be >= 0, got " + std::to_string(tenant_id));
    std::string why;
    int fd = agent->server->add_job(job_id, tenant_id, &why);
    if (fd < 0) return agent_fail(why);
    *out_fd = fd;
    return 0;
  });
}

int zico_agent_remove_job(zico_agent_t* agent, int64_t job_id) {
  return agent_guarded([&] {
    if (!agent) return agent_fail("agent must not be NULL");
    std::string why;
    return agent->server->remove_job(job_id, &why) ? 0 : agent_fail(why);
  });
}

int zico_agent_set_budget(zico_agent_t* agent, uint64_t bytes) {
  return agent_guarded([&] {
    if (!agent) return agent_fail("agent must not be NULL");
    if (bytes == 0) return agent_fail("budget must be positive (ZICO_UNLIMITED for none)");
    agent->server->set_budget(bytes);
    return 0;
  });
}

int zico_agent_set_yielding(zico_agent_t* agent, int64_t job_id, int yielding) {
  return agent_guarded([&] {
    if (!agent) return agent_fail("agent must not be NULL");
    if (yielding < 0 || yielding > 2) return agent_fail("yielding must be 0, 1 or 2, got " + std::to_string(yielding));
    if (!agent->server->set_yielding(job_id, yielding))
      return agent_fail("no job " + std::to_string(job_id) + " in this agent");
    return 0;
  });
}

int zico_agent_set_job_budget(zico_agent_t* agent, int64_t job_id, uint64_t bytes) {
  return agent_guarded([&] {
    if (!agent) return agent_fail("agent must not be NULL");
    if (bytes == 0) return agent_fail("a job's budget must be positive (ZICO_UNLIMITED for none)");
    if (!agent->server->set_job_budget(job_id, bytes))
      return agent_fail("no job " + std::to_string(job_id) + " in this agent");
    return 0;
  });
}

int zico_agent_set_job_plan(zico_agent_t* agent, int64_t job_id, uint64_t bytes) {
  return agent_guarded([&] {
    if (!agent) return agent_fail("agent must not be NULL");
    if (bytes == 0) return agent_fail("a job's plan must be positive (ZICO_UNLIMITED for none)");
    if (!agent->server->set_job_plan(job_id, bytes))
      return agent_fail("no job " + std::to_string(job_id) + " in this agent");
    return 0;
  });
}

int zico_agent_set_wait(zico_agent_t* agent, double seconds) {
  return agent_guarded([&] {
    if (!agent) return agent_fail("agent must not be NULL");
    if (!(seconds >= 0) || seconds > 1e6) return agent_fail("wait must be in [0, 1e6] seconds");
    agent->server->set_wait(seconds);
    return 0;
  });
}

char* zico_agent_stats_json(zico_agent_t* agent) {
  try {
    if (!agent) {
      set_last_error("agent must not be NULL");
      return nullptr;
    }
    std::string s = agent->server->stats_json();
    char* out = static_cast<char*>(std::malloc(s.size() + 1));
    if (out) std::memcpy(out, s.c_str(), s.size() + 1);
    else set_last_error("out of host memory for a result string");
    return out;
  } catch (const std::exception& e) {
    set_last_error(std::string("internal error: ") + e.what());
    return nullptr;
  }
}

void zico_agent_destroy(zico_agent_t* agent) { delete agent; }

int zico_install_agent_client(int fd) { return zico_install_agent_client_on(ZICO_HOST_DEVICE, fd, nullptr); }

int zico_install_agent_client_on(int device, int fd, const zico_chunk_mapper* mapper) {
  return agent_guarded([&] {
    if (fd < 0) return agent_fail("fd must be a socket from zico_agent_add_job, got " + std::to_string(fd));
    if (device < ZICO_HOST_DEVICE || device >= ZICO_MAX_CUDA_DEVICES)
      return agent_fail("device must be -1 (host) or 0..63, got " + std::to_string(device));
    if (device != ZICO_HOST_DEVICE && (!mapper || !mapper->map || !mapper->unmap))
      return agent_fail("a device pool needs a chunk mapper (the CUDA library's zico_install_agent_client_cuda)");
    if (!options().error.empty()) return agent_fail(options().error);  // Note [Malformed knobs fail the first install]
    if (pool_for(device))
      return agent_fail("a pool is already installed on device " + std::to_string(device) +
                        "; install the agent client before any allocation there");
    std::string why;
    AgentUpstream* up = AgentUpstream::connect(fd, mapper, &why);
    if (!up) return agent_fail(why);
    if (!install_pool(device, std::unique_ptr<Upstream>(up), &why)) return agent_fail(why);
    up->start(pool_for(device));
    return 0;
  });
}

}  // extern "C"
