"""A job's output over the API: log lines live from the Redis stream and then from the stored copy (with the
cursor going on across the switch), output files uploaded by the worker with the job token and downloaded by
members; other tenants get 404, bad tokens 401, the wrong job's token or a long-ended job 403."""
import io
import time
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from zico.cluster.models import Placement
from zico.jobs.code import issue_job_token, store_archive
from zico.jobs.models import Job, JobLog
from zico.jobs.outputs import archive_log
from zico.jobs.submission import submit_job
from tests.support.jobs import project
from zico_contracts import keys
from zico.telemetry.handlers import handle
from zico_contracts import joblog
from zico.jobs.lifecycle import transition


@pytest.fixture
def r():
    client = redis.Redis.from_url(settings.REDIS_URL)
    yield client
    for key in client.scan_iter("zico:job:*:log"):
        client.delete(key)


@pytest.fixture
def job(personas, devices, settings, tmp_path, r):
    settings.ZICO_CODE_DIR, settings.ZICO_JOB_FILES_DIR = tmp_path / "code", tmp_path / "jobfiles"
    f = io.BytesIO(project())
    archive, _ = store_archive(personas.tenant, f, personas.teammate)
    job = submit_job(tenant=personas.tenant, owner=personas.teammate, code=archive, command=["python", "train.py"])
    r.delete(joblog.log_stream_key(job.pk))
    transition(job, "ready")
    placement = Placement.objects.create(device=devices[0], plan={})
    placement.jobs.add(job)
    transition(job, "placed", device=devices[0])
    transition(job, "running", device=devices[0])
    return job


def lines(*texts, stream="stdout"):
    return [joblog.entry(t, stream) for t in texts]


def test_members_read_the_live_lines_page_by_page_and_the_other_tenant_gets_404(personas, client_for, job, r):
    joblog.append(r, job.pk, lines("epoch 1", "epoch 2") + lines("warning: slow", stream="stderr"))
    c = client_for(personas.viewer)
    page = c.get(f"/api/jobs/{job.pk}/logs/?limit=2").json()
    assert [ln["line"] for ln in page["lines"]] == ["epoch 1", "epoch 2"]
    assert (page["more"], page["source"], page["complete"], page["job"]["status"]) == (True, "live", False, "running")
    rest = c.get(f"/api/jobs/{job.pk}/logs/?after={page['cursor']}").json()
    assert [(ln["stream"], ln["line"]) for ln in rest["lines"]] == [("stderr", "warning: slow")]
    assert c.get(f"/api/jobs/{job.pk}/logs/?after={rest['cursor']}").json()["lines"] == []
    assert client_for(personas.outsider).get(f"/api/jobs/{job.pk}/logs/").status_code == 404
    assert client_for(None).get(f"/api/jobs/{job.pk}/logs/").status_code == 401


@pytest.mark.parametrize("query,name", [("after=yesterday", "after"), ("limit=0", "limit"), ("limit=x", "limit")])
def test_a_bad_cursor_or_limit_is_a_400_naming_it(personas, client_for, job, query, name):
    r = client_for(personas.teammate).get(f"/api/jobs/{job.pk}/logs/?{query}")
    assert r.status_code == 400 and name in r.json()


def test_the_end_of_the_run_stores_the_log_and_the_cursor_goes_on(personas, client_for, job, r, devices,
                                                                  django_capture_on_commit_callbacks):
    joblog.append(r, job.pk, lines("one", "two"))
    c = client_for(personas.teammate)
    first = c.get(f"/api/jobs/{job.pk}/logs/").json()
    joblog.append(r, job.pk, lines("three"))
    dev = keys.device_key("gpu", "node-a", 0)
    with django_capture_on_commit_callbacks(execute=True):  # the stream is deleted once the copy is committed
        handle({"msg": "job_finished", "t": time.time(), "job": job.pk, "device": dev, "status": "failed",
                "reason": "exit status 1",
                "metrics": {}, "placement": job.active_placement().pk}, r)
    assert JobLog.objects.get(job=job).lines == 3 and not r.exists(joblog.log_stream_key(job.pk))
    after = c.get(f"/api/jobs/{job.pk}/logs/?after={first['cursor']}").json()
    assert [ln["line"] for ln in after["lines"]] == ["three"]
    assert (after["source"], after["complete"], after["job"]["status"]) == ("stored", True, "failed")
    whole = c.get(f"/api/jobs/{job.pk}/logs/").json()
    assert [ln["line"] for ln in whole["lines"]] == ["one", "two", "three"] and whole["note"] == ""
    assert archive_log(job, r).lines == 3  # idempotent: the stored copy is kept


def test_the_stored_copy_keeps_the_tail_and_says_what_it_dropped(personas, client_for, job, r, settings):
    joblog.append(r, job.pk, lines(*[f"line {i} " + "x" * 100 for i in range(50)]))
    settings.ZICO_LOG_MAX_BYTES = 2000
    transition(job, "failed", reason="test")
    stored = archive_log(job, r)
    body = client_for(personas.teammate).get(f"/api/jobs/{job.pk}/logs/").json()
    assert stored.dropped_lines == 50 - stored.lines > 0 and body["dropped_lines"] == stored.dropped_lines
    assert body["lines"][-1]["line"].startswith("line 49 ") and f"{stored.dropped_lines} earlier lines" in body["note"]


