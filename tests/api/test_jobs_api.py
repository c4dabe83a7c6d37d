"""/api/jobs/: submit, list, retrieve, cancel — with every persona; rejected specs store nothing."""
import pytest

from zico.jobs.models import Event, Job
from zico.tenants.models import Tenant
from zico.jobs.lifecycle import transition
from zico.jobs import lifecycle

GIB = 1 << 30
SPEC = {"tenant": "acme", "name": "digits run", "workload": "digits-cnn", "params": {"batch_size": 32}}


@pytest.fixture
def owners_job(personas):
    return Job.objects.create(tenant=personas.tenant, owner=personas.owner, name="acme-secret-run",
                              workload="digits-cnn", params={"batch_size": 8})


@pytest.mark.parametrize("who", ["owner", "admin", "teammate"])
def test_members_submit_a_queued_job_with_defaults_filled(personas, client_for, who):
    user = getattr(personas, who)
    r = client_for(user).post("/api/jobs/", SPEC, format="json")
    assert r.status_code == 201, r.content
    job = Job.objects.get(pk=r.data["id"])
    assert (job.status, job.owner, job.tenant.slug) == ("queued", user, "acme")
    assert job.params["batch_size"] == 32 and "iterations" in job.params  # catalog defaults filled in
    assert job.total_iterations == job.params["iterations"]
    ev = Event.objects.get(job=job)
    assert ev.details["to"] == "queued" and ev.actor == user


def test_it_rejects_viewer_submit(personas, client_for, row_counts):
    before = row_counts()
    r = client_for(personas.viewer).post("/api/jobs/", SPEC, format="json")
    assert r.status_code == 403
    assert row_counts() == before


@pytest.mark.parametrize("who", ["outsider", "staff"])
def test_it_rejects_non_member_submit_to_a_tenant(personas, client_for, row_counts, who):
    before = row_counts()
    r = client_for(getattr(personas, who)).post("/api/jobs/", SPEC, format="json")
    assert r.status_code == 400 and "tenant" in r.data
    assert row_counts() == before


def test_the_tenant_may_be_left_out_when_the_user_can_submit_to_one(personas, client_for):
    spec = {k: v for k, v in SPEC.items() if k != "tenant"}
    r = client_for(personas.teammate).post("/api/jobs/", spec, format="json")
    assert r.status_code == 201 and r.data["tenant"] == "acme"
    personas.other_tenant.add_member(personas.teammate, "member")
    r = client_for(personas.teammate).post("/api/jobs/", spec, format="json")
    assert r.status_code == 400 and "tenant" in r.data


def test_anonymous_requests_are_refused(personas, owners_job, client_for):
    c = client_for(None)
    assert c.get("/api/jobs/").status_code == 401
    assert c.get(f"/api/jobs/{owners_job.pk}/").status_code == 401
    assert c.post("/api/jobs/", SPEC, format="json").status_code == 401


@pytest.mark.parametrize("change,field,subfield", [
    ({"workload": "no-such-model"}, "workload", None),
    ({"params": {"batch_size": 0}}, "params", "batch_size"),
    ({"params": {"batch_size": "big"}}, "params", "batch_size"),
    ({"params": {"learning_rate": 0.1}}, "params", "learning_rate"),
    ({"params": [1, 2]}, "params", None),
    ({"budget_bytes": -1}, "budget_bytes", None),
    ({"budget_bytes": 0}, "budget_bytes", None),
    ({"budget_bytes": 80 * GIB + 1}, "budget_bytes", None),
    ({"priority": 101}, "priority", None),
    ({"tenant": "rival"}, "tenant", None),
    ({"tenant": "nope"}, "tenant", None),
])
def test_it_rejects_a_bad_spec_naming_the_field_and_storing_nothing(personas, devices, client_for, row_counts,
                                                                     change, field, subfield):
    before = row_counts()
    r = client_for(personas.owner).post("/api/jobs/", {**SPEC, **change}, format="json")
    assert r.status_code == 400, r.content
    assert field in r.data
    if subfield:
        assert subfield in r.data[field]
    assert row_counts() == before


def test_a_budget_up_to_the_largest_device_is_accepted(personas, devices, client_for):
    r = client_for(personas.owner).post("/api/jobs/", {**SPEC, "budget_bytes": 80 * GIB}, format="json")
    assert r.status_code == 201 and r.data["budget_bytes"] == 80 * GIB


