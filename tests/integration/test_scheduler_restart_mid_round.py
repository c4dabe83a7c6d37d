"""Scheduler restarts: a scheduler that died between committing a round and sending its tasks (here: its tasks
went to a broker no worker reads, as if the process was SIGKILLed before the send) leaves jobs ``profiling`` and
``placed``; the next ``runscheduler`` process resends their tasks (a ``placement`` Event each), so every job runs
exactly once on its one placement. A running scheduler killed with SIGKILL is replaced without harm, and SIGTERM
ends one cleanly."""
import signal
import time

import pytest
import redis
from django.conf import settings

from servers import stop_process
from zico.cluster.models import Device, Placement
from zico.jobs.models import Event, Job, MemoryProfile
from zico.jobs.submission import submit_job
from zico.scheduling.service import Scheduler

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PARAMS = {"iterations": 40, "batch_size": 128, "image_size": 32}


def lost_round(device) -> "RoundResult":  # noqa: F821
    """A real round in this process; its tasks go to the test settings' Redis, which no worker of the stack reads
    (they use the private one), so they are lost as if the scheduler died before sending them."""
    res = Scheduler().run_round()
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(device.queue)  # what this round "sent"
    return res


def resent(job) -> list[str]:
    return list(Event.objects.filter(job=job, kind="placement", details__action="task_resent")
                .values_list("details__task", flat=True))


def test_work_a_dead_scheduler_committed_but_never_sent_is_resent_and_runs_once(stack, waiter, tenant_owner):
    stack.consumer(lost_after_s=10)
    worker = stack.worker("--kind", "cpu", "--capacity", "2GiB", "--slots", "2", "--loglevel", "WARNING")
    device = stack.registered_device()
    tenant, owner = tenant_owner

    # 1. profiling committed, task lost: the next scheduler resends profile_job, then places and runs the job
    first = submit_job(tenant=tenant, owner=owner, workload="digits-cnn", params=PARAMS)
    assert lost_round(device).profiling == [first.pk]
    assert Job.objects.get(pk=first.pk).status == "profiling"
    scheduler = stack.scheduler("--interval", "1")
    t0 = time.monotonic()
    waiter(lambda: Job.objects.get(pk=first.pk).status in ("succeeded", "failed"), 240, "the first job to end")
    first_s = time.monotonic() - t0
    assert Job.objects.get(pk=first.pk).status == "succeeded"
    assert resent(first) == ["zico.device.profile_job"]

    # 2. a SIGKILLed scheduler (idle between rounds here); its successor finds nothing to resend
    stop_process(scheduler, signal.SIGKILL)
    assert scheduler.returncode == -signal.SIGKILL

    # 3. placement committed, task lost: the next scheduler resends run_job for the same placement
    second = submit_job(tenant=tenant, owner=owner, workload="digits-cnn", params=PARAMS)
    MemoryProfile.record(second, MemoryProfile.objects.filter(job=first).latest("created_at").curve)
    res = lost_round(device)
    assert res.ready == [second.pk] and list(res.placed) == [second.pk]
    placement = Placement.objects.get(jobs=second)
    scheduler = stack.scheduler("--interval", "1", log="scheduler2.log")
    t0 = time.monotonic()
    waiter(lambda: Job.objects.get(pk=second.pk).status == "running", 120, "the placed job to start")
    second_s = time.monotonic() - t0
    waiter(lambda: Job.objects.get(pk=second.pk).status in ("succeeded", "failed"), 240, "the second job to end")
    second.refresh_from_db()
    assert second.status == "succeeded", second.failure_reason
    assert list(Placement.objects.filter(jobs=second)) == [placement]  # placed once, ran on that placement
    assert Placement.objects.filter(jobs=first).count() == 1
    assert resent(second) == ["zico.device.run_job"] and resent(first) == ["zico.device.profile_job"]
    assert "resent the device tasks of 1 job(s)" in stack.log("scheduler2.log")
    # placement events agree with the placements: one "placed" per job, for its one placement
    for job in (first, second):
        opened = Event.objects.filter(kind="placement", tenant=tenant, details__jobs__contains=[job.pk])
        assert [e.details["placement"] for e in opened] == [Placement.objects.get(jobs=job).pk]

    # 4. SIGTERM ends the scheduler cleanly, within a round
    t0 = time.monotonic()
    stop_process(scheduler, signal.SIGTERM, timeout=30)
    term_s = time.monotonic() - t0
    assert scheduler.returncode == 0 and "scheduler stopped" in stack.log("scheduler2.log")
    assert worker.poll() is None
    print(f"\nresent profiling -> job done in {first_s:.1f} s; resent run_job -> running in {second_s:.1f} s; "
          f"SIGTERM -> exit in {term_s:.2f} s")


def test_a_scheduler_killed_while_jobs_are_queued_is_replaced_and_every_job_runs_once(stack, waiter, tenant_owner):
    """SIGKILL lands right after the first round commits (wherever the send then is); invariants only."""
    stack.consumer(lost_after_s=10)
    stack.worker("--kind", "cpu", "--capacity", "2GiB", "--slots", "2", "--loglevel", "WARNING")
    waiter(lambda: Device.objects.filter(node__host=stack.host).exists(), 120, "the worker's device registration")
    tenant, owner = tenant_owner
    jobs = [submit_job(tenant=tenant, owner=owner, workload="digits-cnn", params=PARAMS) for _ in range(3)]
    ids = [j.pk for j in jobs]

    scheduler = stack.scheduler("--interval", "0.2")
    waiter(lambda: Job.objects.filter(pk__in=ids).exclude(status="queued").exists(), 120, "a first round", every=0.02)
    stop_process(scheduler, signal.SIGKILL)
    stack.scheduler("--interval", "1", log="scheduler2.log")
    waiter(lambda: not Job.objects.filter(pk__in=ids).exclude(status__in=["succeeded", "failed"]).exists(), 300,
           "every job to end")
    for job in Job.objects.filter(pk__in=ids):
        assert job.status == "succeeded", (job.pk, job.failure_reason)
        assert Placement.objects.filter(jobs=job).count() == 1  # never placed twice
    assert not Placement.objects.filter(jobs__in=ids, ended_at__isnull=True).exists()  # every placement closed


def test_a_profile_sent_twice_before_a_restart_does_not_block_the_jobs_run(stack, waiter, tenant_owner):
    """The killed scheduler's profile_job did reach the queue and the next scheduler resends it: the worker gets
    two. The second profile may still be running when the job's run_job arrives: the run supersedes it (it is
    stale: the web side has the curve), and its late result changes nothing, so the job runs once, to success."""
    from celery import Celery

    from zico_contracts import tasks

    stack.consumer(lost_after_s=10)
    stack.worker("--kind", "cpu", "--capacity", "2GiB", "--slots", "2", "--loglevel", "INFO")
    device = stack.registered_device()
    tenant, owner = tenant_owner
    job = submit_job(tenant=tenant, owner=owner, workload="digits-cnn", params=PARAMS)
    assert lost_round(device).profiling == [job.pk]
    job.refresh_from_db()
    Celery(broker=stack.env["CELERY_BROKER_URL"]).send_task(tasks.PROFILE_JOB, args=[job.pk, job.profile_spec()],
                                                            queue=device.queue)  # what the dead one did send
    stack.scheduler("--interval", "0.5")
    waiter(lambda: Job.objects.get(pk=job.pk).status in ("succeeded", "failed"), 300, "the job to end")
    job.refresh_from_db()
    assert job.status == "succeeded", job.failure_reason
    assert Placement.objects.filter(jobs=job).count() == 1
    assert resent(job) == ["zico.device.profile_job"]
