"""A catalog job's profile run obeys the tenants' co-location rule like any placement
(placement.tenancy.refusing_tenants): it never goes to a device holding a job of a tenant that refuses
to share with its tenant, or that its tenant refuses; with no such device it waits saying so, never "no
device is online" while one is. Real PostgreSQL and the real Redis broker."""
import uuid

from zico.jobs import lifecycle
from zico.jobs.models import Job
from zico.scheduling.service import Scheduler
from zico.tenants.models import Tenant


def _tenant(name, **kw):
    return Tenant.objects.create(name=name, slug=f"{name}-{uuid.uuid4().hex[:6]}", max_running_jobs=100, **kw)


def _running_on(device, job):
    lifecycle.place(device, [job])
    lifecycle.start(job, device)


def test_a_profile_run_avoids_the_device_of_a_tenant_that_refuses_sharing(cluster, make_job, queued_messages):
    loner = _tenant("loner")  # allows no other tenant beside its jobs
    mine = _tenant("mine", allow_cross_tenant_colocation=True)
    _running_on(cluster[0], make_job(loner))
    for _ in range(2):  # the other device is busier (the least-loaded rule alone picked cluster[0])
        _running_on(cluster[1], make_job(mine, curve=None))
    job = make_job(mine, curve=False, status="queued")
    res = Scheduler().run_round()
    job.refresh_from_db()
    assert res.profiling == [job.pk] and job.profiling_device_id == cluster[1].pk
    assert [a[0] for _, a in queued_messages(cluster[1].queue)] == [job.pk]
    assert queued_messages(cluster[0].queue) == []


def test_a_tenant_that_refuses_sharing_is_not_profiled_beside_another(cluster, make_job, queued_messages):
    sharing = _tenant("sharing", allow_cross_tenant_colocation=True)
    loner = _tenant("loner")
    for device in cluster:
        _running_on(device, make_job(sharing))
    job = make_job(loner, curve=False, status="queued")
    res = Scheduler().run_round()
    job.refresh_from_db()
    assert res.profiling == [] and job.status == "queued"
    assert job.waiting_kind == "tenants_do_not_share"
    assert job.waiting_reason == (f"no device to profile it on: every online device ({cluster[0]}, {cluster[1]}) "
                                  "runs a job of another tenant and this job's tenant does not allow sharing a "
                                  "device with other tenants")
    assert "online" not in job.waiting_reason.replace("every online device", "")
    assert queued_messages(cluster[0].queue) + queued_messages(cluster[1].queue) == []


def test_two_refusing_tenants_profiled_in_one_round_get_devices_of_their_own(cluster, make_job, queued_messages):
    a, b, c = _tenant("a"), _tenant("b"), _tenant("c")
    jobs = [make_job(t, curve=False, status="queued") for t in (a, b, c)]
    res = Scheduler().run_round()
    devices = {j.pk: Job.objects.get(pk=j.pk).profiling_device_id for j in jobs}
    assert sorted(res.profiling) == sorted(j.pk for j in jobs[:2])
    assert devices[jobs[0].pk] != devices[jobs[1].pk] and devices[jobs[2].pk] is None
    third = Job.objects.get(pk=jobs[2].pk)
    assert third.waiting_kind == "tenants_do_not_share"
    assert "the other tenant" not in third.waiting_reason  # its own tenant refuses
    for other in jobs[:2]:
        assert str(other.pk) not in third.waiting_reason.replace(str(cluster[0]), "").replace(str(cluster[1]), "")


def test_a_catalog_profile_run_of_a_refusing_tenant_keeps_another_tenants_profile_away(cluster, make_job):
    """The catalog job profiling on a device has no placement; its tenant still counts there."""
    loner = _tenant("loner")
    mine = _tenant("mine", allow_cross_tenant_colocation=True)
    first = make_job(loner, curve=False, status="queued")
    Scheduler().run_round()
    first.refresh_from_db()
    assert first.status == "profiling"
    second = make_job(mine, curve=False, status="queued")
    Scheduler().run_round()
    second.refresh_from_db()
    assert second.status == "profiling" and second.profiling_device_id != first.profiling_device_id


# -- the reverse: placements see the catalog profile runs (Note [Profile runs are tenants on their device]) --------
def _profiling_on(device, tenant, make_job):
    """A catalog job of ``tenant`` being profiled on ``device`` (a profile_job run: no placement)."""
    job = make_job(tenant, curve=False, status="queued")
    lifecycle.profile([job], device)
    return job


def _offline(device):
    from zico.cluster.models import Device

    Device.objects.filter(pk=device.pk).update(status="offline")


def test_a_refusing_tenants_profile_run_keeps_another_tenants_ready_job_off_its_device(cluster, make_job):
    loner = _tenant("loner")
    mine = _tenant("mine", allow_cross_tenant_colocation=True)
    _profiling_on(cluster[0], loner, make_job)
    _offline(cluster[1])
    job = make_job(mine)
    res = Scheduler().run_round()
    job.refresh_from_db()
    assert res.placed == {} and job.status == "ready"
    assert job.waiting_kind == "tenants_do_not_share"
    assert job.waiting_reason == (f"waiting for device {cluster[0]}: it is profiling a job of another tenant and "
                                  "the other tenant does not allow sharing a device with other tenants")


def test_another_tenants_ready_job_goes_to_a_device_without_the_refusing_tenants_profile_run(cluster, make_job):
    loner = _tenant("loner")
    mine = _tenant("mine", allow_cross_tenant_colocation=True)
    _profiling_on(cluster[0], loner, make_job)  # the first device in the policy's order of equal empty ones
    job = make_job(mine)
    res = Scheduler().run_round()
    assert list(res.placed) == [job.pk]
    assert Job.objects.get(pk=job.pk).active_placement().device_id == cluster[1].pk


def test_a_refusing_tenants_ready_job_is_not_placed_beside_another_tenants_profile_run(cluster, make_job):
    sharing = _tenant("sharing", allow_cross_tenant_colocation=True)
    loner = _tenant("loner")
    _profiling_on(cluster[0], sharing, make_job)
    _offline(cluster[1])
    job = make_job(loner)
    res = Scheduler().run_round()
    job.refresh_from_db()
    assert res.placed == {} and job.status == "ready"
    assert job.waiting_reason == (f"waiting for device {cluster[0]}: it is profiling a job of another tenant and "
                                  "this job's tenant does not allow sharing a device with other tenants")


def test_a_tenants_own_profile_run_does_not_keep_its_ready_job_away(cluster, make_job):
    loner = _tenant("loner")
    _profiling_on(cluster[0], loner, make_job)
    _offline(cluster[1])
    job = make_job(loner)
    assert list(Scheduler().run_round().placed) == [job.pk]


def test_the_locked_recheck_counts_a_profile_run_too(cluster, make_job):
    """lifecycle.place_many re-checks under its locks what the policy decided on a snapshot."""
    import pytest

    from zico.cluster.models import PlacementError

    loner = _tenant("loner")
    mine = _tenant("mine", allow_cross_tenant_colocation=True)
    _profiling_on(cluster[0], loner, make_job)
    with pytest.raises(PlacementError, match="do not allow sharing"):
        lifecycle.place(cluster[0], [make_job(mine)])
    assert lifecycle.place(cluster[1], [make_job(mine)]).device_id == cluster[1].pk
