"""The scheduler service's round: the only writer of placements.

One round:

0. on a scheduler process's first round, resends the tasks of jobs a previous process left
   ``placed`` or ``profiling`` (it may have died between a commit and its send; see
   Note [Scheduler restarts] in zico.scheduling.recovery);
1. takes the cluster-wide scheduling lock (a PostgreSQL session advisory lock), so two
   scheduler processes never decide on the same state at once; a second instance skips its
   round while the first holds it (a crashed holder's lock goes with its session);
2. moves ``queued`` jobs on (bulk moves): to ``ready`` when a curve is stored or an identical job's
   is copied, to ``failed`` when an identical job's remembered profiling failure or a stored estimate
   says it can never run (Note [Known memory needs] in zico.jobs.known), else to ``profiling`` with a
   ``zico.device.profile_job`` task on a device queue — or, a script job (a job with code), alone in a
   placement of its own with a ``zico.device.run_job`` that profiles it as its run starts (Note [A script's
   profile is the start of its run] in workers/runner.py); a ``profile_job`` goes to the preferred online
   device whose jobs' tenants and the job's may meet (placement.tenancy.refusing_tenants, as any placement);
   with background estimates (zico.scheduling.estimates) it polls their child process and fails the misfits they reveal;
3. fails ``ready`` jobs that no device could ever hold (with the reason);
4. asks the policy (placement.policies) for a decision — placements, and why every other ready
   job waits — and opens the placements with
   :func:`zico.jobs.lifecycle.place_many` (a fixed number of queries per call), which
   re-checks under row locks that every job is still ``ready``, the device online and the
   tenant rules kept (the conditional claim: a job moved by anyone else meanwhile is skipped,
   never placed twice) — ``CHUNK_DEVICES`` devices per transaction;
5. after each commit, sends the tasks of what it committed (one ``zico.device.run_job`` per
   placed job, to its device's queue) in one Redis pipeline;
6. stores the waiting reasons that changed (Note [Waiting reasons] in zico.scheduling.waiting).

Task arguments (zico_contracts.specs, the classes both sides use):
``run_job(job_id, Placement.run_spec(...))`` (a ``RunSpec``) and
``profile_job(job_id, Job.profile_spec())`` (a ``ProfileSpec``). A script job's first
``run_job`` has ``"curve": None`` and ``"profile": {"time_limit_s"}`` (Placement.run_spec).
"""
from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, OuterRef, Subquery
from redis.exceptions import RedisError

from placement.gating import DEFAULT_GATE_HEADROOM, gate_share
from placement import reasons
from placement.policies import FirstFitFifo, MemoryAware, Policy
from placement.tenancy import refusing_tenants
from zico.cluster.models import DEFAULT_BOUND_KEY, MIN_BUDGET_BYTES, Device, Placement, Status
from zico.jobs import known
from zico.jobs import lifecycle
from zico.jobs.models import Job, MemoryProfile, on_device_q
from zico.jobs.transitions import JobStatus
from zico.tenants.models import Tenant
from zico_contracts import jobbudget, tasks
from zico_contracts.oom import format_bytes

from . import estimate_requests, waiting
from .recovery import unsent_tasks
from .snapshot import take_snapshot, unavailable_reason

log = logging.getLogger(__name__)

# pg advisory lock key of the scheduling round ("zico-sch" as an int64)
ROUND_LOCK_KEY = 0x7A69636F2D736368
CHUNK_DEVICES = 128  # devices whose placements are opened in one transaction (one lifecycle.place_many)
SEND_BATCH = 1000  # broker commands buffered before a pipeline is sent
POLICIES = ("memory-aware", "fifo")  # names of make_policy (runscheduler --policy)
RUN_TASK = tasks.RUN_JOB
PROFILE_TASK = tasks.PROFILE_JOB


@dataclass
class RoundResult:
    """What one round did (ids), for logs and tests."""

    skipped: bool = False                          # another scheduler held the round lock
    ready: list[int] = field(default_factory=list)          # queued -> ready (curve known)
    profiling: list[int] = field(default_factory=list)      # queued -> profiling (task sent)
    failed: list[int] = field(default_factory=list)         # ready -> failed (fits no device)
    placed: dict[int, int] = field(default_factory=dict)    # job id -> placement id
    waiting: dict[int, reasons.WaitReason] = field(default_factory=dict)  # job left waiting -> why
    resent: list[int] = field(default_factory=list)         # jobs whose task was resent (first round only)
    sent: list[tuple[str, int, str]] = field(default_factory=list)  # (task, job id, queue), after commit
    outbox: list[tuple[str, int, str, list]] = field(default_factory=list, repr=False)  # to send on commit
    timings: dict[str, float] = field(default_factory=dict)  # seconds per step (advance, decide, waiting, ...)
    cpu_timings: dict[str, float] = field(default_factory=dict)  # this process's CPU seconds per step
    deferred: int = 0  # ready jobs the policy has not considered yet: its planning budget ran out (next round)


