"""A job's figures for the pages: headline status (peaks, throughput, ETA, queue position, slowdown) and
the job page's server-rendered panels, which the page re-fetches while the job runs.

Note [Per-job peaks in a shared pool]
    Peaks come from the allocator's per-job accounts (docs/allocator.md, "Accounting and job binding"):
    *allocated* is the bytes of the job's live tensors; *reserved* is the segments the job's own requests
    obtained from the device. In a shared pool a job often reuses segments another job obtained, so its
    reserved bytes can be far below (even 0 B while) its allocated bytes: the pool's reserved total is
    on the device page. Finished jobs report both peaks in their metrics (``peak_allocated_bytes``,
    ``peak_reserved_bytes``, from ``memory_stats(job=...)``); while a job runs they are the largest stored
    timeline figures so far.

Note [Slowdown, predicted and measured]
    One definition for both: a job's mean iteration time (start to start, gate waits included) while its
    group runs together, over the *solo reference* — the ``iteration_s`` of the memory curve its placement
    was planned with (the curve sent in the run spec). The plan predicts it (``placement.groups.plan_group``);
    the agent measures it over the iterations the job ran beside a neighbour (Note [Slowdown beside
    neighbours] in workers/agent/agent.py; the whole run's where it had none), and the page shows the whole
    run's (``slowdown_run``: a neighbour that ended first leaves a solo tail in it) beside it. A measured value
    below 1 means the curve's iteration time is longer than the job really runs alone (an estimate or a
    profiling run slower than training), not that sharing sped it up; the page shows both times.
"""
from __future__ import annotations

from typing import Any, Iterable

from django.db.models import Max
from django.template.loader import render_to_string

from zico.cluster.models import Placement
from zico.jobs.models import Event, Job
from zico.jobs.transitions import CANCELLABLE, JobStatus as S
from zico_contracts import cpushare
from zico.telemetry.models import TimelinePoint
from zico_contracts.oom import readable_reason

from . import access

WAITING = (S.QUEUED, S.PROFILING, S.READY)  # statuses of a job that waits for a device


def stored_peaks(job_ids: Iterable[int]) -> dict[int, dict[str, int]]:
    """``{job id: {"allocated": bytes, "reserved": bytes}}``: the largest stored timeline figures (one query)."""
    ids = list(job_ids)
    if not ids:
        return {}
    rows = (TimelinePoint.objects.filter(job_id__in=ids).values("job_id")
            .annotate(a=Max("allocated_bytes"), r=Max("reserved_bytes")))
    return {r["job_id"]: {"allocated": r["a"], "reserved": r["r"]} for r in rows}


def queue_positions(jobs: Iterable[Job]) -> dict[int, int]:
    """1-based position of each waiting job among all waiting jobs, in the scheduler's queue order
    (priority first, then submission; index ``job_queue_order``). One query, none when no job waits."""
    waiting = {j.pk for j in jobs if j.status in WAITING}
    if not waiting:
        return {}
    order = Job.objects.filter(status__in=WAITING).order_by("-priority", "created_at", "pk").values_list("pk", flat=True)
    return {pk: i + 1 for i, pk in enumerate(order) if pk in waiting}