def test_an_ended_job_no_run_reports_is_stored_by_the_first_read_after_the_grace(personas, client_for, job, r):
    joblog.append(r, job.pk, lines("only line"))
    transition(job, "cancelled", reason="test")
    c = client_for(personas.teammate)
    assert c.get(f"/api/jobs/{job.pk}/logs/").json()["source"] == "live"  # the worker may still report
    Job.objects.filter(pk=job.pk).update(finished_at=timezone.now() - timedelta(hours=1))
    body = c.get(f"/api/jobs/{job.pk}/logs/").json()
    assert (body["source"], body["complete"], [ln["line"] for ln in body["lines"]]) == ("stored", True, ["only line"])


def test_the_worker_uploads_outputs_that_members_list_and_download(personas, client_for, job):
    worker = client_for(None)
    auth = {"HTTP_AUTHORIZATION": f"JobToken {issue_job_token(job.pk)}"}
    for path, data in [("model/weights.bin", b"\x00\x01" * 100), ("metrics.json", b'{"loss": 0.1}')]:
        f = io.BytesIO(data)
        f.name = "x"
        r = worker.post(f"/api/worker/jobs/{job.pk}/files/", {"path": path, "file": f}, format="multipart", **auth)
        assert r.status_code == 201, r.content
    listed = client_for(personas.viewer).get(f"/api/jobs/{job.pk}/files/").json()
    assert [(f["path"], f["size_bytes"]) for f in listed] == [("metrics.json", 13), ("model/weights.bin", 200)]
    got = client_for(personas.viewer).get(listed[1]["url"])
    assert got.status_code == 200 and got["Content-Type"] == "application/octet-stream"
    assert b"".join(got.streaming_content) == b"\x00\x01" * 100 and "attachment" in got["Content-Disposition"]
    assert client_for(personas.outsider).get(f"/api/jobs/{job.pk}/files/").status_code == 404
    assert client_for(personas.outsider).get(listed[1]["url"]).status_code == 404


@pytest.mark.parametrize("path,message", [("../../etc/passwd", "'..' in path"), ("/abs", "absolute path"),
                                          ("a\\b", "backslash"), ("", "may not be blank")])
def test_an_output_path_that_leaves_the_job_is_refused(personas, client_for, job, path, message):
    f = io.BytesIO(b"x")
    f.name = "x"
    r = client_for(None).post(f"/api/worker/jobs/{job.pk}/files/", {"path": path, "file": f}, format="multipart",
                              HTTP_AUTHORIZATION=f"JobToken {issue_job_token(job.pk)}")
    assert r.status_code == 400 and message in r.json()["path"][0]
    assert not job.files.exists()


def test_output_limits_are_413(personas, client_for, job, settings):
    settings.ZICO_OUTPUT_MAX_FILE_BYTES = 10
    f = io.BytesIO(b"x" * 11)
    f.name = "x"
    r = client_for(None).post(f"/api/worker/jobs/{job.pk}/files/", {"path": "big", "file": f}, format="multipart",
                              HTTP_AUTHORIZATION=f"JobToken {issue_job_token(job.pk)}")
    assert r.status_code == 413 and not job.files.exists()


def test_job_tokens_open_their_own_job_only_and_not_for_long(personas, client_for, job, settings):
    other = submit_job(tenant=personas.tenant, owner=personas.teammate, code=job.code, command=["true"])
    c = client_for(None)
    url = f"/api/worker/jobs/{job.pk}/code"
    assert c.get(url).status_code == 401
    assert c.get(url, HTTP_AUTHORIZATION="JobToken 12:forged:sig").status_code == 401
    r = c.get(url, HTTP_AUTHORIZATION=f"JobToken {issue_job_token(other.pk)}")
    assert r.status_code == 403 and f"for job {other.pk}" in r.json()["detail"]
    user_token = client_for(personas.teammate)  # a signed-in user is not a worker
    assert user_token.get(url).status_code == 401
    token = issue_job_token(job.pk)
    assert c.get(url, HTTP_AUTHORIZATION=f"JobToken {token}").status_code == 200
    transition(job, "succeeded")
    assert c.get(url, HTTP_AUTHORIZATION=f"JobToken {token}").status_code == 200  # within the grace
    Job.objects.filter(pk=job.pk).update(finished_at=timezone.now() - timedelta(hours=1))
    assert c.get(url, HTTP_AUTHORIZATION=f"JobToken {token}").status_code == 403
    settings.ZICO_WORKER_TOKEN_TTL_S = -1  # every token is older than that
    r = c.get(f"/api/worker/jobs/{other.pk}/code", HTTP_AUTHORIZATION=f"JobToken {issue_job_token(other.pk)}")
    assert r.status_code == 401 and "expired" in r.json()["detail"]