def send_tasks(outbox: list[tuple[str, int, str, list]]) -> list[tuple[str, int, str]]:
    """Send device tasks by name, each on its queue (the web side never imports the worker
    code), over one broker connection in one publish batch.

    Args:
        outbox: ``(task name, job id, queue, args)`` per message.
    Returns:
        ``(task name, job id, queue)`` of what was sent. If the batch fails, the error is logged
        and nothing is reported sent (a part flushed before the failure was delivered); the jobs
        stay placed or profiling and the liveness checks requeue lost work.

    Note [Publishing a round's tasks]: kombu's ``Producer.batch`` buffers the messages' Redis
    commands in one non-transactional pipeline, sent at the end (or every ``SEND_BATCH``
    commands). ``argsrepr`` is given so Celery does not build a printable copy of every curve.
    No queue is declared (``declare=[]``): a task goes to the default exchange with its queue's
    name as routing key, which kombu's Redis transport turns into an LPUSH on that queue's list
    whether or not it was declared; the device worker declares the queue it consumes (a declare
    here cost two Redis round trips per new queue per process). ``ignore_result=True``: the
    outcome of a device task comes back through the control consumer, never through Celery's
    result backend, and a task with a stored result costs a subscribe and an unsubscribe on the
    backend's pub/sub per message.
    """
    from zico import celery_app

    sent = []
    try:
        with celery_app.producer_or_acquire() as producer, producer.batch(max_size=SEND_BATCH):
            for name, job_id, queue, args in outbox:
                celery_app.send_task(name, args=args, queue=queue, producer=producer, declare=[],
                                     ignore_result=True, argsrepr=f"({job_id}, ...)", kwargsrepr="{}")
                sent.append((name, job_id, queue))
    except Exception:
        log.exception("could not send %d tasks (jobs %s)", len(outbox), [job_id for _, job_id, _, _ in outbox])
        return []
    return sent


def make_policy(name: str = "memory-aware") -> Policy:
    """The service's policy by name, with its settings: ``memory-aware`` (slowdown limit
    ``settings.ZICO_MAX_SLOWDOWN``, at most ``settings.ZICO_MAX_GROUP`` jobs per device; groups planned with the jobs' planning curves (the snapshot's,
    Note [One planning rule] in placement.gating) against each device's gate share (``1 - Device.gate_headroom``); at most ``settings.ZICO_ROUND_PLANNING_BUDGET_S`` CPU
    seconds of new plans per round, Note [Planning budget] in placement.policies) or ``fifo``.

    Raises:
        ValueError: an unknown name (the message lists :data:`POLICIES`).
    """
    if name == "memory-aware":
        return MemoryAware(max_group=settings.ZICO_MAX_GROUP, max_slowdown=settings.ZICO_MAX_SLOWDOWN,
                           group_share=gate_share(DEFAULT_GATE_HEADROOM),
                           planning_budget_s=settings.ZICO_ROUND_PLANNING_BUDGET_S)
    if name == "fifo":
        return FirstFitFifo()
    raise ValueError(f"policy: {name!r} is not one of {', '.join(POLICIES)}")


