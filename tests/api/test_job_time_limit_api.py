"""A job's wall-clock limit through the API: ``time_limit_s`` on POST /api/jobs/ is checked (a positive number of
seconds, at most the tenant's ``max_time_limit_s`` and ZICO_JOB_TIME_LIMIT_S: a 400 naming the field and both values,
nothing stored), the job stores the least limit with its source, shows it, and its run spec carries it; only staff
set a tenant's maximum."""
import pytest
from django.test import override_settings

from zico.cluster.models import Device, Node, Placement
from zico.jobs.models import Job
from zico_contracts.specs import RunSpec
from zico_contracts.walltime import WallLimit

SPEC = {"tenant": "acme", "workload": "digits-cnn", "params": {"batch_size": 32}}


def limit_tenant(personas, seconds):
    personas.tenant.max_time_limit_s = seconds
    personas.tenant.save(update_fields=["max_time_limit_s"])


def test_a_request_above_the_tenants_maximum_is_refused_naming_both_values(personas, client_for, row_counts):
    limit_tenant(personas, 3600)
    before = row_counts()
    r = client_for(personas.teammate).post("/api/jobs/", {**SPEC, "time_limit_s": 7200}, format="json")
    assert r.status_code == 400, r.content
    assert list(r.data) == ["time_limit_s"]
    message = str(r.data["time_limit_s"][0])
    assert "7200 s" in message and "3600 s" in message and "acme" in message, message
    assert row_counts() == before


@override_settings(ZICO_JOB_TIME_LIMIT_S=600.0)
def test_a_request_above_the_platforms_limit_is_refused(personas, client_for, row_counts):
    before = row_counts()
    r = client_for(personas.teammate).post("/api/jobs/", {**SPEC, "time_limit_s": 601}, format="json")
    assert r.status_code == 400 and "ZICO_JOB_TIME_LIMIT_S" in str(r.data["time_limit_s"][0]), r.content
    assert row_counts() == before


@pytest.mark.parametrize("bad", [0, -5, "60", True, [], {"s": 1}])
def test_a_limit_that_is_not_a_positive_number_of_seconds_is_refused(personas, client_for, row_counts, bad):
    before = row_counts()
    r = client_for(personas.teammate).post("/api/jobs/", {**SPEC, "time_limit_s": bad}, format="json")
    assert r.status_code == 400 and list(r.data) == ["time_limit_s"], r.content
    assert "positive number of seconds" in str(r.data["time_limit_s"][0])
    assert row_counts() == before


@override_settings(ZICO_JOB_TIME_LIMIT_S=86400.0)
@pytest.mark.parametrize("tenant_s, asked, expected", [
    (None, None, (86400.0, "platform")),
    (3600, None, (3600.0, "tenant")),
    (3600, 3, (3.0, "job")),
    (None, 1.5, (1.5, "job")),
])
def test_the_job_stores_shows_and_sends_the_least_limit(personas, client_for, tenant_s, asked, expected):
    limit_tenant(personas, tenant_s)
    body = {**SPEC, **({"time_limit_s": asked} if asked is not None else {})}
    r = client_for(personas.teammate).post("/api/jobs/", body, format="json")
    assert r.status_code == 201, r.content
    assert (r.data["time_limit_s"], r.data["time_limit_source"]) == expected
    job = Job.objects.get(pk=r.data["id"])
    got = client_for(personas.teammate).get(f"/api/jobs/{job.pk}/").data
    assert (got["time_limit_s"], got["time_limit_source"]) == expected
    listed = client_for(personas.teammate).get("/api/jobs/").data["results"][0]  # the list's fast path too
    assert (listed["time_limit_s"], listed["time_limit_source"]) == expected
    node = Node.objects.create(host="node-a")
    device = Device.objects.create(node=node, index=0, kind="cpu", name="cpu", uuid="cpu-0",
                                   total_bytes=1 << 30, budget_bytes=1 << 30)
    placement = Placement.objects.create(device=device, plan={})
    spec = RunSpec.from_dict(job.pk, placement.run_spec(job, None))
    assert spec.wall_limit == WallLimit(*expected)


def test_a_tenant_limit_lowered_after_submission_holds_for_the_run(personas, client_for):
    r = client_for(personas.teammate).post("/api/jobs/", {**SPEC, "time_limit_s": 3000}, format="json")
    job = Job.objects.get(pk=r.data["id"])
    limit_tenant(personas, 60)
    job.refresh_from_db()
    assert job.wall_limit() == WallLimit(60, "tenant")
    limit_tenant(personas, 7200)  # raised again: the job's own request holds
    job.refresh_from_db()
    assert job.wall_limit() == WallLimit(3000.0, "job")


@pytest.mark.parametrize("who, status", [("staff", 200), ("owner", 403), ("admin", 403)])
def test_only_staff_set_a_tenants_maximum(personas, client_for, who, status):
    r = client_for(getattr(personas, who)).patch("/api/tenants/acme/", {"max_time_limit_s": 3600}, format="json")
    assert r.status_code == status, r.content
    personas.tenant.refresh_from_db()
    assert personas.tenant.max_time_limit_s == (3600 if status == 200 else None)
    if status == 200:
        assert r.data["max_time_limit_s"] == 3600
        r = client_for(personas.staff).patch("/api/tenants/acme/", {"max_time_limit_s": 0}, format="json")
        assert r.status_code == 400 and "max_time_limit_s" in r.data


def test_the_job_page_shows_the_limit_and_staff_set_the_tenants_on_the_tenant_page(personas, client_for):
    limit_tenant(personas, 3600)
    r = client_for(personas.teammate).post("/api/jobs/", SPEC, format="json")
    html = client_for(personas.teammate).get(f"/jobs/{r.data['id']}/").content.decode()
    assert "Wall-clock limit" in html and "1 h 0 min (the tenant&#x27;s limit)" in html, html
    r = client_for(personas.staff).post("/tenants/acme/quotas/", {"max_running_jobs": 4, "max_time_limit_h": "0.5"})
    assert r.status_code == 302
    personas.tenant.refresh_from_db()
    assert personas.tenant.max_time_limit_s == 1800
    client_for(personas.staff).post("/tenants/acme/quotas/", {"max_running_jobs": 4})  # empty: no tenant limit
    personas.tenant.refresh_from_db()
    assert personas.tenant.max_time_limit_s is None
