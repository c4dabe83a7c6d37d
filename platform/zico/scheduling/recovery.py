"""Recovery after a scheduler restart: resend the device tasks a previous scheduler process committed but may
never have sent.

Note [Scheduler restarts]
    A round commits its moves first and sends the device tasks after the commit (zico.scheduling.service),
    so a scheduler killed (SIGKILL, OOM, power) between a commit and its send leaves jobs ``placed`` on an
    open placement, or ``profiling``, with no task on any queue: nothing would ever start them. A round
    killed *inside* a transaction leaves nothing (PostgreSQL rolls it back and the advisory round lock goes
    with the session); a SIGTERM ends the round in progress before stopping, so it leaves nothing either.

    The database does not say whether the send happened, so the first round of every scheduler process
    resends the task of each job still ``placed`` (``run_job`` with the *same* placement, curve and plan)
    or ``profiling`` (``profile_job``; for a script job profiled as its run starts, in a placement of its
    own, that placement's ``run_job`` with its profile). A duplicate is harmless by the workers' contract: a ``run_job`` for
    a job already running in that worker raises before touching it, one for a finished run of the same
    placement is ignored (``done`` key), and a second curve for a job already ``ready`` is only stored.
    No job changes status here, so no job can be placed twice; the resend is recorded as a ``placement``
    Event (``action: task_resent``) per job so the restart is visible in the job's history.
"""
from __future__ import annotations

import logging

from django.db.models import OuterRef, Subquery

from zico.cluster.models import Placement
from zico.jobs.models import Event, Job, MemoryProfile
from zico.jobs.transitions import JobStatus

log = logging.getLogger(__name__)

RESENT = "task_resent"


def unsent_tasks(run_task: str, profile_task: str) -> list[tuple[str, int, str, list]]:
    """The device tasks of every job still ``placed`` or ``profiling`` (see the Note), as an outbox of
    ``(task name, job id, queue, args)``; records one ``placement`` Event (``action: task_resent``) per job.
    A fixed number of queries, whatever the number of jobs.

    A ``placed`` job without a stored curve, or a ``profiling`` job whose profiling device is unknown, is
    logged and left alone (the lost-worker check or a user still ends it).
    """
    outbox: list[tuple[str, int, str, list]] = []
    events: list[Event] = []
    reason = "scheduler restarted; the task may not have been sent"
    links = list(Placement.jobs.through.objects.filter(job__status=JobStatus.PLACED, placement__ended_at__isnull=True)
                 .values_list("job_id", "placement_id").order_by("job_id"))
    if links:
        jobs = Job.objects.select_related("tenant").in_bulk([j for j, _ in links])  # the spec reads the tenant
        placements = Placement.objects.select_related("device__node").in_bulk([p for _, p in links])
        latest = MemoryProfile.objects.filter(job=OuterRef("pk")).order_by("-created_at", "-id").values("pk")[:1]
        curve_of = dict(Job.objects.filter(pk__in=jobs).annotate(c=Subquery(latest)).values_list("pk", "c"))
        bodies = dict(MemoryProfile.objects.filter(pk__in={c for c in curve_of.values() if c})
                      .values_list("pk", "curve"))
        for job_id, placement_id in links:
            job, placement = jobs[job_id], placements[placement_id]
            if curve_of.get(job_id) is None:
                log.warning("job %s is placed without a stored curve; not resent", job_id)
                continue
            spec = placement.run_spec(job, bodies[curve_of[job_id]])
            outbox.append((run_task, job_id, placement.device.queue, [job_id, spec]))
            events.append(Event(kind=Event.Kind.PLACEMENT, tenant_id=job.tenant_id, job=job, device=placement.device,
                                details={"action": RESENT, "task": run_task, "placement": placement.pk,
                                         "reason": reason}))
    profiling = list(Job.objects.filter(status=JobStatus.PROFILING).select_related("profiling_device__node", "tenant")
                     .order_by("pk"))
    in_run = dict(Placement.jobs.through.objects.filter(job__in=profiling, placement__ended_at__isnull=True)
                  .values_list("job_id", "placement_id"))
    runs = Placement.objects.select_related("device__node").in_bulk(set(in_run.values()))
    for job in profiling:
        if job.pk in in_run:  # a script job profiled as its run starts: its run_job, with its profile
            placement = runs[in_run[job.pk]]
            outbox.append((run_task, job.pk, placement.device.queue, [job.pk, placement.run_spec(job, None)]))
            events.append(Event(kind=Event.Kind.PLACEMENT, tenant_id=job.tenant_id, job=job, device=placement.device,
                                details={"action": RESENT, "task": run_task, "placement": placement.pk,
                                         "reason": reason}))
            continue
        device = job.profiling_device  # the column set by the move to profiling
        if device is None:
            log.warning("job %s is profiling on an unknown device; not resent", job.pk)
            continue
        outbox.append((profile_task, job.pk, device.queue,
                       [job.pk, job.profile_spec()]))
        events.append(Event(kind=Event.Kind.PLACEMENT, tenant_id=job.tenant_id, job=job, device=device,
                            details={"action": RESENT, "task": profile_task, "reason": reason}))
    Event.objects.bulk_create(events)
    if outbox:
        log.warning("scheduler start: resending %d device task(s) a previous scheduler may not have sent (jobs %s)",
                    len(outbox), [job_id for _, job_id, _, _ in outbox])
    return outbox