class Scheduler:
    """Runs scheduling rounds with one policy; keeps the policy (and its plan cache) between
    rounds. Call :meth:`run_round` outside any transaction: tasks are sent when its own
    transactions have committed."""

    def __init__(self, policy: Policy | None = None, estimates=None) -> None:
        """``estimates``: a zico.scheduling.estimates.BackgroundEstimates to run CPU estimates of the jobs sent to
        profiling (``runscheduler`` passes one unless ``ZICO_SCHEDULER_ESTIMATES`` is off), or None."""
        self.policy = policy or make_policy()
        self.recovered = False  # Note [Scheduler restarts]: done once per process, on its first round
        self.estimates = estimates
        self._requests_redis = None  # the client the estimate requests are read with, made on first use

    def run_round(self) -> RoundResult:
        """One round (see the module notes). Never raises for a single job's trouble; database
        errors propagate (the command logs them and retries next round). ``timings`` in the
        result says where the round's time went (seconds per step), ``cpu_timings`` this process's CPU
        seconds per step."""
        res = RoundResult()
        clock = _Clock(res.timings, res.cpu_timings)
        if not _lock_round():
            res.skipped = True
            return res
        try:
            if not self.recovered:
                with transaction.atomic():
                    res.outbox = unsent_tasks(RUN_TASK, PROFILE_TASK)
                wanted = len(res.outbox)
                self._flush(res)
                res.resent = [job_id for _, job_id, _ in res.sent]
                self.recovered = len(res.resent) == wanted  # a failed send is retried next round
                clock("recover")
            with transaction.atomic():
                self._advance_queued(res)
            clock("advance")
            self.judge_estimates(res)
            clock("estimates")
            self._flush(res)
            clock("send")
            snap = take_snapshot()
            clock("snapshot")
            with transaction.atomic():
                for job, why in snap.unplaceable:
                    if lifecycle.fail(job, f"cannot be placed: {why}"):
                        res.failed.append(job.pk)
            by_device: dict[int, list] = defaultdict(list)
            decision = self.policy.decide(snap.state)
            res.deferred = decision.deferred
            for p in decision.placements:
                by_device[p.device_id].append(p)
            peaks = {j.id: j.peak_bytes for j in snap.state.queued}
            res.waiting.update({pk: reasons.unavailable_devices(r, peaks[pk], snap.unavailable)
                                for pk, r in decision.waiting.items()})
            clock("decide")
            items = list(by_device.items())
            for i in range(0, len(items), CHUNK_DEVICES):
                with transaction.atomic():
                    self._open(snap, items[i:i + CHUNK_DEVICES], res)
                clock("write")
                self._flush(res)
                clock("send")
            waiting.record([(snap.jobs[pk], r) for pk, r in res.waiting.items() if pk in snap.jobs],
                           JobStatus.READY)
            clock("waiting")
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
        """queued -> ready (curve stored, or an identical job's copied), -> failed (what is known says it
        can never run: Note [Known memory needs] in zico.jobs.known) or -> profiling (task queued for
        after the commit), in bulk moves. The queued rows are locked as they are read (``FOR UPDATE``
        re-checks the status after any wait), so no one else moves them before the bulk moves. A catalog job is
        profiled on the first device of :func:`_profiling_rooms` that admits its tenant (the co-location rule of
        every placement); with none, it waits saying why (:func:`_no_profiling_room`)."""
        # the tenant comes along for the specs (its wall-clock limit, Job.wall_limit); only the job rows are locked
        queued = list(Job.objects.select_for_update(of=("self",)).select_related("tenant").filter(status=JobStatus.QUEUED)
                      .order_by("-priority", "created_at", "pk"))
        if not queued:
            return
        with_curve = set(MemoryProfile.objects.filter(job__in=queued).values_list("job_id", flat=True))
        ready = [j for j in queued if j.pk in with_curve]
        lifecycle.mark_ready(ready, "memory curve known")
        res.ready += [j.pk for j in ready]
        left, estimated = self._known_needs([j for j in queued if j.pk not in with_curve], res)
        left, held = _one_profile_per_kind(left)
        if held:
            res.waiting.update({j.pk: why for j, why in held})
            waiting.record(held, JobStatus.QUEUED)
        self._profile_as_runs([j for j in left if j.code_id is not None], res)
        left = [j for j in left if j.code_id is None]
        if not left:
            return
        rooms = _profiling_rooms()
        tenants = {t.pk: t for t in Tenant.objects.filter(pk__in={j.tenant_id for j in left}
                                                          | {t for r in rooms for t in r.tenants})}
        by_device: dict[int, tuple[Device, list[Job]]] = {}
        waits = []
        for job in left:
            room = next((r for r in rooms if r.admits(job.tenant_id, tenants)), None)
            if room is None:
                waits.append((job, _no_profiling_room(job, rooms, tenants)))
                continue
            room.tenants.add(job.tenant_id)  # the next job of this round meets this one's tenant there
            room.job_ids.setdefault(job.tenant_id, []).append(job.pk)
            by_device.setdefault(room.device.pk, (room.device, []))[1].append(job)
        if waits:
            res.waiting.update({j.pk: why for j, why in waits})
            waiting.record(waits, JobStatus.QUEUED)
        for profiler, jobs in by_device.values():
            lifecycle.profile(jobs, profiler)
            for job in jobs:
                res.profiling.append(job.pk)
                res.outbox.append((PROFILE_TASK, job.pk, profiler.queue,
                                   [job.pk, job.profile_spec()]))
                if self.estimates is not None and job.pk not in estimated:
                    self.estimates.want(job.workload, job.params or {}, job.pk)

    def _profile_as_runs(self, jobs: list[Job], res: RoundResult) -> None:
        """Script jobs without a curve (queue order), each in a placement of its own, queued -> profiling, with
        a ``run_job`` that profiles it as its run starts (Note [A script's profile is the start of its run] in
        workers/runner.py). Where (Note [Where a script is profiled]): a device that runs nothing, or one whose
        jobs are all of known memory and leave room beside their peaks: the job's own ``budget_bytes``, or for a
        job without one its default bound (zico_contracts.jobbudget; in the placement's plan as
        ``default_budget_bytes``, and so in its run spec), unless it was stopped at that bound before (it is then
        profiled alone); tenancy and quota as for any placement; one profile per device and round. The others
        wait with why."""
        if not jobs:
            return
        rooms, blind = _devices_to_profile_on()
        busy: list[tuple[str, float, str]] = []  # taken by this round's profiles
        tenants = {t.pk: t for t in Tenant.objects.filter(pk__in={j.tenant_id for j in jobs}
                                                          | {t for r in rooms for t in r.tenants})}
        on_device = dict(Job.objects.filter(on_device_q(), tenant_id__in=[j.tenant_id for j in jobs])
                         .values_list("tenant_id").annotate(n=Count("pk")).order_by())
        share = float(settings.ZICO_JOB_DEFAULT_BUDGET_FRACTION)
        groups, waits = [], []
        for job in jobs:
            tenant = tenants[job.tenant_id]
            if on_device.get(tenant.pk, 0) >= tenant.max_running_jobs:
                waits.append((job, reasons.quota("jobs", on_device.get(tenant.pk, 0), tenant.max_running_jobs)))
                continue
            fit, bound = next(((r, b) for r in rooms for ok, b in [r.takes(job, tenant, tenants, share)] if ok),
                              (None, None))
            if fit is None:
                taken = [(str(r.device), float(r.device.budget_bytes), r.why_not(job, tenant, tenants, share))
                         for r in rooms]
                waits.append((job, reasons.no_profiling_device(_unavailable_devices(blind) + busy + taken,
                                                               online=len(busy) + len(taken) + len(blind))))
                continue
            rooms.remove(fit)
            # never the job's id: it may be another tenant's
            busy.append((str(fit.device), float(fit.device.budget_bytes), "profiling a job"))
            on_device[tenant.pk] = on_device.get(tenant.pk, 0) + 1
            plan = {"job_ids": [job.pk], "mode": "profile", "budget_bytes": fit.device.budget_bytes}
            if bound is not None:  # Placement.run_spec sends it as the job's budget, flagged as the default
                plan[DEFAULT_BOUND_KEY] = bound
            groups.append((fit.device, [job], plan))
        opened = lifecycle.place_many(groups, profiling=True) if groups else []
        for (device, [job], _), got in zip(groups, opened):
            if isinstance(got, Placement):
                res.profiling.append(job.pk)
                res.outbox.append((RUN_TASK, job.pk, device.queue, [job.pk, got.run_spec(job, None)]))
            else:
                log.info("profiling placement of job %s on %s refused: %s", job.pk, device, got)
                waits.append((job, reasons.placement_refused(str(device))))
        if waits:
            res.waiting.update({j.pk: why for j, why in waits})
            waiting.record(waits, JobStatus.QUEUED)

    def _known_needs(self, jobs: list[Job], res: RoundResult) -> tuple[list[Job], set[int]]:
        """Queued jobs without a curve of their own, judged on what is stored about identical jobs and the
        workload (Note [Known memory needs] in zico.jobs.known): an identical job's profile is copied (the job
        goes ready, not profiled again); an identical job's remembered profiling failure, or a stored estimate
        that fits no device, fails the job. Returns the jobs left to profile and the ids of those judged on
        a stored estimate (not estimated again). Queries: a fixed number, plus one bulk move per distinct
        reason."""
        reuse = known.profiles_to_reuse(jobs)
        if reuse:
            MemoryProfile.objects.bulk_create([
                MemoryProfile(job=j, source=p.source, curve=p.curve, peak_bytes=p.peak_bytes,
                              persistent_bytes=p.persistent_bytes, iteration_s=p.iteration_s)
                for j in jobs if (p := reuse.get(j.pk)) is not None])
            reusing = [j for j in jobs if j.pk in reuse and reuse[j.pk].job_id is not None]
            lifecycle.mark_ready(reusing, "memory curve of an identical job reused; not profiled",
                                details_by_job={j.pk: _reused_from(j, reuse[j.pk]) for j in reusing})
            uploaded = [j for j in jobs if j.pk in reuse and reuse[j.pk].job_id is None]
            lifecycle.mark_ready(uploaded, "memory curve from a snapshot uploaded for this code and command; not profiled",
                                details_by_job={j.pk: {"profile": reuse[j.pk].pk} for j in uploaded})
            res.ready += [j.pk for j in reusing + uploaded]
        jobs = [j for j in jobs if j.pk not in reuse]
        if not jobs:
            return [], set()
        budgets = known.devices_budgets()
        failures = known.remembered_failures(jobs, max((b for _, b in budgets), default=None))
        refused: dict[str, list[Job]] = defaultdict(list)
        for j in jobs:
            if j.pk in failures:
                refused[f"{known.failure_sentence(failures[j.pk])}; not profiled again"].append(j)
        estimates: dict[tuple[str, str], object] = {}
        estimated: set[int] = set()
        for j in jobs:
            if j.pk in failures or j.code_id is not None:  # a script has no CPU estimate
                continue
            key = known.params_key(j.workload, j.params)
            if key not in estimates:
                estimates[key] = known.stored_estimate(j.workload, j.params or {})
            if estimates[key] is not None:
                estimated.add(j.pk)
                misfit = known.estimate_misfit(estimates[key], j.budget_bytes, budgets)
                if misfit is not None:
                    refused[f"refused before profiling: {misfit[1]}"].append(j)
        for reason, group in refused.items():
            lifecycle.fail_many(group, reason)
            res.failed += [j.pk for j in group]
        out = {j.pk for group in refused.values() for j in group}
        return [j for j in jobs if j.pk not in out], estimated

    def judge_estimates(self, res: RoundResult) -> None:
        """Poll the background estimates (Note [Estimates beside the rounds] in zico.scheduling.estimates) and
        fail the jobs still queued or profiling whose freshly stored estimate fits no device; a profiling run
        of such a job is asked to stop (its cancel key)."""
        if self.estimates is None:
            return
        waiting_ids = (JobStatus.QUEUED, JobStatus.PROFILING)
        self._take_estimate_requests()
        done = self.estimates.step(lambda ids: bool(ids) and Job.objects.filter(pk__in=ids, status__in=waiting_ids)
                                   .exists())
        self._answer_estimate_requests()
        if not done:
            return
        budgets = known.devices_budgets()
        for wanted in done:
            curve = known.stored_estimate(wanted.workload, wanted.params)
            if curve is None:
                continue
            for job in Job.objects.filter(known.identical(wanted.workload, wanted.params), status__in=waiting_ids):
                misfit = known.estimate_misfit(curve, job.budget_bytes, budgets)
                if misfit is not None and lifecycle.fail(
                        job, f"refused by its estimate: {misfit[1]}",
                        stop_run=_redis() if job.status == JobStatus.PROFILING else None):
                    res.failed.append(job.pk)

    def _take_estimate_requests(self) -> None:
        """Hand the estimates users asked for through the API to the background estimates (Note [Estimates users
        ask for] in zico.scheduling.estimate_requests); Redis trouble leaves them for the next round."""
        if self._requests_redis is None:
            self._requests_redis = _redis()
        try:
            for _key, workload, params in estimate_requests.waiting(self._requests_redis):
                self.estimates.want(workload, params, None)
        except RedisError as exc:
            log.warning("estimate requests not read: %s", exc)

    def _answer_estimate_requests(self) -> None:
        """Remove the requests whose estimate ended, remembering failures (kept for the next round on Redis trouble)."""
        answered = self.estimates.take_answered()
        for i, wanted in enumerate(answered):
            try:
                estimate_requests.finish(self._requests_redis or _redis(), wanted.workload, wanted.params,
                                         wanted.error)
            except RedisError as exc:
                log.warning("estimate requests not answered: %s", exc)
                self.estimates.answered[:0] = answered[i:]
                return

    def _open(self, snap, items: list[tuple[int, list]], res: RoundResult) -> None:
        """Open one placement per device for the jobs put on it (the last plan covers them all)
        with one :func:`lifecycle.place_many`; a refused group of several jobs is tried again one
        job at a time (a second ``place_many``) so the still-valid ones go ahead."""
        groups = [(snap.devices[dev_id], [snap.jobs[p.job_id] for p in ps], ps[-1].plan) for dev_id, ps in items]
        opened = lifecycle.place_many([(d, jobs, plan.to_dict()) for d, jobs, plan in groups])
        retry = []
        for (device, jobs, _), (_, ps), got in zip(groups, items, opened):
            if isinstance(got, Placement):
                self._placed(snap, device, jobs, got, res)
            else:
                log.info("placement on %s refused: %s", device, got)
                if len(jobs) == 1:
                    res.waiting[jobs[0].pk] = reasons.placement_refused(str(device))
                if len(jobs) > 1:
                    retry += [(device, [j], p.plan) for j, p in zip(jobs, ps)]
        if retry:
            for (device, jobs, _), got in zip(retry, lifecycle.place_many([(d, js, pl.to_dict()) for d, js, pl in retry])):
                if isinstance(got, Placement):
                    self._placed(snap, device, jobs, got, res)
                else:
                    log.info("placement on %s refused: %s", device, got)
                    res.waiting[jobs[0].pk] = reasons.placement_refused(str(device))

    @staticmethod
    def _placed(snap, device: Device, jobs: list, placement: Placement, res: RoundResult) -> None:
        for j in jobs:
            res.placed[j.pk] = placement.pk
            spec = placement.run_spec(j, snap.curves[j.pk])
            res.outbox.append((RUN_TASK, j.pk, device.queue, [j.pk, spec]))


