"""What the control consumer does with each message from a device worker: the database side of the link.

Device workers never write the database (docs/architecture.md); these functions do it for them, one message at a time.
Each handler is idempotent where a message may be seen twice (a consumer that dies before acking re-reads
its pending messages), and refuses stale runs: a ``job_started`` for a placement that is no longer the job's
active one gets that run aborted through Redis (see :func:`zico_contracts.keys.abort_key`).
"""
from __future__ import annotations

import logging
import math
import reprlib
from datetime import datetime, timezone as dt_timezone
from typing import Any

from django.db import transaction
from django.db.models import Count, Q

from placement.gating import DEFAULT_GATE_HEADROOM
from zico.cluster.models import DEFAULT_BOUND_KEY, Device, Node, Placement
from zico.jobs.models import Event, Job, MemoryProfile
from zico.jobs.outputs import archive_log
from zico.jobs.shares import store_measured_share
from zico.jobs import lifecycle
from zico.jobs.transitions import TERMINAL, JobStatus as S
from zico_contracts import computeshare, jobbudget, keys
from zico_contracts.lifecycle import validate as validate_message
from zico_contracts.oom import readable_reason

from .downsample import Point
from .models import MAX_POINTS_PER_METRIC, MetricPoint, TelemetryGap, TimelinePoint

log = logging.getLogger(__name__)


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(float(t), tz=dt_timezone.utc)


def device_for(dev: str) -> Device | None:
    """The Device row of a device key, or None if that worker never registered."""
    kind, host, index = keys.parse_device_key(dev)
    return Device.objects.select_related("node").filter(node__host=host, kind=kind, index=index).first()


def _job(msg: dict[str, Any]) -> Job | None:
    job = Job.objects.filter(pk=msg.get("job")).first()
    if job is None:
        log.warning("message about unknown job %r ignored: %s", msg.get("job"), msg.get("msg"))
    return job


def _current_run(job: Job, msg: dict[str, Any]) -> bool:
    """True when ``msg`` comes from the run of the job's active placement (or names no placement)."""
    placement = msg.get("placement")
    if placement is None:
        return True
    active = job.active_placement()
    return active is not None and active.pk == int(placement)


def end_placement_if_done(placement: Placement | None, reason: str) -> None:
    """End ``placement`` once none of its jobs is still placed or running."""
    if placement is None or placement.ended_at is not None:
        return
    if not placement.jobs.filter(status__in=[S.PLACED, S.RUNNING]).exists():
        placement.end(reason)


