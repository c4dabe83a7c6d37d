"""Every job the round leaves waiting says why, with the figures, through GET /api/jobs/{id}/ and on
the job page; one ``waiting`` Event per change of reason; cleared once the job is placed."""
import dataclasses
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from rest_framework.test import APIClient

from placement.curves import triangular_curve
from zico.cluster.models import Device
from zico.jobs.models import Event
from zico.scheduling.service import Scheduler
from zico.tenants.models import Tenant

GiB = 1 << 30


def _curve(peak_gib=10, share=None):
    c = triangular_curve(2 * GiB, peak_gib * GiB, 0.2)
    return dataclasses.replace(c, meta={"compute_share": share}) if share else c


@pytest.fixture
def api(db):
    """GET a job through the API as cluster staff (who see every tenant's jobs)."""
    client = APIClient()
    client.force_login(get_user_model().objects.create_user(f"ops-{uuid.uuid4().hex[:6]}", is_staff=True))

    def get(job):
        r = client.get(f"/api/jobs/{job.pk}/")
        assert r.status_code == 200, r.content
        return r.json()

    get.client = client
    return get


def _offline(*devices):
    Device.objects.filter(pk__in=[d.pk for d in devices]).update(status="offline")


def _tenant(name, **kw):
    return Tenant.objects.create(name=name, slug=f"{name}-{uuid.uuid4().hex[:6]}", max_running_jobs=100, **kw)


def _waiting_events(job):
    return list(Event.objects.filter(job=job, kind=Event.Kind.WAITING).order_by("time", "id"))


def test_over_the_slowdown_limit_names_the_device_the_job_slowed_and_both_factors(cluster, tenant, make_job, api):
    gpu0, gpu1 = cluster
    _offline(gpu1)
    first = make_job(tenant, curve=_curve(share=0.86))
    assert first.pk in Scheduler().run_round().placed
    second = make_job(tenant, curve=_curve(share=0.86))
    res = Scheduler().run_round()
    assert second.pk not in res.placed
    body = api(second)
    assert body["status"] == "ready" and body["waiting_kind"] == "slowdown_limit"
    assert body["waiting_reason"] == (f"waiting for device {gpu0}: co-locating with job {first.pk} would slow "
                                      f"job {first.pk} and this job by 1.72× (limit 1.6×)")
    assert body["waiting_since"] is not None
    # the job page shows it, and its log has it once however many rounds keep it
    Scheduler().run_round()
    page = api.client.get(f"/jobs/{second.pk}/").content.decode()
    assert f"Waiting: <span id=\"job-waiting-reason\">{body['waiting_reason']}</span>" in page
    assert [e.details["reason"] for e in _waiting_events(second)] == [body["waiting_reason"]]


def test_the_slowdown_limit_is_the_setting(cluster, tenant, make_job, api, settings):
    _offline(cluster[1])
    make_job(tenant, curve=_curve(share=0.86))
    Scheduler().run_round()
    second = make_job(tenant, curve=_curve(share=0.86))
    settings.ZICO_MAX_SLOWDOWN = 1.8
    assert second.pk in Scheduler().run_round().placed
    assert api(second)["waiting_reason"] == ""


def test_the_group_size_limit_is_the_setting(cluster, tenant, make_job, api, settings):
    gpu0, gpu1 = cluster
    _offline(gpu1)
    jobs = [make_job(tenant, curve=_curve(peak_gib=4, share=0.3)) for _ in range(3)]
    placed = Scheduler().run_round().placed  # the default, ZICO_MAX_GROUP=2
    assert jobs[0].pk in placed and jobs[1].pk in placed and jobs[2].pk not in placed
    assert api(jobs[2])["waiting_reason"] == f"waiting for device {gpu0}: it already runs 2 jobs (at most 2 per device)"
    settings.ZICO_MAX_GROUP = 3
    assert jobs[2].pk in Scheduler().run_round().placed
    for job in jobs:  # all three on the one online device
        job.refresh_from_db()
        assert job.active_placement().device_id == gpu0.pk
    assert api(jobs[2])["waiting_reason"] == ""


@pytest.mark.parametrize("raw", ["0.99", "fast", "inf", "-2"])
def test_a_bad_slowdown_limit_is_refused_naming_the_variable(monkeypatch, raw):
    from zico import settings as zico_settings

    monkeypatch.setenv("ZICO_MAX_SLOWDOWN", raw)
    with pytest.raises(ImproperlyConfigured, match="ZICO_MAX_SLOWDOWN"):
        zico_settings._slowdown_limit("ZICO_MAX_SLOWDOWN", 1.6)
    monkeypatch.setenv("ZICO_MAX_SLOWDOWN", "1.0")
    assert zico_settings._slowdown_limit("ZICO_MAX_SLOWDOWN", 1.6) == 1.0


def test_no_online_device_big_enough_gives_the_peak_the_largest_budget_and_the_device_that_could(
        cluster, tenant, make_job, api):
    node = cluster[0].node
    big = Device.objects.create(node=node, index=7, kind="gpu", name="Test GPU", uuid=f"GPU-{node.host}-7",
                                total_bytes=40 * GiB, budget_bytes=32 * GiB, status="draining")
    job = make_job(tenant, curve=_curve(peak_gib=20))
    assert job.pk not in Scheduler().run_round().placed
    body = api(job)
    assert body["waiting_kind"] == "device_offline"
    assert body["waiting_reason"] == (f"no online device can hold its 20 GiB peak (largest budget 16 GiB); "
                                      f"device {big} can, but is draining")


