"""The scheduler service's round: the only writer of placements.

One round:

1. takes the cluster-wide scheduling lock (a PostgreSQL session advisory lock), so two
   scheduler processes never decide on the same state at once; a second instance skips its
   round while the first holds it (a crashed holder's lock goes with its session);
2. moves ``queued`` jobs on: to ``ready`` when a curve is stored, else to ``profiling`` with a
   ``zico.device.profile_job`` task on a device queue;
3. fails ``ready`` jobs that no device could ever hold (with the reason);
4. asks the policy (placement.policies) for placements and opens them with
   :meth:`zico.cluster.models.Placement.open`, which re-checks under row locks that every job is
   still ``ready`` and the device online (the conditional claim: a job moved by anyone else
   meanwhile is skipped, never placed twice) — ``CHUNK_DEVICES`` devices per transaction, so
   job and tenant rows are not held locked for the whole round;
5. after each commit, sends the tasks of what it committed (one ``zico.device.run_job`` per
   placed job, to its device's queue).

Task arguments (agreed with the workers lane, see workers.runner.RunSpec / workers.tasks):
``run_job(job_id, {"workload", "params", "placement", "curve", "plan"})`` and
``profile_job(job_id, {"workload", "params"})``.
"""
from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field

from django.db import connection, transaction

from placement.policies import MemoryAware, Policy
from zico.cluster.models import Device, Placement, PlacementError, Status
from zico.jobs.models import Job, MemoryProfile
from zico.jobs.transitions import IllegalTransition, JobStatus

from .snapshot import take_snapshot

log = logging.getLogger(__name__)

# pg advisory lock key of the scheduling round ("zico-sch" as an int64)
ROUND_LOCK_KEY = 0x7A69636F2D736368
CHUNK_DEVICES = 32  # devices whose placements are opened in one transaction
RUN_TASK = "zico.device.run_job"
PROFILE_TASK = "zico.device.profile_job"


@dataclass
class RoundResult:
    """What one round did (ids), for logs and tests."""

    skipped: bool = False                          # another scheduler held the round lock
    ready: list[int] = field(default_factory=list)          # queued -> ready (curve known)
    profiling: list[int] = field(default_factory=list)      # queued -> profiling (task sent)
    failed: list[int] = field(default_factory=list)         # ready -> failed (fits no device)
    placed: dict[int, int] = field(default_factory=dict)    # job id -> placement id
    sent: list[tuple[str, int, str]] = field(default_factory=list)  # (task, job id, queue), after commit
    outbox: list[tuple[str, int, str, list]] = field(default_factory=list, repr=False)  # to send on commit


def send_tasks(outbox: list[tuple[str, int, str, list]]) -> list[tuple[str, int, str]]:
    """Send device tasks by name, each on its queue, over one broker connection (the web side
    never imports the worker code). Returns what was sent; a message that fails is logged and
    skipped (the job stays placed or profiling; liveness checks requeue lost work)."""
    from zico import celery_app

    sent = []
    with celery_app.producer_or_acquire() as producer:
        for name, job_id, queue, args in outbox:
            try:
                celery_app.send_task(name, args=args, queue=queue, producer=producer)
                sent.append((name, job_id, queue))
            except Exception:
                log.exception("could not send %s for job %s to %s", name, job_id, queue)
    return sent


