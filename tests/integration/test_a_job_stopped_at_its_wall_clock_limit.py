"""A job is stopped at its wall-clock limit (Note [A job's wall-clock limit] in workers/agent/agent.py), end to end:
a script that prints a line every second and sleeps between them, so it is never hung, submitted with
``zico submit --time-limit 4s`` to a tenant whose maximum is an hour, runs on one CPU device worker; the device agent
stops it once it has run 4 s and the job fails naming its own limit; its log has its lines up to the stop.

Real PostgreSQL, real Redis (private), a real web server, and the real processes (consumer, scheduler, one CPU
device worker, a sandboxed job process)."""
import json
import shutil
from pathlib import Path

import pytest

from tests.support.cli import zico
from zico.jobs.models import Job
from zico.tenants.models import ApiToken

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCRIPTS = Path(__file__).resolve().parents[1] / "workers" / "user_scripts"


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (the user-script sandbox) is not installed")
def test_a_job_past_its_wall_clock_limit_fails_naming_it(stack, waiter, tenant_owner, live_server, tmp_path,
                                                         settings):
    stack.env.update(ZICO_WORKER_API_URL=live_server.url, ZICO_VAR_DIR=str(tmp_path / "var"),
                     ZICO_JOB_FILES_DIR=str(settings.ZICO_JOB_FILES_DIR), ZICO_JOB_STOP_GRACE_S="2")
    settings.ZICO_WORKER_API_URL = live_server.url
    stack.consumer(lost_after_s=15)
    stack.worker("--kind", "cpu", "--capacity", "512MiB", "--budget", str(323 << 20), "--loglevel", "INFO")
    stack.registered_device()
    tenant, owner = tenant_owner
    tenant.change(max_time_limit_s=3600)
    _, secret = ApiToken.issue(owner, "cli")
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(SCRIPTS / "prints_and_sleeps.py", project / "prints_and_sleeps.py")
    home = tmp_path / "home"
    home.mkdir()
    assert zico(home, "login", live_server.url, "--token", secret).returncode == 0
    out = zico(home, "submit", "--json", "--time-limit", "4s", str(project), "--", "python", "prints_and_sleeps.py")
    assert out.returncode == 0, out.stderr
    job_id = json.loads(out.stdout)["job"]["id"]
    assert json.loads(out.stdout)["job"]["time_limit_source"] == "job"
    stack.scheduler("--interval", "1")
    waiter(lambda: Job.objects.get(pk=job_id).status in ("succeeded", "failed", "cancelled"), 300, "the job to end")
    job = Job.objects.get(pk=job_id)
    assert job.status == "failed", (job.status, job.failure_reason, stack.log("worker.log")[-3000:])
    assert job.failure_reason.startswith("ran past its wall-clock limit of 4 s (the job's own limit): stopped"), \
        job.failure_reason
    logs = zico(home, "logs", str(job_id))
    assert "wall-clock limit: 4 s (the job's own limit)" in logs.stderr and "tick 1" in logs.stdout, logs  # system lines: stderr
    status = zico(home, "status", str(job_id))
    assert "ran past its wall-clock limit of 4 s" in status.stdout, status.stdout
