"""What is known about a job's memory need before it runs, read from what is stored: an identical job's
measured profile, an identical job's remembered profiling failure, the workload's stored CPU estimate.
Nothing here runs a workload or imports torch; the submission check and the scheduler's step before
profiling both read it, so a job is judged the same way at both.

Note [Known memory needs]
    Three stored sources, read in this order (:func:`misfit` at submission; the scheduler's
    ``_advance_queued``, zico.scheduling.service, before it profiles a job):

    1. The measured profile of an *identical* job (:func:`identical`: same workload, same params with the
       defaults filled in; for a job with code, the same code, command and env): its peak is the need. The
       scheduler copies it to the new job, which skips profiling (its status change names the job whose curve
       it took). A curve from a user's PyTorch snapshot (source ``torch-snapshot``, zico.jobs.snapshots) is
       the uploader's word, not a measurement, so it serves only identical jobs of the same tenant: the
       snapshot attached to such a job, or one uploaded for the identity itself (a profile without a job;
       Note [A snapshot is its tenant's word]). The newest of the curves a job may use wins.
    2. A remembered profiling failure of an identical job (``Job.metrics["profile_failure"]``, written by
       the control consumer with :func:`profile_failure`): an identical run would fail the same way, so
       the job is refused at submission (or failed by the scheduler) with that job's reason instead of
       being profiled again. Remembered, with when it stops applying (:func:`failure_applies`):
       out of memory while no other job held memory on the device (placed, running or profiled there; the
       job needs more than the budget it ran under, the device's or its own smaller one: Note [An
       out-of-memory says what the run had]; no longer applies once a device with a larger budget is
       registered); the profiling time
       limit (no longer applies once ``ZICO_PROFILE_TIME_LIMIT_S`` is raised past the limit it hit); an
       error the workload's own code raised (a non-finite loss, a shape error). Not remembered, so an
       identical job is profiled again: a cancel, an out-of-memory while other jobs shared the device
       (they held part of it), and errors of the machine rather than the job (:data:`MACHINE_ERRORS`,
       CUDA driver errors).
    3. The stored CPU estimate of the workload for a CUDA target (fake tensors, docs/curves.md), read
       from the estimate cache (zico_workloads.curves.estimate_cache: a hit reads one JSON file, no torch).
       ``manage.py curve estimate`` and the scheduler's background estimates
       (zico.scheduling.estimates) write it. The estimate came within 5 % of real CUDA runs
       (docs/curves.md), so a job is refused only when even ``1 - ESTIMATE_TOLERANCE`` of it exceeds
       every device budget, and the refusal's "needs ≥ X" is that lower figure. A CPU pool's need leaves
       out the cuBLAS workspaces a CUDA target holds (``meta.blas_workspace_bytes``).

    The estimate itself is never run while a request waits: cold, it takes seconds to tens of seconds
    of a loaded machine, more than a request may take; reading a stored one costs the submission a few
    milliseconds (both measured: docs/operations.md, "Input limits"). The devices judged are every
    registered device, as the scheduler's own check (zico.scheduling.snapshot): an offline device
    comes back, and a job it could hold waits for it with a reason.
"""
from __future__ import annotations

import json
import logging
import re
from typing import Any, Iterable

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.db.models import Q

from .models import Job, MemoryProfile
from .transitions import JobStatus

log = logging.getLogger(__name__)

SNAPSHOT_SOURCE = "torch-snapshot"  # a curve a user uploaded (zico.jobs.snapshots); placement.curves.SOURCES
ESTIMATE_DEVICE = "cuda:0"  # the estimate's target: cached, and a lower bound for a CPU pool less the workspaces
ESTIMATE_TOLERANCE = 0.05   # the estimate's accuracy against real CUDA runs (docs/curves.md)
# Exception names of profiling errors that say something about the machine, not the job (not remembered).
MACHINE_ERRORS = frozenset({"OSError", "IOError", "FileNotFoundError", "PermissionError", "ConnectionError",
                            "BrokenPipeError", "TimeoutError", "MemoryError", "ZicoError", "BuildError",
                            "KeyboardInterrupt", "SystemExit"})