class Scheduler:
    """Runs scheduling rounds with one policy; keeps the policy (and its plan cache) between
    rounds. Call :meth:`run_round` outside any transaction: tasks are sent when its own
    transactions have committed."""

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy or MemoryAware()

    def run_round(self) -> RoundResult:
        """One round (see the module notes). Never raises for a single job's trouble; database
        errors propagate (the command logs them and retries next round)."""
        res = RoundResult()
        if not _lock_round():
            res.skipped = True
            return res
        try:
            with transaction.atomic():
                self._advance_queued(res)
            self._flush(res)
            snap = take_snapshot()
            with transaction.atomic():
                for job, why in snap.unplaceable:
                    if _move(job, JobStatus.FAILED, reason=f"cannot be placed: {why}"):
                        res.failed.append(job.pk)
            by_device: dict[int, list] = defaultdict(list)
            for p in self.policy.place(snap.state):
                by_device[p.device_id].append(p)
            items = list(by_device.items())
            for i in range(0, len(items), CHUNK_DEVICES):
                with transaction.atomic():
                    for dev_id, ps in items[i:i + CHUNK_DEVICES]:
                        self._open(snap, snap.devices[dev_id], ps, res)
                self._flush(res)
        finally:
            _unlock_round()
        return res

    @staticmethod
    def _flush(res: RoundResult) -> None:
        """Send the tasks of what was just committed."""
        if res.outbox:
            res.sent += send_tasks(res.outbox)
            res.outbox = []

    # -- steps ------------------------------------------------------------------------------
    def _advance_queued(self, res: RoundResult) -> None:
        queued = list(Job.objects.filter(status=JobStatus.QUEUED).order_by("-priority", "created_at"))
        with_curve = set(MemoryProfile.objects.filter(job__in=queued).values_list("job_id", flat=True))
        profiler = _profiling_device()
        for job in queued:
            if job.pk in with_curve:
                if _move(job, JobStatus.READY, reason="memory curve known"):
                    res.ready.append(job.pk)
            elif profiler is not None and _move(job, JobStatus.PROFILING, device=profiler):
                res.profiling.append(job.pk)
                res.outbox.append((PROFILE_TASK, job.pk, profiler.queue,
                                     [job.pk, {"workload": job.workload, "params": job.params or {}}]))

    def _open(self, snap, device: Device, ps: list, res: RoundResult) -> None:
        """Open one placement for the jobs put on ``device`` (the last plan covers them all);
        if that is refused, try them one at a time so the still-valid ones go ahead."""
        jobs = [snap.jobs[p.job_id] for p in ps]
        attempts = [(jobs, ps[-1].plan)] + ([([j], p.plan) for j, p in zip(jobs, ps)] if len(ps) > 1 else [])
        for group, plan in attempts:
            if any(j.pk in res.placed for j in group):
                continue
            try:
                placement = Placement.open(device, group, plan.to_dict())
            except (IllegalTransition, PlacementError) as exc:
                log.info("placement on %s refused: %s", device, exc)
                continue
            for j in group:
                res.placed[j.pk] = placement.pk
                spec = {"workload": j.workload, "params": j.params or {}, "placement": placement.pk,
                        "curve": snap.curves[j.pk], "plan": placement.plan}
                res.outbox.append((RUN_TASK, j.pk, device.queue, [j.pk, spec]))
            if group is jobs:
                return


def _lock_round() -> bool:
    if connection.vendor != "postgresql":  # a single-process development database
        return True
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s)", [ROUND_LOCK_KEY])
        return bool(cur.fetchone()[0])


def _unlock_round() -> None:
    if connection.vendor != "postgresql":
        return
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s)", [ROUND_LOCK_KEY])
    except Exception:  # the connection is gone, and its session's lock with it
        log.warning("could not release the scheduling lock explicitly", exc_info=True)


def _move(job: Job, to: str, **kw) -> bool:
    try:
        job.transition(to, **kw)
        return True
    except IllegalTransition as exc:  # someone else moved it first (cancel, another round)
        log.info("%s", exc)
        return False


def _profiling_device() -> Device | None:
    """An online device to profile on: a GPU if there is one, else a CPU pool; the one with
    the fewest placed or running jobs."""
    from django.db.models import Count, Q

    from zico.jobs.transitions import ON_DEVICE

    devices = (Device.objects.filter(status=Status.ONLINE, node__status=Status.ONLINE, budget_bytes__gt=0)
               .select_related("node")
               .annotate(load=Count("placements", filter=Q(placements__ended_at__isnull=True,
                                                           placements__jobs__status__in=ON_DEVICE))))
    return min(devices, key=lambda d: (d.kind != Device.Kind.GPU, d.load, d.pk), default=None)
