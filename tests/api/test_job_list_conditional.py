"""GET /api/jobs/ with If-None-Match: 304 without building the page while nothing the page shows changed, a new
ETag when anything did (Note [Job list ETag] in zico/api/conditional.py); and a constant number of queries per
page, whatever its rows."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from zico.cluster.models import Placement
from zico.jobs.models import Job, MemoryProfile
from zico.tenants.models import ApiToken
from zico.jobs.lifecycle import transition
from zico.jobs import lifecycle


@pytest.fixture
def token_client(personas):
    """token_client(user) -> an APIClient with that user's API token (the pollers' way in)."""

    def make(user):
        _, raw = ApiToken.issue(user, "poller")
        c = APIClient()
        c.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return c

    return make


@pytest.fixture
def jobs(personas):
    t = personas.tenant
    return [Job.objects.create(tenant=t, owner=personas.owner, name=f"j{i}", workload="digits-cnn",
                               total_iterations=100) for i in range(3)]


def poll(c, etag, path="/api/jobs/"):
    return c.get(path, HTTP_IF_NONE_MATCH=etag)


def page_statements(queries) -> list[str]:
    """The statements that read the page's rows (PageRows.read or a slice; not count_and_stamp)."""
    return [q["sql"] for q in queries if "LEFT JOIN page_rows" in q["sql"] or q["sql"].startswith("SELECT j.")]


def test_an_unchanged_page_is_a_304_that_does_not_read_the_rows(personas, jobs, token_client):
    c = token_client(personas.owner)
    first = c.get("/api/jobs/")
    assert first.status_code == 200 and first["Vary"] and "no-cache" in first["Cache-Control"]
    with CaptureQueriesContext(connection) as q:
        again = poll(c, first["ETag"])
    assert again.status_code == 304 and again.content == b"" and again["ETag"] == first["ETag"]
    assert "no-cache" in again["Cache-Control"]
    assert page_statements(q.captured_queries) == []  # answered from the hash alone
    with CaptureQueriesContext(connection) as q:
        assert c.get("/api/jobs/").status_code == 200
    assert len(page_statements(q.captured_queries)) == 1
    assert poll(c, '"something else"').status_code == 200


@pytest.mark.parametrize("change", ["status", "progress_by_update", "placement", "deleted", "new_job"])
def test_any_change_the_page_shows_gives_a_new_etag(personas, jobs, token_client, devices, change):
    c = token_client(personas.owner)
    etag = c.get("/api/jobs/")["ETag"]
    job = jobs[1]
    if change == "status":
        transition(job, "ready")
    elif change == "progress_by_update":  # a queryset update: updated_at stays as it was
        Job.objects.filter(pk=job.pk).update(progress_iteration=42)
    elif change == "placement":  # the job row is untouched; its device changes
        transition(job, "ready")
        etag = c.get("/api/jobs/")["ETag"]
        lifecycle.place(devices[0], [job])
    elif change == "deleted":
        job.delete()
    else:
        Job.objects.create(tenant=personas.tenant, owner=personas.owner, workload="digits-cnn")
    r = poll(c, etag)
    assert r.status_code == 200 and r["ETag"] != etag
    assert poll(c, r["ETag"]).status_code == 304
    shown = {j["id"]: j for j in r.json()["results"]}
    if change == "progress_by_update":
        assert shown[job.pk]["progress_iteration"] == 42
    if change == "placement":
        assert shown[job.pk]["device"] == devices[0].pk


def test_another_tenants_changes_do_not_change_the_etag(personas, jobs, token_client):
    c = token_client(personas.owner)
    etag = c.get("/api/jobs/")["ETag"]
    theirs = Job.objects.create(tenant=personas.other_tenant, owner=personas.outsider, workload="digits-cnn")
    transition(theirs, "ready")
    Job.objects.filter(pk=theirs.pk).update(progress_iteration=9)
    assert poll(c, etag).status_code == 304
    # and their poller's ETag is theirs: our page's tag is not a 304 for them
    outsider = token_client(personas.outsider)
    assert poll(outsider, etag).status_code == 200


def test_each_page_and_filter_has_its_own_etag(personas, jobs, token_client):
    c = token_client(personas.owner)
    tags = {p: c.get(p)["ETag"] for p in ("/api/jobs/", "/api/jobs/?limit=1", "/api/jobs/?limit=1&offset=1",
                                          "/api/jobs/?status=queued")}
    assert len(set(tags.values())) == len(tags)
    assert poll(c, tags["/api/jobs/?limit=1"], "/api/jobs/?limit=1&offset=1").status_code == 200
    assert poll(c, tags["/api/jobs/?limit=1&offset=1"], "/api/jobs/?limit=1&offset=1").status_code == 304


def test_an_empty_page_has_an_etag_too(personas, token_client):
    c = token_client(personas.viewer)
    r = c.get("/api/jobs/")
    assert r.status_code == 200 and r.json()["count"] == 0
    assert poll(c, r["ETag"]).status_code == 304
    Job.objects.create(tenant=personas.tenant, owner=personas.owner, workload="digits-cnn")
    assert poll(c, r["ETag"]).status_code == 200


def queries_for(c, path: str) -> list[str]:
    """The statements of one GET of ``path`` (not the request transaction's savepoints, a test's artefact)."""
    with CaptureQueriesContext(connection) as q:
        assert c.get(path).status_code == 200
    return [x["sql"].split(" FROM ")[0][:40] for x in q.captured_queries if "SAVEPOINT" not in x["sql"]]


def test_a_page_costs_the_same_queries_whatever_its_rows(personas, token_client, devices):
    c = token_client(personas.owner)
    t = personas.tenant
    Job.objects.create(tenant=t, owner=personas.owner, workload="digits-cnn")
    c.get("/api/jobs/")  # the token's first use stamps its last_used_at (then once a minute)
    one = queries_for(c, "/api/jobs/")
    for i in range(40):  # owners, placements and profiles vary by row: still no query per row
        job = Job.objects.create(tenant=t, owner=personas.admin if i % 2 else None, workload="digits-cnn")
        if i % 10 == 0:  # 4 placed: the tenant's max_running_jobs
            transition(job, "ready")
            lifecycle.place(devices[i % 2], [job])
        if i % 3 == 0:
            MemoryProfile.objects.create(job=job, source="estimate", curve={}, peak_bytes=i << 20,
                                         persistent_bytes=1 << 20, iteration_s=0.1)
    assert queries_for(c, "/api/jobs/") == one
    assert queries_for(c, "/api/jobs/?limit=100") == one
    assert len(one) == 2, one  # the token; the count, the page's hash and the page in one statement
