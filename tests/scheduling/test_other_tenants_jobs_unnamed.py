"""What a tenant reads about its job never names another tenant's job: its waiting reason and waiting Events
(Note [A waiting Event names no other tenant's job] in zico.scheduling.waiting), the wait for an identical job's
profile, the curve reused from an identical job, the refusal at submission. Read through the API as a member
of the tenant, against the real PostgreSQL and Redis."""
import re
import uuid

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from placement.curves import triangular_curve
from zico.jobs.lifecycle import transition
from zico.jobs.models import Job, MemoryProfile
from zico.scheduling.service import Scheduler
from zico.tenants.models import Role, Tenant

GiB = 1 << 30
PARAMS = {"iterations": 50, "batch_size": 48}  # identical jobs (the defaults are filled in at submission only)


def _tenant(name, **kw):
    return Tenant.objects.create(name=name, slug=f"{name}-{uuid.uuid4().hex[:6]}", max_running_jobs=100, **kw)


def _member(tenant) -> APIClient:
    user = get_user_model().objects.create_user(f"member-{tenant.slug}")
    tenant.add_member(user, Role.MEMBER)
    client = APIClient()
    client.force_login(user)
    return client


def _named_jobs(body) -> set[int]:
    """Every job id a response body names: the values of keys naming jobs (``job``, ``job_ids``,
    ``slowed_job_id``, ``profile_of_job``), and "job 12" in any text."""
    found: set[int] = set()

    def walk(x, key=""):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(v, k)
        elif isinstance(x, list):
            for v in x:
                walk(v, key)
        elif isinstance(x, str):
            found.update(int(n) for n in re.findall(r"\bjobs? (\d+)\b", x))
        elif isinstance(x, int) and not isinstance(x, bool) and re.fullmatch(r"(\w+_)?job(_ids?)?", key):
            found.add(x)

    walk(body)
    return found


def _seen_by_member(client, job) -> set[int]:
    detail = client.get(f"/api/jobs/{job.pk}/")
    events = client.get(f"/api/jobs/{job.pk}/events/")
    assert detail.status_code == 200 and events.status_code == 200, (detail.content, events.content)
    return _named_jobs(detail.json()) | _named_jobs(events.json())


def test_a_tenant_waiting_beside_another_tenants_jobs_never_reads_their_ids(cluster, make_job):
    loner, mine = _tenant("loner"), _tenant("mine", allow_cross_tenant_colocation=True)
    theirs = [make_job(loner) for _ in cluster]  # one 10 GiB job on each 16 GiB device
    Scheduler().run_round()
    assert Job.objects.filter(pk__in=[j.pk for j in theirs], status="placed").count() == 2
    job = make_job(mine)
    assert job.pk not in Scheduler().run_round().placed
    job.refresh_from_db()
    assert job.waiting_kind == "tenants_do_not_share"
    client = _member(mine)
    seen = _seen_by_member(client, job)
    assert job.pk in seen and not seen & {j.pk for j in theirs}, seen
    event = job.events.get(kind="waiting")
    assert event.details["job_ids"] == [] and event.details["other_tenant_jobs"] == 1


def test_the_wait_for_another_tenants_identical_profile_does_not_name_it(cluster):
    a, b = _tenant("a", allow_cross_tenant_colocation=True), _tenant("b", allow_cross_tenant_colocation=True)
    theirs = Job.objects.create(tenant=a, workload="digits-cnn", params=PARAMS)
    Scheduler().run_round()
    assert Job.objects.get(pk=theirs.pk).status == "profiling"
    job = Job.objects.create(tenant=b, workload="digits-cnn", params=PARAMS)
    Scheduler().run_round()
    job.refresh_from_db()
    assert job.waiting_kind == "identical_profiling"
    assert job.waiting_reason == ("waiting for the profile of an identical job of another tenant (same workload "
                                  "and params): it is not profiled twice")
    seen = _seen_by_member(_member(b), job)
    assert theirs.pk not in seen, seen
    own = Job.objects.create(tenant=a, workload="digits-cnn", params=PARAMS)  # its own tenant's: named
    Scheduler().run_round()
    assert theirs.pk in _seen_by_member(_member(a), own)


def test_a_curve_reused_from_another_tenants_job_does_not_name_it(cluster):
    a, b = _tenant("a"), _tenant("b")
    theirs = Job.objects.create(tenant=a, workload="digits-cnn", params=PARAMS)
    MemoryProfile.record(theirs, triangular_curve(GiB, 3 * GiB, 0.2))
    transition(theirs, "ready")
    job = Job.objects.create(tenant=b, workload="digits-cnn", params=PARAMS)
    assert job.pk in Scheduler().run_round().ready
    seen = _seen_by_member(_member(b), job)
    assert theirs.pk not in seen, seen
    assert job.events.get(kind="status_change", details__to="ready").details["profile_of_another_tenant"] is True


@pytest.mark.parametrize("same_tenant", [False, True])
def test_a_refusal_at_submission_names_only_the_tenants_own_job(cluster, same_tenant):
    from zico_workloads.catalog import validate_params

    a = _tenant("a")
    b = a if same_tenant else _tenant("b")
    theirs = Job.objects.create(tenant=a, workload="digits-cnn", params=validate_params("digits-cnn", PARAMS))
    MemoryProfile.record(theirs, triangular_curve(GiB, 40 * GiB, 0.2))  # over every 16 GiB device
    r = _member(b).post("/api/jobs/", {"tenant": b.slug, "workload": "digits-cnn", "params": PARAMS}, format="json")
    assert r.status_code == 400, r.content
    assert (theirs.pk in _named_jobs(r.json())) is same_tenant, r.json()

