"""The one owner of a job's lifecycle on the web side: the verbs that move a job (place, start, profile,
mark ready, finish, fail, cancel, lose, requeue), each with its status_change Events, the records that go
with it (placements, worker_lost Events) and its Redis side effects (a run asked to stop, a log archived).

No other module writes ``Job.status``: pages, the API, the admin, the scheduler and the control consumer
call these verbs. The statuses and the table of legal moves are in zico.jobs.transitions (Note [Job status
machine]); :func:`transition`, :func:`try_transition` and :func:`transition_many` below are the one write of
a move, public for tests that set a job's status directly.
"""
from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import Case, F, IntegerField, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from placement.tenancy import refusing_tenants
from zico.cluster.models import DEFAULT_BOUND_KEY, Device, Placement, PlacementError, Status
from zico.tenants.models import Tenant
from zico_contracts import jobbudget, keys

from .known import DEFAULT_BOUND_EXCEEDED
from .models import Event, Job, on_device_q
from .outputs import archive_log
from .transitions import ALL_STATUSES, TERMINAL, TRANSITIONS, IllegalTransition, JobStatus, is_allowed

S = JobStatus
log = logging.getLogger(__name__)


# -- the write of a move -------------------------------------------------------------------------
def _check_target(to: str, reason: str) -> None:
    """Refuse an unknown target status or a move to ``failed`` without a reason (ValueError)."""
    if to not in TRANSITIONS:
        raise ValueError(f"unknown job status {to!r} (expected one of {', '.join(ALL_STATUSES)})")
    if to == S.FAILED and not reason.strip():
        raise ValueError("reason: a move to 'failed' needs a reason")


# The Job fields a move may change, refreshed on the caller's object by transition.
_MOVED_FIELDS = ("status", "status_changed_at", "attempts", "started_at", "lost_count", "finished_at",
                 "failure_reason", "metrics", "updated_at", "waiting_reason", "waiting_kind", "waiting_since",
                 "profiling_device_id")


def transition(job, to: str, *, reason: str = "", actor=None, device=None,
               metrics: dict[str, Any] | None = None, **details: Any):
    """Move ``job`` to status ``to`` and record a ``status_change`` Event, atomically: the write
    of :func:`transition_many` for one job, plus the ``metrics`` merge.

    Args:
        job: a Job instance (its in-memory fields are refreshed from the moved row).
        to: target status (a JobStatus value).
        reason: why (shown to users; required for ``failed``, stored in ``failure_reason``).
        actor: the user who asked, or None for the system (scheduler, worker).
        device: the Device the move concerns (placement, loss), recorded on the Event.
        metrics: merged into ``job.metrics`` (iterations/s, peak bytes, delay, slowdown, ...).
        **details: extra JSON-serialisable details stored on the Event.
    Returns:
        The same ``job`` object, updated.
    Raises:
        IllegalTransition: the table does not allow the move from the job's current status
            (read under a row lock); nothing is written.
        ValueError: unknown target status, or ``failed`` without a reason.
    """
    _check_target(to, reason)
    with transaction.atomic():
        _write_moves([job], to, reason, actor, {job.pk: device}, {job.pk: details})
        row = Job.objects.only(*_MOVED_FIELDS).get(pk=job.pk)  # still locked by _write_moves
        if metrics:
            row.metrics = {**(row.metrics or {}), **metrics}
            Job.objects.filter(pk=row.pk).update(metrics=row.metrics)
    for f in _MOVED_FIELDS:
        setattr(job, f, getattr(row, f))
    return job


def try_transition(job, to: str, **kwargs: Any) -> bool:
    """:func:`transition`, for callers that act on what they saw (a worker's message, a round's
    decision) while someone else may have moved the job first (a cancel, another round): an
    IllegalTransition is logged at INFO and answered False; True when the move was made.

    Raises:
        ValueError: what :func:`transition` raises for bad input (unknown status, ``failed``
            without a reason).
    """
    try:
        transition(job, to, **kwargs)
        return True
    except IllegalTransition as exc:
        log.info("%s", exc)
        return False


