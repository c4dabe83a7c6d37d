"""lifecycle.place_many: the checks and records of lifecycle.place for many groups at once; a
refused group writes nothing while the others go ahead; groups earlier in the batch count for
the tenant rules of later ones; a query count that does not grow with the number of groups."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from zico.cluster.models import Device, Placement, PlacementError
from zico.jobs.models import Event, Job
from zico.jobs.transitions import IllegalTransition
from zico.jobs.lifecycle import transition
from zico.jobs import lifecycle


def ready_job(tenant, owner, status="ready"):
    return Job.objects.create(tenant=tenant, owner=owner, workload="digits-cnn", status=status)


@pytest.fixture
def gpus(gpu):
    """Four GPUs on one node (the ``gpu`` fixture's first)."""
    return [gpu] + [Device.objects.create(node=gpu.node, index=i, kind="gpu", name="Test GPU", uuid=f"GPU-test-{i}",
                                          total_bytes=16 << 30, budget_bytes=16 << 30) for i in range(1, 4)]


def test_it_opens_every_group_with_the_records_of_open(personas, gpus):
    a, b, c = (ready_job(personas.tenant, personas.owner) for _ in range(3))
    plans = [{"job_ids": [a.pk, b.pk], "mode": "shift"}, {"job_ids": [c.pk], "mode": "independent"}]
    p1, p2 = lifecycle.place_many([(gpus[0], [a, b], plans[0]), (gpus[1], [c], plans[1])])
    assert isinstance(p1, Placement) and isinstance(p2, Placement)
    assert (p1.device, p1.plan, p2.device, p2.plan) == (gpus[0], plans[0], gpus[1], plans[1])
    assert set(p1.jobs.values_list("pk", flat=True)) == {a.pk, b.pk} and list(p2.jobs.all()) == [c]
    assert a.status == "placed" and set(Job.objects.values_list("status", flat=True)) == {"placed"}
    for job, p in ((a, p1), (b, p1), (c, p2)):
        ev = Event.objects.get(kind="status_change", job=job)
        assert ev.device == p.device and ev.details == {"from": "ready", "to": "placed", "reason": "",
                                                        "placement": p.pk}
        assert job.active_placement() == p
    ev = Event.objects.get(kind="placement", device=gpus[0])
    assert ev.tenant == personas.tenant and ev.details == {"placement": p1.pk, "jobs": [a.pk, b.pk],
                                                           "shared_with_other_tenants": False, "plan": plans[0]}
    assert Event.objects.filter(kind="placement").count() == 2


def test_a_refused_group_writes_nothing_and_the_others_go_ahead(personas, gpus):
    ok = ready_job(personas.tenant, personas.owner)
    gone = ready_job(personas.tenant, personas.owner)
    transition(gone, "cancelled", reason="user")
    mate = ready_job(personas.tenant, personas.owner)
    gpus[2].status = "offline"
    gpus[2].save()
    late = ready_job(personas.tenant, personas.owner)
    got = lifecycle.place_many([(gpus[0], [ok], {}), (gpus[1], [mate, gone], {}), (gpus[2], [late], {})])
    assert isinstance(got[0], Placement)
    assert isinstance(got[1], IllegalTransition) and f"job {gone.pk}" in str(got[1])
    assert isinstance(got[2], PlacementError) and "offline" in str(got[2])
    assert Placement.objects.count() == 1
    assert Job.objects.get(pk=mate.pk).status == mate.status == "ready"
    assert Job.objects.get(pk=late.pk).status == "ready"
    assert Event.objects.filter(kind="placement").count() == 1
    assert Event.objects.filter(kind="status_change", details__to="placed").count() == 1


def test_tenants_meet_only_when_both_allow_it_counting_groups_earlier_in_the_batch(personas, gpus):
    lifecycle.place(gpus[0], [ready_job(personas.other_tenant, personas.outsider)])
    mine = [ready_job(personas.tenant, personas.owner) for _ in range(2)]
    theirs = ready_job(personas.other_tenant, personas.outsider)
    got = lifecycle.place_many([(gpus[0], [mine[0]], {}),          # rival is already there
                               (gpus[1], [mine[1]], {}),
                               (gpus[1], [theirs], {})])          # acme was just put there
    assert isinstance(got[0], PlacementError) and "acme, rival" in str(got[0])
    assert isinstance(got[1], Placement) and isinstance(got[2], PlacementError)
    personas.tenant.change(allow_cross_tenant_colocation=True)
    personas.other_tenant.change(allow_cross_tenant_colocation=True)
    [shared] = lifecycle.place_many([(gpus[1], [theirs], {"mode": "x"})])
    ev = Event.objects.get(kind="placement", tenant=personas.other_tenant, details__placement=shared.pk)
    assert ev.details["shared_with_other_tenants"] is True and ev.details["plan"] is None


def test_the_running_jobs_quota_counts_groups_earlier_in_the_batch(personas, gpus):
    personas.tenant.change(max_running_jobs=3)
    lifecycle.place(gpus[0], [ready_job(personas.tenant, personas.owner)])
    jobs = [ready_job(personas.tenant, personas.owner) for _ in range(4)]
    got = lifecycle.place_many([(gpus[1], jobs[:2], {}), (gpus[2], jobs[2:3], {}), (gpus[3], jobs[3:], {})])
    assert isinstance(got[0], Placement)
    assert all(isinstance(g, PlacementError) and "quota of 3" in str(g) for g in got[1:])
    assert Job.objects.filter(tenant=personas.tenant, status="placed").count() == 3


def test_it_refuses_a_job_in_two_groups_and_empty_groups(personas, gpus):
    job = ready_job(personas.tenant, personas.owner)
    with pytest.raises(ValueError, match="more than one group"):
        lifecycle.place_many([(gpus[0], [job], {}), (gpus[1], [job], {})])
    [err] = lifecycle.place_many([(gpus[0], [], {})])
    assert isinstance(err, PlacementError) and str(err).startswith("jobs:")
    assert not Placement.objects.exists() and Job.objects.get(pk=job.pk).status == "ready"


def test_the_query_count_does_not_grow_with_the_number_of_groups(personas, gpus):
    personas.tenant.change(max_running_jobs=100)
    counts = []
    for n in (1, 4):
        groups = [(gpus[i], [ready_job(personas.tenant, personas.owner) for _ in range(2)], {}) for i in range(n)]
        with CaptureQueriesContext(connection) as q:
            got = lifecycle.place_many(groups)
        assert all(isinstance(p, Placement) for p in got)
        counts.append(len(q.captured_queries))
    assert counts[0] == counts[1]
