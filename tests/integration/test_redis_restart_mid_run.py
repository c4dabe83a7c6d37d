"""Redis restarted mid-run (fresh and empty, as after a crash without persistence): the worker reconnects, the
job continues and succeeds, the telemetry gap is recorded, and neither the worker nor the consumer crashes."""
import time

import pytest
from celery import Celery

from zico.cluster.models import Placement
from zico.jobs.models import Event, Job
from zico.jobs.submission import submit_job
from zico_contracts.queues import cpu_queue
from zico.telemetry.models import TelemetryGap, TimelinePoint
from zico.jobs.lifecycle import transition
from zico.jobs import lifecycle

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_a_redis_restart_leaves_a_recorded_gap_and_a_finished_job(stack, redis_server, waiter, tenant_owner):
    client = Celery("it", broker=redis_server.url, backend=redis_server.url)
    consumer = stack.consumer(lost_after_s=10)
    worker = stack.worker("--kind", "cpu", "--capacity", "2GiB", "--slots", "2", "--loglevel", "WARNING")
    device = stack.registered_device()
    tenant, owner = tenant_owner
    job = submit_job(tenant=tenant, owner=owner, workload="digits-cnn",
                     params={"iterations": 300, "batch_size": 256, "image_size": 32})
    transition(job, "ready")
    placement = lifecycle.place(device, [job], plan={})
    client.send_task("zico.device.run_job", queue=cpu_queue(stack.host),
                     args=[job.pk, {"workload": job.workload, "params": job.params, "placement": placement.pk}])
    waiter(lambda: Job.objects.filter(pk=job.pk, progress_iteration__gt=0).exists(), 300, "the job to make progress")

    redis_server.restart(down_s=3.0)
    restarted_at = time.time()
    job.refresh_from_db()
    assert job.status == "running" and job.progress_iteration < 300  # the restart hit a running job

    # Telemetry resumed after the restart: samples of the job taken after it are stored again. A wait, not a
    # one-off read: a second's point is stored only once a later second arrives or 2 s after it ends
    # (Downsampler lag), and under load the consumer can handle the job's end before those last points.
    waiter(lambda: TimelinePoint.objects.filter(job=job, second__gt=int(restarted_at) + 1).exists(), 120,
           "a timeline point of the job after the restart")
    waiter(lambda: Job.objects.get(pk=job.pk).status in ("succeeded", "failed", "queued"), 900, "the job to end")
    job.refresh_from_db()
    assert job.status == "succeeded", (job.status, job.failure_reason)
    assert job.lost_count == 0  # the outage was not mistaken for a dead worker
    gap = waiter(lambda: TelemetryGap.objects.filter(device=device).first(), 60, "the telemetry gap row")
    assert 2.0 <= gap.seconds <= 60 and gap.end.timestamp() <= restarted_at + 60
    # the device series resumed too
    assert TimelinePoint.objects.filter(device=device, job=None, second__gt=int(restarted_at) + 1).exists()
    assert worker.poll() is None and consumer.poll() is None  # nothing crashed
    recorded = waiter(lambda: Event.objects.filter(kind=Event.Kind.OUTAGE, details__service="redis").first(), 60,
                      "the consumer's outage event")
    assert 2.0 <= recorded.details["seconds"] <= 120
    # the worker reconnected to the broker: it still takes new tasks
    # (a fresh client: this test process's own result-backend subscription is not what is under test)
    fresh = Celery("it-after", broker=redis_server.url, backend=redis_server.url)
    facts = fresh.send_task("zico.device.describe", queue=cpu_queue(stack.host)).get(timeout=120)
    assert facts["pid"] == worker.pid
    assert "Unrecoverable error" not in stack.log("worker.log")