def transition_many(jobs, to: str, *, reason: str = "", actor=None, device=None,
                    details_by_job: dict[int, dict[str, Any]] | None = None,
                    devices_by_job: dict[int, Any] | None = None):
    """Move every job of ``jobs`` to status ``to`` at once, or none of them: the bulk form of
    :func:`transition`, with the same write (one ``status_change`` Event per job).

    A fixed number of queries whatever the number of jobs: the rows are locked and read
    (``SELECT … FOR UPDATE``, in id order), every current status is checked against the table,
    then one conditional ``UPDATE … WHERE id IN (…) AND status IN (<statuses that may move to
    to>)`` whose row count must equal the number of jobs, and one bulk insert of the Events. Every
    move clears the waiting reason (``waiting_reason``, ``waiting_kind``, ``waiting_since``); the
    side effects per target: ``running``: attempts + 1 and started_at kept or set; ``lost``:
    lost_count + 1; terminal: finished_at; ``failed``: failure_reason; ``profiling``: profiling_device
    (the Event's device), cleared by every other move. There is no ``metrics``
    merge here (:func:`transition` has it).

    Args:
        jobs: Job instances (distinct; their in-memory fields are updated like transition's).
        to: target status (a JobStatus value).
        reason: why, on every Event (required for ``failed``).
        actor: the user who asked, or None for the system.
        device: the Device every Event names, or None; ``devices_by_job`` (job id -> Device)
            overrides it per job.
        details_by_job: job id -> extra JSON-serialisable details for that job's Event.
    Returns:
        The list of jobs, updated.
    Raises:
        IllegalTransition: some job's current status (read under the row lock) may not move to
            ``to`` (the first such job in id order is named); nothing is written.
        ValueError: unknown target status, ``failed`` without a reason, or a job listed twice.
    """
    _check_target(to, reason)
    jobs = list(jobs)
    ids = [j.pk for j in jobs]
    if len(set(ids)) != len(ids):
        raise ValueError("jobs: a job is listed more than once")
    if not jobs:
        return jobs
    devices = {j.pk: (devices_by_job or {}).get(j.pk, device) for j in jobs}
    with transaction.atomic():
        now = _write_moves(jobs, to, reason, actor, devices, details_by_job or {})
        fresh = {r.pk: r for r in Job.objects.filter(pk__in=ids).only(
            "attempts", "started_at", "lost_count")} if to in (S.RUNNING, S.LOST) else {}
    for job in jobs:
        job.status, job.status_changed_at, job.updated_at = to, now, now
        job.waiting_reason, job.waiting_kind, job.waiting_since = "", "", None
        if to in TERMINAL:
            job.finished_at = now
        if to == S.FAILED:
            job.failure_reason = reason
        job.profiling_device_id = getattr(devices[job.pk], "pk", None) if to == S.PROFILING else None
        if job.pk in fresh:
            for f in ("attempts", "started_at", "lost_count"):
                setattr(job, f, getattr(fresh[job.pk], f))
    return jobs


def _write_moves(jobs: list, to: str, reason: str, actor, device_by_job: dict, details_by_job: dict):
    """The one write of a move (see :func:`transition_many`), inside the caller's transaction:
    lock and check every row, one conditional UPDATE with the per-status side effects, one
    ``status_change`` Event per job. ``jobs`` are distinct and ``to``/``reason`` already checked.
    Returns the time of the move; raises IllegalTransition before writing anything."""
    ids = [j.pk for j in jobs]
    may_move = [s for s, targets in TRANSITIONS.items() if to in targets]
    if actor is not None and not getattr(actor, "is_authenticated", False):
        actor = None  # as Event.record: anonymous means the system
    rows = dict(Job.objects.select_for_update().filter(pk__in=ids).order_by("pk").values_list("pk", "status"))
    for pk in sorted(ids):
        if not is_allowed(rows.get(pk, "missing"), to):
            raise IllegalTransition(pk, rows.get(pk, "missing"), to)
    now = timezone.now()
    # a move ends the wait the scheduler explained; the next round explains afresh if the job still waits
    fields: dict[str, Any] = {"status": to, "status_changed_at": now, "updated_at": now,
                              "waiting_reason": "", "waiting_kind": "", "waiting_since": None}
    if to == S.RUNNING:
        fields.update(attempts=F("attempts") + 1, started_at=Coalesce(F("started_at"), now))
    elif to == S.LOST:
        fields["lost_count"] = F("lost_count") + 1
    if to in TERMINAL:
        fields["finished_at"] = now
    if to == S.FAILED:
        fields["failure_reason"] = reason
    if to == S.PROFILING:  # where, in a column: the lost-worker check reads it (Job.profiling_device)
        dev_ids = {pk: getattr(device_by_job.get(pk), "pk", None) for pk in ids}
        if len(set(dev_ids.values())) == 1:
            fields["profiling_device_id"] = next(iter(dev_ids.values()))
        else:
            fields["profiling_device_id"] = Case(*[When(pk=pk, then=Value(d)) for pk, d in dev_ids.items()],
                                                 default=Value(None), output_field=IntegerField())
    else:
        fields["profiling_device_id"] = None
    changed = Job.objects.filter(pk__in=ids, status__in=may_move).update(**fields)
    if changed != len(ids):  # cannot happen under the row locks; never write a partial move
        raise IllegalTransition(ids[0], rows.get(ids[0], "missing"), to)
    Event.objects.bulk_create([
        Event(kind=Event.Kind.STATUS_CHANGE, time=now, job_id=j.pk, tenant_id=j.tenant_id,
              actor_id=actor and actor.pk, device_id=getattr(device_by_job.get(j.pk), "pk", None),
              details={"reason": reason, "from": rows[j.pk], "to": to, **details_by_job.get(j.pk, {})})
        for j in jobs])
    return now


