"""The data behind the charts: a job's memory over time and a device's per-job timeline, stored plus live.

Both builders merge two sources into one JSON-ready dict:

* the stored timeline (``zico.telemetry.models.TimelinePoint``, at most one point per job per second,
  written by the control consumer), downsampled in SQL to at most ``MAX_POINTS`` buckets per series by
  taking each bucket's largest value (a downsampled chart never hides a peak);
* live samples from Redis (:mod:`zico.web.live`), which replace stored points from their first second on.

A first request (no ``cursor``) returns the whole window; later polls pass the returned ``cursor`` (and
``since_event``) and get only what is new. Times are unix seconds, memory figures bytes.
"""
from __future__ import annotations

import math
import time
from datetime import datetime, timezone
from typing import Any, Iterable

from django.db.models import BigIntegerField, ExpressionWrapper, F, Max, Q, Value

from zico.jobs.models import Event, Job
from zico.telemetry.models import TimelinePoint

from . import live
from .job_panels import job_statuses
from .templatetags.zico_format import bytes_h

MAX_POINTS = 600  # buckets per series in a first response
WINDOWS_S = (300, 900, 3600, 6 * 3600, 24 * 3600)  # the time-range selector's choices
DEFAULT_WINDOW_S = 900
JOB_WINDOW = "job"  # a job chart's default range: the job's own span
DEVICE_EVENT_KINDS = (Event.Kind.PLACEMENT, Event.Kind.DELAY, Event.Kind.BUDGET_CHANGE,
                      Event.Kind.OOM_PREVENTED, Event.Kind.WORKER_LOST)


def parse_window(value: str | None) -> int:
    """The window in seconds from a query parameter. Raises ValueError naming ``window`` if not a choice."""
    if value in (None, ""):
        return DEFAULT_WINDOW_S
    if not value.isdigit() or int(value) not in WINDOWS_S:
        raise ValueError(f"window: expected one of {', '.join(map(str, WINDOWS_S))} seconds, got {value!r}")
    return int(value)


def parse_since_event(value: str | None) -> int:
    """The last event id the page has seen (0 = none). Raises ValueError naming ``since_event``."""
    if value in (None, ""):
        return 0
    if not value.isdigit():
        raise ValueError(f"since_event: expected a non-negative integer, got {value!r}")
    return int(value)


def _stored(qs, since_s: int, window_s: int, value_fields: Iterable[str]) -> list[dict[str, Any]]:
    """Stored points since ``since_s`` bucketed to <= MAX_POINTS per (job); each bucket keeps its maxima.

    A bucket's time is its start (a multiple of the bucket size), the same for every job, so the stacked
    device chart lays every band on one time grid.
    """
    bucket = max(1, math.ceil(window_s / MAX_POINTS))
    qs = qs.filter(second__gte=since_s)
    if bucket == 1:
        return list(qs.order_by("second").values("second", "job_id", *value_fields))
    b = ExpressionWrapper(F("second") / Value(bucket), output_field=BigIntegerField())
    rows = list(qs.annotate(b=b).values("b", "job_id").annotate(**{f: Max(f) for f in value_fields})
                .order_by("b"))
    for r in rows:
        r["second"] = r.pop("b") * bucket
    return rows


def _summary(peak: int | None, budget: int | None, allocated: int | None, reserved: int | None) -> dict:
    return {"peak_bytes": peak, "budget_bytes": budget, "current_allocated_bytes": allocated,
            "current_reserved_bytes": reserved}


def parse_job_window(value: str | None) -> int | str:
    """A job chart's window: ``"job"`` (the default: the job's own span, submitted .. finished or now) or
    one of ``WINDOWS_S``. Raises ValueError naming ``window``."""
    if value in (None, "", JOB_WINDOW):
        return JOB_WINDOW
    return parse_window(value)