def _gate_headroom(msg: dict[str, Any]) -> float:
    """The gate headroom a ``worker_up`` seeds a new device row with (its ``--gate-headroom``); the default when it
    sent none, and with a warning when it sent one outside [0, 1)."""
    if "gate_headroom" not in msg:
        return DEFAULT_GATE_HEADROOM
    value = msg["gate_headroom"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        log.warning("worker_up from %s: gate_headroom %s is not in [0, 1); using %s",
                    msg.get("device"), reprlib.repr(value), DEFAULT_GATE_HEADROOM)
        return DEFAULT_GATE_HEADROOM
    return float(value)


# -- handlers ------------------------------------------------------------------------------------
def on_worker_up(msg: dict[str, Any], r) -> Device:
    """Register (or refresh) the worker's node and device; requeue runs its previous process left behind. The
    device row owns its budget and gate headroom: the worker's figures only seed a new row, and the row's are
    written where the worker reads them."""
    kind, host, index = keys.parse_device_key(msg["device"])
    total = int(msg["total_bytes"])
    with transaction.atomic():
        node, _ = Node.objects.get_or_create(host=host)
        dev = Device.objects.select_for_update().filter(node=node, kind=kind, index=index).first()
        if dev is None:
            budget = min(int(msg.get("budget_bytes") or total), total)
            dev = Device.objects.create(node=node, kind=kind, index=index, name=str(msg.get("name", ""))[:100],
                                        uuid=str(msg.get("uuid", ""))[:64], total_bytes=total, budget_bytes=budget,
                                        gate_headroom=_gate_headroom(msg))
        else:
            dev.name, dev.uuid, dev.total_bytes = str(msg.get("name", ""))[:100], str(msg.get("uuid", ""))[:64], total
            dev.budget_bytes = min(dev.budget_bytes, total)
            if dev.status == "offline":  # a draining device stays draining (Device.set_status)
                dev.status = "online"
            dev.save(update_fields=["name", "uuid", "total_bytes", "budget_bytes", "status"])
        Node.objects.filter(pk=node.pk).update(status="online")
    dev.heartbeat(_dt(msg["t"]))
    r.set(keys.budget_key(msg["device"]), dev.budget_bytes)
    r.set(keys.gate_headroom_key(msg["device"]), repr(float(dev.gate_headroom)))
    # One process per device: a new process means the old one is gone, with whatever it was running.
    started = _dt(msg.get("started_at", msg["t"]))
    # So is a profile it was running: the task died with it (acks_late may redeliver it, but only to a
    # process that is not this one's predecessor), so the job goes back to the queue to be profiled again.
    stranded = Job.objects.filter(
        Q(status=S.RUNNING, placements__device=dev, placements__ended_at__isnull=True, placements__started_at__lt=started)
        | Q(status=S.PROFILING, profiling_device=dev, status_changed_at__lt=started)).distinct().order_by("pk")
    if stranded.exists():
        lifecycle.lose(dev, list(stranded), reason=f"worker process on {msg['device']} restarted (pid {msg.get('pid')})",
                     redis_client=r)
    return dev


def on_job_started(msg: dict[str, Any], r) -> None:
    job = _job(msg)
    if job is None:
        return
    # a script job profiled as its run starts stays ``profiling`` until its curve comes (on_profile_done)
    if not _current_run(job, msg) or job.status not in (S.PLACED, S.RUNNING, S.PROFILING) or (
            job.status == S.PROFILING and msg.get("placement") is None):
        log.warning("aborting stale run of job %s (placement %s, job is %s)", job.pk, msg.get("placement"), job.status)
        r.set(keys.abort_key(job.pk, msg.get("placement")), "stale", ex=keys.CANCEL_TTL_S)
        return
    dev = device_for(msg["device"])
    if job.status == S.PLACED:
        lifecycle.start(job, dev, placement=msg.get("placement"), resumed_from=msg.get("resumed_from"))
    elif job.status == S.PROFILING:
        Job.objects.filter(pk=job.pk, started_at__isnull=True).update(started_at=_dt(msg["t"]))
    if msg.get("iterations") is not None:
        Job.objects.filter(pk=job.pk).update(total_iterations=int(msg["iterations"]))


def on_job_progress(msg: dict[str, Any], r) -> None:
    job = _job(msg)
    if job is None or not _current_run(job, msg):
        return
    fields = {"progress_iteration": max(0, int(msg["iteration"])),
              "total_iterations": msg.get("iterations") or job.total_iterations}
    rate = msg.get("iterations_per_s")
    if isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate > 0 and job.status not in TERMINAL:
        # the live throughput (this run's mean so far); job_finished replaces it with the run's final figure
        fields["metrics"] = {**(job.metrics or {}), "iterations_per_s": float(rate)}
    Job.objects.filter(pk=job.pk).update(**fields)
    store_metrics(job, msg)


def _chartable(value: Any) -> float | None:
    """``value`` as a finite float, or None for text, None, booleans, inf, NaN and ints beyond a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        x = float(value)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def store_metrics(job: Job, msg: dict[str, Any]) -> int:
    """Store the numbers among a ``job_progress``'s ``values`` (the job's ``zico.log`` figures) as
    :class:`MetricPoint` rows (names cut to 100 characters) at the message's ``t`` and ``iteration``;
    text, None, booleans, inf, NaN and integers beyond a float are not charted and are skipped. A message
    seen twice stores nothing new (one value per job, name and ``t``). Returns how many numbers the message
    held. Raises ValueError when ``values`` is not an object.

    Note [Thinning a job's metrics]
        A name reaches at most one value a second, so a long run would store one row a second per name
        for as long as it runs. Once a name holds more than ``MAX_POINTS_PER_METRIC`` rows, every second
        one of its older rows is deleted (the first and the newest stay): the series keeps its whole span
        at half the resolution, and a chart of it keeps its shape. A job's rows stay with it; they are
        deleted with the job.
    """
    values = msg.get("values") or {}
    if not isinstance(values, dict):
        raise ValueError(f"job_progress values: expected an object of name -> number, got {reprlib.repr(values)}")
    numbers = {str(name)[:100]: x for name, x in ((n, _chartable(v)) for n, v in values.items()) if x is not None}
    if not numbers:
        return 0
    t, iteration = float(msg["t"]), max(0, int(msg["iteration"]))
    rows = [MetricPoint(job=job, name=name, t=t, iteration=iteration, value=v) for name, v in numbers.items()]
    MetricPoint.objects.bulk_create(rows, ignore_conflicts=True)
    names = [p.name for p in rows]
    counts = (MetricPoint.objects.filter(job=job, name__in=names).values("name").annotate(n=Count("id"))
              .filter(n__gt=MAX_POINTS_PER_METRIC))
    for c in counts:  # Note [Thinning a job's metrics]
        ids = list(MetricPoint.objects.filter(job=job, name=c["name"]).order_by("id").values_list("id", flat=True))
        MetricPoint.objects.filter(pk__in=ids[1:-1:2]).delete()
    return len(rows)


def on_job_delay(msg: dict[str, Any], r) -> None:
    """A run's delay totals so far (workers.gate.DelayTally: Note [Delays that count]): one ``delay`` Event per
    job and placement, created by the first report and updated in place by the later ones, so the log holds
    one line per run with its count, total and largest delay."""
    job = _job(msg)
    if job is None or not _current_run(job, msg):
        return
    details = {"placement": msg.get("placement"), "iteration": msg.get("iteration"),
               "delays": int(msg.get("delays", 1)), "delay_s": float(msg.get("delay_s", 0.0)),
               "delay_max_s": float(msg.get("delay_max_s", msg.get("delay_s", 0.0)))}
    updated = Event.objects.filter(job=job, kind=Event.Kind.DELAY,
                                   details__placement=details["placement"]).update(details=details)
    if not updated:
        Event.record(Event.Kind.DELAY, job=job, device=device_for(msg["device"]), **details)


ENVIRONMENT_STATES = ("preparing", "ready", "failed")
ENVIRONMENT_FIELDS = ("key", "packages", "build_s", "cached", "progress")


def on_job_environment(msg: dict[str, Any], r) -> None:
    """The build of a job's own environment (Note [A job's own environment] in workers.runner): stored as the
    job's ``metrics["environment"]`` (``state`` preparing | ready | failed, ``progress``, ``key``, ``packages``,
    ``build_s``, ``cached``), which the job page and ``zico status`` show. Raises ValueError for an unknown state."""
    job = _job(msg)
    if job is None or not _current_run(job, msg) or job.status in TERMINAL:
        return
    if msg.get("state") not in ENVIRONMENT_STATES:
        raise ValueError(f"job_environment: state {msg.get('state')!r} is not one of {ENVIRONMENT_STATES}")
    env = {"state": msg["state"], **{k: msg[k] for k in ENVIRONMENT_FIELDS if k in msg}}
    with transaction.atomic():
        locked = Job.objects.select_for_update().get(pk=job.pk)
        Job.objects.filter(pk=job.pk).update(metrics={**(locked.metrics or {}), "environment": env})


def on_job_finished(msg: dict[str, Any], r) -> None:
    """Record the outcome and metrics of a run, and the compute share it measured with the job's curve
    (zico.jobs.shares); the placement ends when all its jobs are done."""
    job = _job(msg)
    if job is None:
        return
    if not _current_run(job, msg):
        log.info("ignoring the end of a stale run of job %s", job.pk)
        return
    status, metrics = msg.get("status"), dict(msg.get("metrics") or {})
    share = metrics.pop(computeshare.METRIC, None)
    if share is not None:  # a malformed measurement is dropped, never the run's outcome with it
        try:
            metrics[computeshare.METRIC] = share = computeshare.validate(share)
        except computeshare.ShareError as exc:
            log.warning("job %s: malformed compute share measurement not stored: %s", job.pk, exc)
            share = None
    dev = device_for(msg["device"])
    placement = job.active_placement()
    if status not in (S.SUCCEEDED, S.FAILED, S.CANCELLED):
        log.warning("job %s: unknown outcome %r", job.pk, status)
        return
    bound = (placement.plan or {}).get(DEFAULT_BOUND_KEY) if placement is not None else None
    if job.status == S.PROFILING and isinstance(bound, int) and jobbudget.stopped_at_bound(status, metrics):
        # Note [Where a script is profiled] in zico.scheduling.service: stopped at a bound its user never set
        with transaction.atomic():
            requeued = lifecycle.requeue_to_profile_alone(job, dev, bound, run_metrics=metrics)
            if requeued:
                end_placement_if_done(placement, f"job {job.pk} stopped at its default bound; requeued")
        if requeued:
            log.info("job %s stopped at its default bound of %s bytes on %s: requeued to be profiled alone",
                     job.pk, bound, dev)
            return
    if job.status == S.PROFILING and status == S.FAILED:  # a script job whose run ended before its profile did
        _remember_profile_failure(job, str(msg.get("reason") or ""), dev)
    with transaction.atomic():  # the outcome and the placement's end are seen together, never one alone
        lifecycle.finish(job, status, dev, reason=readable_reason(str(msg.get("reason") or ""))[:keys.REASON_MAX_CHARS],
                         metrics=metrics)
        if metrics.get("iterations_done") is not None:
            Job.objects.filter(pk=job.pk).update(progress_iteration=int(metrics["iterations_done"]))
        if share is not None:  # stored with the curve of the job's kind (Note [Where a measured share is stored])
            store_measured_share(job, share, msg.get("placement"))
        end_placement_if_done(placement, f"job {job.pk} {status}")
    archive_log(job, r)  # the run's output lines, from its Redis stream (Note [A job's log, live then stored])


def _profile_failure(error: str, dev: Device | None, job: Job) -> dict | None:
    """What to remember of ``job``'s failed profile (zico.jobs.known.profile_failure), judged with whether another
    job's placement on the device, or another catalog job's profile run there, overlapped the profile run at any
    time (from the job's start, or the profiling time limit ago, until now): a neighbour that held the device's
    memory and ended before this message arrived still counts, so a failure it caused is not remembered (Note [A
    failure refuses only its own tenant]); and with the job's own budget (Note [An out-of-memory says what the
    run had])."""
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone

    from zico.jobs.known import profile_failure

    now = timezone.now()
    since = job.started_at or now - timedelta(seconds=float(settings.ZICO_PROFILE_TIME_LIMIT_S))
    overlapping = (Q(placements__device=dev) & Q(placements__started_at__lte=now)  # one placement, all three
                   & (Q(placements__ended_at__isnull=True) | Q(placements__ended_at__gte=since)))
    others = dev is not None and (Job.objects.filter(overlapping).exclude(pk=job.pk).exists()
                                  or _profiled_beside(job, dev, since, now))
    return profile_failure(error[:1500], dev, others, own_budget_bytes=job.budget_bytes)


def _profiled_beside(job: Job, dev: Device, since, now) -> bool:
    """Whether another catalog job's profile run (no placement: Note [Profile runs are tenants on their device] in
    placement.tenancy) was on ``dev`` at any time between ``since`` and ``now``: sent there before ``now`` (its
    move to ``profiling`` names the device) and still profiling there, or moved on since ``since``."""
    sent_here = (Event.objects.filter(kind=Event.Kind.STATUS_CHANGE, device=dev, details__to=S.PROFILING,
                                      time__lte=now).exclude(job=job).values("job_id"))
    moved_on = Event.objects.filter(kind=Event.Kind.STATUS_CHANGE, details__from=S.PROFILING, time__gte=since,
                                    job__in=sent_here).values("job_id")
    return Job.objects.filter(pk__in=sent_here).filter(Q(status=S.PROFILING, profiling_device=dev)
                                                       | Q(pk__in=moved_on)).exists()


def _remember_profile_failure(job: Job, reason: str, dev: Device | None) -> None:
    """A script job that failed before its profile was complete: remembered as a profiling failure (Note [Known
    memory needs] in zico.jobs.known), so an identical job is refused instead of started again."""
    failure = _profile_failure(readable_reason(reason), dev, job)
    if failure:
        Job.objects.filter(pk=job.pk).update(metrics={**(job.metrics or {}), "profile_failure": failure})
        job.metrics = {**(job.metrics or {}), "profile_failure": failure}


def on_profile_done(msg: dict[str, Any], r) -> None:
    """Store a profile's curve, or fail the job with the profiling error; a failure that predicts an identical
    job's is remembered in the job's metrics (``profile_failure``, Note [Known memory needs] in
    zico.jobs.known), so identical jobs are refused instead of profiled again.

    A profile with ``placement`` is a script job's, measured as its run starts (Note [A script's profile is the
    start of its run] in workers/runner.py): its curve moves the job profiling -> running (the run goes on);
    its error fails the job and stops the run. Without one it is ``profile_job``'s: profiling -> ready."""
    job = _job(msg)
    if job is None:
        return
    in_run = msg.get("placement") is not None
    if in_run and not _current_run(job, msg):
        log.info("ignoring the profile of a stale run of job %s", job.pk)
        return
    if not in_run and job.status != S.PROFILING and msg.get("error"):
        # a duplicate profile_job's (Note [A stale profile run] in workers/profiling.py): the job has moved on
        log.info("ignoring the profiling error of job %s, which is %s: %s", job.pk, job.status, msg["error"])
        return
    dev = device_for(msg["device"])
    if msg.get("error"):
        error = readable_reason(str(msg["error"]))
        failure = _profile_failure(error, dev, job)
        if lifecycle.fail(job, f"profiling failed: {error}"[:2000], device=dev,
                          metrics={"profile_failure": failure} if failure else None,
                          stop_run=r if in_run else None):  # the run goes on without its curve: stop it
            archive_log(job, r)  # a command job's output while profiled (its traceback) is its log
        return
    MemoryProfile.record(job, msg["curve"])
    if job.status == S.PROFILING:
        lifecycle.profiled(job, dev, placement=msg.get("placement"), iterations=msg.get("iterations"))


