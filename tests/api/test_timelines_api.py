"""Memory timelines over the REST API with an API token: /api/jobs/{id}/timeline/ and
/api/devices/{id}/timeline/, scoped like the pages (owner, teammate, outsider, staff)."""
import time
from datetime import datetime, timezone

import pytest
from rest_framework.test import APIClient

from zico.cluster.models import Placement
from zico.jobs.models import Job
from zico.telemetry.models import TimelinePoint
from zico.tenants.models import ApiToken

from .conftest import GIB
from zico.jobs.lifecycle import transition


def bearer(user) -> APIClient:
    _, raw = ApiToken.issue(user, "script")
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return c


def _job_on(device, tenant, allocated):
    """A job placed on ``device`` with one stored timeline point of ``allocated`` bytes, 10 s ago."""
    job = Job.objects.create(tenant=tenant, workload="digits-cnn", params={})
    transition(job, "ready")
    placement = Placement.objects.create(device=device, plan={})
    placement.jobs.add(job)
    transition(job, "placed", device=device)
    second = int(time.time()) - 10
    TimelinePoint.objects.create(device=device, job=job, second=second,
                                 time=datetime.fromtimestamp(second, tz=timezone.utc),
                                 allocated_bytes=allocated, reserved_bytes=allocated + 1)
    return job


@pytest.fixture
def two_jobs(personas, devices):
    small, _ = devices
    mine = _job_on(small, personas.tenant, GIB)
    theirs = _job_on(small, personas.other_tenant, 2 * GIB)
    return small, mine, theirs


@pytest.mark.parametrize("who", ["owner", "teammate", "viewer", "staff"])
def test_a_jobs_timeline_is_readable_with_a_token_by_its_tenants_members_and_staff(personas, two_jobs, who):
    _, mine, _ = two_jobs
    r = bearer(getattr(personas, who)).get(f"/api/jobs/{mine.pk}/timeline/")
    assert r.status_code == 200
    assert [p[1:3] for p in r.json()["points"]] == [[GIB, GIB + 1]]
    assert r.json()["job"]["id"] == mine.pk


def test_an_outsider_gets_404_for_another_tenants_job_timeline(personas, two_jobs):
    _, mine, _ = two_jobs
    assert bearer(personas.outsider).get(f"/api/jobs/{mine.pk}/timeline/").status_code == 404


def test_without_credentials_the_timeline_is_a_401(two_jobs):
    _, mine, _ = two_jobs
    assert APIClient().get(f"/api/jobs/{mine.pk}/timeline/").status_code == 401


def test_a_tenant_owner_reads_the_device_timeline_with_only_their_own_jobs_band(personas, two_jobs):
    small, mine, theirs = two_jobs
    r = bearer(personas.owner).get(f"/api/devices/{small.pk}/timeline/")
    assert r.status_code == 200
    assert set(r.json()["series"]) == {str(mine.pk)}
    assert str(theirs.pk) not in r.json()["jobs"]


def test_staff_read_every_band_of_the_device_timeline(personas, two_jobs):
    small, mine, theirs = two_jobs
    r = bearer(personas.staff).get(f"/api/devices/{small.pk}/timeline/")
    assert r.status_code == 200 and set(r.json()["series"]) == {str(mine.pk), str(theirs.pk)}


def test_the_outsider_sees_only_their_own_band(personas, two_jobs):
    small, _, theirs = two_jobs
    r = bearer(personas.outsider).get(f"/api/devices/{small.pk}/timeline/")  # owner of rival, which ran a job there
    assert r.status_code == 200 and set(r.json()["series"]) == {str(theirs.pk)}


def test_a_member_who_administers_no_tenant_there_gets_404_for_the_device_timeline(personas, two_jobs):
    small, _, _ = two_jobs
    assert bearer(personas.teammate).get(f"/api/devices/{small.pk}/timeline/").status_code == 404


def test_a_device_no_tenant_of_yours_ran_on_is_a_404(personas, devices, two_jobs):
    _, big = devices
    assert bearer(personas.owner).get(f"/api/devices/{big.pk}/timeline/").status_code == 404


@pytest.mark.parametrize("query, name", [("window=7", "window"), ("since_event=x", "since_event")])
def test_a_bad_query_parameter_is_a_400_naming_it(personas, two_jobs, query, name):
    small, _, _ = two_jobs
    r = bearer(personas.staff).get(f"/api/devices/{small.pk}/timeline/?{query}")
    assert r.status_code == 400 and name in r.json()


def test_a_bad_cursor_is_a_400_naming_it(personas, two_jobs):
    _, mine, _ = two_jobs
    r = bearer(personas.owner).get(f"/api/jobs/{mine.pk}/timeline/?cursor=not-a-cursor")
    assert r.status_code == 400 and "cursor" in r.json()


def test_a_jobs_timeline_takes_the_jobs_own_span_or_a_listed_window(personas, two_jobs):
    _, mine, _ = two_jobs
    c = bearer(personas.owner)
    whole = c.get(f"/api/jobs/{mine.pk}/timeline/?window=job").json()
    assert whole["window"] == "job" and whole["range"][0] == pytest.approx(mine.created_at.timestamp())
    assert c.get(f"/api/jobs/{mine.pk}/timeline/").json()["window"] == 900  # the default
    assert c.get(f"/api/jobs/{mine.pk}/timeline/?window=3600").json()["window"] == 3600
    r = c.get(f"/api/jobs/{mine.pk}/timeline/?window=60")
    assert r.status_code == 400 and r.json()["window"] == ["expected one of 300, 900, 3600, 21600, 86400 seconds, "
                                                           "got '60'"]
    small, _, _ = two_jobs  # a device has no "job" span
    assert bearer(personas.staff).get(f"/api/devices/{small.pk}/timeline/?window=job").status_code == 400


def test_the_schema_documents_each_timelines_window_values(personas):
    schema = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    def window(path):
        [p] = [p for p in schema["paths"][path]["get"]["parameters"] if p["name"] == "window"]
        return p
    job, device = window("/api/jobs/{id}/timeline/"), window("/api/devices/{id}/timeline/")
    assert sorted(job["schema"]["enum"]) == sorted(["job", "300", "900", "3600", "21600", "86400"])
    assert sorted(device["schema"]["enum"]) == [300, 900, 3600, 21600, 86400]
    assert "default 900" in job["description"] and "own span" in job["description"]
    assert "400" in device["description"]