class _Clock:
    """Adds the seconds since the last call to ``timings[step]``, and this process's CPU seconds to
    ``cpu_timings[step]`` (on a loaded machine wall time stretches with the load; CPU time much less)."""

    def __init__(self, timings: dict[str, float], cpu_timings: dict[str, float]) -> None:
        self.timings, self.t = timings, time.perf_counter()
        self.cpu_timings, self.cpu = cpu_timings, time.process_time()

    def __call__(self, step: str) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        self.timings[step] = self.timings.get(step, 0.0) + now - self.t
        self.cpu_timings[step] = self.cpu_timings.get(step, 0.0) + cpu - self.cpu
        self.t, self.cpu = now, cpu


def _one_profile_per_kind(jobs: list[Job]) -> tuple[list[Job], list[tuple[Job, reasons.WaitReason]]]:
    """Of queued ``jobs`` to profile (queue order), the first of each kind of identical jobs (zico.jobs.known)
    that no job is profiling now; the others, with why they wait: an identical job's profile will serve
    them (the next round copies it; another tenant's identical job is not named). One query."""
    if not jobs:
        return [], []
    q, _ = known.any_identical(jobs)
    owner = {}
    for pk, tenant_id, workload, params in (Job.objects.filter(q, status=JobStatus.PROFILING).order_by("pk")
                                            .values_list("pk", "tenant_id", "workload", "params")):
        owner.setdefault(known.params_key(workload, params), (pk, tenant_id))
    send, held = [], []
    for j in jobs:
        key = known.params_key(j.workload, j.params)
        if key in owner:
            pk, tenant_id = owner[key]
            held.append((j, reasons.identical_profiling(pk, same_tenant=tenant_id == j.tenant_id)))
        else:
            owner[key] = (j.pk, j.tenant_id)
            send.append(j)
    return send, held


