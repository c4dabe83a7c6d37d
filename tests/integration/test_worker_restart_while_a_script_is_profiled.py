"""A device worker SIGKILLed and restarted while a user's script job is profiled as its run starts (Note [A
script's profile is the start of its run] in workers/runner.py), or while its ``run_job`` waits in the device's
queue: after the restart the job is requeued with a ``worker_lost`` Event naming the restart, profiled again in a
new run and succeeds; it never sits ``profiling`` with no process until the profiling time limit fails it. In the
second case the restarted worker receives both the queued task of the ended placement and the new placement's
(Note [Two runs of one job] in workers/runner.py); before the fix the second was refused ("job 1 is already
running") and the job hung.

Real PostgreSQL, real Redis (private), a real web server (the worker fetches the code through the worker-facing
API) and the real processes: control consumer, scheduler service and one CPU device worker, started the
documented way.
"""
import io
import shutil
import signal
import tarfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from workers.testing import stop_process
from zico.jobs.code import store_archive
from zico.jobs.models import Event, Job, MemoryProfile
from zico.jobs.submission import submit_job

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# slow steps: the profile (the first 4 iterations) lasts long enough for the worker to be killed during it
TRAIN_PY = b"""import time

import torch

model = torch.nn.Linear(64, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(8):
    time.sleep(1.5)
    loss = model(torch.randn(32, 64)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("slow: done")
"""


def _archive(tenant, owner):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("train.py")
        info.size, info.mode = len(TRAIN_PY), 0o644
        tar.addfile(info, io.BytesIO(TRAIN_PY))
    archive, _ = store_archive(tenant, SimpleUploadedFile("code.tar.gz", buf.getvalue()), owner)
    return archive


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (the user-script sandbox) is not installed")
def test_a_worker_restarted_while_a_script_is_profiled_runs_it_again(stack, waiter, tenant_owner, live_server,
                                                                     tmp_path, settings):
    stack.env.update(ZICO_WORKER_API_URL=live_server.url, ZICO_VAR_DIR=str(tmp_path / "var"),
                     ZICO_PROFILE_TIME_LIMIT_S="600", ZICO_JOB_FILES_DIR=str(settings.ZICO_JOB_FILES_DIR))
    settings.ZICO_WORKER_API_URL = live_server.url
    stack.consumer(lost_after_s=15)
    worker_args = ("--kind", "cpu", "--capacity", "2GiB", "--budget", "1GiB", "--slots", "2", "--loglevel", "INFO")
    worker = stack.worker(*worker_args)
    device = stack.registered_device()
    tenant, owner = tenant_owner
    job = submit_job(tenant=tenant, owner=owner, code=_archive(tenant, owner), command=["python", "train.py"], env={})
    stack.scheduler("--interval", "1")

    # the script's process runs (job_started came) and its profile is not complete yet
    waiter(lambda: Job.objects.filter(pk=job.pk, status="profiling", started_at__isnull=False).exists(), 180,
           "the script job to start its profiled run")
    first = Job.objects.get(pk=job.pk).active_placement()
    assert first is not None and first.device_id == device.pk
    stop_process(worker, signal.SIGKILL)
    assert Job.objects.get(pk=job.pk).status == "profiling"  # killed mid-profile
    stack.worker(*worker_args, log="worker2.log")

    waiter(lambda: Job.objects.get(pk=job.pk).status in ("succeeded", "failed", "cancelled"), 240,
           "the job to end after the worker's restart")
    job.refresh_from_db()
    logs = "\n".join(stack.log(n)[-4000:] for n in ("worker2.log", "consumer.log", "scheduler.log"))
    assert job.status == "succeeded", (job.failure_reason, logs)
    lost = Event.objects.get(kind="worker_lost", job=job)
    assert "restarted" in lost.details["reason"] and lost.details["placement"] == first.pk
    assert job.lost_count == 1
    last = job.placements.order_by("-pk").first()
    assert last.pk != first.pk  # run again in a new placement, profiled again there
    assert MemoryProfile.objects.filter(job=job, source="allocator-trace").exists()
    assert "already running" not in stack.log("worker2.log")


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (the user-script sandbox) is not installed")
def test_a_script_placed_while_its_worker_is_dead_runs_once_the_worker_is_back(stack, waiter, tenant_owner,
                                                                               live_server, tmp_path, settings):
    stack.env.update(ZICO_WORKER_API_URL=live_server.url, ZICO_VAR_DIR=str(tmp_path / "var"),
                     ZICO_PROFILE_TIME_LIMIT_S="600", ZICO_JOB_FILES_DIR=str(settings.ZICO_JOB_FILES_DIR))
    settings.ZICO_WORKER_API_URL = live_server.url
    stack.consumer(lost_after_s=120)  # the dead worker is not declared lost by its heartbeat before it is back
    worker_args = ("--kind", "cpu", "--capacity", "2GiB", "--budget", "1GiB", "--slots", "2", "--loglevel", "INFO")
    worker = stack.worker(*worker_args)
    device = stack.registered_device()
    stop_process(worker, signal.SIGKILL)  # its device is still online: the job is placed there, its task queued
    tenant, owner = tenant_owner
    job = submit_job(tenant=tenant, owner=owner, code=_archive(tenant, owner), command=["python", "train.py"], env={})
    stack.scheduler("--interval", "1")
    waiter(lambda: Job.objects.filter(pk=job.pk, status="profiling").exists(), 120, "the job to be placed")
    first = Job.objects.get(pk=job.pk).active_placement()
    assert first is not None and first.device_id == device.pk
    stack.worker(*worker_args, log="worker2.log")

    waiter(lambda: Job.objects.get(pk=job.pk).status in ("succeeded", "failed", "cancelled"), 240,
           "the job to end after the worker's restart")
    job.refresh_from_db()
    logs = "\n".join(stack.log(n)[-4000:] for n in ("worker2.log", "consumer.log", "scheduler.log"))
    assert job.status == "succeeded", (job.failure_reason, logs)
    # the restart declared it lost (its task might have died with the process) and it was placed again: the
    # restarted worker received both run_job tasks, the stale one's run stopped (Note [Two runs of one job])
    lost = Event.objects.get(kind="worker_lost", job=job)
    assert "restarted" in lost.details["reason"] and lost.details["placement"] == first.pk
    assert job.placements.order_by("-pk").first().pk != first.pk
    assert MemoryProfile.objects.filter(job=job, source="allocator-trace").exists()
    assert "already running" not in stack.log("worker2.log")