_LIMIT = re.compile(r"profiling time limit of ([0-9.]+(?:e[+-]?[0-9]+)?) s")


def identical(workload: str, params: dict[str, Any], prefix: str = "") -> Q:
    """The one definition of an identical job: same workload key, same params (defaults filled in, as
    ``submit_job`` stores them). ``prefix`` reaches the job through a relation (``"job__"``)."""
    return Q(**{f"{prefix}workload": workload, f"{prefix}params": params})


def params_key(workload: str, params: dict[str, Any]) -> tuple[str, str]:
    """A hashable key equal for identical jobs."""
    return workload, json.dumps(params or {}, sort_keys=True, separators=(",", ":"), cls=DjangoJSONEncoder)


def any_identical(jobs: Iterable[Job], prefix: str = "") -> tuple[Q, dict]:
    """A Q matching jobs identical to any of ``jobs``, and ``{params_key: one of jobs}`` per distinct key."""
    distinct = {params_key(j.workload, j.params): j for j in jobs}
    q = Q(pk__in=[])
    for j in distinct.values():
        q |= identical(j.workload, j.params or {}, prefix)
    return q, distinct


def _newest_per_key(qs, keys: tuple[str, ...], order: tuple[str, ...]):
    """``qs`` reduced to its newest row per ``keys`` (field names): DISTINCT ON in PostgreSQL, in Python elsewhere."""
    if connection.vendor == "postgresql":
        return qs.order_by(*keys, *order).distinct(*keys)
    return qs.order_by(*order)


def _newer(a, b):
    """The newer of two profiles (either may be None)."""
    if a is None or b is None:
        return a or b
    return a if (a.created_at, a.pk) > (b.created_at, b.pk) else b


def profiles_to_reuse(jobs: list[Job]) -> dict[int, MemoryProfile]:
    """For each of ``jobs`` (without a profile of their own), the newest stored profile it may reuse (Note [Known
    memory needs]): another identical job's measured one, or, for a job with code, a snapshot's curve of its own
    tenant (attached to an identical job, or uploaded for the identity). ``{job id: profile}``; jobs with none
    are left out; a profile of another job has its ``job`` loaded. Three queries at most."""
    if not jobs:
        return {}
    mine = [j.pk for j in jobs if j.pk]
    q, _ = any_identical(jobs, "job__")
    order = ("-created_at", "-id")
    keys = ("job__workload", "job__params")
    shared: dict[tuple[str, str], MemoryProfile] = {}
    for p in _newest_per_key(MemoryProfile.objects.filter(q).exclude(job__in=mine).exclude(source=SNAPSHOT_SOURCE)
                             .select_related("job"), keys, order):
        shared.setdefault(params_key(p.job.workload, p.job.params), p)
    own: dict[tuple[int, tuple[str, str]], MemoryProfile] = {}  # (tenant id, key) -> newest snapshot curve
    coded = [j for j in jobs if j.code_id is not None]
    if coded:
        tenants = {j.tenant_id for j in coded}
        q, _ = any_identical(coded, "job__")
        for p in _newest_per_key(MemoryProfile.objects.filter(q, source=SNAPSHOT_SOURCE, job__tenant__in=tenants)
                                 .exclude(job__in=mine).select_related("job"), ("job__tenant_id", *keys), order):
            own.setdefault((p.job.tenant_id, params_key(p.job.workload, p.job.params)), p)
        ident = Q(pk__in=[])
        for params in {params_key("", j.params)[1]: j.params for j in coded}.values():
            ident |= Q(identity=params)
        for p in _newest_per_key(MemoryProfile.objects.filter(ident, job__isnull=True, tenant__in=tenants),
                                 ("tenant_id", "identity"), order):
            k = (p.tenant_id, params_key("", p.identity))
            own[k] = _newer(own.get(k), p)
    out = {}
    for j in jobs:
        k = params_key(j.workload, j.params)
        best = _newer(shared.get(k), own.get((j.tenant_id, k)) if j.code_id is not None else None)
        if best is not None:
            out[j.pk] = best
    return out


