"""The body of ``zico.device.profile_job``: the curves issue's profiling procedure run on this device.

A catalog job's profile is the first ``warmup + steady`` iterations of the built-in catalog project
(``workers/job/catalog_project/train.py``) run by the same path as its run and as a user's script
(``workers.job.entry`` in the job's sandbox, Note [Catalog jobs run as scripts] in workers.runner), traced
through the allocator as a script's profile is (Note [A script's profile is the start of its run] there) and
turned into a memory curve (DESIGN contract, source ``allocator-trace``; ``meta``: workload, params with the
catalog's defaults, ``profile_s``, and ``held_peak_bytes``, the bytes its pool held at most, for the one planning
rule: placement.gating). It runs in a job process of its own under the device agent, like every job,
drawing on the device's pool under its budget, so a profile beside running jobs can neither crash the worker
nor take memory the budget does not allow; on a host without a sandbox, the same process unwrapped (Note [No
sandbox for Zico's own code] in workers.agent.sandbox). The tools that measure Zico (``tools.colocate``, the real-run
experiment) profile through :func:`catalog_profile` too (tools.jobpath); ``python -m workers.curves profile``
measures a workload in its own process with :func:`workers.curves.capture.profile_curve`. The curve goes to the
web side as a ``profile_done`` message, where the control consumer stores it as the job's MemoryProfile. One
profile runs at a time per worker, so two profiles never distort each other.

A command job (a user's own script, ``code_url`` in the spec) is not profiled here: its profile is the start of
its run (``run_job`` with ``profile``, Note [A script's profile is the start of its run] in workers.runner); a
``profile_job`` for one ends with that error.

Note [Profiling time limit]
    The spec's ``time_limit_s`` (the web side's ``ZICO_PROFILE_TIME_LIMIT_S``, see Job.profile_spec) bounds
    a run: after each iteration past the limit, or once the job was cancelled, the run stops, its memory
    is released and ``profile_done`` carries the reason, so the job fails with it. An iteration is never
    interrupted, so a run ends at most one iteration after the limit; until then it holds the worker's
    profiling lock and one task slot. A spec without the key (an older web side) has no limit.

Note [A stale profile run]
    ``profile_job`` may come twice: a restarted scheduler resends the task of every job still ``profiling``,
    because the database cannot say whether the dead one sent it (Note [Scheduler restarts] in
    zico.scheduling.recovery). The second run waits for the profiling lock; by the time it holds it the web
    side may have stored the first curve and placed the job, whose ``run_job`` then finds the job's (stale)
    profile running here. The run supersedes it (``DeviceAgent.supersede_profile``: stopped like a cancel, and
    the run starts once it has ended) and a superseded profile sends nothing. A stale profile that does send a
    result changes nothing either: the control consumer stores a late curve and ignores a late error for a job
    that is no longer ``profiling``. Before this, the run raised "already running", nothing ever sent it again,
    and the job stayed ``placed``.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

from .device import DeviceRuntime
from .joblines import escape_controls, neutral_paths

log = logging.getLogger(__name__)

_profile_lock = threading.Lock()


def profile(rt: DeviceRuntime, job_id: int, spec: dict[str, Any]) -> dict[str, Any]:
    """Profile job ``job_id`` (``spec``: ``workload``, ``params``, optional ``warmup``/``steady``
    iteration counts and ``time_limit_s``) and send the curve. Returns the curve's summary, or
    ``{"error": ...}`` (also for a run stopped by its time limit or a cancel, Note [Profiling time limit]).
    Raises SpecError (a ValueError naming the field) for a malformed spec (zico_contracts.specs.ProfileSpec)."""
    from placement.curves import curve_from_dict, summary
    from zico_contracts.specs import ProfileSpec

    from .agent import SUPERSEDED

    parsed = ProfileSpec.from_dict(job_id, spec)
    warmup, steady, limit = parsed.warmup_iterations, parsed.steady_iterations, parsed.time_limit_s
    code = parsed.code
    profile_fields = {"warmup": warmup, "steady": steady, "time_limit_s": limit}
    t0 = time.monotonic()
    if code is not None:  # Note [A script's profile is the start of its run] in workers.runner
        result = {"status": "failed", "reason": "a job with code is profiled as its run starts (run_job with a "
                                                "profile), not by profile_job"}
    else:
        with _profile_lock:
            result = catalog_profile(rt, parsed, profile_fields,
                                     lambda: "cancelled" if rt.link.cancel_requested(job_id) else None)
    if result["status"] == SUPERSEDED:  # Note [A stale profile run]
        log.info("profile of job %s superseded by its run; nothing sent", job_id)
        return {"job": job_id, "error": result["reason"]}
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
    if error is not None:  # the job is failed with the reason by the web side, which its tenant reads
        error = neutral_paths(error)  # Note [Host paths in what a tenant sees] in workers.joblines
        log.warning("profiling job %s failed: %s", job_id, escape_controls(error))
        rt.link.emit("profile_done", job=job_id, error=error[:1500])
        rt.link.flush()
        return {"job": job_id, "error": error}
    rt.link.emit("profile_done", job=job_id, curve=curve.to_dict(), profile_s=round(time.monotonic() - t0, 3))
    rt.link.flush()
    return {"job": job_id, **summary(curve)}


def catalog_profile(rt: DeviceRuntime, spec, profile_fields: dict[str, Any],
                    stop_check=lambda: None) -> dict[str, Any]:
    """The profile run of catalog job ``spec`` (a ProfileSpec) as the built-in catalog project's first
    ``warmup + steady`` iterations, through the user-script path (Note [Catalog jobs run as scripts] in
    workers.runner; the trace as Note [A script's profile is the start of its run] there); returns the agent's
    outcome, with ``curve`` (a dict) when it succeeded and the trace held a usable iteration. ``stop_check()``:
    a reason to stop the run ("cancelled"), or None. The device worker's ``profile_job`` and the tools
    (tools.jobpath) profile through here. Never raises for the job's failures (``status`` and ``reason``)."""
    from . import jobdisk
    from .agent import JobRun
    from .profiletrace import profiled_curve
    from .runner import catalog_script_spec

    dirs = None
    try:
        dirs, proc_spec = catalog_script_spec(rt, spec, profile_fields)
        run = JobRun(spec.job, proc_spec, profiling=True, tenant_id=int(spec.tenant or 0),
                     budget_bytes=spec.job_budget_bytes, wall_limit=spec.wall_limit,
                     stop_check=stop_check)
        result = rt.agent.run(run)
        if result["status"] == "succeeded":
            result["curve"] = profiled_curve(dirs, spec.job, profile_fields["warmup"], rt.torch_device,
                                             {"workload": spec.workload, "params": proc_params(spec),
                                              "profile_s": result.get("metrics", {}).get("run_s")},
                                             result.get("metrics", {}).get("peak_reserved_bytes"))
    except ValueError as exc:  # bad params, or a trace without a usable iteration
        result = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}
    except (OSError, RuntimeError) as exc:
        result = {"status": "failed", "reason": f"could not start the profile run: {type(exc).__name__}: {exc}"}
    finally:
        if dirs is not None:  # Note [A job's disk] in workers.agent.diskwatch: it may be a file system of its own
            jobdisk.remove_run_dir(dirs.scratch_dir.parent, jobdisk.of_runtime(rt))
    return result


def proc_params(spec) -> dict[str, Any]:
    """The job's params with the catalog's defaults (what a curve's ``meta.params`` holds)."""
    from zico_workloads.catalog import validate_params

    return validate_params(spec.workload, spec.params)