def _reused_from(job: Job, profile: MemoryProfile) -> dict:
    """The status_change Event's details of a job given an identical job's curve: that job's id when it is of the
    job's own tenant; else only that it was another tenant's (its id is not this tenant's to see)."""
    if profile.job.tenant_id == job.tenant_id:
        return {"profile_of_job": profile.job_id}
    return {"profile_of_job": None, "profile_of_another_tenant": True}


def _redis():
    import redis

    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2.0, socket_connect_timeout=2.0)


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


def _unavailable_devices(blind: set[int] = frozenset()) -> list[tuple[str, float, str]]:
    """Registered devices no job can go to now, ``(label, budget bytes, why)``, for a reason; ``blind``: devices
    running a job of unknown memory."""
    return [(str(d), float(d.budget_bytes), why) for d in Device.objects.select_related("node")
            if (why := unavailable_reason(d, blind))]


@dataclass
class _Room:
    """A device where a script job may be profiled as its run starts, and what runs there: the tenants, how many
    jobs and the sum of their curves' peaks (bytes)."""

    device: Device
    tenants: set[int] = field(default_factory=set)
    jobs: int = 0
    peak_bytes: float = 0.0

    def _refuses(self, tenant, tenants: dict) -> bool:
        involved = {tenant.pk: tenant, **{t: tenants[t] for t in self.tenants}}
        return bool(refusing_tenants({pk: t.allow_cross_tenant_colocation for pk, t in involved.items()}))

    def takes(self, job: Job, tenant, tenants: dict, share: float) -> tuple[bool, int | None]:
        """Whether ``job`` may be profiled here (Note [Where a script is profiled]; tenancy by
        placement.tenancy.refusing_tenants), and the default bound it then runs under (bytes; None: its own budget,
        or the device's alone). ``share``: ``settings.ZICO_JOB_DEFAULT_BUDGET_FRACTION``."""
        if self._refuses(tenant, tenants):
            return False, None
        if self.jobs == 0:
            return True, None
        left = self.device.budget_bytes - self.peak_bytes
        if job.budget_bytes is not None:
            return left >= job.budget_bytes, None
        if known.profiled_alone(job):
            return False, None
        bound = jobbudget.default_bound(self.device.budget_bytes, self.peak_bytes, share, MIN_BUDGET_BYTES)
        return bound is not None, bound

    def why_not(self, job: Job, tenant, tenants: dict, share: float) -> str:
        """Why :meth:`takes` refused ``job``, in words with the figures, for its waiting reason."""
        if self._refuses(tenant, tenants):
            return "runs a job of a tenant this job's tenant may not share a device with"
        left = max(0.0, self.device.budget_bytes - self.peak_bytes)
        head = (f"running {self.jobs} job(s) with {format_bytes(self.peak_bytes)} of peaks, {format_bytes(left)} of "
                "its budget left")
        if job.budget_bytes is not None:
            return f"{head}: under this job's own budget of {format_bytes(job.budget_bytes)}"
        if known.profiled_alone(job):
            return f"{head}: this job is profiled alone (it needed more than its default bound beside other jobs)"
        if share <= 0:
            return f"{head}: a job without a budget is profiled alone there ({jobbudget.FRACTION_ENV} is 0)"
        return (f"{head}: under the {format_bytes(MIN_BUDGET_BYTES)} a job without a budget needs to be profiled "
                "beside other jobs")


