/* zico.h — the C ABI of the Zico shared allocator (libzico_core.so).
 *
 * Two functions are the allocator proper, with CUDAPluggableAllocator's signatures:
 *   void* zico_malloc(size_t size, int device, void* stream);   (NULL when refused)
 *   void  zico_free(void* ptr, size_t size, int device, void* stream);
 * torch is given the torch shim's wrappers (allocator/shim/cuda_entry.cpp), which throw torch's
 * out-of-memory error instead of returning NULL; the CPU shim calls these two directly.
 * Everything else is a control call used by the Python binding (ctypes).
 *
 * Conventions:
 *   - device -1 is the host (CPU) pool; 0..63 are CUDA devices.
 *   - job 0 is the "unattributed" account; job ids are >= 0.
 *   - Control calls return 0 on success and -1 on error; zico_last_error() then holds a message
 *     for the calling thread. No call aborts the process on bad input.
 *   - Functions returning char* return a malloc'd NUL-terminated JSON document that the caller
 *     releases with zico_string_free(); NULL means error (see zico_last_error()).
 */
#ifndef ZICO_ZICO_H_
#define ZICO_ZICO_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZICO_HOST_DEVICE (-1)
#define ZICO_MAX_CUDA_DEVICES 64
#define ZICO_UNLIMITED UINT64_MAX

/* Trace record kinds. Marks (>= 10) come from zico_mark(). */
enum zico_trace_kind {
  ZICO_TRACE_ALLOC = 0,         /* delta = +block bytes */
  ZICO_TRACE_FREE = 1,          /* delta = -block bytes */
  ZICO_TRACE_SEGMENT_ALLOC = 2, /* delta = +segment bytes (reserved grows) */
  ZICO_TRACE_SEGMENT_FREE = 3,  /* delta = -segment bytes (reserved shrinks) */
  ZICO_TRACE_OOM = 4,           /* delta = requested bytes that could not be served */
  ZICO_TRACE_BUDGET_WAIT = 5,   /* a job started waiting for other jobs' frees */
  ZICO_TRACE_BUDGET_OVERRUN = 6,/* the deadlock rule let a job past the budget */
  ZICO_MARK_ITERATION_START = 10,
  ZICO_MARK_FORWARD = 11,
  ZICO_MARK_BACKWARD = 12,
  ZICO_MARK_OPTIMIZER = 13,
  ZICO_MARK_ITERATION_END = 14
};

/* One trace record; 64 bytes, layout mirrored by the Python binding. */
typedef struct zico_trace_record {
  double timestamp_s;           /* CLOCK_REALTIME, seconds since the epoch */
  int64_t job;
  int64_t delta_bytes;
  int64_t job_allocated_bytes;  /* the job's allocated bytes after this event */
  int64_t pool_allocated_bytes; /* the pool's allocated bytes after this event */
  int64_t pool_reserved_bytes;  /* the pool's reserved bytes after this event */
  int64_t iteration;            /* the job's iteration (from marks), -1 if never marked */
  int32_t device;
  int32_t kind;                 /* enum zico_trace_kind */
} zico_trace_record;

/* --- the allocator proper (CUDAPluggableAllocator signature) --- */
void* zico_malloc(size_t size, int device, void* stream);
void zico_free(void* ptr, size_t size, int device, void* stream);
/* Like zico_free, but returns 1 if ptr was a live allocation of the pool and 0 (silently) if not. */
int zico_try_free(void* ptr, int device, void* stream);

/* --- installation --- */
/* Host pool for `device` (normally ZICO_HOST_DEVICE); capacity_bytes = ZICO_UNLIMITED for none. */
int zico_install_host(int device, uint64_t capacity_bytes);
int zico_is_installed(int device);
/* "" when every ZICO_* knob parsed, else the message naming each malformed one and its accepted
 * forms; every install (and zico_agent_create) then fails with that message. Never NULL. */
const char* zico_config_error(void);
const char* zico_upstream_name(int device); /* "host", "cuda", or NULL */

/* --- job binding --- */
int zico_bind_thread(int64_t job, int64_t* previous);
int64_t zico_thread_job(void);
/* job < 0 unbinds the stream. previous receives the old binding (-1 when none). */
int zico_bind_stream(void* stream, int64_t job, int64_t* previous);

/* --- budget --- */
int zico_set_budget(int device, uint64_t bytes); /* ZICO_UNLIMITED = no budget */
int zico_get_budget(int device, uint64_t* bytes);
int zico_set_budget_wait(int device, double seconds); /* bound on waiting for frees */
int zico_get_budget_wait(int device, double* seconds);

/* --- progress marks (also fed to the deadlock rule); applies to every installed pool --- */
int zico_mark(int64_t job, int kind, int64_t iteration);

/* --- statistics (JSON; release with zico_string_free) --- */
char* zico_memory_stats_json(int device, int64_t job, int per_job); /* per_job=0: pool totals */
char* zico_memory_snapshot_json(int device);
char* zico_last_oom_json(int device);
char* zico_jobs_json(int device);
int zico_reset_peak_memory_stats(int device);
int zico_empty_cache(int device);
int zico_check_invariants(int device); /* 0 = all invariants hold, -1 = message in last_error */

/* --- trace --- */
size_t zico_drain_trace(zico_trace_record* out, size_t max_records);
int zico_set_trace_enabled(int enabled);
uint64_t zico_trace_dropped(void);

/* --- the agent pool: one pool shared by job processes (docs/allocator.md, "Agent pool") ---
 * Agent side, in the device agent process. Sizes are bytes; the pool is capacity_bytes rounded
 * down to whole chunks; budget_bytes = ZICO_UNLIMITED for none; chunk_bytes = 0 takes
 * ZICO_AGENT_CHUNK_BYTES (default 2 MiB), else it must be a multiple of 4096. */