def job_status(job: Job, peaks: dict[str, int] | None = None, position: int | None = None) -> dict[str, Any]:
    """The job's headline figures (JSON-ready; bytes, seconds, unix seconds).

    ``peaks`` are the stored figures from :func:`stored_peaks` (used until the final metrics arrive),
    ``position`` the queue position from :func:`queue_positions`. Keys: ``id, status, iteration,
    iterations, progress`` (0..1), ``iterations_per_s`` (live while running, then the run's mean),
    ``eta_s`` (seconds left at that rate, running jobs only), ``peak_allocated_bytes``,
    ``peak_reserved_bytes`` (Note [Per-job peaks in a shared pool]), ``delay_s``, ``slowdown``, ``slowdown_run``,
    ``iterations_beside``,
    ``solo_iteration_s``, ``mean_iteration_s`` (Note [Slowdown, predicted and measured]),
    ``queue_position``, ``waiting_reason``, ``failure_reason``, ``span`` (submitted, started, finished;
    ``run_s`` from start to finish).
    """
    m = job.metrics or {}
    peaks = peaks or {}
    total = job.total_iterations
    rate = m.get("iterations_per_s")
    eta = None
    if job.status == S.RUNNING and rate and total:
        eta = max(0.0, (total - job.progress_iteration) / rate)

    def peak(key, stored):  # the allocator's own peak once reported, else the stored timeline's
        return m[key] if m.get(key) is not None else peaks.get(stored)

    return {
        "id": job.pk, "status": job.status, "iteration": job.progress_iteration, "iterations": total,
        "progress": min(1.0, job.progress_iteration / total) if total else None,
        "iterations_per_s": rate, "eta_s": eta,
        "peak_allocated_bytes": peak("peak_allocated_bytes", "allocated"),
        "peak_reserved_bytes": peak("peak_reserved_bytes", "reserved"),
        "delay_s": m.get("delay_s"), "slowdown": m.get("slowdown"), "slowdown_run": m.get("slowdown_run"),
        "iterations_beside": m.get("iterations_beside"),
        "solo_iteration_s": m.get("solo_iteration_s"), "mean_iteration_s": m.get("mean_iteration_s"),
        "queue_position": position, "waiting_reason": job.waiting_reason or "",
        "failure_reason": readable_reason(job.failure_reason),
        "span": {"submitted": job.created_at.timestamp(),
                 "started": job.started_at.timestamp() if job.started_at else None,
                 "finished": job.finished_at.timestamp() if job.finished_at else None,
                 "run_s": (job.finished_at - job.started_at).total_seconds()
                 if job.finished_at and job.started_at else None},
    }


def job_statuses(jobs: list[Job]) -> list[dict[str, Any]]:
    """:func:`job_status` for many jobs with one peaks query."""
    peaks = stored_peaks(j.pk for j in jobs)
    positions = queue_positions(jobs)
    return [job_status(j, peaks.get(j.pk), positions.get(j.pk)) for j in jobs]


def current_group(job: Job, placement):
    """The placement whose sharing plan covers ``job``'s group now: the newest placement on its device, opened
    since the job's own (and before the job finished), whose plan lists the job, else the job's own.

    Note [The current group]
        When a job joins a device, the scheduler opens a new placement for the newcomer whose plan covers the
        device's whole group (the jobs already there first, with their new shifts: docs/placement.md); the
        running jobs stay linked to their own, older placement. So a job's group and shifts are those of the
        newest such plan that lists it, not of the placement that started it.
    """
    if placement is None:
        return None
    newer = Placement.objects.filter(device_id=placement.device_id, started_at__gte=placement.started_at)
    if job.finished_at is not None:
        newer = newer.filter(started_at__lte=job.finished_at)
    for p in newer.select_related("device__node").order_by("-started_at", "-pk")[:20]:
        if p.pk == placement.pk or job.pk in p.plan_by_job():
            return p
    return placement


def _plan_view(user, job, placement, group) -> dict | None:
    """The current group's sharing plan (``group``, :func:`current_group`) as rows a person can read, in the
    plan's order; other tenants' co-located jobs stay anonymous; a member that has ended says so."""
    if group is None:
        return None
    plan = group.plan or {}
    per_job = group.plan_by_job()
    ids = list(per_job) + sorted(set(group.jobs.values_list("pk", flat=True)) - set(per_job))
    members = {j.pk: j for j in Job.objects.filter(pk__in=ids)}
    visible = set(access.visible_jobs(user).filter(pk__in=list(members)).values_list("pk", flat=True))
    rows = []
    for pk in ids:
        other = members.get(pk)
        if other is None:
            continue
        shown = other.pk in visible
        m = other.metrics or {}
        rows.append({"job": other if shown else None, "is_self": other.pk == job.pk,
                     "ended": other.status if shown and other.is_finished and other.pk != job.pk else "",
                     "predicted_slowdown": per_job.get(other.pk, {}).get("predicted_slowdown") if shown else None,
                     "measured_slowdown": m.get("slowdown") if shown else None})
    device_visible = access.timeline_devices(user).filter(pk=group.device_id).exists()
    return {"rows": rows, "budget_bytes": plan.get("budget_bytes"),
            "predicted_peak_bytes": plan.get("predicted_peak_bytes"), "device_visible": device_visible,
            "mode": plan.get("mode"),
            "predicted_slowdown": per_job.get(job.pk, {}).get("predicted_slowdown"),
            "group": group, "regrouped": placement is not None and group.pk != placement.pk}