def _devices_to_profile_on() -> tuple[list[_Room], set[int]]:
    """Online devices with a budget that run no job of unknown memory (none placed, running or profiling there
    without a stored curve), as rooms; GPUs first, then the fewest jobs. Also the ids of the devices left out
    for a job of unknown memory. Three queries.

    Note [Where a script is profiled]
        A script job's profile is the start of its run, and until its curve is known the device's
        coordinator cannot gate it: only a bound the agent pool holds keeps it from its neighbours. So it
        starts where a bound cannot squeeze anyone:

        * on a device that runs nothing: profiled alone, bounded by the device's budget;
        * with its own ``budget_bytes`` (``zico submit --budget``: the most it may hold), beside jobs of known
          memory that leave at least that much of the device budget beside the sum of their peaks;
        * without one, beside such jobs under a *default bound* (zico_contracts.jobbudget): the least of
          ``ZICO_JOB_DEFAULT_BUDGET_FRACTION`` (0.5) of the device's budget and what that budget leaves beside
          their peaks, where that is at least the budget floor (64 MiB, Note [Budget floor] in
          zico.cluster.models). It is in the placement's plan (``default_budget_bytes``) and the run spec
          (``job_budget_bytes`` with ``job_budget_default``); the agent holds it as it holds a declared budget
          until the job's curve is stored, then lifts it (the curve gates the job from then on).

        Why: a new script must neither wait for an empty device (on a busy cluster, for ever) nor be free to
        take the memory its neighbours were planned with; a bound the agent holds gives both, and the
        neighbours' peaks are known, so the room beside them is too. Rooms are tried empty device first.

        A run stopped at its default bound (it failed after the agent refused an allocation for that bound:
        the ``job_budget_refusals`` metric) is not failed for a limit its user never set: the job goes back to
        the queue (zico.jobs.lifecycle.requeue_to_profile_alone, remembered in its metrics:
        zico.jobs.known.profiled_alone) and is then profiled alone, once: alone the device's budget bounds it,
        so a second stop is an ordinary out-of-memory failure. A declared budget is the user's word and is
        never retried.

        Limits: the bound is the only thing holding the job while it is profiled; the gate's headroom is not
        kept beside it (the neighbours' peaks and the bound may fill the budget). With per-process pools (a GPU
        without VMM chunks) the bound is the job process's own pool, fixed at launch: it is not lifted at the
        curve, and a stop there is reported as a failure, not requeued (the pool counts no refusals).

        No job is placed beside it until its curve is stored (the snapshot leaves a device running a job of
        unknown memory out); then it is gated as a new job, and the scheduler plans the next jobs with its
        curve.
    """
    latest_peak = MemoryProfile.objects.filter(job=OuterRef("pk")).order_by("-created_at", "-id").values("peak_bytes")
    rooms: dict[int, _Room] = {d.pk: _Room(d) for d in Device.objects.filter(
        status=Status.ONLINE, node__status=Status.ONLINE, budget_bytes__gt=0).select_related("node")}
    blind: set[int] = set()
    for dev_id, tenant_id, peak in (Job.objects.filter(on_device_q(), placements__ended_at__isnull=True)
                                    .annotate(peak=Subquery(latest_peak[:1]))
                                    .values_list("placements__device_id", "tenant_id", "peak")):
        room = rooms.get(dev_id)
        if peak is None and room is not None:  # an offline device is left out for that already
            blind.add(dev_id)
        if room is not None:
            room.tenants.add(tenant_id)
            room.jobs += 1
            room.peak_bytes += float(peak or 0)
    # a catalog job's profile run has no placement, but its tenant is on the device all the same
    for dev_id, tenant_id in (Job.objects.filter(status=JobStatus.PROFILING, profiling_device_id__in=list(rooms))
                              .values_list("profiling_device_id", "tenant_id")):
        rooms[dev_id].tenants.add(tenant_id)
    out = sorted((r for pk, r in rooms.items() if pk not in blind),
                 key=lambda r: (r.device.kind != Device.Kind.GPU, r.jobs, r.device.pk))
    return out, blind


