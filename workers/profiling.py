"""The body of ``zico.device.profile_job``: the curves issue's profiling procedure run on this device.

:func:`workers.curves.capture.profile_curve` runs a few real iterations of the job through the shared
allocator and turns the allocator trace into a memory curve (DESIGN contract, source ``allocator-trace``);
the curve goes to the web side as a ``profile_done`` message, where the control consumer stores it as the
job's MemoryProfile. One profile runs at a time per worker, so two profiles never distort each other.
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
    iteration counts) and send the curve. Returns the curve's summary, or ``{"error": ...}``."""
    from placement.curves import summary
    from workers.curves.capture import profile_curve

    if isinstance(job_id, bool) or not isinstance(job_id, int) or not isinstance(spec, dict):
        raise ValueError(f"profile_job needs an int job id and a JSON object spec, got {job_id!r}, {spec!r}")
    warmup, steady = int(spec.get("warmup", 1)), int(spec.get("steady", 3))
    with _profile_lock:
        state = JobState(job_id=job_id, iterations=warmup + steady, phase="profiling")
        rt.add_job(state)
        t0 = time.monotonic()
        try:
            curve = profile_curve(spec["workload"], spec.get("params") or {}, device=rt.torch_device,
                                  data_dir=rt.config.data_dir, warmup=warmup, steady=steady, job_id=job_id)
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
