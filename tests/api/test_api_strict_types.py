"""Loose input the API used to coerce: budget_bytes and priority take JSON integers only (no strings, floats,
booleans), a number no bigint holds says "out of range"; a device PATCH names read-only and unknown fields;
a device budget of 0 is refused in the API and in the admin (draining is the device status)."""
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from zico.cluster.models import BudgetError, Device
from zico.jobs.models import Event

GIB = 1 << 30
SPEC = {"workload": "digits-cnn", "params": {"batch_size": 8, "iterations": 5}}


@pytest.mark.parametrize("field, value, message", [
    ("budget_bytes", "1000", "expected an integer, got the string '1000'"),
    ("budget_bytes", 1e3, "expected an integer, got the number 1000.0"),
    ("budget_bytes", True, "expected an integer, got true"),
    ("budget_bytes", [1000], "expected an integer, got a JSON array"),
    ("budget_bytes", 1e30, "out of range: 1e+30"),
    ("budget_bytes", 10**30, "out of range: 1e+30"),
    ("priority", "5", "expected an integer, got the string '5'"),
    ("priority", 10**20, "out of range: 1e+20 is more than 100"),  # its own bound, not the 64-bit one
    ("priority", -1e30, "out of range: -1e+30 is less than -100"),
])
def test_it_refuses_a_non_integer_naming_the_field(client_for, personas, devices, row_counts, field, value, message):
    before = row_counts()
    r = client_for(personas.owner).post("/api/jobs/", {**SPEC, field: value}, format="json")
    assert r.status_code == 400, r.content
    assert r.json() == {field: [r.json()[field][0]]} and r.json()[field][0].startswith(message)
    assert row_counts() == before


def test_a_json_integer_budget_is_accepted(client_for, personas, devices):
    r = client_for(personas.owner).post("/api/jobs/", {**SPEC, "budget_bytes": GIB}, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["budget_bytes"] == GIB


@pytest.mark.parametrize("field, message", [("total_bytes", "read-only"), ("uuid", "read-only"),
                                            ("colour", "unknown field")])
def test_a_device_patch_names_a_read_only_or_unknown_field(client_for, personas, devices, field, message):
    small, _ = devices
    r = client_for(personas.staff).patch(f"/api/devices/{small.pk}/", {field: 1}, format="json")
    assert r.status_code == 400
    assert list(r.json()) == [field] and r.json()[field][0].startswith(message)
    r = client_for(personas.staff).patch(f"/api/devices/{small.pk}/", {field: 1, "budget_bytes": GIB}, format="json")
    assert r.status_code == 400 and Device.objects.get(pk=small.pk).budget_bytes == 16 * GIB


def test_a_device_budget_of_zero_is_refused_in_the_api(client_for, personas, devices, row_counts):
    small, _ = devices
    before = row_counts()
    r = client_for(personas.staff).patch(f"/api/devices/{small.pk}/", {"budget_bytes": 0}, format="json")
    assert r.status_code == 400 and "must be > 0 bytes" in r.json()["budget_bytes"][0]
    assert row_counts() == before and Device.objects.get(pk=small.pk).budget_bytes == 16 * GIB
    with pytest.raises(BudgetError, match="must be > 0"):
        small.set_budget(0)


def test_a_device_budget_of_zero_is_refused_in_the_admin(devices):
    small, _ = devices
    root = Client()
    root.force_login(get_user_model().objects.create_superuser("root", "root@example.test", "pw"))
    url = reverse("admin:cluster_device_change", args=[small.pk])
    form = root.get(url).context["adminform"].form
    data = {b.html_name: b.value() for b in form if b.value() is not None}
    data["budget_bytes"] = 0
    r = root.post(url, data)
    assert r.status_code == 200  # the form again, with the error; not a 500, not a redirect
    assert "must be &gt; 0 bytes" in r.content.decode()
    assert Device.objects.get(pk=small.pk).budget_bytes == 16 * GIB
    assert not Event.objects.filter(kind="budget_change").exists()