typedef struct zico_agent zico_agent_t;
int zico_agent_create(uint64_t capacity_bytes, uint64_t budget_bytes, uint64_t chunk_bytes, zico_agent_t** out);
/* Registers job_id (> 0) of tenant_id (>= 0) and returns in *out_fd the job's end of an AF_UNIX
 * SOCK_SEQPACKET socketpair, close-on-exec set (the caller clears it or passes it with pass_fds). When
 * that socket closes (the job exited or died), the job's chunks return to the free list. */
int zico_agent_add_job(zico_agent_t* agent, int64_t job_id, int64_t tenant_id, int* out_fd);
/* Disconnects the job; every chunk it held returns to the free list, quarantined: the process may
 * still map them, so each is scrubbed before its next grant, even to the same tenant. The record
 * stays in the stats. */
int zico_agent_remove_job(zico_agent_t* agent, int64_t job_id);
int zico_agent_set_budget(zico_agent_t* agent, uint64_t bytes);
/* Marks a job yielding (1: beside gated neighbours, through its iteration), held back at its iteration
 * start by the device's coordinator (2), or neither (0): while 1 or 2, any waiting request may reclaim its
 * cached segments (Note [Yielding jobs] in agent_server.cpp); while 2, once it has returned what it can, a
 * waiter beside it is in a deadlock (Note [Held at the gate]). Other values fail. */
int zico_agent_set_yielding(zico_agent_t* agent, int64_t job_id, int yielding);
/* The most bytes job_id may hold (ZICO_UNLIMITED: none, the default); a request past it is refused, never
 * queued (Note [A job's own budget] in agent_server.cpp). 0 or an unknown job fails. */
int zico_agent_set_job_budget(zico_agent_t* agent, int64_t job_id, uint64_t bytes);
/* The most bytes the job's gate plans it to hold (ZICO_UNLIMITED: no plan): a deadlock grant never takes it past
 * this (Note [Deadlock grants within a plan] in agent_server.cpp). */
int zico_agent_set_job_plan(zico_agent_t* agent, int64_t job_id, uint64_t bytes);
/* Bound on how long a request waits for room before it is refused (seconds; default
 * ZICO_BUDGET_WAIT_S). */
int zico_agent_set_wait(zico_agent_t* agent, double seconds);
/* {"pool": {...}, "jobs": [{...}, ...]} (keys in docs/allocator.md); release with zico_string_free. */
char* zico_agent_stats_json(zico_agent_t* agent);
void zico_agent_destroy(zico_agent_t* agent);
/* Job side, in the job process, before any host allocation: the host pool (device -1) is created
 * with chunks granted by the agent on `fd` as its upstream. -1 if a host pool already exists or fd
 * is not an agent socket. The process then uses the host pool as usual (the CPU shim, zico_malloc). */
int zico_install_agent_client(int fd);

/* --- agent pool extension points: device chunks (libzico_cuda.so plugs CUDA VMM in here) ---
 * zico_chunk_ops: how the agent makes chunks. create() makes one chunk of `bytes` and returns an fd
 * to pass to jobs (the agent keeps it open) plus backend state in *handle; scrub() prepares a chunk
 * that moves to another tenant: afterwards it reads zeros and no earlier holder can reach its new
 * contents (a new backing: new fd and handle); destroy() releases both. Return 0 on success. */
typedef struct zico_chunk_ops {
  void* ctx;
  int (*create)(void* ctx, size_t bytes, int* fd, uint64_t* handle);
  int (*scrub)(void* ctx, size_t bytes, int* fd, uint64_t* handle);
  void (*destroy)(void* ctx, int fd, uint64_t handle);
  const char* name; /* "memfd", "cuda" */
} zico_chunk_ops;
int zico_agent_create_with(const zico_chunk_ops* ops, uint64_t capacity_bytes, uint64_t budget_bytes,
                           uint64_t chunk_bytes, zico_agent_t** out);
/* zico_chunk_mapper: how a job maps granted chunks. map() stitches n chunk fds into one range of
 * n * chunk_bytes (NULL on failure; the caller closes the fds); unmap() undoes it. The event
 * functions are the stream rule's primitives (Upstream in allocator/src/upstream.hpp); NULL ones
 * behave as on the host (no events). */
typedef struct zico_chunk_mapper {
  void* ctx;
  void* (*map)(void* ctx, const int* fds, size_t n, size_t chunk_bytes);
  void (*unmap)(void* ctx, void* base, size_t bytes);
  void* (*record_event)(void* ctx, void* stream);
  int (*event_done)(void* ctx, void* event);
  void (*stream_wait)(void* ctx, void* stream, void* event);
  void (*event_synchronize)(void* ctx, void* event);
  void (*destroy_event)(void* ctx, void* event);
  const char* name; /* the pool's upstream name: "agent", "agent-cuda" */
  uint64_t capacity_bytes; /* 0: the agent's capacity */
} zico_chunk_mapper;
/* Installs the pool of `device` (-1 host, 0..63 CUDA) with chunks from the agent on fd, mapped by
 * `mapper` (NULL: memfd mmap, host only). zico_install_agent_client(fd) = (-1, fd, NULL). */
int zico_install_agent_client_on(int device, int fd, const zico_chunk_mapper* mapper);

/* --- misc --- */
const char* zico_last_error(void);
void zico_string_free(char* s);
const char* zico_version(void);

#ifdef __cplusplus
}
#endif

#endif /* ZICO_ZICO_H_ */