def job_memory(job: Job, window_s: int | str = JOB_WINDOW, cursor: str | None = None,
               now_s: float | None = None) -> dict[str, Any]:
    """Allocated and reserved bytes of ``job`` over ``window_s`` seconds before now, or over the job's own
    span (``window_s="job"``: from its submission to its finish, or to now while it has not finished).

    Returns ``{"window", "range": [from_s, to_s], "job": job_status, "live": {"ok", "cursor"}, "points":
    [[t, allocated, reserved, iteration], ...], "summary": {peak_allocated_bytes, peak_reserved_bytes,
    budget_bytes, current_allocated_bytes, current_reserved_bytes}}``; with a ``cursor`` only the live
    points after it. The peaks are the job's (Note [Per-job peaks in a shared pool] in job_panels).
    Raises ValueError on a bad cursor.
    """
    now_s = time.time() if now_s is None else now_s
    if window_s == JOB_WINDOW:
        since = job.created_at.timestamp()
        until = job.finished_at.timestamp() + 1 if job.finished_at else now_s
        span = max(60, math.ceil(until - since))
    else:
        since, until, span = now_s - window_s, now_s, window_s
    recent = live.taken_since(job.created_at)  # not an earlier deployment's job of the same id
    read = live.read_samples(lambda s: s.get("job") == job.pk and recent(s), cursor=cursor)
    live_pts = [[s["t"], s.get("allocated"), s.get("reserved"), s.get("iteration")]
                for s in read.samples if isinstance(s.get("t"), (int, float))]
    points: list[list] = []
    if cursor is None:
        first_live = live_pts[0][0] if live_pts else math.inf
        rows = _stored(TimelinePoint.objects.filter(job=job), int(since), span,
                       ("allocated_bytes", "reserved_bytes", "iteration"))
        points = [[r["second"], r["allocated_bytes"], r["reserved_bytes"], r["iteration"]]
                  for r in rows if r["second"] < _cut(first_live)]
    points += live_pts
    status = job_statuses([job])[0]
    seen_alloc = max((p[1] or 0 for p in points), default=None)
    seen_res = max((p[2] or 0 for p in points), default=None)
    last = points[-1] if points else [None, None, None, None]
    summary = _summary(None, job.budget_bytes, last[1], last[2])
    del summary["peak_bytes"]
    summary["peak_allocated_bytes"] = max(filter(None, [status["peak_allocated_bytes"], seen_alloc]), default=None)
    summary["peak_reserved_bytes"] = max(filter(None, [status["peak_reserved_bytes"], seen_res]), default=None)
    return {
        "window": window_s,
        "range": [since, until],
        "job": status,
        "live": {"ok": read.ok, "cursor": read.cursor},
        "points": points,
        "summary": summary,
    }


def _event_label(e: Event, visible_job_ids: set[int] | None) -> str:
    d = e.details or {}
    job = (f"“{e.job}”" if e.job_id and (visible_job_ids is None or e.job_id in visible_job_ids)
           else "a job of another tenant" if e.job_id else "a job")
    if e.kind == Event.Kind.BUDGET_CHANGE:
        return f"budget {bytes_h(d.get('old_bytes'))} → {bytes_h(d.get('new_bytes'))}"
    if e.kind == Event.Kind.DELAY:
        n = int(d.get("delays", 1))
        return (f"{job} delayed {n} time{'s' if n != 1 else ''}, {float(d.get('delay_s', 0)):.2f} s in all"
                + (f" (longest {float(d['delay_max_s']):.2f} s)" if n > 1 and "delay_max_s" in d else ""))
    if e.kind == Event.Kind.PLACEMENT:
        return f"{job} placed"
    if e.kind == Event.Kind.OOM_PREVENTED:
        n = int(d.get("count") or 0)
        return (f"OOM prevented ×{n}: {job} waited {float(d.get('waited_s') or 0):.2f} s for the budget"
                + (f" ({d['overruns']} let past it)" if d.get("overruns") else ""))
    return e.get_kind_display()


def device_events(device, tenant_ids: set[int] | None, since_s: float, since_event: int = 0) -> list[dict]:
    """Timeline markers: the device's placement, delay, budget, OOM-prevented and worker-lost events.

    ``tenant_ids`` None shows every event; otherwise only events without a job or with a job of those
    tenants. Newest 500 at most, in the order of their ids. "OOM prevented" reports come several a second
    under load: they are one marker per job and minute (:func:`_oom_minutes`), carrying a ``group`` key; a
    later poll that sees a new report of a minute already shown returns that minute's whole marker again
    (same ``group``), which replaces the one shown.
    """
    qs = _visible(Event.objects.filter(device=device, kind__in=DEVICE_EVENT_KINDS, time__gte=_dt(since_s)),
                  tenant_ids)
    evs = list(qs.filter(id__gt=since_event).select_related("job").order_by("-id")[:500])[::-1]
    visible = None if tenant_ids is None else {e.job_id for e in evs if e.job_id}
    out = [{"id": e.pk, "t": e.time.timestamp(), "kind": e.kind, "job": e.job_id,
            "label": _event_label(e, visible)} for e in evs if e.kind != Event.Kind.OOM_PREVENTED]
    ooms = [e for e in evs if e.kind == Event.Kind.OOM_PREVENTED]
    if ooms:  # each minute touched, whole: its reports before ``since_event`` too
        first = min(e.time.timestamp() for e in ooms) // OOM_MINUTE_S * OOM_MINUTE_S
        ids = {e.job_id for e in ooms}
        of_jobs = Q(job_id__in=ids - {None}) | (Q(job__isnull=True) if None in ids else Q(pk__in=[]))
        whole = qs.filter(of_jobs, kind=Event.Kind.OOM_PREVENTED, time__gte=_dt(first),
                          id__lte=max(e.pk for e in ooms)).select_related("job")
        touched = {_oom_key(e) for e in ooms}
        out += _oom_minutes([e for e in whole if _oom_key(e) in touched], visible)
    return sorted(out, key=lambda e: e["id"])


