"""PostgreSQL restarted mid-run (an immediate stop, like a crash, then crash recovery), on a private cluster: the
running job goes on and succeeds, a job submitted just before the outage is profiled and placed after it, the
consumer stores every second of telemetry of the outage once the database is back, and neither the consumer,
the scheduler nor the worker crashes or exits."""
import re
import time

import pytest
from django.db import connection

from zico.cluster.models import Placement
from zico.jobs.models import Event, Job
from zico.jobs.submission import submit_job
from zico.telemetry.models import TimelinePoint

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LONG = {"iterations": 400, "batch_size": 256, "image_size": 32}  # outlasts the restart on a fast machine too
SHORT = {"iterations": 40, "batch_size": 128, "image_size": 32}


def test_a_postgres_restart_is_waited_out_and_nothing_is_lost(private_postgres, stack, waiter, tenant_owner):
    consumer = stack.consumer(lost_after_s=10)
    scheduler = stack.scheduler("--interval", "1")
    worker = stack.worker("--kind", "cpu", "--capacity", "2GiB", "--slots", "2", "--loglevel", "WARNING")
    device = stack.registered_device()
    tenant, owner = tenant_owner
    first = submit_job(tenant=tenant, owner=owner, workload="digits-cnn", params=LONG)
    waiter(lambda: Job.objects.filter(pk=first.pk, status="running", progress_iteration__gt=0).exists(), 180,
           "the first job to run (profiled and placed by the scheduler)")
    second = submit_job(tenant=tenant, owner=owner, workload="digits-cnn", params=SHORT)

    connection.close()
    down_at = time.time()
    private_postgres.restart(down_s=3.0, mode="immediate")
    up_at = time.time()

    # the consumer reconnects: the job's samples after the restart are stored (a job sample is only taken while
    # the job runs, so this also shows the restart hit the running job); the scheduler places the second job
    waiter(lambda: TimelinePoint.objects.filter(job=first, second__gt=int(up_at) + 1).exists(), 90,
           "a timeline point of the first job after the restart")
    stored_again = time.time() - up_at
    for job, params in ((first, LONG), (second, SHORT)):
        waiter(lambda: Job.objects.get(pk=job.pk).status in ("succeeded", "failed", "cancelled"), 420,
               f"job {job.pk} to end")
        job.refresh_from_db()
        assert job.status == "succeeded", (job.pk, job.status, job.failure_reason)
        assert job.lost_count == 0  # the outage was not mistaken for a dead worker
        assert Placement.objects.filter(jobs=job).count() == 1  # placed once
        assert job.progress_iteration == params["iterations"]

    # nothing lost: every second of the outage has its device point (samples waited in the Redis stream)
    seconds = set(TimelinePoint.objects.filter(device=device, job=None, second__gte=int(down_at),
                                               second__lte=int(up_at)).values_list("second", flat=True))
    missing = sorted(set(range(int(down_at), int(up_at) + 1)) - seconds)
    assert len(missing) <= 1, f"device seconds of the outage not stored: {missing}"

    assert consumer.poll() is None and scheduler.poll() is None and worker.poll() is None  # nobody crashed
    log = stack.log("consumer.log")
    outage = re.search(r"database reachable again after ([\d.]+) s", log)
    assert outage, log[-2000:]
    assert "Traceback" not in log
    recorded = Event.objects.filter(kind=Event.Kind.OUTAGE, details__service="database").get()
    assert 2.0 <= recorded.details["seconds"] <= 120 and down_at - 5 <= recorded.details["start"] <= up_at
    print(f"\npostgres down {up_at - down_at:.1f} s; consumer outage {outage.group(1)} s; "
          f"first timeline point after it {stored_again:.1f} s after the restart")