# -- placing ---------------------------------------------------------------------------------------
def place(device: Device, jobs, plan: dict | None = None, *, actor=None) -> Placement:
    """Place ``jobs`` (all ``ready``) on ``device`` under ``plan``, atomically: a one-group
    :func:`place_many`, whose :func:`_refusal` holds the one copy of the rules.

    Creates the Placement, moves every job ready → placed (a status_change Event each) and
    records one ``placement`` Event per tenant involved. Jobs on one device share its pool and compute
    (docs/architecture.md, "Tenancy"), so jobs of different tenants — counting jobs already placed or running
    on the device, and catalog jobs being profiled there (Note [Profile runs are tenants on their device] in
    placement.tenancy) — may meet only when every tenant involved allows cross-tenant co-location.

    Raises:
        PlacementError: no jobs, the device is not online, the co-location policy forbids it, or a
            tenant would exceed its ``max_running_jobs`` quota (jobs placed or running, any device).
        IllegalTransition: a job is not ``ready``; nothing is written.
        ValueError: a job is listed twice.
    """
    [placement] = place_many([(device, jobs, plan)], actor=actor)  # the rules live there, once
    if isinstance(placement, Exception):
        raise placement
    return placement

def place_many(groups, *, actor=None, profiling: bool = False) -> list:
    """Open many placements at once, with the checks and records of :func:`place` for each.

    ``profiling``: the jobs are ``queued`` script jobs without a curve, each to be profiled as its run starts
    (Note [A script's profile is the start of its run] in workers/runner.py); they move queued →
    profiling (the device in ``Job.profiling_device``) instead of ready → placed.

    ``groups`` is a list of ``(device, jobs, plan)``; the result is aligned with it: the new
    Placement, or the PlacementError / IllegalTransition that refused that group (a refused
    group writes nothing; the others go ahead). Groups are judged in order as if opened one
    after another: a group counts the jobs of the groups accepted before it (same device for
    the co-location policy, same tenant for the running-jobs quota).

    A fixed number of queries whatever the number of groups: devices,
    tenants and jobs locked in id order with one ``SELECT … FOR UPDATE`` each, the jobs
    already on those devices and the per-tenant count of jobs placed or running read once,
    then one bulk insert of placements, of their job links and of the placement Events, and
    one :func:`transition_many` (ready → placed, one status_change Event
    per job, a conditional UPDATE whose row count is checked).

    Raises:
        ValueError: a job appears in two groups.
    """
    groups = [(device, list(jobs), plan or {}) for device, jobs, plan in groups]
    all_ids = [j.pk for _, jobs, _ in groups for j in jobs]
    if len(set(all_ids)) != len(all_ids):
        dup = next(pk for pk in all_ids if all_ids.count(pk) > 1)
        raise ValueError(f"groups: job {dup} is listed twice (in more than one group, or twice in one)")
    out: list = [None] * len(groups)
    with transaction.atomic():
        devices = {d.pk: d for d in Device.objects.select_for_update().select_related("node")
                   .filter(pk__in={d.pk for d, _, _ in groups}).order_by("pk")}
        # tenants of the jobs already placed or running on these devices, per device
        on_dev: dict[int, set[int]] = {}
        for dev_id, tenant_id in (Job.objects.filter(on_device_q(), placements__device__in=list(devices),
                                                     placements__ended_at__isnull=True)
                                  .values_list("placements__device_id", "tenant_id").order_by().distinct()):
            on_dev.setdefault(dev_id, set()).add(tenant_id)
        # and of the catalog jobs being profiled there (Note [Profile runs are tenants on their device] in
        # placement.tenancy)
        for dev_id, tenant_id in (Job.objects.filter(status=S.PROFILING, profiling_device__in=list(devices))
                                  .values_list("profiling_device_id", "tenant_id").order_by().distinct()):
            on_dev.setdefault(dev_id, set()).add(tenant_id)
        tenant_ids = {j.tenant_id for _, jobs, _ in groups for j in jobs} | set().union(*on_dev.values())
        # Locked, so two placements on different devices cannot both slip under a running-jobs quota.
        tenants = {t.pk: t for t in Tenant.objects.select_for_update().filter(pk__in=tenant_ids).order_by("pk")}
        counts = dict(Job.objects.filter(on_device_q(), tenant_id__in=tenant_ids)
                      .values_list("tenant_id").annotate(n=models.Count("pk")).order_by())
        status = dict(Job.objects.select_for_update().filter(pk__in=all_ids).order_by("pk")
                      .values_list("pk", "status"))
        accepted = []
        for i, (device, jobs, plan) in enumerate(groups):
            out[i] = err = _refusal(devices.get(device.pk), jobs, tenants, on_dev, counts, status,
                                        JobStatus.QUEUED if profiling else JobStatus.READY)
            if err is None:
                dev = devices[device.pk]
                on_dev.setdefault(dev.pk, set()).update(j.tenant_id for j in jobs)
                for j in jobs:
                    counts[j.tenant_id] = counts.get(j.tenant_id, 0) + 1
                accepted.append(i)
        made = Placement.objects.bulk_create([Placement(device=devices[groups[i][0].pk], plan=groups[i][2]) for i in accepted])
        links, moved, dev_of, det_of, events = [], [], {}, {}, []
        for i, placement in zip(accepted, made):
            _, jobs, _ = groups[i]
            out[i] = placement
            dev = placement.device
            links += [Placement.jobs.through(placement_id=placement.pk, job_id=j.pk) for j in jobs]
            for j in jobs:
                moved.append(j)
                dev_of[j.pk], det_of[j.pk] = dev, {"placement": placement.pk}
            involved = sorted({j.tenant_id for j in jobs} | on_dev.get(dev.pk, set()))
            events += _placement_events(placement, jobs, involved, tenants, actor)
        Placement.jobs.through.objects.bulk_create(links)
        for i, placement in zip(accepted, made):  # a default bound (Note [Where a script is profiled]) in its Event
            bound = (placement.plan or {}).get(DEFAULT_BOUND_KEY) if profiling else None
            for j in groups[i][1] if bound is not None else ():
                det_of[j.pk][DEFAULT_BOUND_KEY] = bound
        transition_many(moved, JobStatus.PROFILING if profiling else JobStatus.PLACED, actor=actor,
                        devices_by_job=dev_of, details_by_job=det_of,
                        reason="placed in a placement of its own to be profiled as its run starts" if profiling else "")
        Event.objects.bulk_create(events)
    return out