def _cpu_share(job: Job) -> str:
    """The job's share of its CPU device, as its run's metrics carry it (zico_contracts.cpushare), or ""."""
    share = (job.metrics or {}).get(cpushare.METRIC)
    return cpushare.describe(share) if isinstance(share, dict) else ""


def _slowdown_error(plan: dict[str, Any] | None, s: Any) -> float | None:
    """(predicted - measured) / measured slowdown of the job (positive: the plan said slower), None unless both."""
    predicted = (plan or {}).get("predicted_slowdown")
    measured = s.get("slowdown") if isinstance(s, dict) else getattr(s, "slowdown", None)
    if not predicted or not measured:
        return None
    return (float(predicted) - float(measured)) / float(measured)


def panel_context(user, job: Job) -> dict[str, Any]:
    """Everything the job page's panels show (the page's first render and its live re-renders)."""
    job.refresh_from_db()
    profile = job.latest_profile()
    placement = job.placements.select_related("device__node").order_by("-started_at").first()
    group = current_group(job, placement)  # Note [The current group]
    delay_events = job.events.filter(kind=Event.Kind.DELAY)
    delays = list(delay_events.order_by("-time")[:20])
    totals = [d or {} for d in delay_events.values_list("details", flat=True)]  # one event per run
    total_delay = sum(float(d.get("delay_s", 0) or 0) for d in totals)
    delay_count = sum(int(d.get("delays", 1) or 0) for d in totals)
    log = list(job.events.select_related("actor", "device__node").order_by("-time", "-id")[:100])
    s = job_statuses([job])[0]
    plan = _plan_view(user, job, placement, group)
    return {
        "job": job, "s": s, "profile": profile, "placement": placement,
        "cpu_share": _cpu_share(job), "slowdown_error": _slowdown_error(plan, s),
        # the plan's tag: "active" while this job runs in it, "ending" for a cancel its worker has not yet
        # confirmed, "ended" once the job (or the placement) is done, even while a partner still runs in it
        "plan_state": ("ended" if placement is None or not placement.is_active
                       else "ending" if job.status == S.CANCELLED
                       else "ended" if job.status in (S.SUCCEEDED, S.FAILED) else "active"),
        "plan": plan, "delays": delays, "delay_count": delay_count,
        "total_delay_s": total_delay, "log": log,
        "can_cancel": job.status in CANCELLABLE and access.can_cancel(user, job),
        "files": list(job.files.all()) if job.code_id else [],
    }


PANELS = ("head", "stats", "curve", "plan", "log", "files")  # template web/_job_<name>.html, element #panel-<name>


def panels(user, job: Job, request=None) -> dict[str, Any]:
    """The job page's panels as HTML (``{"html": {name: html}}``), the status figures (``job``) and the
    memory curve (``curve``: the DESIGN contract JSON, or None) with its profile id."""
    ctx = panel_context(user, job)
    html = {name: render_to_string(f"web/_job_{name}.html", ctx, request=request) for name in PANELS}
    profile = ctx["profile"]
    return {"job": ctx["s"], "html": html, "profile": profile.pk if profile else None,
            "curve": profile.curve if profile else None}
