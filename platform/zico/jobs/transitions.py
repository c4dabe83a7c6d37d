"""The job status machine: the one table of legal moves and the one write that makes them (_write_moves).

Note [Job status machine]
~~~~~~~~~~~~~~~~~~~~~~~~~
The happy path is  queued → profiling → ready → placed → running → succeeded.
The other moves a real cluster needs, and why:

* queued → ready          a memory curve is already known (uploaded torch snapshot, cached estimate)
* queued|profiling|ready|placed|running|lost → cancelled
                          a user or admin cancels; a running job is stopped by its worker
* queued|profiling|ready|placed|running|lost → failed
                          the spec cannot run (profiling OOM, import error, worker rejected the placement,
                          training raised, too many losses); ``reason`` is required and kept in failure_reason
* profiling|placed|running → lost
                          the worker holding the job stopped heart-beating (worker_lost)
* lost → queued           the job is requeued and resumes from its last checkpoint
* placed → ready          the scheduler unplaces a job before it starts (device drained or budget lowered);
                          its curve stays valid, so it goes back to ready rather than queued
* profiling → running     a script job profiled as its run starts (in a placement of its own) has its curve
                          measured and goes on training (Note [A script's profile is the start of its run]
                          in workers/runner.py)
succeeded, failed and cancelled are terminal: nothing leaves them.

Every move runs in one transaction: the job row is locked (SELECT … FOR UPDATE), its *current*
status in the database is checked against the table, the row is updated and one ``status_change``
Event is written — so two racing callers cannot both move the same job, and a refused move
changes nothing.
"""
from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

log = logging.getLogger(__name__)


class JobStatus:
    """Status values (plain strings, stored in Job.status)."""

    QUEUED = "queued"
    PROFILING = "profiling"
    READY = "ready"
    PLACED = "placed"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"


S = JobStatus
ALL_STATUSES = (S.QUEUED, S.PROFILING, S.READY, S.PLACED, S.RUNNING, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.LOST)
TERMINAL = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED})
# Statuses in which a job holds (or is about to hold) device memory: counted by the running-jobs quota.
ON_DEVICE = frozenset({S.PLACED, S.RUNNING})

# The one table of legal moves: from-status -> statuses it may move to.
TRANSITIONS: dict[str, frozenset[str]] = {
    S.QUEUED: frozenset({S.PROFILING, S.READY, S.CANCELLED, S.FAILED}),
    S.PROFILING: frozenset({S.READY, S.RUNNING, S.CANCELLED, S.FAILED, S.LOST}),
    S.READY: frozenset({S.PLACED, S.CANCELLED, S.FAILED}),
    S.PLACED: frozenset({S.RUNNING, S.READY, S.CANCELLED, S.FAILED, S.LOST}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.LOST}),
    S.LOST: frozenset({S.QUEUED, S.CANCELLED, S.FAILED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}


def on_device_q(prefix: str = ""):
    """A Q for the jobs that hold (or are about to hold) memory on a device: placed or running, or profiling
    in a placement of their own (a script job whose profile is the start of its run). ``prefix`` reaches the
    job through a relation (``"jobs__"``). A subquery, not a join, so counts stay one row per job."""
    from django.db.models import Q

    from zico.cluster.models import Placement

    in_placement = Placement.jobs.through.objects.filter(placement__ended_at__isnull=True).values("job_id")
    return Q(**{f"{prefix}status__in": ON_DEVICE}) | Q(**{f"{prefix}status": S.PROFILING,
                                                           f"{prefix}pk__in": in_placement})


CANCELLABLE = frozenset(s for s, targets in TRANSITIONS.items() if S.CANCELLED in targets)


class IllegalTransition(ValueError):
    """A status move that the table does not allow; nothing was changed."""

    def __init__(self, job_id: int, from_status: str, to_status: str):
        allowed = ", ".join(sorted(TRANSITIONS.get(from_status, ()))) or "none (terminal)"
        super().__init__(f"job {job_id}: cannot move from {from_status!r} to {to_status!r} "
                         f"(allowed from {from_status!r}: {allowed})")
        self.job_id, self.from_status, self.to_status = job_id, from_status, to_status


def is_allowed(from_status: str, to_status: str) -> bool:
    return to_status in TRANSITIONS.get(from_status, frozenset())


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
    from .models import Job

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
    from .models import Job

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
    from django.db.models import Case, F, IntegerField, Value, When
    from django.db.models.functions import Coalesce

    from .models import Event, Job

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