@dataclass
class _ProfileRoom:
    """An online device a catalog job's ``profile_job`` may go to, with the tenants whose jobs hold memory there
    (placed, running or profiling in an open placement, or a catalog job profiling there) and their job ids."""

    device: Device
    load: int = 0
    tenants: set[int] = field(default_factory=set)
    job_ids: dict[int, list[int]] = field(default_factory=dict)  # tenant id -> its jobs there

    def admits(self, tenant_id: int, tenants: dict) -> bool:
        """May a job of ``tenant_id`` be profiled here: placement.tenancy.refusing_tenants over the tenants
        already here and the job's, the rule of every placement."""
        involved = {tenant_id, *self.tenants}
        return not refusing_tenants({t: tenants[t].allow_cross_tenant_colocation for t in involved})


def _profiling_rooms() -> list[_ProfileRoom]:
    """Online devices with a budget to profile catalog jobs on, in order of preference: a GPU before a CPU pool,
    then the fewest placed or running jobs, then the id; each with the tenants of the jobs holding memory there
    (see :class:`_ProfileRoom`). Three queries."""
    from django.db.models import Q

    from zico.jobs.transitions import ON_DEVICE

    devices = (Device.objects.filter(status=Status.ONLINE, node__status=Status.ONLINE, budget_bytes__gt=0)
               .select_related("node")
               .annotate(load=Count("placements", filter=Q(placements__ended_at__isnull=True,
                                                           placements__jobs__status__in=ON_DEVICE))))
    rooms = {d.pk: _ProfileRoom(d, d.load) for d in devices}
    placed = (Job.objects.filter(on_device_q(), placements__ended_at__isnull=True,
                                 placements__device_id__in=list(rooms))
              .values_list("pk", "tenant_id", "placements__device_id"))
    profiling = (Job.objects.filter(status=JobStatus.PROFILING, profiling_device_id__in=list(rooms))
                 .values_list("pk", "tenant_id", "profiling_device_id"))
    for pk, tenant_id, dev_id in [*placed, *profiling]:
        room = rooms[dev_id]
        room.tenants.add(tenant_id)
        if pk not in room.job_ids.setdefault(tenant_id, []):
            room.job_ids[tenant_id].append(pk)
    return sorted(rooms.values(), key=lambda r: (r.device.kind != Device.Kind.GPU, r.load, r.device.pk))


def _no_profiling_room(job: Job, rooms: list[_ProfileRoom], tenants: dict) -> reasons.WaitReason:
    """Why a catalog job gets no profiling device: none online (with the devices that are not), or every online
    one holds a job of a tenant that refuses to share with its tenant, or that its tenant refuses."""
    if not rooms:
        return reasons.no_profiling_device(_unavailable_devices())
    others = sorted({pk for r in rooms for t, ids in r.job_ids.items() if t != job.tenant_id for pk in ids})
    return reasons.profiling_tenants_do_not_share(tenants[job.tenant_id].allow_cross_tenant_colocation,
                                                  [str(r.device) for r in rooms], others)
