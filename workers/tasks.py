"""Device tasks with stable names, run by a device worker (``workers.bootstrap``) in its threads pool.

* ``zico.device.run_job(job_id, spec)`` — train a job to an outcome (:mod:`workers.runner`).
* ``zico.device.profile_job(job_id, spec)`` — measure the job's memory curve on this device
  (:mod:`workers.profiling`).
* ``zico.device.describe()`` — the worker's process facts (pid, the agent's pool, the job processes running,
  CUDA state); used by tests and operators to check that tasks run in the agent's process and jobs in their own.

Tasks take ids and JSON only, are idempotent (a redelivered finished run returns its recorded outcome; a
run of a stale placement is aborted by the web side) and delegate to plain functions. The web side sends
them by name with ``queue=zico_contracts.queues.device_queue(kind, host, index)``; it never imports this module.
"""
from __future__ import annotations

import os
import threading
from typing import Any

from celery import shared_task

from zico_contracts import tasks as names

from .device import runtime


@shared_task(name=names.RUN_JOB, acks_late=True, reject_on_worker_lost=True)
def run_job(job_id: int, spec: dict[str, Any]) -> dict[str, Any]:
    """Run job ``job_id`` as described by ``spec`` (:class:`zico_contracts.specs.RunSpec`); returns the outcome.

    Raises SpecError (a ValueError) on a malformed spec; the job is then reported failed.
    """
    from zico_contracts.specs import RunSpec, SpecError

    from .runner import run

    rt = runtime()
    try:
        parsed = RunSpec.from_dict(job_id, spec)
    except SpecError as exc:
        if isinstance(job_id, int) and not isinstance(job_id, bool) and job_id > 0:
            placement = spec.get("placement") if isinstance(spec, dict) else None
            rt.link.emit("job_finished", job=job_id, status="failed", reason=f"bad run spec: {exc}",
                         placement=placement if isinstance(placement, int) and placement > 0 else None)
            rt.link.flush()
        raise
    return run(rt, parsed)


@shared_task(name=names.PROFILE_JOB, acks_late=True, reject_on_worker_lost=True)
def profile_job(job_id: int, spec: dict[str, Any]) -> dict[str, Any]:
    """Profile job ``job_id`` on this device and send its memory curve (``profile_done``); returns a summary."""
    from .profiling import profile

    return profile(runtime(), job_id, spec)


@shared_task(name=names.DESCRIBE)
def describe() -> dict[str, Any]:
    """Facts about the worker process executing this task (JSON)."""
    import sys

    rt = runtime()
    cuda_initialized = None
    if "torch" in sys.modules:
        import torch

        cuda_initialized = bool(torch.cuda.is_initialized())
    return {"pid": os.getpid(), "ppid": os.getppid(), "thread": threading.current_thread().name,
            "runtime_pid": rt.pid, "device": rt.device, "pool": "agent" if rt.agent.pool.shared else "per-process",
            "job_pids": {r.job_id: r.pid for r in rt.jobs()}, "slots": rt.config.slots,
            "budget_bytes": rt.budget_bytes, "total_bytes": rt.info.total_bytes,
            "cuda_initialized": cuda_initialized}