def on_telemetry_gap(msg: dict[str, Any], r) -> None:
    dev = device_for(msg["device"])
    if dev is not None:
        TelemetryGap.objects.create(device=dev, start=_dt(msg["start"]), end=_dt(msg["end"]))


def on_oom_prevented(msg: dict[str, Any], r) -> None:
    """One ``oom_prevented`` Event per report: ``count`` allocations waited for the budget and then
    succeeded (Note [OOM prevented] in workers.oom_watch); ``/metrics`` sums the counts."""
    job = _job(msg)
    if job is None or not _current_run(job, msg):
        return
    count, overruns = int(msg.get("count", 0)), int(msg.get("overruns", 0))
    if count < 0 or overruns < 0 or (count == 0 and overruns == 0):
        raise ValueError(f"oom_prevented: count {count} / overruns {overruns} must be >= 0, one of them > 0")
    Event.record(Event.Kind.OOM_PREVENTED, job=job, device=device_for(msg["device"]), count=count,
                 overruns=overruns, waited_s=float(msg.get("waited_s", 0.0)))


HANDLERS = {
    "worker_up": on_worker_up,
    "job_started": on_job_started,
    "job_progress": on_job_progress,
    "job_environment": on_job_environment,
    "job_delay": on_job_delay,
    "job_finished": on_job_finished,
    "profile_done": on_profile_done,
    "telemetry_gap": on_telemetry_gap,
    "oom_prevented": on_oom_prevented,
    "worker_down": lambda msg, r: None,
}


