"""Users' own scripts end to end: submitted with the `zico` command to a running stack, profiled on the device
from their first optimizer steps, run in the sandbox as processes of their own, their output followed with
`zico logs`, a metric reported through `zico.log` kept with the job (and its series, which the job page charts),
and a failing script's reason shown.

Real PostgreSQL, real Redis (private), a real web server (the worker fetches the code and uploads output files
through the worker-facing API), and the real processes: control consumer, scheduler service and one CPU device
worker started the documented way. The scripts (tests/workers/user_scripts/) know nothing of Zico, except the
one that uses ``import zico``.
"""
import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.cli import zico
from workers.jobdisk import mounts_under

from zico.jobs.models import Job, MemoryProfile
from zico.telemetry.models import MetricPoint
from zico.tenants.models import ApiToken

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCRIPTS = Path(__file__).resolve().parents[1] / "workers" / "user_scripts"
REPO = Path(__file__).resolve().parents[2]




@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (the user-script sandbox) is not installed")
def test_plain_scripts_submitted_with_zico_are_profiled_run_and_followed(stack, waiter, tenant_owner, live_server,
                                                                         tmp_path, settings):
    stack.env.update(ZICO_WORKER_API_URL=live_server.url, ZICO_VAR_DIR=str(tmp_path / "var"),
                     ZICO_PROFILE_TIME_LIMIT_S="300",
                     # the consumer stores each job's log where this process's web server reads it
                     ZICO_JOB_FILES_DIR=str(settings.ZICO_JOB_FILES_DIR))
    settings.ZICO_WORKER_API_URL = live_server.url  # the live server builds nothing, but keeps one truth
    stack.consumer(lost_after_s=15)
    stack.worker("--kind", "cpu", "--capacity", "2GiB", "--budget", "1GiB", "--slots", "3", "--loglevel", "INFO")
    stack.registered_device()
    tenant, owner = tenant_owner
    _, secret = ApiToken.issue(owner, "cli")
    project = tmp_path / "project"
    project.mkdir()
    for name in ("mlp_adam.py", "lstm_sgd_clip.py", "logs_metrics.py", "raises.py"):
        shutil.copy(SCRIPTS / name, project / name)
    (project / ".zicoignore").write_text("*.ckpt\n")
    (project / "big.ckpt").write_bytes(b"x" * 4096)  # not packed
    home = tmp_path / "home"
    home.mkdir()
    login = zico(home, "login", live_server.url, "--token", secret)
    assert login.returncode == 0, login.stderr
    ids = {}
    for name, argv in (("mlp", ["python", "mlp_adam.py", "--steps", "30"]),
                       ("lstm", ["python", "lstm_sgd_clip.py"]),
                       ("metrics", ["python", "logs_metrics.py"]),
                       ("raises", ["python", "raises.py"])):
        out = zico(home, "submit", "--json", "--name", name, str(project), "--", *argv)
        assert out.returncode == 0, out.stderr
        ids[name] = json.loads(out.stdout)["job"]["id"]
    example = zico(home, "submit", "--json", "--name", "example", str(REPO / "examples" / "digits-mlp"), "--",
                   "python", "train.py", "--epochs", "3")  # the README's example project
    assert example.returncode == 0, example.stderr
    ids["example"] = json.loads(example.stdout)["job"]["id"]
    stack.scheduler("--interval", "1")
    ended = ("succeeded", "failed", "cancelled")
    waiter(lambda: all(Job.objects.get(pk=i).status in ended for i in ids.values()), 900, "every job to end")
    jobs = {n: Job.objects.get(pk=i) for n, i in ids.items()}
    for name in ("mlp", "lstm", "metrics", "example"):
        assert jobs[name].status == "succeeded", (name, jobs[name].failure_reason, stack.log("worker.log")[-3000:])
        profile = MemoryProfile.objects.filter(job=jobs[name]).first()
        assert profile is not None and profile.source == "allocator-trace" and profile.peak_bytes > 0
    assert jobs["raises"].status == "failed" and "ValueError" in jobs["raises"].failure_reason
    assert "raises.py, line" in jobs["raises"].failure_reason
    assert jobs["metrics"].metrics["iterations_done"] == 5 and "loss" in jobs["metrics"].metrics
    # the series the job page charts: its numbers by name, at the steps done when they were sent (text is not charted)
    points = MetricPoint.objects.filter(job=jobs["metrics"])
    assert set(points.values_list("name", flat=True)) == {"loss", "accuracy"}
    assert points.filter(name="loss").order_by("id").last().iteration == 5
    assert jobs["mlp"].metrics["iterations_done"] == 30
    logs = zico(home, "logs", str(ids["mlp"]))
    assert logs.returncode == 0, logs.stderr
    assert "mlp: 30 steps, final loss" in logs.stdout
    shown = zico(home, "logs", str(ids["example"]))
    assert "epoch 3/3: loss" in shown.stdout and jobs["example"].metrics["accuracy"] > 0.5
    got = zico(home, "download", str(ids["example"]), "-o", str(tmp_path / "dl"))
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "dl" / "model.pt").stat().st_size > 10_000  # the model the job saved to its output dir
    follow = zico(home, "logs", "-f", str(ids["raises"]))
    assert follow.returncode == 1  # the job's outcome
    assert "ValueError" in follow.stderr
    # the reason a person reads: the headline first, then how the process ended and the traceback's last lines
    reason = jobs["raises"].failure_reason.splitlines()
    assert reason[:3] == ["ValueError: batch 2 has the wrong shape (raises.py, line 12)", "exited with code 1",
                          f"last {len(reason) - 3} lines of stderr:"], reason
    assert reason[3] == "Traceback (most recent call last):" and reason[-1] == "ValueError: batch 2 has the wrong shape"
    status = zico(home, "status", str(ids["raises"]))
    assert ("failure  ValueError: batch 2 has the wrong shape (raises.py, line 12)\n" + " " * 19 + "exited with code 1\n"
            in status.stdout), status.stdout
    # the log's closing line has the headline and the exit, not the stderr lines again
    assert "job failed: ValueError: batch 2 has the wrong shape (raises.py, line 12); exited with code 1\n" in follow.stderr
    # each job's directories were a file system of their own where the host allows, gone with the job (Note [A
    # job's disk] in workers/agent/diskwatch.py)
    assert mounts_under(tmp_path / "var") == []
    if os.geteuid() == 0 and os.path.exists("/dev/loop-control"):
        assert "are a file system of that size of their own (a quota" in stack.log("worker.log")