# Job.metrics key of a script job stopped at its default bound while profiled beside other jobs (Note [Where a
# script is profiled] in zico.scheduling.service): {"bound_bytes", "device", "refusals", "peak_reserved_bytes"}
# (zico.jobs.lifecycle.requeue_to_profile_alone). Such a job is profiled alone.
DEFAULT_BOUND_EXCEEDED = "default_bound_exceeded"


def profiled_alone(job: Job) -> bool:
    """Whether ``job`` was stopped at its default bound before (``Job.metrics[DEFAULT_BOUND_EXCEEDED]``), so it is
    profiled only on a device that runs nothing (Note [Where a script is profiled] in zico.scheduling.service)."""
    return isinstance((job.metrics or {}).get(DEFAULT_BOUND_EXCEEDED), dict)


def profile_failure(error: str, device, others_on_device: bool, limit_s: float | None = None,
                    own_budget_bytes: int | None = None) -> dict | None:
    """What to remember of a failed profiling run (Note [Known memory needs]), or None when it says nothing
    about an identical run.

    Args:
        error: the worker's ``profile_done`` error, ``"<ExceptionName>: <message>"`` or the time-limit text.
        device: the Device it ran on (None: unknown).
        others_on_device: whether another job held memory on that device at the time (placed, running, or a
            profile run of its own).
        limit_s: the profiling time limit it ran under (read from the error when it names one).
        own_budget_bytes: the job's own budget (``Job.budget_bytes``, the agent's hard cap on it), or None.
    Returns:
        ``{"kind": "out_of_memory" | "time_limit" | "error", "reason": error, ...}`` with ``device``,
        ``budget_bytes`` (the budget it ran out under: the device's, or its own when smaller) and ``own_budget``
        (out of memory), or ``limit_s`` (time limit).

    Note [An out-of-memory says what the run had]: the run needed more than the budget it ran under, and
    nothing more. Alone on the device that is the device budget; with its own smaller budget, that one (an
    identical job is then refused only while no device's budget is larger: :func:`failure_applies`). Beside
    another job's memory it says nothing (the neighbour held part of the device), so it is not remembered."""
    error = (error or "").strip()
    name = error.partition(":")[0].strip()
    if not error or error.startswith("cancelled"):
        return None
    if "OutOfMemoryError" in name or "out of memory" in error.lower():
        if device is None or others_on_device:
            return None
        own = own_budget_bytes is not None and 0 < own_budget_bytes < device.budget_bytes
        return {"kind": "out_of_memory", "reason": error, "device": str(device),
                "budget_bytes": int(own_budget_bytes if own else device.budget_bytes), "own_budget": own}
    if "ZICO_PROFILE_TIME_LIMIT_S" in error:
        m = _LIMIT.search(error)
        limit = float(m.group(1)) if m else limit_s
        return {"kind": "time_limit", "reason": error, "limit_s": limit} if limit else None
    if not name.isidentifier() or name in MACHINE_ERRORS or "CUDA error" in error or "CUDA driver" in error:
        return None
    return {"kind": "error", "reason": error}


def failure_applies(failure: dict, largest_budget: int | None, limit_s: float) -> bool:
    """Whether a remembered failure still predicts an identical run's (Note [Known memory needs])."""
    kind = failure.get("kind") if isinstance(failure, dict) else None
    if kind == "out_of_memory":
        budget = failure.get("budget_bytes")
        return isinstance(budget, int) and largest_budget is not None and largest_budget <= budget
    if kind == "time_limit":
        return isinstance(failure.get("limit_s"), (int, float)) and limit_s <= failure["limit_s"]
    return kind == "error"