def _refusal(dev, jobs, tenants, on_dev, counts, status, expected: str = "ready"):
    """Why :func:`place_many` refuses one group (an exception to return), or None: the placement
    rules (see :func:`place`), judged on the state read under locks plus the groups accepted before.

    ``dev`` is the locked Device or None (gone); ``tenants`` maps id -> Tenant; ``on_dev`` maps
    device id -> ids of the tenants with jobs on it; ``counts`` maps tenant id -> jobs placed or
    running; ``status`` maps job id -> its locked status, which must be ``expected``.
    """
    if not jobs:
        return PlacementError("jobs: a placement needs at least one job")
    if dev is None or dev.status != Status.ONLINE:
        return PlacementError(f"device: {dev or 'the device'} is {dev.status if dev else 'gone'}, not online")
    involved = sorted((tenants[t] for t in {j.tenant_id for j in jobs} | on_dev.get(dev.pk, set())),
                      key=lambda t: t.slug)  # the Tenant ordering, as the messages name them
    refusing = refusing_tenants({t: t.allow_cross_tenant_colocation for t in involved})
    if refusing:
        return PlacementError(f"jobs: tenants {', '.join(t.slug for t in refusing)} do not allow sharing {dev} "
                              "with other tenants")
    for t in involved:
        adding = sum(j.tenant_id == t.pk for j in jobs)
        if adding and counts.get(t.pk, 0) + adding > t.max_running_jobs:
            return PlacementError(f"jobs: tenant {t.slug} would have {counts.get(t.pk, 0) + adding} jobs placed "
                                  f"or running, over its quota of {t.max_running_jobs}")
    for j in jobs:
        if status.get(j.pk) != expected:
            return IllegalTransition(j.pk, status.get(j.pk, "missing"),
                                     JobStatus.PLACED if expected == JobStatus.READY else JobStatus.PROFILING)
    return None

