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

from servers import stop_process
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


WORKER_ARGS = ("--kind", "cpu", "--capacity", "2GiB", "--budget", "1GiB", "--slots", "2", "--loglevel", "INFO")


def _start(stack, live_server, tmp_path, settings, lost_after_s: int):
    """The stack's environment for script jobs, its control consumer and one CPU worker; returns the worker."""
    stack.env.update(ZICO_WORKER_API_URL=live_server.url, ZICO_VAR_DIR=str(tmp_path / "var"),
                     ZICO_PROFILE_TIME_LIMIT_S="600", ZICO_JOB_FILES_DIR=str(settings.ZICO_JOB_FILES_DIR))
    settings.ZICO_WORKER_API_URL = live_server.url
    stack.consumer(lost_after_s=lost_after_s)
    return stack.worker(*WORKER_ARGS)


def _assert_ran_again(stack, waiter, job, first):
    """After the restart: ``job`` succeeded, declared lost once by the restart in placement ``first``, run and
    profiled again in a new placement, and the restarted worker never refused a run of it."""
    waiter(lambda: Job.objects.get(pk=job.pk).status in ("succeeded", "failed", "cancelled"), 240,
           "the job to end after the worker's restart")
    job.refresh_from_db()
    logs = "\n".join(stack.log(n)[-4000:] for n in ("worker2.log", "consumer.log", "scheduler.log"))
    assert job.status == "succeeded", (job.failure_reason, logs)
    lost = Event.objects.get(kind="worker_lost", job=job)
    assert "restarted" in lost.details["reason"] and lost.details["placement"] == first.pk
    assert job.lost_count == 1
    assert job.placements.order_by("-pk").first().pk != first.pk
    assert MemoryProfile.objects.filter(job=job, source="allocator-trace").exists()
    assert "already running" not in stack.log("worker2.log")


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (the user-script sandbox) is not installed")
def test_a_worker_restarted_while_a_script_is_profiled_runs_it_again(stack, waiter, tenant_owner, live_server,
                                                                     tmp_path, settings):
    worker = _start(stack, live_server, tmp_path, settings, lost_after_s=15)
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
    stack.worker(*WORKER_ARGS, log="worker2.log")
    _assert_ran_again(stack, waiter, job, first)


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (the user-script sandbox) is not installed")
def test_a_script_placed_while_its_worker_is_dead_runs_once_the_worker_is_back(stack, waiter, tenant_owner,
                                                                               live_server, tmp_path, settings):
    # the dead worker is not declared lost by its heartbeat before it is back
    worker = _start(stack, live_server, tmp_path, settings, lost_after_s=120)
    device = stack.registered_device()
    stop_process(worker, signal.SIGKILL)  # its device is still online: the job is placed there, its task queued
    tenant, owner = tenant_owner
    job = submit_job(tenant=tenant, owner=owner, code=_archive(tenant, owner), command=["python", "train.py"], env={})
    stack.scheduler("--interval", "1")
    waiter(lambda: Job.objects.filter(pk=job.pk, status="profiling").exists(), 120, "the job to be placed")
    first = Job.objects.get(pk=job.pk).active_placement()
    assert first is not None and first.device_id == device.pk
    # the restart declares it lost (its task might have died with the process) and it is placed again: the
    # restarted worker receives both run_job tasks, and the stale one's run is stopped (Note [Two runs of one job])
    stack.worker(*WORKER_ARGS, log="worker2.log")
    _assert_ran_again(stack, waiter, job, first)