def handle(msg: dict[str, Any], r) -> None:
    """Dispatch one lifecycle message, checked against its contract first (zico_contracts.lifecycle). Raises
    LifecycleError (a ValueError naming the field) on a malformed one, ValueError on figures a handler refuses."""
    HANDLERS[validate_message(msg)["msg"]](msg, r)


# -- timeline ----------------------------------------------------------------------------------
def store_points(points: list[Point], devices: dict[str, Device | None]) -> int:
    """Insert downsampled points (one per second per series; duplicates ignored). Returns rows offered."""
    rows = []
    job_ids = {p.job for p in points if p.job is not None}
    known_jobs = set(Job.objects.filter(pk__in=job_ids).values_list("pk", flat=True)) if job_ids else set()
    looked_up: set[str] = set()
    for p in points:
        # A key not registered yet is looked up again in the next batch (once per batch), not cached as
        # unknown: a worker's first samples can reach the stream before its worker_up is handled.
        if devices.get(p.device) is None and p.device not in looked_up:
            devices[p.device] = device_for(p.device)
            looked_up.add(p.device)
        dev = devices[p.device]
        if dev is None or (p.job is not None and p.job not in known_jobs):
            continue
        rows.append(TimelinePoint(device=dev, job_id=p.job, second=p.second, time=_dt(p.second),
                                  allocated_bytes=p.allocated, reserved_bytes=p.reserved,
                                  allocated_at_peak_bytes=p.allocated_at_peak, iteration=p.iteration,
                                  phase=p.phase, device_used_bytes=p.device_used, budget_bytes=p.budget,
                                  samples=p.samples))
    TimelinePoint.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)