def _placement_events(placement, jobs, involved, tenants, actor) -> list:
    """The ``placement`` Events of :func:`place` (one per tenant with jobs in it), unsaved."""
    if actor is not None and not getattr(actor, "is_authenticated", False):
        actor = None
    # Each tenant's event names only its own jobs, and carries the plan (which names every co-located
    # job) only when no other tenant is involved: other tenants' jobs are not theirs to see.
    shared = len(involved) > 1
    events = []
    for tid in involved:
        mine = [j.pk for j in jobs if j.tenant_id == tid]
        if mine:
            details = {"placement": placement.pk, "jobs": mine, "shared_with_other_tenants": shared,
                       "plan": None if shared else placement.plan}
            events.append(Event(kind=Event.Kind.PLACEMENT, tenant=tenants[tid], device=placement.device,
                                actor=actor, details=details))
    return events


# -- the verbs a job's life is made of ---------------------------------------------------------
def mark_ready(jobs, reason: str, details_by_job: dict[int, dict[str, Any]] | None = None) -> list:
    """queued -> ready, in one bulk move: the jobs' memory curves are known (``reason`` says how). Raises
    IllegalTransition (nothing written) when some job is not queued."""
    return transition_many(jobs, S.READY, reason=reason, details_by_job=details_by_job)


def profile(jobs, device: Device) -> list:
    """queued -> profiling on ``device`` (a catalog job's ``profile_job`` task follows), in one bulk move.
    Raises IllegalTransition (nothing written) when some job is not queued."""
    return transition_many(jobs, S.PROFILING, device=device)


def start(job: Job, device: Device | None, **details: Any) -> bool:
    """placed -> running: the worker started the run (``details``: the run's placement, its checkpoint).
    False, with nothing written, when the job has moved on (a cancel, a loss)."""
    return try_transition(job, S.RUNNING, device=device, **details)


def profiled(job: Job, device: Device | None, *, placement: int | None = None, iterations: int | None = None) -> bool:
    """A job's curve is stored: profiling -> running for a script job profiled as its run starts (in
    ``placement``; the run goes on), profiling -> ready for a ``profile_job``'s. False when the job has moved on."""
    if placement is not None:
        return try_transition(job, S.RUNNING, device=device, placement=int(placement),
                              reason=f"memory curve measured from its first {iterations or 'few'} iterations; "
                                     "the run goes on")
    return try_transition(job, S.READY, device=device)


def finish(job: Job, outcome: str, device: Device | None, *, reason: str = "",
           metrics: dict[str, Any] | None = None) -> None:
    """A run ended with ``outcome`` (succeeded, failed or cancelled). A job still placed or profiling that
    did not end cancelled moves to running first (its start message was lost, or no curve came: the run did
    start). A job already ended (cancelled by a user before the worker confirmed) keeps its status and gets
    the run's figures. Raises ValueError for another outcome."""
    if outcome not in TERMINAL:
        raise ValueError(f"outcome: expected one of {', '.join(sorted(TERMINAL))}, got {outcome!r}")
    if job.status in (S.PLACED, S.PROFILING) and outcome != S.CANCELLED:
        try_transition(job, S.RUNNING, device=device)
    if job.status in TERMINAL:
        Job.objects.filter(pk=job.pk).update(metrics={**(job.metrics or {}), **(metrics or {})})
        return
    try_transition(job, outcome, device=device, reason=reason, metrics=metrics)