def remembered_failures(jobs: list[Job], largest_budget: int | None) -> dict[int, Job]:
    """For each of ``jobs``, the newest identical failed job *of the same tenant* whose remembered profiling
    failure still applies (:func:`failure_applies`): ``{job id: failed job}``. One query.

    Note [A failure refuses only its own tenant]: a profiling failure is remembered only when the run had the
    device to itself (:func:`profile_failure`), but what ran beside it is the platform's judgement at the time,
    and a tenant can make its own identical job fail on purpose (a script that raises). So a remembered failure
    refuses identical jobs of the tenant whose job failed, never another tenant's: one tenant cannot poison a
    catalog configuration, or a public project, for everyone."""
    if not jobs:
        return {}
    q, _ = any_identical(jobs)
    tenants = {j.tenant_id for j in jobs}
    qs = _newest_per_key(Job.objects.filter(q, status=JobStatus.FAILED, metrics__has_key="profile_failure",
                                            tenant_id__in=tenants)
                         .exclude(pk__in=[j.pk for j in jobs if j.pk]), ("tenant_id", "workload", "params"),
                         ("-finished_at", "-id"))
    limit = float(settings.ZICO_PROFILE_TIME_LIMIT_S)
    newest: dict[tuple, Job] = {}
    for f in qs:
        newest.setdefault((f.tenant_id, *params_key(f.workload, f.params)), f)
    out = {}
    for j in jobs:
        f = newest.get((j.tenant_id, *params_key(j.workload, j.params)))
        if f is not None and failure_applies(f.metrics["profile_failure"], largest_budget, limit):
            out[j.pk] = f
    return out


def failure_sentence(failed: Job) -> str:
    """Why an identical job is not profiled again, in words, naming the job that failed: for an out-of-memory
    only what the run had (Note [An out-of-memory says what the run had]: the budget it ran out under, alone on
    its device) and the device budget an identical job needs; else the run's own reason."""
    failure = failed.metrics["profile_failure"]
    if failure.get("kind") == "out_of_memory":
        budget = failure["budget_bytes"]
        under = f"its own budget of {budget} bytes" if failure.get("own_budget") else \
            f"the device budget of {budget} bytes"
        return (f"profiling identical job {failed.pk} ran out of memory under {under}, alone on {failure['device']}: "
                f"it needs a device with a budget above {budget} bytes")
    return f"profiling identical job {failed.pk} failed: {failure.get('reason', '')}"


def stored_estimate(workload: str, params: dict[str, Any]):
    """The stored CPU estimate of ``workload`` with ``params`` for :data:`ESTIMATE_DEVICE` (a MemoryCurve), or
    None: none stored, a workload the cache does not keep (one registered through entry points), or an
    unreadable entry. Reads the cache only (zico_workloads.curves.estimate_cache); never estimates, never imports torch."""
    from zico_workloads.curves.estimate_cache import stored_estimate as lookup

    try:
        return lookup(workload, params, ESTIMATE_DEVICE, settings.ZICO_DATA_DIR, settings.ZICO_ESTIMATE_CACHE_DIR)
    except Exception:  # an unknown workload or params are refused elsewhere; a broken cache is no estimate
        log.warning("estimate cache not read for %s %s", workload, params, exc_info=True)
        return None


def estimated_need(curve, kind: str) -> int:
    """The least bytes a job with this CUDA-target estimate needs on a device of ``kind`` (``gpu`` | ``cpu``):
    its peak less the estimate's tolerance, and, for a CPU pool, less the cuBLAS workspaces."""
    peak = float(curve.peak_bytes)
    if kind != "gpu":
        blas = (curve.meta or {}).get("blas_workspace_bytes")
        peak -= float(blas) if isinstance(blas, (int, float)) and 0 < blas < peak else 0.0
    return int(peak * (1 - ESTIMATE_TOLERANCE))


def devices_budgets() -> list[tuple[str, int]]:
    """``(kind, budget bytes)`` of every registered device."""
    from zico.cluster.models import Device

    return list(Device.objects.values_list("kind", "budget_bytes"))