def test_no_room_names_the_device_budget_that_would_take_the_group_not_the_gates_share(cluster, tenant, make_job,
                                                                                        api):
    """Note [A budget reason names a device budget]: the pair needs 15 GiB planned against the gate's share of a
    device budget (16 GiB × (1 − 0.1 headroom) = 14.4 GiB); the user reads the device budget that would take it,
    15 GiB / 0.9, never the 14.4 GiB "group budget"."""
    gpu0, gpu1 = cluster
    _offline(gpu1)
    curve = dataclasses.replace(triangular_curve(5 * GiB, 10 * GiB, 0.2), meta={"compute_share": 0.3})
    first = make_job(tenant, curve=curve)
    assert first.pk in Scheduler().run_round().placed
    second = make_job(tenant, curve=curve)
    assert second.pk not in Scheduler().run_round().placed
    body = api(second)
    assert body["waiting_kind"] == "no_room"
    assert body["waiting_reason"] == (f"waiting for device {gpu0}: beside job {first.pk} it needs a device budget of "
                                      "at least 16.7 GiB; this device's is 16 GiB, so it waits until the jobs there "
                                      "end")
    assert [e.details["reason"] for e in _waiting_events(second)] == [body["waiting_reason"]]


def test_a_spent_quota_gives_the_count_and_the_limit(cluster, make_job, api):
    tenant = Tenant.objects.create(name="Small", slug=f"small-{uuid.uuid4().hex[:6]}", max_running_jobs=2)
    jobs = [make_job(tenant) for _ in range(3)]
    res = Scheduler().run_round()
    waiting = [j for j in jobs if j.pk not in res.placed]
    assert len(res.placed) == 2 and len(waiting) == 1
    body = api(waiting[0])
    assert (body["waiting_kind"], body["waiting_reason"]) == ("quota", "tenant quota: 2 of 2 running jobs")


def test_tenants_that_do_not_share_say_so_without_naming_the_other_job(cluster, make_job, api):
    _offline(cluster[1])
    private, open_ = _tenant("private"), _tenant("open", allow_cross_tenant_colocation=True)
    theirs = make_job(private)
    Scheduler().run_round()
    mine = make_job(open_)
    assert mine.pk not in Scheduler().run_round().placed
    body = api(mine)
    assert body["waiting_kind"] == "tenants_do_not_share"
    assert body["waiting_reason"] == (f"waiting for device {cluster[0]}: it runs a job of another tenant and the "
                                      "other tenant does not allow sharing a device with other tenants")
    assert str(theirs.pk) not in body["waiting_reason"].replace(str(cluster[0]), "")


def test_no_device_online_for_a_ready_job_and_for_one_to_profile(cluster, tenant, make_job, api):
    _offline(*cluster)
    ready = make_job(tenant)
    unprofiled = make_job(tenant, curve=False, status="queued")
    Scheduler().run_round()
    body = api(ready)
    assert body["waiting_kind"] == "device_offline"
    assert body["waiting_reason"] == (f"no device is online; device {cluster[0]} can hold its 10 GiB peak "
                                      "but is offline")
    body = api(unprofiled)
    assert (body["status"], body["waiting_kind"]) == ("queued", "no_device")
    assert body["waiting_reason"] == (f"no device is online to profile it on ({cluster[0]} offline, "
                                      f"{cluster[1]} offline)")


def test_the_reason_is_cleared_when_the_job_is_placed(cluster, tenant, make_job, api):
    _offline(cluster[1])
    make_job(tenant, curve=_curve(share=0.86))
    Scheduler().run_round()
    second = make_job(tenant, curve=_curve(share=0.86))
    Scheduler().run_round()
    assert api(second)["waiting_reason"]
    Device.objects.filter(pk=cluster[1].pk).update(status="online")
    assert second.pk in Scheduler().run_round().placed
    body = api(second)
    assert (body["status"], body["waiting_reason"], body["waiting_kind"], body["waiting_since"]) == \
        ("placed", "", "", None)
    page = api.client.get(f"/jobs/{second.pk}/").content.decode()
    assert 'id="job-waiting" role="status" hidden' in page


def test_the_reason_follows_the_situation_with_one_event_per_change(cluster, make_job, api):
    tenant = Tenant.objects.create(name="Small", slug=f"small-{uuid.uuid4().hex[:6]}", max_running_jobs=2)
    jobs = [make_job(tenant) for _ in range(3)]
    res = Scheduler().run_round()
    job = next(j for j in jobs if j.pk not in res.placed)
    before = api(job)
    assert before["waiting_reason"] == "tenant quota: 2 of 2 running jobs"
    Scheduler().run_round()  # nothing changed: no new event
    assert len(_waiting_events(job)) == 1
    # the quota is raised, but the devices have gone offline: the reason moves on
    Tenant.objects.filter(pk=tenant.pk).update(max_running_jobs=3)
    _offline(*cluster)
    Scheduler().run_round()
    after = api(job)
    assert after["status"] == "ready" and after["waiting_kind"] == "device_offline"
    assert after["waiting_since"] == before["waiting_since"]
    assert [e.details["kind"] for e in _waiting_events(job)] == ["quota", "device_offline"]
