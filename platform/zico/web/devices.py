"""Device pages: the cluster overview (devices, allocated and reserved versus budget, jobs) and the device
timeline for admins."""
from __future__ import annotations

import json

import redis
from django.contrib.auth.decorators import login_required
from django.db.models import OuterRef, Subquery
from django.shortcuts import render
from django.utils import timezone

from zico.cluster.models import Device, Placement
from zico.telemetry.models import TimelinePoint

from zico_contracts import cpushare, jobdisk, keys

from . import access, live
from .timelines import DEFAULT_WINDOW_S, WINDOWS_S

STALE_S = 120  # a pool reading older than this is not the device's memory now (workers sample at 5 Hz)


@login_required
def cluster(request):
    """Every device with its latest stored pool figures and the jobs placed on it now (a fixed number of
    queries, whatever the cluster's size).

    Devices and pool totals are shared cluster facts; a job is named only to users who may read it, the
    others are counted as "jobs of other tenants". *Allocated* is the bytes of live tensors, *reserved* the
    segments the pool holds (allocated plus cache; a worker returns the cache when its last job ends). A
    reading older than ``STALE_S`` is not shown as the device's memory now.
    """
    last = TimelinePoint.objects.filter(device=OuterRef("pk"), job__isnull=True).order_by("-second")
    devices = list(Device.objects.select_related("node").annotate(
        used=Subquery(last.values("reserved_bytes")[:1]), allocated=Subquery(last.values("allocated_bytes")[:1]),
        seen=Subquery(last.values("time")[:1])))
    now = timezone.now()
    visible = set(access.visible_jobs(request.user).filter(placements__ended_at__isnull=True)
                  .values_list("pk", flat=True))
    timeline_ok = set(access.timeline_devices(request.user).values_list("pk", flat=True))
    placed: dict[int, list] = {}
    for p in Placement.objects.active().prefetch_related("jobs__tenant"):
        placed.setdefault(p.device_id, []).extend(p.jobs.all())
    rows = []
    for d in devices:
        jobs = placed.get(d.pk, [])
        fresh = d.seen is not None and (now - d.seen).total_seconds() <= STALE_S
        rows.append({
            "device": d, "key": d.key, "used": d.used if fresh else None,
            "allocated": d.allocated if fresh else None, "seen": d.seen, "stale": d.seen is not None and not fresh,
            "idle": not jobs,
            "jobs": [j for j in jobs if j.pk in visible],
            "hidden_jobs": sum(j.pk not in visible for j in jobs),
            "timeline": d.pk in timeline_ok,
        })
    totals = {"budget": sum(d.budget_bytes for d in devices), "total": sum(d.total_bytes for d in devices),
              "used": sum(r["used"] or 0 for r in rows), "allocated": sum(r["allocated"] or 0 for r in rows)}
    return render(request, "web/cluster.html", {"rows": rows, "totals": totals})


def cpu_share(device) -> str:
    """What each job gets of a CPU device's cores, from its worker's heartbeat (Note [Compute per slot] in
    zico_contracts.cpushare): ``"1 of 2 cores and 1 thread per job (2 slots)"``; "" for a GPU, a worker that
    sends none, or Redis unreachable."""
    if device.kind != "cpu":
        return ""
    try:
        beat = json.loads(live.client().get(keys.heartbeat_key(device.key)) or "{}")
        share = beat.get(cpushare.METRIC) if isinstance(beat, dict) else None
        threads, cores, slots = (int(share[k]) for k in ("threads", "cores", "slots"))
    except (redis.RedisError, ValueError, TypeError, KeyError):
        return ""
    return (f"{min(threads, cores)} of {cores} cores and {threads} thread{'s' if threads != 1 else ''} per job "
            f"({slots} slots)")


def job_disk(device) -> str:
    """How the device's worker bounds a job's disk, from its heartbeat (zico_contracts.jobdisk): "64.00 GiB of disk
    per job (a file system of its own)"; "" for a worker that sends none, or Redis unreachable."""
    try:
        beat = json.loads(live.client().get(keys.heartbeat_key(device.key)) or "{}")
    except (redis.RedisError, ValueError, TypeError):
        return ""
    return jobdisk.describe(beat.get(jobdisk.METRIC)) if isinstance(beat, dict) else ""


@login_required
def device_timeline(request, pk: int):
    """Stacked per-job memory of one device, its budget line and events; live, with a time-range selector."""
    device = access.device_for_timeline(request.user, pk)
    return render(request, "web/device_timeline.html", {
        "device": device, "key": device.key, "windows": WINDOWS_S, "window": DEFAULT_WINDOW_S,
        "all_jobs": request.user.is_staff, "cpu_share": cpu_share(device),
        "job_disk": job_disk(device),
    })