def fail(job: Job, reason: str, *, device: Device | None = None, metrics: dict[str, Any] | None = None,
         stop_run=None) -> bool:
    """-> failed with ``reason``; False, with nothing written, when the job has already moved on (ended, or
    moved by someone else). ``stop_run``: a Redis client, to ask the job's worker to stop its run (the cancel
    key, read between iterations) once the job has failed. Raises ValueError for an empty reason."""
    if not try_transition(job, S.FAILED, reason=reason, device=device, metrics=metrics):
        return False
    if stop_run is not None:
        keys.request_cancel(stop_run, job.pk)
    return True


def fail_many(jobs, reason: str) -> list:
    """-> failed with ``reason``, every job or none (IllegalTransition names the first that may not)."""
    return transition_many(jobs, S.FAILED, reason=reason)


def cancel(job: Job, actor, reason: str) -> Job:
    """-> cancelled by ``actor`` (None: the system). The run of a job on a device is stopped by its worker:
    the control consumer asks it to (zico.telemetry.consumer's push_cancellations) while the job's placement
    is active. Raises IllegalTransition (nothing written) when the job has already ended."""
    return transition(job, S.CANCELLED, reason=reason, actor=actor)


def lose(dev: Device, jobs: list[Job], reason: str, max_losses: int | None = None,
         redis_client=None) -> list[Job]:
    """Mark ``jobs`` lost on ``dev`` with a worker_lost Event each, then requeue them (or fail them once they
    have been lost ``max_losses`` times, ``settings.ZICO_MAX_WORKER_LOSSES`` by default, storing their log
    when ``redis_client`` is given). Ends their placements. A job lost while profiling (it has no placement)
    is requeued the same way, with a reason saying it is profiled again. Returns the jobs moved; a job that
    has moved on meanwhile is left as it is."""
    max_losses = max_losses or settings.ZICO_MAX_WORKER_LOSSES
    moved = []
    for job in jobs:
        placement = job.active_placement()
        was = job.status
        if not try_transition(job, S.LOST, device=dev, reason=reason):
            continue
        Event.record(Event.Kind.WORKER_LOST, job=job, device=dev, reason=reason, lost_count=job.lost_count,
                     placement=placement.pk if placement else None)
        if placement is not None:
            placement.end(f"worker lost: {reason}")
        if job.lost_count >= max_losses:
            try_transition(job, S.FAILED, device=dev, reason=f"worker lost {job.lost_count} times (last: {reason})")
            if redis_client is not None:
                archive_log(job, redis_client)
        elif was == S.PROFILING:
            requeue(job, dev, "requeued after worker loss while profiling; it is profiled again")
        else:
            requeue(job, dev, "requeued after worker loss; resumes from its checkpoint")
        moved.append(job)
    return moved


def requeue_to_profile_alone(job: Job, device: Device | None, bound_bytes: int,
                             run_metrics: dict[str, Any] | None = None) -> bool:
    """profiling -> queued: a script job's run was stopped at its default bound of ``bound_bytes`` bytes beside
    other jobs (zico_contracts.jobbudget); it is remembered in its metrics (zico.jobs.known.DEFAULT_BOUND_EXCEEDED:
    the bound, the device, and from the stopped run's ``run_metrics`` its refusals and peak reserved bytes; the
    run's other figures are not the job's) so the scheduler profiles it alone, and the move's reason says so with
    the bound (:func:`zico_contracts.jobbudget.requeue_reason`). False, with nothing written, when the job has
    moved on."""
    run_metrics = run_metrics or {}
    memo = {"bound_bytes": int(bound_bytes), "device": str(device) if device else None,
            "refusals": run_metrics.get(jobbudget.REFUSALS_METRIC),
            "peak_reserved_bytes": run_metrics.get("peak_reserved_bytes")}
    return try_transition(job, S.QUEUED, device=device, reason=jobbudget.requeue_reason(bound_bytes),
                          metrics={DEFAULT_BOUND_EXCEEDED: memo}, bound_bytes=int(bound_bytes))


def requeue(job: Job, device: Device | None, reason: str) -> bool:
    """lost -> queued: the job waits to be placed again (from its checkpoint, or profiled again)."""
    return try_transition(job, S.QUEUED, device=device, reason=reason)
