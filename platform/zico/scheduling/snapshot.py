"""Reads the database into the placement core's value objects (placement.state.ClusterState):
online devices with the jobs on them, ready jobs with curves, tenants with quotas, weights and
device-memory-seconds used. Read-only; the service calls it under its round lock.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db.models import OuterRef, Subquery, TextField
from django.db.models.functions import MD5, Cast
from django.utils import timezone

from placement.compute_share import DEFAULT_COMPUTE_SHARE, stored_share
from placement.curves import CurveError, MemoryCurve, curve_from_dict
from placement.gating import planning_curve
from placement.state import ClusterState, Device as DeviceState, Job as JobState, Tenant as TenantState
from zico.cluster.models import Device, Status
from zico.jobs.models import Job, MemoryProfile
from zico.jobs.models import on_device_q
from zico.jobs.transitions import JobStatus
from zico.tenants.models import Tenant

log = logging.getLogger(__name__)

# Device-memory-seconds older than this no longer count for fair share.
USAGE_WINDOW = timedelta(days=7)


@dataclass
class Snapshot:
    """The state for a policy plus what the service needs to act on its placements."""

    state: ClusterState
    devices: dict[int, Device] = field(default_factory=dict)        # device id -> row
    jobs: dict[int, Job] = field(default_factory=dict)              # ready job id -> row
    curves: dict[int, dict[str, Any]] = field(default_factory=dict)  # job id -> curve JSON
    unplaceable: list[tuple[Job, str]] = field(default_factory=list)  # (ready job, why it can never run)
    # devices the policy does not see, (label, budget bytes, why): offline, draining, no budget, or running a
    # job of unknown memory use; they name the device a waiting job needs (placement.reasons.unavailable_devices)
    unavailable: list[tuple[str, float, str]] = field(default_factory=list)


def compute_share(curve: MemoryCurve) -> float:
    """The share of a device's compute the scheduler assumes ``curve``'s job takes: the share measured and
    stored in its ``meta["compute_share"]`` when in (0, 1] (Note [Measured compute share] in
    placement.compute_share), else DEFAULT_COMPUTE_SHARE."""
    share = stored_share(curve)
    return DEFAULT_COMPUTE_SHARE if share is None else share


@dataclass(frozen=True)
class _Curve:
    """One distinct stored curve: its JSON (sent to the worker, whose gate derives the same planning curve), the
    curve the scheduler plans with (``placement.gating.planning_curve`` of it; None when unusable) and its key."""

    json: dict[str, Any]
    curve: MemoryCurve | None
    key: str


def _job_state(job: Job, c: _Curve) -> JobState | None:
    if c.curve is None:
        log.warning("job %s: stored curve unusable; not scheduled", job.pk)
        return None
    iterations = job.total_iterations or (job.params or {}).get("iterations") or 1
    return JobState(id=job.pk, tenant=job.tenant_id, curve=c.curve, submitted_s=job.created_at.timestamp(),
                    priority=job.priority, iterations=max(1, int(iterations)),
                    compute_share=compute_share(c.curve), curve_key=c.key)


def _latest_curves(job_ids) -> dict[int, _Curve]:
    """Each job's latest stored curve. Many jobs share a curve (same workload), so the database
    returns every job's latest profile id with the MD5 of its curve's canonical ``jsonb`` text,
    and only one body per distinct hash is read and parsed (3 queries; the round's snapshot was
    dominated by reading and validating 1,000 identical-but-for-the-job curves)."""
    latest = MemoryProfile.objects.filter(job=OuterRef("pk")).order_by("-created_at", "-id")
    rows = list(Job.objects.filter(pk__in=job_ids).annotate(profile_id=Subquery(latest.values("id")[:1]))
                .filter(profile_id__isnull=False).values_list("pk", "profile_id").order_by())
    digest = dict(MemoryProfile.objects.filter(pk__in={pid for _, pid in rows})
                  .annotate(h=MD5(Cast("curve", TextField()))).values_list("pk", "h").order_by())
    first = {}
    for pid, h in digest.items():
        first.setdefault(h, pid)
    bodies = dict(MemoryProfile.objects.filter(pk__in=first.values()).values_list("pk", "curve").order_by())
    parsed: dict[str, _Curve] = {}
    for h, pid in first.items():
        body = bodies[pid]
        if not body:
            continue
        try:
            curve = planning_curve(curve_from_dict(body))  # Note [One planning rule] in placement.gating
        except CurveError as exc:
            log.warning("stored curve of profile %s unusable (%s)", pid, exc)
            curve = None
        parsed[h] = _Curve(body, curve, h)
    return {pk: parsed[digest[pid]] for pk, pid in rows if digest[pid] in parsed}


def _usage(now) -> dict[int, float]:
    """Device-memory-seconds per tenant over USAGE_WINDOW: peak bytes x run seconds per job."""
    latest_peak = MemoryProfile.objects.filter(job=OuterRef("pk")).order_by("-created_at", "-id").values("peak_bytes")[:1]
    rows = (Job.objects.filter(started_at__isnull=False, started_at__gte=now - USAGE_WINDOW)
            .annotate(peak=Subquery(latest_peak)).values("tenant_id", "peak", "started_at", "finished_at"))
    usage: dict[int, float] = {}
    for r in rows:
        seconds = ((r["finished_at"] or now) - r["started_at"]).total_seconds()
        usage[r["tenant_id"]] = usage.get(r["tenant_id"], 0.0) + float(r["peak"] or 0) * max(seconds, 0.0)
    return usage


def unavailable_reason(d: Device, blind: frozenset[int] | set[int] = frozenset()) -> str:
    """Why no job may be placed on ``d`` now (words for a waiting reason: "offline", "draining", ...),
    or ``""``; ``blind``: devices running a job whose curve is unusable."""
    if d.node.status != Status.ONLINE:
        return f"on a node that is {d.node.status}"
    if d.status != Status.ONLINE:
        return d.status
    if d.budget_bytes <= 0:
        return "given no budget"
    if d.pk in blind:
        return "running a job whose memory use is unknown"
    return ""


def take_snapshot(now=None) -> Snapshot:
    """Build the policy's view of the cluster from the database.

    Devices: online, budget > 0, with every job placed or running on them, or profiling there as its run
    starts (a device with such a job lacking a usable curve is left out: its memory use is unknown), and the
    tenants of the catalog jobs being profiled there (``profiling_tenants``: Note [Profile runs are tenants on
    their device] in placement.tenancy). Queued: ``ready``
    jobs with a curve; a ready job whose peak exceeds its own ``budget_bytes`` or every registered
    device's budget is listed in ``unplaceable`` instead (the round fails it with that reason).
    """
    now = now or timezone.now()
    usage = _usage(now)
    tenants = {t.pk: TenantState(t.pk, weight=t.share_weight, allow_cross_tenant=t.allow_cross_tenant_colocation,
                                 max_running_jobs=t.max_running_jobs, usage_byte_seconds=usage.get(t.pk, 0.0))
               for t in Tenant.objects.all()}
    resident = list(Job.objects.filter(on_device_q(), placements__ended_at__isnull=True)
                    .values_list("pk", "placements__device_id").distinct())
    ready = list(Job.objects.filter(status=JobStatus.READY).select_related("tenant"))  # its run spec reads the tenant
    curves = _latest_curves([pk for pk, _ in resident] + [j.pk for j in ready])
    resident_rows = {j.pk: j for j in Job.objects.filter(pk__in=[pk for pk, _ in resident])}
    # Note [Profile runs are tenants on their device] in placement.tenancy: a catalog job's profile run has no
    # placement, but its tenant is on the device (a script's profile run is resident already; listed again, no harm)
    profiling: dict[int, set[int]] = {}
    for dev_id, tenant_id in (Job.objects.filter(status=JobStatus.PROFILING, profiling_device_id__isnull=False)
                              .values_list("profiling_device_id", "tenant_id").distinct()):
        profiling.setdefault(dev_id, set()).add(tenant_id)
    snap = Snapshot(state=ClusterState((), (), tenants))  # filled in below
    on_device: dict[int, list[JobState]] = {}
    blind: set[int] = set()
    for pk, dev_id in resident:
        js = _job_state(resident_rows[pk], curves[pk]) if pk in curves else None
        if js is None:
            blind.add(dev_id)
        else:
            on_device.setdefault(dev_id, []).append(js)
    devices = []
    registered = list(Device.objects.select_related("node"))
    all_budgets = [d.budget_bytes for d in registered]
    for d in registered:
        why = unavailable_reason(d, blind)
        if why:
            snap.unavailable.append((str(d), float(d.budget_bytes), why))
            continue
        snap.devices[d.pk] = d
        devices.append(DeviceState(d.pk, float(d.budget_bytes), tuple(on_device.get(d.pk, ())), d.kind, d.node.host,
                                   d.index, group_share=1 - d.gate_headroom,
                                   profiling_tenants=frozenset(profiling.get(d.pk, ()))))
    queued = []
    largest = max(all_budgets, default=0)
    for job in ready:
        if job.pk not in curves:
            continue
        js = _job_state(job, curves[job.pk])
        if js is None:
            continue
        if job.budget_bytes is not None and js.peak_bytes > job.budget_bytes:
            # The job's own budget is the most bytes it may hold; a curve that needs more would be held back or
            # refused at every iteration, so the job ends now with the figures instead of running into it.
            snap.unplaceable.append((job, f"its memory peak of {int(js.peak_bytes)} bytes exceeds its own budget of "
                                          f"{job.budget_bytes} bytes (raise budget_bytes or shrink the batch)"))
            continue
        if all_budgets and js.peak_bytes > largest:
            snap.unplaceable.append((job, f"its memory peak of {int(js.peak_bytes)} bytes exceeds the largest "
                                          f"device budget of {largest} bytes"))
            continue
        snap.jobs[job.pk], snap.curves[job.pk] = job, curves[job.pk].json
        queued.append(js)
    snap.state = ClusterState(tuple(devices), tuple(queued), tenants, now.timestamp())
    return snap
