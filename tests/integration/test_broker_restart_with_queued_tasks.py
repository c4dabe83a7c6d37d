"""A broker restart that loses queued tasks: a job placed while its device's worker is restarting (stopped, not
yet declared lost, so the run_job task waits in Redis) loses that task when Redis restarts empty; the running
scheduler sees the broker's new run_id and resends the task for the same placement, and the job runs once on
the worker's next process and succeeds."""
import time

import pytest
import redis

from zico_workloads.curves.estimate import estimate_curve
from servers import stop_process
from zico.cluster.models import Placement
from zico.jobs.models import Event, Job, MemoryProfile
from zico.jobs.submission import submit_job

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PARAMS = {"iterations": 40, "batch_size": 128, "image_size": 32}


def test_tasks_lost_with_the_broker_are_resent_by_the_running_scheduler(stack, redis_server, waiter, tenant_owner):
    curve = estimate_curve("digits-cnn", PARAMS)  # a curve without a profiling run
    stack.consumer(lost_after_s=120)  # the stopped worker must not be declared lost meanwhile
    worker = stack.worker("--kind", "cpu", "--capacity", "2GiB", "--slots", "2", "--loglevel", "WARNING")
    device = stack.registered_device()
    scheduler = stack.scheduler("--interval", "0.5")
    waiter(lambda: "scheduler ready" in stack.log("scheduler.log"), 60, "the scheduler to start")
    tenant, owner = tenant_owner

    stop_process(worker)  # the device's worker process is gone; its device is still online
    job = submit_job(tenant=tenant, owner=owner, workload="digits-cnn", params=PARAMS)
    MemoryProfile.record(job, curve)
    waiter(lambda: Job.objects.get(pk=job.pk).status == "placed", 60, "the job to be placed")
    queue = redis.Redis.from_url(redis_server.url)
    waiter(lambda: queue.llen(device.queue) == 1, 30, "the run_job task waiting in the broker")
    redis_server.restart(down_s=1.0)
    assert queue.llen(device.queue) == 0  # the task is gone with the broker's data
    restarted = time.monotonic()
    worker = stack.worker("--kind", "cpu", "--capacity", "2GiB", "--slots", "2", "--loglevel", "WARNING",
                          log="worker2.log")

    waiter(lambda: Job.objects.get(pk=job.pk).status in ("running", "succeeded", "failed"), 120,
           "the job to start after the resend")
    started_s = time.monotonic() - restarted
    waiter(lambda: Job.objects.get(pk=job.pk).status in ("succeeded", "failed"), 240, "the job to end")
    job.refresh_from_db()
    assert job.status == "succeeded", job.failure_reason
    assert Placement.objects.filter(jobs=job).count() == 1 and job.lost_count == 0
    assert Event.objects.filter(job=job, kind="placement", details__action="task_resent").count() >= 1
    assert "the broker's Redis restarted" in stack.log("scheduler.log")
    assert scheduler.poll() is None and worker.poll() is None
    print(f"\nbroker restart lost the queued run_job; resent, job running {started_s:.1f} s after the restart "
          f"(includes the worker's start)")