def test_it_rejects_a_budget_that_exceeds_the_tenant_quota(personas, devices, client_for, row_counts):
    Tenant.objects.filter(pk=personas.tenant.pk).update(max_total_budget_bytes=10 * GIB)
    c = client_for(personas.owner)
    assert c.post("/api/jobs/", {**SPEC, "budget_bytes": 6 * GIB}, format="json").status_code == 201
    before = row_counts()
    r = c.post("/api/jobs/", {**SPEC, "budget_bytes": 5 * GIB}, format="json")
    assert r.status_code == 400 and "quota exceeded" in str(r.data["budget_bytes"])
    r = c.post("/api/jobs/", SPEC, format="json")  # a quota makes a budget mandatory
    assert r.status_code == 400 and "required" in str(r.data["budget_bytes"])
    assert row_counts() == before
    # a finished job frees its share of the quota
    transition(Job.objects.get(), "cancelled", reason="test")
    assert c.post("/api/jobs/", {**SPEC, "budget_bytes": 9 * GIB}, format="json").status_code == 201


@pytest.mark.parametrize("who,sees", [("owner", True), ("admin", True), ("teammate", True), ("viewer", True),
                                      ("outsider", False), ("staff", True)])
def test_list_shows_only_the_callers_tenants_jobs(personas, owners_job, client_for, who, sees):
    rival_job = Job.objects.create(tenant=personas.other_tenant, owner=personas.outsider, name="rival-run",
                                   workload="digits-cnn")
    r = client_for(getattr(personas, who)).get("/api/jobs/")
    assert r.status_code == 200
    ids = {j["id"] for j in r.data["results"]}
    assert (owners_job.pk in ids) == sees
    assert (b"acme-secret-run" in r.content) == sees
    assert (rival_job.pk in ids) == (who in ("outsider", "staff"))


def test_list_filters_by_status_and_tenant(personas, owners_job, client_for):
    other = Job.objects.create(tenant=personas.tenant, owner=personas.owner, workload="digits-cnn")
    transition(other, "cancelled", reason="test")
    c = client_for(personas.owner)
    assert [j["id"] for j in c.get("/api/jobs/?status=cancelled").data["results"]] == [other.pk]
    assert c.get("/api/jobs/?tenant=rival").data["count"] == 0


@pytest.mark.parametrize("who,status", [("owner", 200), ("admin", 200), ("teammate", 200), ("viewer", 200),
                                        ("outsider", 404), ("staff", 200)])
def test_retrieve_by_persona(personas, owners_job, client_for, who, status):
    r = client_for(getattr(personas, who)).get(f"/api/jobs/{owners_job.pk}/")
    assert r.status_code == status
    assert (b"acme-secret-run" in r.content) == (status == 200)


@pytest.mark.parametrize("who,status", [("owner", 200), ("admin", 200), ("teammate", 403), ("viewer", 403),
                                        ("outsider", 404), ("staff", 200)])
def test_cancel_by_persona(personas, owners_job, client_for, who, status):
    r = client_for(getattr(personas, who)).post(f"/api/jobs/{owners_job.pk}/cancel/")
    assert r.status_code == status
    owners_job.refresh_from_db()
    assert owners_job.status == ("cancelled" if status == 200 else "queued")
    assert Event.objects.filter(job=owners_job, details__to="cancelled").count() == (status == 200)
    assert b"acme-secret-run" not in r.content or status == 200


def test_a_member_cancels_their_own_job(personas, client_for):
    job = Job.objects.create(tenant=personas.tenant, owner=personas.teammate, workload="digits-cnn")
    r = client_for(personas.teammate).post(f"/api/jobs/{job.pk}/cancel/")
    assert r.status_code == 200 and r.data["status"] == "cancelled"


def test_a_demoted_member_can_no_longer_cancel_their_job(personas, client_for):
    job = Job.objects.create(tenant=personas.tenant, owner=personas.teammate, workload="digits-cnn")
    personas.tenant.memberships.get(user=personas.teammate).set_role("viewer")
    assert client_for(personas.teammate).post(f"/api/jobs/{job.pk}/cancel/").status_code == 403


def test_cancelling_a_finished_job_is_a_conflict(personas, owners_job, client_for):
    transition(owners_job, "cancelled", reason="first")
    events = Event.objects.count()
    r = client_for(personas.owner).post(f"/api/jobs/{owners_job.pk}/cancel/")
    assert r.status_code == 409 and "already ended" in r.data["detail"]
    assert Event.objects.count() == events


@pytest.mark.parametrize("who,status", [("owner", 200), ("admin", 200), ("teammate", 200), ("viewer", 200),
                                        ("outsider", 404), ("staff", 200)])
def test_job_events_by_persona(personas, owners_job, client_for, who, status):
    transition(owners_job, "profiling", reason="estimate on CPU")
    r = client_for(getattr(personas, who)).get(f"/api/jobs/{owners_job.pk}/events/")
    assert r.status_code == status
    if status == 200:
        assert [(e["kind"], e["details"]["to"]) for e in r.data["results"]] == [("status_change", "profiling")]
    else:
        assert b"estimate on CPU" not in r.content


