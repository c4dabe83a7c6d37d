"""Limits the API enforces with a message naming the figure: device budgets (floor, total, the running group's
need), job budgets (floor, a known peak), tenant weights, read-only fields of every PATCH."""
import pytest

from placement.curves import triangular_curve
from placement.gating import minimal_feasible_budget
from zico.cluster.models import MIN_BUDGET_BYTES, Device, Placement
from zico.jobs.models import Event, Job, MemoryProfile
from zico.tenants.models import Tenant

from .conftest import GIB
from zico.jobs.lifecycle import transition


def _running_job(tenant, device, peak, persistent, params=None):
    """A job running on ``device`` with a stored curve (``peak``/``persistent`` bytes)."""
    job = Job.objects.create(tenant=tenant, workload="digits-cnn", params=params or {})
    MemoryProfile.record(job, triangular_curve(persistent, peak))
    transition(job, "ready")
    placement = Placement.objects.create(device=device, plan={})
    placement.jobs.add(job)
    transition(job, "placed", device=device)
    transition(job, "running", device=device)
    return job


# -- device budgets --------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [1, MIN_BUDGET_BYTES - 1])
def test_a_device_budget_below_the_floor_is_refused_naming_the_floor(personas, devices, client_for, bad):
    small, _ = devices
    r = client_for(personas.staff).patch(f"/api/devices/{small.pk}/", {"budget_bytes": bad}, format="json")
    assert r.status_code == 400
    assert f"floor of {MIN_BUDGET_BYTES} bytes" in r.data["budget_bytes"][0]
    assert Device.objects.get(pk=small.pk).budget_bytes == 16 * GIB


def test_the_floor_itself_is_accepted(personas, devices, client_for):
    small, _ = devices
    r = client_for(personas.staff).patch(f"/api/devices/{small.pk}/", {"budget_bytes": MIN_BUDGET_BYTES},
                                         format="json")
    assert r.status_code == 200 and r.data["budget_bytes"] == MIN_BUDGET_BYTES


def test_a_budget_above_the_total_names_the_total(personas, devices, client_for):
    small, _ = devices
    r = client_for(personas.staff).patch(f"/api/devices/{small.pk}/", {"budget_bytes": 16 * GIB + 1}, format="json")
    assert r.status_code == 400 and f"device total of {16 * GIB} bytes" in r.data["budget_bytes"][0]