OOM_MINUTE_S = 60  # "OOM prevented" reports of one job are one marker per this many seconds


def _visible(qs, tenant_ids: set[int] | None):
    return qs if tenant_ids is None else qs.filter(job__isnull=True) | qs.filter(job__tenant_id__in=tenant_ids)


def _oom_key(e: Event) -> str:
    return f"oom-{e.job_id or 0}-{int(e.time.timestamp() // OOM_MINUTE_S)}"


def _oom_minutes(evs: list[Event], visible_job_ids: set[int] | None) -> list[dict]:
    """One marker per job and minute of "OOM prevented" reports: at the minute's first report, its id the
    newest one's, the label summing their counts, waits and grants past the budget (``overruns``)."""
    groups: dict[str, list[Event]] = {}
    for e in sorted(evs, key=lambda e: e.pk):
        groups.setdefault(_oom_key(e), []).append(e)
    out = []
    for key, group in groups.items():
        ds = [e.details or {} for e in group]
        count = sum(int(d.get("count") or 0) for d in ds)
        waited = sum(float(d.get("waited_s") or 0) for d in ds)
        overruns = sum(int(d.get("overruns") or 0) for d in ds)
        head = group[0]
        job = (f"“{head.job}”" if head.job_id and (visible_job_ids is None or head.job_id in visible_job_ids)
               else "a job of another tenant" if head.job_id else "a job")
        span = (f" in {len(group)} reports from {head.time.astimezone(timezone.utc):%H:%M:%S} UTC"
                if len(group) > 1 else "")
        # a grant past the budget (the deadlock rule) is said as such, never as "OOM prevented ×0"
        parts = [f"OOM prevented ×{count}{span}: {job} waited {waited:.2f} s for the budget"] if count else []
        if overruns:
            parts.append(f"granted past the budget ×{overruns} (the deadlock rule)" if count else
                         f"Granted past the budget ×{overruns}{span}: {job}, by the deadlock rule")
        out.append({"id": group[-1].pk, "t": head.time.timestamp(), "kind": Event.Kind.OOM_PREVENTED,
                    "job": head.job_id, "group": key, "count": count, "overruns": overruns,
                    "label": "; ".join(parts)})
    return out


def _dt(unix_s: float) -> datetime:
    return datetime.fromtimestamp(unix_s, tz=timezone.utc)


def _cut(first_live_t: float) -> float:
    """Stored seconds before this one are kept; from it on, live samples replace them."""
    return math.floor(first_live_t) if math.isfinite(first_live_t) else math.inf


def _clip_to_pool(job_rows: list[dict], pool_rows: list[dict]) -> None:
    """Scale each time bucket's job bands down to the pool's allocated bytes in that bucket, in place.

    Within one second the stacked values are co-instant (Note [Stacking per-second points] in
    zico.telemetry.downsample) and already sum to at most the pool; a bucket of several seconds takes each
    job's largest value, which may come from different seconds, so the bucket's sum is scaled to the
    pool's largest allocated figure of the bucket. A bucket without a pool row is left as it is.
    """
    pool = {r["second"]: r["allocated_bytes"] for r in pool_rows if r["allocated_bytes"] is not None}
    sums: dict[int, int] = {}
    for r in job_rows:
        sums[r["second"]] = sums.get(r["second"], 0) + (r["stacked"] or 0)
    for r in job_rows:
        held, total = pool.get(r["second"]), sums[r["second"]]
        if held is not None and total > held:
            r["stacked"] = int((r["stacked"] or 0) * held / total)


def _end_band(points: list[list], finished_s: float) -> list[list]:
    """A finished job's band: its points up to the second it finished, then one point of 0 bytes at most
    1 s after its last one, so the band ends with the job instead of holding its last value."""
    end = math.floor(finished_s) + 1
    kept = [p for p in points if p[0] < end]
    if kept and kept[-1][1]:  # right after its last point: a stepped band holds a value until the next one
        kept.append([min(end, kept[-1][0] + 1), 0])
    return kept