def estimate_misfit(curve, budget_bytes: int | None, budgets: list[tuple[str, int]]) -> tuple[str, str] | None:
    """``(field, message)`` when an estimated curve fits neither ``budget_bytes`` (the job's own) nor any of
    ``budgets`` (:func:`devices_budgets`), else None."""
    source = (f"its CPU estimate of {int(curve.peak_bytes)} bytes for {ESTIMATE_DEVICE}, less the estimate's "
              f"{ESTIMATE_TOLERANCE:.0%} tolerance")
    kinds = {k for k, _ in budgets} or {"gpu"}
    least = min(estimated_need(curve, k) for k in kinds)
    if budget_bytes is not None and least > budget_bytes:
        return "budget_bytes", f"needs ≥ {least} bytes ({source}); its budget_bytes is {budget_bytes}"
    if budgets and all(estimated_need(curve, k) > b for k, b in budgets):
        largest = max(b for _, b in budgets)
        need = min(estimated_need(curve, k) for k, _ in budgets)
        return "params", (f"needs ≥ {need} bytes ({source}); the largest device budget is {largest} bytes "
                          "(shrink the batch or the model)")
    return None


def peak_misfit(peak: int, source: str, budget_bytes: int | None, largest: int | None) -> tuple[str, str] | None:
    """``(field, message)`` when a known ``peak`` (bytes; ``source`` says whose, in words) exceeds ``budget_bytes``
    (the job's own) or ``largest`` (the largest device budget, :func:`devices_budgets`), else None."""
    if budget_bytes is not None and peak > budget_bytes:
        return "budget_bytes", f"needs ≥ {peak} bytes ({source}); its budget_bytes is {budget_bytes}"
    if largest is not None and peak > largest:
        return "params", (f"needs ≥ {peak} bytes ({source}); the largest device budget is {largest} bytes "
                          "(shrink the batch or the model)")
    return None


def misfit(workload: str, params: dict[str, Any], budget_bytes: int | None,
           tenant_id: int | None = None) -> tuple[str, str] | None:
    """``(field, message)`` when what is known of a job with this workload and full params says it can never
    run (Note [Known memory needs]): a known peak over its own budget or every device's budget, a remembered
    profiling failure of an identical job, or a stored estimate that fits nowhere; None when nothing known
    refuses it. A job with code (``workload`` empty, ``params`` its identity, ``code_identity``) is judged on
    its identical jobs alone (no estimate), and its refusal names ``code``. A remembered failure counts only
    for ``tenant_id``'s own jobs (Note [A failure refuses only its own tenant]); an identical job of another
    tenant is not named in the message."""
    budgets = devices_budgets()
    largest = max((b for _, b in budgets), default=None)
    profile = (MemoryProfile.objects.filter(identical(workload, params, "job__")).exclude(source=SNAPSHOT_SOURCE)
               .select_related("job").order_by("-created_at", "-id").defer("curve").first())
    if profile is not None:
        same = "same workload and params" if workload else "same code, command and env"
        # another tenant's job is never named (its id is not this tenant's to see)
        whose = f"job {profile.job_id}" if profile.job.tenant_id == tenant_id else "a job of another tenant"
        refused = peak_misfit(int(profile.peak_bytes), f"the measured peak of {whose}, {same}",
                              budget_bytes, largest)
        return ("code", refused[1]) if refused and refused[0] == "params" and not workload else refused
    probe = Job(workload=workload, params=params, tenant_id=tenant_id)  # not saved: its id None keys the answer
    failed = remembered_failures([probe], largest).get(None)
    if failed is not None:
        field, what = ("params", "the params") if workload else ("code", "the code, command or env")
        return field, f"{failure_sentence(failed)}; an identical job would fail the same way (change {what})"
    if not workload:
        return None  # a script has no CPU estimate
    curve = stored_estimate(workload, params)
    return estimate_misfit(curve, budget_bytes, budgets) if curve is not None else None
