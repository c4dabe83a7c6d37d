"""lifecycle.place: ready jobs become placed atomically; the co-location policy keeps tenants apart."""
import pytest

from zico.cluster.models import Placement, PlacementError
from zico.jobs.models import Event, Job
from zico.jobs.transitions import IllegalTransition
from zico.jobs import lifecycle


def ready_job(tenant, owner, status="ready"):
    return Job.objects.create(tenant=tenant, owner=owner, workload="digits-cnn", status=status)


def test_it_places_ready_jobs_and_records_events(personas, gpu):
    a, b = ready_job(personas.tenant, personas.owner), ready_job(personas.tenant, personas.teammate)
    p = lifecycle.place(gpu, [a, b], {"predicted_slowdown": {str(a.pk): 1.0, str(b.pk): 1.2}})
    assert set(p.jobs.values_list("pk", flat=True)) == {a.pk, b.pk} and p.is_active
    assert set(Job.objects.filter(pk__in=[a.pk, b.pk]).values_list("status", flat=True)) == {"placed"}
    ev = Event.objects.get(kind="placement")
    assert ev.details["jobs"] == [a.pk, b.pk] and ev.details["shared_with_other_tenants"] is False
    assert ev.details["plan"] == {"predicted_slowdown": {str(a.pk): 1.0, str(b.pk): 1.2}}
    assert Event.objects.filter(kind="status_change", details__to="placed", device=gpu).count() == 2
    assert a.active_placement() == p


def test_a_job_that_is_not_ready_leaves_nothing_written(personas, gpu):
    a, b = ready_job(personas.tenant, personas.owner), ready_job(personas.tenant, personas.owner, "queued")
    events = Event.objects.count()
    with pytest.raises(IllegalTransition):
        lifecycle.place(gpu, [a, b])
    assert not Placement.objects.exists() and Event.objects.count() == events
    assert Job.objects.get(pk=a.pk).status == a.status == "ready"


def test_tenants_share_a_device_only_when_both_allow_it(personas, gpu):
    mine = ready_job(personas.tenant, personas.owner)
    theirs = ready_job(personas.other_tenant, personas.outsider)
    with pytest.raises(PlacementError, match="acme, rival"):
        lifecycle.place(gpu, [mine, theirs])
    personas.tenant.change(allow_cross_tenant_colocation=True)
    with pytest.raises(PlacementError, match="rival"):
        lifecycle.place(gpu, [mine, theirs])
    personas.other_tenant.change(allow_cross_tenant_colocation=True)
    lifecycle.place(gpu, [mine, theirs])
    acme_event = Event.objects.get(kind="placement", tenant=personas.tenant)
    assert acme_event.details["jobs"] == [mine.pk] and acme_event.details["shared_with_other_tenants"] is True
    assert acme_event.details["plan"] is None  # the plan names the other tenant's job


def test_jobs_already_on_the_device_count_for_the_policy(personas, gpu):
    lifecycle.place(gpu, [ready_job(personas.other_tenant, personas.outsider)])
    with pytest.raises(PlacementError, match="acme"):
        lifecycle.place(gpu, [ready_job(personas.tenant, personas.owner)])


def test_an_offline_device_or_no_jobs_is_refused(personas, gpu):
    with pytest.raises(PlacementError, match="jobs"):
        lifecycle.place(gpu, [])
    gpu.status = "offline"
    gpu.save()
    with pytest.raises(PlacementError, match="offline"):
        lifecycle.place(gpu, [ready_job(personas.tenant, personas.owner)])


def test_the_running_jobs_quota_is_enforced(personas, gpu):
    personas.tenant.change(max_running_jobs=2)
    lifecycle.place(gpu, [ready_job(personas.tenant, personas.owner)])
    extra = [ready_job(personas.tenant, personas.owner) for _ in range(2)]
    with pytest.raises(PlacementError, match="quota of 2"):
        lifecycle.place(gpu, extra)
    assert Placement.objects.count() == 1
    lifecycle.place(gpu, extra[:1])
    assert Job.objects.filter(status="placed").count() == 2
