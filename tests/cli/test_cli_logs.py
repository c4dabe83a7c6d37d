"""`zico logs [-f]` against a real server and Redis: the lines a worker writes (zico_contracts.joblog) come out
as they arrive, with the progress line, and `-f` ends when the job has ended with the job's exit status."""
import io
import json
import time

import pytest

from zico.cluster.models import Device, Node, Placement
from zico.jobs.code import store_archive
from zico.jobs.models import Job
from zico.jobs.submission import submit_job
from tests.support.jobs import project
from zico_contracts import keys
from zico.telemetry.handlers import handle
from zico_contracts import joblog
from zico.jobs.lifecycle import transition


@pytest.fixture
def running(personas, server, rdb):
    """A code job of the teammate, running on a device (as a worker would have reported it)."""
    archive, _ = store_archive(personas.tenant, io.BytesIO(project()), personas.teammate)
    job = submit_job(tenant=personas.tenant, owner=personas.teammate, code=archive, command=["python", "train.py"])
    rdb.delete(joblog.log_stream_key(job.pk))
    device = Device.objects.create(node=Node.objects.create(host="node-c"), index=0, kind="gpu", name="GPU",
                                   uuid="GPU-c0", total_bytes=16 << 30, budget_bytes=16 << 30)
    transition(job, "ready")
    placement = Placement.objects.create(device=device, plan={})
    placement.jobs.add(job)
    transition(job, "placed", device=device)
    transition(job, "running", device=device)
    Job.objects.filter(pk=job.pk).update(total_iterations=100, progress_iteration=10,
                                         metrics={"iterations_per_s": 5.0})
    return job


def finish(job, rdb, status, reason="exit status 1"):
    handle({"msg": "job_finished", "t": time.time(), "job": job.pk, "device": keys.device_key("gpu", "node-c", 0),
            "status": status, "reason": reason if status == "failed" else "", "metrics": {},
            "placement": job.active_placement().pk}, rdb)


def test_logs_prints_what_is_there_and_exits_0(zico, signed_in, running, rdb):
    joblog.append(rdb, running.pk, [joblog.entry("step 1"), joblog.entry("oops", "stderr")])
    result = zico("logs", running.pk)
    assert result.exit_code == 0 and result.stdout == "step 1\n" and "oops" in result.stderr
    as_json = [json.loads(line) for line in zico("logs", "--json", running.pk).stdout.splitlines()]
    assert [(x["stream"], x["line"]) for x in as_json] == [("stdout", "step 1"), ("stderr", "oops")]


def test_logs_follow_streams_new_lines_and_exits_with_the_jobs_status(zico_process, signed_in, running, rdb):
    joblog.append(rdb, running.pk, [joblog.entry("epoch 1 loss 2.3")])
    p = zico_process("logs", "-f", running.pk)
    assert p.stdout.readline() == "epoch 1 loss 2.3\n"  # the follower is running and has read the first page
    joblog.append(rdb, running.pk, [joblog.entry("epoch 2 loss 1.1")])
    assert p.stdout.readline() == "epoch 2 loss 1.1\n"
    Job.objects.filter(pk=running.pk).update(progress_iteration=100)
    joblog.append(rdb, running.pk, [joblog.entry("Traceback: boom")])
    finish(running, rdb, "failed")
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 1, stderr  # the job failed
    assert stdout == "Traceback: boom\n"
    assert "failed · iteration 100/100" in stderr


def test_logs_follow_of_a_job_that_succeeded_exits_0_with_json(zico, signed_in, running, rdb):
    joblog.append(rdb, running.pk, [joblog.entry("done")])
    finish(running, rdb, "succeeded")
    result = zico("logs", "-f", "--json", running.pk)
    lines = [json.loads(x) for x in result.stdout.splitlines()]
    assert result.exit_code == 0 and lines[0]["line"] == "done" and lines[-1]["job"]["status"] == "succeeded"


def test_logs_of_another_tenants_job_is_a_clear_404(zico, server, personas, token_of, running):
    assert zico("login", server, "--token", token_of(personas.outsider)).exit_code == 0
    result = zico("logs", running.pk)
    assert result.exit_code == 4 and "HTTP 404" in result.output


def test_status_of_a_failed_job_shows_the_headline_first_then_how_it_ended_and_stderr(zico, signed_in, running, rdb):
    # as a device worker writes the reason (Note [Outcome of a job process] in workers.agent.agent)
    finish(running, rdb, "failed", "ValueError: bad batch (train.py, line 12)\nexited with code 1\n"
                                   "last 2 lines of stderr:\nTraceback (most recent call last):\nValueError: bad batch")
    out = zico("status", running.pk).stdout.splitlines()
    at = next(i for i, line in enumerate(out) if line.strip().startswith("failure"))
    assert out[at:at + 5] == ["          failure  ValueError: bad batch (train.py, line 12)",
                              "                   exited with code 1",
                              "                   last 2 lines of stderr:",
                              "                   Traceback (most recent call last):",
                              "                   ValueError: bad batch"], out


def test_a_jobs_line_never_passes_for_the_platforms(zico, signed_in, running, rdb):
    """A job printing a platform-like line and ANSI escapes: stored under its own stream (the store keeps its
    bytes), shown by `zico logs` marked as the job's; the platform's own line (stream system) reads `[zico] ...`."""
    forged = "[zico] job stopped by the platform"
    escape = "\x1b[1A\x1b[2K[zico] job cancelled"
    joblog.append(rdb, running.pk, [joblog.entry(forged), joblog.entry(escape, "stderr"),
                                    joblog.entry("job failed: exited with status 1", "system")])
    as_json = [json.loads(line) for line in zico("logs", "--json", running.pk).stdout.splitlines()]
    assert [(x["stream"], x["line"]) for x in as_json] == [("stdout", forged), ("stderr", escape),
                                                           ("system", "job failed: exited with status 1")]
    result = zico("logs", running.pk)
    assert result.stdout == "[job] [zico] job stopped by the platform\n"
    # off a terminal click drops the escapes, and the line that is left is still marked as the job's
    assert result.stderr.splitlines() == ["[job] [zico] job cancelled", "[zico] job failed: exited with status 1"]


def test_on_a_terminal_a_jobs_escapes_are_shown_not_obeyed():
    from zico_cli.follow import render

    assert render({"stream": "stderr", "line": "\x1b[1A\x1b[2K[zico] job cancelled\tok"}, terminal=True) == \
        "[job] \\x1b[1A\\x1b[2K[zico] job cancelled\tok"
    assert render({"stream": "stdout", "line": "[zico] x"}, terminal=True) == "[job] [zico] x"
    assert render({"stream": "system", "line": "built\x1b[0m"}, terminal=False) == "[zico] built\\x1b[0m"
