"""The body of ``zico.device.profile_job``: the curves issue's profiling procedure run on this device.

:func:`workers.curves.capture.profile_curve` runs a few real iterations of the job and turns the allocator
trace into a memory curve (DESIGN contract, source ``allocator-trace``). It runs in a job process of its own
under the device agent, like every job (``workers.jobproc`` with a ``profile`` spec), drawing on the device's
pool under its budget, so a profile beside running jobs can neither crash the worker nor take memory the
budget does not allow. The curve goes to the web side as a ``profile_done`` message, where the control
consumer stores it as the job's MemoryProfile. One profile runs at a time per worker, so two profiles never
distort each other.

Note [Profiling a script]
    A command job (a user's own script, ``code_url`` in the spec) is profiled by running its script in the
    sandbox as its run would (``workers.scriptproc`` with a ``profile`` spec): its first ``warmup + steady``
    optimizer steps are traced through the allocator, turned into the curve, and the script is then stopped.
    The run itself starts the script again from the beginning (a script cannot be paused across a
    re-placement); its output during profiling goes to the job's log stream, marked by a system line.

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

from .device import DeviceRuntime

log = logging.getLogger(__name__)

_profile_lock = threading.Lock()


def profile(rt: DeviceRuntime, job_id: int, spec: dict[str, Any]) -> dict[str, Any]:
    """Profile job ``job_id`` (``spec``: ``workload``, ``params``, optional ``warmup``/``steady``
    iteration counts and ``time_limit_s``) and send the curve. Returns the curve's summary, or
    ``{"error": ...}`` (also for a run stopped by its time limit or a cancel, Note [Profiling time limit]).
    Raises SpecError (a ValueError naming the field) for a malformed spec (zico_contracts.specs.ProfileSpec)."""
    from placement.curves import curve_from_dict, summary
    from zico_contracts.specs import ProfileSpec

    from . import usercode
    from .agent import JobRun

    parsed = ProfileSpec.from_dict(job_id, spec)
    warmup, steady, limit = parsed.warmup_iterations, parsed.steady_iterations, parsed.time_limit_s
    code = parsed.code  # a command job: its script is profiled (Note [Profiling a script])
    profile_fields = {"warmup": warmup, "steady": steady, "time_limit_s": limit}
    t0 = time.monotonic()
    with _profile_lock:
        dirs = output = None
        try:
            if code is not None:
                dirs = usercode.prepare(code, job_id, rt.config.var_dir or rt.config.checkpoint_dir.parent)
                proc_spec = {**usercode.script_spec(code, dirs, rt.torch_device, rt.config.data_dir),
                             "profile": profile_fields}
                output = usercode.LogRelay(rt.link.redis, job_id)
                output.line("system", f"profiling: the first {warmup + steady} iterations of the script")
            else:
                proc_spec = {"workload": spec["workload"], "params": spec.get("params") or {},
                             "device": rt.torch_device, "data_dir": str(rt.config.data_dir),
                             "checkpoint_dir": str(rt.config.checkpoint_dir), "profile": profile_fields}
            run = JobRun(job_id, proc_spec, profiling=True, tenant_id=int(spec.get("tenant") or 0),
                         stop_check=lambda: "cancelled" if rt.link.cancel_requested(job_id) else None,
                         on_output=output.line if output is not None else (lambda stream, line: None))
            result = rt.agent.run(run)
            if code is not None and result["status"] == "succeeded":
                result = {**result, **_script_curve(dirs, job_id, warmup, rt.torch_device, code)}
        except usercode.CodeFetchError as exc:
            result = {"status": "failed", "reason": str(exc)}
        except (OSError, RuntimeError) as exc:
            result = {"status": "failed", "reason": f"could not start the profile run: {type(exc).__name__}: {exc}"}
        finally:
            if dirs is not None:
                usercode.cleanup(dirs)
            if output is not None:
                output.close()
    error = None
    if result["status"] != "succeeded" or "curve" not in result:
        error = result.get("reason") or f"profile run ended {result['status']}"
        if result["status"] == "cancelled":
            error = "cancelled on request"
    else:
        try:
            curve = curve_from_dict(result["curve"])
        except ValueError as exc:
            error = f"the profile run sent a malformed curve: {exc}"
    if error is not None:  # the job is failed with the reason by the web side
        log.warning("profiling job %s failed: %s", job_id, error)
        rt.link.emit("profile_done", job=job_id, error=error[:1500])
        rt.link.flush()
        return {"job": job_id, "error": error}
    rt.link.emit("profile_done", job=job_id, curve=curve.to_dict(), profile_s=round(time.monotonic() - t0, 3))
    rt.link.flush()
    return {"job": job_id, **summary(curve)}


def _script_curve(dirs, job_id: int, warmup: int, device: str, code) -> dict[str, Any]:
    """``{"curve": ...}`` from the trace a script's profile run left in its scratch dir (workers.scriptproc),
    or ``{"status": "failed", "reason": ...}`` when it is missing or holds no usable iteration."""
    import json
    from types import SimpleNamespace

    from placement.curves import CurveError
    from workers.curves.capture import allocator_records_to_trace
    from zico_workloads.curves.trace import trace_curve

    from .scriptproc import PROFILE_TRACE

    try:
        rows = json.loads((dirs.scratch_dir / PROFILE_TRACE).read_text())
        records = [SimpleNamespace(kind=k, timestamp_s=t, job_allocated_bytes=a, delta_bytes=d, iteration=i,
                                   job=job_id) for k, t, a, d, i in rows]
        curve = trace_curve(allocator_records_to_trace(records, job_id), warmup=warmup, source="allocator-trace",
                            device=device if device == "cpu" else f"cuda:{device.partition(':')[2] or 0}",
                            meta={"command": list(code.command), "code_sha256": code.code_sha256})
    except (OSError, ValueError, TypeError, CurveError) as exc:
        return {"status": "failed", "reason": f"the script's profile trace is unusable: {type(exc).__name__}: {exc}"}
    return {"curve": curve.to_dict()}
