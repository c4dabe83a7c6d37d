"""Device pages: the cluster overview (devices, used versus budget, jobs) and the device timeline for admins."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from zico.cluster.models import Device, Placement
from zico.telemetry.models import TimelinePoint

from . import access
from .timelines import DEFAULT_WINDOW_S, WINDOWS_S, device_key


@login_required
def cluster(request):
    """Every device with its latest stored pool figures and the jobs placed on it now.

    Devices and pool totals are shared cluster facts; a job is named only to users who may read it, the
    others are counted as "jobs of other tenants".
    """
    devices = list(Device.objects.select_related("node"))
    visible = set(access.visible_jobs(request.user).filter(placements__ended_at__isnull=True)
                  .values_list("pk", flat=True))
    timeline_ok = set(access.timeline_devices(request.user).values_list("pk", flat=True))
    rows = []
    for d in devices:
        last = TimelinePoint.objects.filter(device=d, job__isnull=True).order_by("-second").first()
        jobs = [j for p in Placement.objects.active().filter(device=d).prefetch_related("jobs__tenant")
                for j in p.jobs.all()]
        rows.append({
            "device": d, "key": device_key(d), "last": last,
            "used": last.reserved_bytes if last else None,
            "jobs": [j for j in jobs if j.pk in visible],
            "hidden_jobs": sum(j.pk not in visible for j in jobs),
            "timeline": d.pk in timeline_ok,
        })
    totals = {"budget": sum(d.budget_bytes for d in devices), "total": sum(d.total_bytes for d in devices),
              "used": sum(r["used"] or 0 for r in rows)}
    return render(request, "web/cluster.html", {"rows": rows, "totals": totals})


@login_required
def device_timeline(request, pk: int):
    """Stacked per-job memory of one device, its budget line and events; live, with a time-range selector."""
    device = access.device_for_timeline(request.user, pk)
    return render(request, "web/device_timeline.html", {
        "device": device, "key": device_key(device), "windows": WINDOWS_S, "window": DEFAULT_WINDOW_S,
        "all_jobs": request.user.is_staff,
    })