def device_timeline(device, tenant_ids: set[int] | None, window_s: int = DEFAULT_WINDOW_S,
                    cursor: str | None = None, since_event: int = 0, now_s: float | None = None) -> dict:
    """Per-job allocated bytes on ``device`` (one stacked band per job), the pool's reserved bytes, its
    budget and event markers, over the last ``window_s`` seconds.

    ``tenant_ids`` None (staff) shows every job's band; otherwise only bands of jobs of those tenants —
    the pool row (all jobs together) and the budget are shown either way. A band's bytes are the job's
    allocated bytes at the device's peak instant of each second, so the bands of a bucket never sum above
    the pool's allocated bytes (:func:`_clip_to_pool`); a finished job's band ends at its finish
    (:func:`_end_band`). Returns ``{"device", "jobs": {id: {...}}, "series": {id: [[t, allocated], ...]}, "pool": [[t, allocated, reserved, budget]],
    "events": [...], "live": {...}, "summary": {...}}``. Raises ValueError on a bad cursor.
    """
    now_s = time.time() if now_s is None else now_s
    dev = device.key
    recent = live.taken_since(device.created_at)  # not an earlier deployment's worker on this key
    read = live.read_samples(lambda s: s.get("device") == dev and recent(s), cursor=cursor)
    samples = [s for s in read.samples if isinstance(s.get("t"), (int, float))]
    sampled_jobs = {s["job"] for s in samples if isinstance(s.get("job"), int)}
    if tenant_ids is None:
        allowed = sampled_jobs
    else:  # one query decides which sampled jobs this user may see
        allowed = set(Job.objects.filter(pk__in=sampled_jobs, tenant_id__in=tenant_ids)
                      .values_list("id", flat=True))
    series: dict[int, list] = {}
    pool: list[list] = []
    for s in samples:
        jid = s.get("job")
        if jid is None:
            pool.append([s["t"], s.get("allocated"), s.get("reserved"), s.get("budget")])
        elif jid in allowed:
            series.setdefault(jid, []).append([s["t"], s.get("allocated")])
    first_live = samples[0]["t"] if samples else math.inf
    if cursor is None:
        since = int(now_s - window_s)
        cut = _cut(first_live)
        base = TimelinePoint.objects.filter(device=device)
        job_rows = (base.filter(job__isnull=False) if tenant_ids is None
                    else base.filter(job__tenant_id__in=tenant_ids))
        stored_jobs = _stored(job_rows, since, window_s, ("allocated_at_peak_bytes", "allocated_bytes"))
        for r in stored_jobs:  # rows stored before the at-peak figure existed stack their maximum
            at_peak = r.pop("allocated_at_peak_bytes")
            r["stacked"] = r.pop("allocated_bytes") if at_peak is None else at_peak
        stored_pool = _stored(base.filter(job__isnull=True), since, window_s,
                              ("allocated_bytes", "reserved_bytes", "budget_bytes"))
        _clip_to_pool(stored_jobs, stored_pool)
        stored_series: dict[int, list] = {}
        for r in stored_jobs:
            if r["second"] < cut:
                stored_series.setdefault(r["job_id"], []).append([r["second"], r["stacked"]])
        for jid, pts in stored_series.items():
            series[jid] = pts + series.get(jid, [])
        pool = [[r["second"], r["allocated_bytes"], r["reserved_bytes"], r["budget_bytes"]]
                for r in stored_pool if r["second"] < cut] + pool
    job_rows = list(Job.objects.filter(pk__in=set(series)).select_related("tenant"))
    jobs = {j.pk: {"id": j.pk, "label": str(j), "tenant": j.tenant.slug, "status": j.status,
                   "finished": j.finished_at.timestamp() if j.finished_at else None} for j in job_rows}
    for j in job_rows:
        if j.finished_at is not None and j.pk in series:
            series[j.pk] = _end_band(series[j.pk], j.finished_at.timestamp())
    events = device_events(device, tenant_ids, now_s - window_s, since_event)
    peak = max((p[2] or 0 for p in pool), default=None)
    last = pool[-1] if pool else [None, None, None, None]
    return {
        "window": window_s,
        "device": {"id": device.pk, "key": dev, "name": device.name, "total_bytes": device.total_bytes,
                   "budget_bytes": device.budget_bytes},
        "jobs": {str(k): v for k, v in jobs.items()},
        "series": {str(k): v for k, v in series.items()},
        "pool": pool,
        "events": events,
        "live": {"ok": read.ok, "cursor": read.cursor},
        "summary": _summary(peak, last[3] or device.budget_bytes, last[1], last[2]),
    }

