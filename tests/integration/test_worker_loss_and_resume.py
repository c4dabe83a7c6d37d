"""SIGKILL of a device worker mid-job: the job is marked lost and requeued within 60 s, with a worker_lost
Event; after a worker restart it resumes from its checkpoint and succeeds.

Real PostgreSQL, real Redis (private), the real control consumer and real worker processes. The scheduler's
part (place a ready job, send ``zico.device.run_job`` to the device queue) is done here in a few lines with
the same model call the scheduler uses (``lifecycle.place``), so the test pins the worker and consumer side.
"""
import signal
import time

import pytest
from celery import Celery

from workers.job import checkpoints
from servers import stop_process
from zico.cluster.models import Device, Placement
from zico.jobs.models import Event, Job
from zico.jobs.submission import submit_job
from zico_contracts.queues import cpu_queue
from zico.jobs.lifecycle import transition
from zico.jobs import lifecycle

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def place_and_send(client, job, device):
    job.refresh_from_db()
    if job.status == "queued":
        transition(job, "ready")
    placement = lifecycle.place(device, [job], plan={})
    client.send_task("zico.device.run_job", queue=cpu_queue(device.node.host), args=[job.pk, {
        "workload": job.workload, "params": job.params, "placement": placement.pk}])
    return placement


def test_a_killed_worker_loses_its_job_which_resumes_from_its_checkpoint(stack, redis_server, waiter, tmp_path, tenant_owner):
    client = Celery("it", broker=redis_server.url, backend=redis_server.url)
    stack.consumer(lost_after_s=5)
    worker_args = ("--kind", "cpu", "--capacity", "2GiB", "--slots", "2", "--checkpoint-every", "1",
                   "--loglevel", "WARNING")
    worker = stack.worker(*worker_args)
    device = stack.registered_device()
    tenant, owner = tenant_owner
    job = submit_job(tenant=tenant, owner=owner, workload="digits-cnn",
                     params={"iterations": 300, "batch_size": 256, "image_size": 32})
    place_and_send(client, job, device)

    ckpt = tmp_path / "ckpt"
    waiter(lambda: Job.objects.get(pk=job.pk).status == "running", 120, "the job to run")
    waiter(lambda: checkpoints.checkpoint_path(ckpt, job.pk).exists(), 120, "a first checkpoint")
    saved = checkpoints.load(ckpt, job.pk)["iteration"]

    stop_process(worker, signal.SIGKILL)
    killed_at = time.monotonic()
    waiter(lambda: Job.objects.get(pk=job.pk).status == "queued", 60, "the lost job to be requeued")
    requeued_s = time.monotonic() - killed_at
    assert requeued_s < 60
    job.refresh_from_db()
    assert job.lost_count == 1
    lost = Event.objects.get(kind="worker_lost", job=job)
    assert lost.device_id == device.pk
    assert list(Event.objects.filter(job=job, kind="status_change").order_by("time", "id")
                .values_list("details__to", flat=True))[-2:] == ["lost", "queued"]

    stack.worker(*worker_args, log="worker2.log")
    waiter(lambda: Device.objects.get(pk=device.pk).status == "online", 120, "the restarted worker")
    device.refresh_from_db()
    place_and_send(client, job, device)
    waiter(lambda: Job.objects.get(pk=job.pk).status in ("succeeded", "failed"), 600, "the resumed job to end")
    job.refresh_from_db()
    assert job.status == "succeeded", job.failure_reason
    assert job.metrics["resumed_from"] >= saved + 1 > 0
    assert job.metrics["iterations_this_run"] == 300 - job.metrics["resumed_from"]
    assert job.progress_iteration == 300
    print(f"\nworker SIGKILL -> job requeued in {requeued_s:.1f} s (lost after 5 s without a heartbeat); "
          f"resumed from iteration {job.metrics['resumed_from']}")