def test_a_budget_below_the_running_groups_need_is_a_409_naming_the_need(personas, devices, client_for):
    small, _ = devices
    a = _running_job(personas.tenant, small, peak=6 * GIB, persistent=2 * GIB)
    b = _running_job(personas.tenant, small, peak=4 * GIB, persistent=1 * GIB)
    mfb = minimal_feasible_budget([triangular_curve(2 * GIB, 6 * GIB), triangular_curve(1 * GIB, 4 * GIB)])
    need = -(-int(mfb) // (1 - small.gate_headroom))  # over the gate's share of the budget
    assert mfb == 7 * GIB
    r = client_for(personas.staff).patch(f"/api/devices/{small.pk}/", {"budget_bytes": int(need) - 1}, format="json")
    assert r.status_code == 409
    message = r.data["budget_bytes"][0]
    assert f"at least {int(need)} bytes" in message and f"jobs {a.pk}, {b.pk}" in message
    assert Device.objects.get(pk=small.pk).budget_bytes == 16 * GIB
    assert not Event.objects.filter(kind="budget_change").exists()
    ok = client_for(personas.staff).patch(f"/api/devices/{small.pk}/", {"budget_bytes": int(need)}, format="json")
    assert ok.status_code == 200 and ok.data["budget_bytes"] == int(need)


def test_the_409s_advice_can_be_followed_through_the_api(personas, devices, client_for):
    small, _ = devices
    job = _running_job(personas.tenant, small, peak=6 * GIB, persistent=2 * GIB)
    staff = client_for(personas.staff)
    r = staff.patch(f"/api/devices/{small.pk}/", {"budget_bytes": 2 * GIB}, format="json")
    assert r.status_code == 409 and 'set the device draining (PATCH {"status": "draining"})' in r.data["budget_bytes"][0]
    # drain and lower in one request: the budget is still refused, so the status is left as it was
    r = staff.patch(f"/api/devices/{small.pk}/", {"status": "draining", "budget_bytes": 2 * GIB}, format="json")
    assert r.status_code == 409 and Device.objects.get(pk=small.pk).status == "online"
    assert not Event.objects.filter(kind="device_status").exists()
    r = staff.patch(f"/api/devices/{small.pk}/", {"status": "draining"}, format="json")
    assert r.status_code == 200 and r.data["status"] == "draining"
    ev = Event.objects.get(kind="device_status", device=small)
    assert ev.details == {"old": "online", "new": "draining"} and ev.actor == personas.staff
    from zico.scheduling.snapshot import take_snapshot
    assert small.pk not in take_snapshot().devices  # no new job is placed on it
    transition(job, "succeeded")
    r = staff.patch(f"/api/devices/{small.pk}/", {"budget_bytes": 2 * GIB, "status": "online"}, format="json")
    assert r.status_code == 200 and (r.data["budget_bytes"], r.data["status"]) == (2 * GIB, "online")


@pytest.mark.parametrize("body, field", [({"status": "offline"}, "status"), ({"status": "lost"}, "status"),
                                         ({}, "budget_bytes"), ({"status": "draining", "name": "x"}, "name")])
def test_a_bad_device_patch_is_a_400_naming_the_field(personas, devices, client_for, body, field):
    small, _ = devices
    r = client_for(personas.staff).patch(f"/api/devices/{small.pk}/", body, format="json")
    assert r.status_code == 400 and field in r.data, r.data
    assert Device.objects.get(pk=small.pk).status == "online"


def test_an_offline_device_cannot_be_drained_or_set_online_by_hand(personas, devices, client_for):
    small, _ = devices
    Device.objects.filter(pk=small.pk).update(status="offline")  # its worker was lost
    for status in ("draining", "online"):
        r = client_for(personas.staff).patch(f"/api/devices/{small.pk}/", {"status": status}, format="json")
        assert r.status_code == 409 and "offline" in r.data["status"][0]
    assert Device.objects.get(pk=small.pk).status == "offline"


@pytest.mark.parametrize("who", ["owner", "admin", "teammate", "viewer", "outsider"])
def test_tenant_roles_cannot_drain_a_device(personas, devices, client_for, who):
    small, _ = devices
    r = client_for(getattr(personas, who)).patch(f"/api/devices/{small.pk}/", {"status": "draining"}, format="json")
    assert r.status_code == 403 and Device.objects.get(pk=small.pk).status == "online"


def test_jobs_that_have_ended_do_not_hold_the_budget_up(personas, devices, client_for):
    small, _ = devices
    job = _running_job(personas.tenant, small, peak=12 * GIB, persistent=2 * GIB)
    transition(job, "succeeded")
    r = client_for(personas.staff).patch(f"/api/devices/{small.pk}/", {"budget_bytes": GIB}, format="json")
    assert r.status_code == 200


# -- job budgets --------------------------------------------------------------------------------
def test_a_job_budget_below_the_floor_is_refused(personas, devices, client_for, row_counts):
    before = row_counts()
    r = client_for(personas.teammate).post("/api/jobs/", {"workload": "digits-cnn", "budget_bytes": 1},
                                           format="json")
    assert r.status_code == 400 and f"floor of {MIN_BUDGET_BYTES}" in r.data["budget_bytes"][0]
    assert row_counts() == before


def _profiled_earlier_job(personas, client_for, peak):
    """An earlier digits-cnn job (default params) whose stored profile has ``peak`` bytes."""
    r = client_for(personas.teammate).post("/api/jobs/", {"workload": "digits-cnn"}, format="json")
    assert r.status_code == 201
    earlier = Job.objects.get(pk=r.data["id"])
    MemoryProfile.record(earlier, triangular_curve(peak // 4, peak))
    return earlier


def test_a_job_whose_known_peak_exceeds_every_device_budget_is_refused_at_submit(personas, devices, client_for):
    earlier = _profiled_earlier_job(personas, client_for, peak=100 * GIB)  # the largest budget is 72 GiB
    r = client_for(personas.teammate).post("/api/jobs/", {"workload": "digits-cnn"}, format="json")
    assert r.status_code == 400
    message = r.data["params"][0]
    assert f"needs ≥ {100 * GIB} bytes" in message and f"the largest device budget is {72 * GIB} bytes" in message
    assert f"job {earlier.pk}" in message
    assert Job.objects.count() == 1


def test_a_job_whose_known_peak_exceeds_its_own_budget_is_refused_at_submit(personas, devices, client_for):
    _profiled_earlier_job(personas, client_for, peak=2 * GIB)
    r = client_for(personas.teammate).post("/api/jobs/", {"workload": "digits-cnn", "budget_bytes": GIB},
                                           format="json")
    assert r.status_code == 400 and f"needs ≥ {2 * GIB} bytes" in r.data["budget_bytes"][0]


def test_other_params_are_not_judged_by_an_earlier_jobs_peak(personas, devices, client_for):
    _profiled_earlier_job(personas, client_for, peak=100 * GIB)
    r = client_for(personas.teammate).post("/api/jobs/", {"workload": "digits-cnn", "params": {"batch_size": 8}},
                                           format="json")
    assert r.status_code == 201


def test_a_known_peak_that_fits_is_accepted(personas, devices, client_for):
    _profiled_earlier_job(personas, client_for, peak=2 * GIB)
    r = client_for(personas.teammate).post("/api/jobs/", {"workload": "digits-cnn"}, format="json")
    assert r.status_code == 201


# -- tenants ----------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -1, 1e-4, 1000.5, 1e308])
def test_a_share_weight_outside_its_range_is_refused_naming_the_bound(personas, client_for, bad):
    r = client_for(personas.staff).patch("/api/tenants/acme/", {"share_weight": bad}, format="json")
    assert r.status_code == 400 and "share_weight" in r.data
    assert ("1000" in str(r.data["share_weight"])) or ("0.001" in str(r.data["share_weight"]))
    assert Tenant.objects.get(slug="acme").share_weight == 1.0


@pytest.mark.parametrize("good", [0.001, 2.5, 1000])
def test_a_share_weight_inside_its_range_is_accepted(personas, client_for, good):
    r = client_for(personas.staff).patch("/api/tenants/acme/", {"share_weight": good}, format="json")
    assert r.status_code == 200 and r.data["share_weight"] == good


@pytest.mark.parametrize("field", ["slug", "created_at", "my_role", "running_jobs", "budgeted_bytes"])
def test_a_read_only_tenant_field_in_a_patch_is_a_400_like_the_device_patch(personas, client_for, field):
    r = client_for(personas.owner).patch("/api/tenants/acme/", {field: "x", "name": "New"}, format="json")
    assert r.status_code == 400 and r.data[field][0].startswith("read-only")
    assert Tenant.objects.get(slug="acme").name == "Acme"  # nothing applied


def test_an_unknown_tenant_field_is_a_400(personas, client_for):
    r = client_for(personas.owner).patch("/api/tenants/acme/", {"colour": "red"}, format="json")
    assert r.status_code == 400 and r.data["colour"][0].startswith("unknown field")


def test_a_read_only_device_field_is_a_400(personas, devices, client_for):
    small, _ = devices
    r = client_for(personas.staff).patch(f"/api/devices/{small.pk}/", {"budget_bytes": GIB, "total_bytes": GIB},
                                         format="json")
    assert r.status_code == 400 and r.data["total_bytes"][0].startswith("read-only")
    assert Device.objects.get(pk=small.pk).budget_bytes == 16 * GIB


def test_a_read_only_member_field_in_a_patch_is_a_400(personas, client_for):
    r = client_for(personas.owner).patch("/api/tenants/acme/members/teammate/", {"role": "admin", "username": "x"},
                                         format="json")
    assert r.status_code == 400 and r.data["username"][0].startswith("read-only")
    assert personas.tenant.role_of(personas.teammate) == "member"
