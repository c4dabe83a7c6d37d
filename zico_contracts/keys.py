"""Redis key and channel names — the one module that declares them, shared by device workers and the web side.

Device workers talk to the web side only through Redis (docs/architecture.md). Everything they exchange is named here:

=================================  ======  ====================================================================
name                               type    meaning
=================================  ======  ====================================================================
``zico:telemetry``                 stream  memory samples (job, device, t, allocated, reserved, iteration, phase)
                                           read by the control consumer and, with a cursor, by the pages'
                                           live endpoints (zico.web.live); trimmed to ``TELEMETRY_STREAM_MAXLEN``
``zico:control``                   stream  lifecycle messages worker -> control consumer (zico_contracts.lifecycle)
``zico:workers``                   set     device keys of every worker that ever registered
``zico:worker:<dev>:heartbeat``    string  JSON {pid, t, jobs}; expires after ``HEARTBEAT_TTL_S``
``zico:device:<dev>:budget``       string  budget bytes the web side wants the device to hold; read by the worker
``zico:job:<job>:cancel``          string  set by the web side to cancel a running job (the worker checks it
                                           before every iteration)
``zico:job:<job>:abort:<pl>``      string  set by the control consumer to stop a stale run (placement ``pl``
                                           is no longer the job's active placement)
``zico:job:<job>:done``            string  outcome of a finished run, with its placement and ``run_token``
                                           (makes ``run_job`` idempotent; a record with another token
                                           is another deployment's and is ignored)
``zico:job:<job>:log``             stream  a job's output lines (t, stream, line, cut), capped; declared in
                                           ``zico_contracts.joblog`` (the worker writes it, the web side
                                           reads it and stores it when the job ends)
``zico:estimate:requests``         hash    CPU estimates users asked for through the API, waiting for the
                                           scheduler (web side only): request key -> JSON {workload, params,
                                           requested_at}; at most ``ESTIMATE_REQUESTS_MAX`` fields
``zico:estimate:<req>:failed``     string  why the scheduler's estimate of request ``<req>`` failed; expires
                                           after ``ESTIMATE_FAILURE_TTL_S`` (web side only)
=================================  ======  ====================================================================

``<dev>`` is a device key from :func:`zico_contracts.queues.device_key` (also ``keys.device_key``), e.g.
``gpu.node1.0`` or ``cpu.node1.0``.
Standard library only (a Redis client is passed in where one is needed).
"""
from __future__ import annotations

from zico_contracts.queues import device_key, parse_device_key  # noqa: F401  (the <dev> part of the names)

PREFIX = "zico"
TELEMETRY_STREAM = f"{PREFIX}:telemetry"
CONTROL_STREAM = f"{PREFIX}:control"
CONTROL_GROUP = "control"  # consumer group of the control consumer(s) on both streams
WORKERS_SET = f"{PREFIX}:workers"

# Samples are lossy live data: keep at most this many in the stream (~ minutes at 4 Hz x 100 jobs).
TELEMETRY_STREAM_MAXLEN = 100_000
# A worker refreshes its heartbeat every HEARTBEAT_INTERVAL_S; the key expires after HEARTBEAT_TTL_S.
HEARTBEAT_INTERVAL_S = 1.0
HEARTBEAT_TTL_S = 30
# Reporter publishing period: 0.2 s = 5 Hz (issue 6 asks for >= 4 Hz).
SAMPLE_INTERVAL_S = 0.2
CANCEL_TTL_S = 24 * 3600
DONE_TTL_S = 7 * 24 * 3600

# Lifecycle messages on CONTROL_STREAM: their kinds and fields are zico_contracts.lifecycle's.

# Estimates asked for through the API (Note [Estimates users ask for] in zico.scheduling.estimate_requests).
ESTIMATE_REQUESTS = f"{PREFIX}:estimate:requests"
ESTIMATE_REQUESTS_MAX = 16          # waiting requests at once; more are refused until some are done
ESTIMATE_FAILURE_TTL_S = 3600       # how long a failed estimate is answered as failed before it may be asked again


def estimate_failure_key(request: str) -> str:
    return f"{PREFIX}:estimate:{request}:failed"


# A job_finished reason is stored up to this many characters (Job.failure_reason); a worker fits a failed job's
# last stderr lines within it, dropping the oldest (workers.agent.agent.failure_reason).
REASON_MAX_CHARS = 2000


def heartbeat_key(dev: str) -> str:
    return f"{PREFIX}:worker:{dev}:heartbeat"


def budget_key(dev: str) -> str:
    return f"{PREFIX}:device:{dev}:budget"


def gate_headroom_key(dev: str) -> str:
    """The device row's gate headroom (a float in [0, 1)), written by the web side beside the budget."""
    return f"{PREFIX}:device:{dev}:gate_headroom"


def cancel_key(job_id: int) -> str:
    return f"{PREFIX}:job:{int(job_id)}:cancel"


def abort_key(job_id: int, placement_id) -> str:
    return f"{PREFIX}:job:{int(job_id)}:abort:{placement_id}"


def done_key(job_id: int) -> str:
    return f"{PREFIX}:job:{int(job_id)}:done"


def request_cancel(redis_client, job_id: int) -> None:
    """Ask the worker running ``job_id`` to stop before its next iteration (web side helper)."""
    redis_client.set(cancel_key(job_id), "1", ex=CANCEL_TTL_S)
