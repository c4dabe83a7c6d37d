"""The body of ``zico.device.profile_job``: the curves issue's profiling procedure run on this device.

:func:`workers.curves.capture.profile_curve` runs a few real iterations of the job through the shared
allocator and turns the allocator trace into a memory curve (DESIGN contract, source ``allocator-trace``);
the curve goes to the web side as a ``profile_done`` message, where the control consumer stores it as the
job's MemoryProfile. One profile runs at a time per worker, so two profiles never distort each other.

Note [Profiling time limit]
    The spec's ``time_limit_s`` (the web side's ``ZICO_PROFILE_TIME_LIMIT_S``, see Job.profile_spec) bounds
    a run: after each iteration past the limit, or once the job was cancelled, the run stops, its memory
    is released and ``profile_done`` carries the reason, so the job fails with it. An iteration is never
    interrupted, so a run ends at most one iteration after the limit; until then it holds the worker's
    profiling lock and one task slot. A spec without the key (an older web side) has no limit.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

from .device import DeviceRuntime, JobState

log = logging.getLogger(__name__)
_profile_lock = threading.Lock()


def profile(rt: DeviceRuntime, job_id: int, spec: dict[str, Any]) -> dict[str, Any]:
    """Profile job ``job_id`` (``spec``: ``workload``, ``params``, optional ``warmup``/``steady``
    iteration counts and ``time_limit_s``) and send the curve. Returns the curve's summary, or
    ``{"error": ...}`` (also for a run stopped by its time limit or a cancel, Note [Profiling time limit]).

    Raises ValueError for a malformed spec."""
    from placement.curves import summary
    from workers.curves.capture import profile_curve

    if isinstance(job_id, bool) or not isinstance(job_id, int) or not isinstance(spec, dict):
        raise ValueError(f"profile_job needs an int job id and a JSON object spec, got {job_id!r}, {spec!r}")
    warmup, steady = int(spec.get("warmup", 1)), int(spec.get("steady", 3))
    limit = spec.get("time_limit_s")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit <= 0):
        raise ValueError(f"profile_job: time_limit_s must be a positive number of seconds, got {limit!r}")
    with _profile_lock:
        state = JobState(job_id=job_id, iterations=warmup + steady, phase="profiling")
        rt.add_job(state)
        t0 = time.monotonic()

        def stop(done: int) -> str | None:  # Note [Profiling time limit]
            elapsed = time.monotonic() - t0
            if limit is not None and elapsed > limit:
                return (f"stopped after {elapsed:.0f} s and {done} of {warmup + steady} iterations: over the "
                        f"profiling time limit of {limit:g} s (ZICO_PROFILE_TIME_LIMIT_S)")
            if rt.link.cancel_requested(job_id):
                return "cancelled on request"
            return None

        try:
            curve = profile_curve(spec["workload"], spec.get("params") or {}, device=rt.torch_device,
                                  data_dir=rt.config.data_dir, warmup=warmup, steady=steady, job_id=job_id,
                                  stop=stop)
        except Exception as exc:  # the job is failed with the reason by the web side
            log.exception("profiling job %s failed", job_id)
            rt.link.emit("profile_done", job=job_id, error=f"{type(exc).__name__}: {exc}"[:1500])
            rt.link.flush()
            return {"job": job_id, "error": str(exc)}
        finally:
            rt.remove_job(job_id)
    rt.link.emit("profile_done", job=job_id, curve=curve.to_dict(), profile_s=round(time.monotonic() - t0, 3))
    rt.link.flush()
    return {"job": job_id, **summary(curve)}