@pytest.mark.parametrize("who,status", [("owner", 200), ("admin", 200), ("teammate", 200), ("viewer", 200),
                                        ("outsider", 404), ("staff", 200)])
def test_job_profile_by_persona(personas, owners_job, client_for, who, status):
    from placement.curves import triangular_curve
    from zico.jobs.models import MemoryProfile

    c = client_for(getattr(personas, who))
    assert c.get(f"/api/jobs/{owners_job.pk}/profile/").status_code == 404  # none yet (or not visible)
    MemoryProfile.record(owners_job, triangular_curve(1e9, 3e9, iteration_s=0.5))
    r = c.get(f"/api/jobs/{owners_job.pk}/profile/")
    assert r.status_code == status
    if status == 200:
        assert r.data["peak_bytes"] == 3_000_000_000 and r.data["curve"]["version"] == 1
        listed = c.get("/api/jobs/").data["results"][0]
        assert listed["profile"]["peak_bytes"] == 3_000_000_000 and "curve" not in listed["profile"]
    else:
        assert b"3000000000" not in r.content


def test_a_placed_job_names_its_device(personas, owners_job, devices, client_for):
    from zico.cluster.models import Placement

    c = client_for(personas.owner)
    assert c.get(f"/api/jobs/{owners_job.pk}/").data["device"] is None
    transition(owners_job, "ready")
    lifecycle.place(devices[1], [owners_job])
    assert c.get(f"/api/jobs/{owners_job.pk}/").data["device"] == devices[1].pk
    assert c.get("/api/jobs/").data["results"][0]["device"] == devices[1].pk


def test_listing_costs_the_same_queries_for_one_job_or_many(personas, client_for):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    c = client_for(personas.owner)

    def queries():
        with CaptureQueriesContext(connection) as ctx:
            assert c.get("/api/jobs/").status_code == 200
        return len(ctx.captured_queries)

    Job.objects.create(tenant=personas.tenant, owner=personas.owner, workload="digits-cnn")
    one = queries()
    for _ in range(5):
        Job.objects.create(tenant=personas.tenant, owner=personas.teammate, workload="digits-cnn")
    assert queries() == one


def test_a_stored_allocator_dict_in_a_failure_reason_reads_as_a_sentence(personas, owners_job, client_for):
    # a reason stored before the web side rewrote them: the worker's Python dict repr of the allocator report
    oom = {"device": 0, "reason": "capacity", "job": owners_job.pk, "requested_bytes": 5 << 20,
           "rounded_bytes": 6 << 20, "allocated_bytes": 15 * GIB, "reserved_bytes": 16 * GIB,
           "budget_bytes": None, "capacity_bytes": 16 * GIB, "detail": None}
    raw = f"OutOfMemoryError: CUDA out of memory (allocator: {oom})"
    Job.objects.filter(pk=owners_job.pk).update(status="failed", failure_reason=raw)
    Event.record(Event.Kind.STATUS_CHANGE, job=owners_job, reason=raw, **{"from": "running", "to": "failed"})
    sentence = (f"OutOfMemoryError: CUDA out of memory (the allocator refused 6.00 MiB for job {owners_job.pk} on "
                "device 0: the device has no more memory (capacity 16.00 GiB) (reserved 16.00 GiB, allocated "
                "15.00 GiB))")
    c = client_for(personas.owner)
    assert c.get(f"/api/jobs/{owners_job.pk}/").data["failure_reason"] == sentence
    assert c.get("/api/jobs/").data["results"][0]["failure_reason"] == sentence  # the list's fast path too
    page = c.get(f"/jobs/{owners_job.pk}/").content.decode()
    assert "the device has no more memory (capacity 16.00 GiB)" in page and "&#x27;reason&#x27;" not in page
    assert "capacity_bytes" not in page  # neither in the head nor in the log's status change


def test_a_missing_or_hidden_job_is_a_404_naming_the_id(personas, owners_job, client_for):
    missing = owners_job.pk + 1000
    r = client_for(personas.owner).get(f"/api/jobs/{missing}/")
    assert r.status_code == 404 and r.data["detail"] == f"no job {missing} among the jobs you can see", r.data
    # another tenant's job reads exactly as a missing one: its existence is not told
    r = client_for(personas.outsider).get(f"/api/jobs/{owners_job.pk}/")
    assert r.status_code == 404 and r.data["detail"] == f"no job {owners_job.pk} among the jobs you can see"
    r = client_for(personas.owner).post(f"/api/jobs/{missing}/cancel/")
    assert r.status_code == 404 and str(missing) in r.data["detail"]
