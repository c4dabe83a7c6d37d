"""/api/devices/: every signed-in persona reads devices; only staff set budgets (with an Event)."""
import pytest

from zico.cluster.models import Device
from zico.jobs.models import Event

GIB = 1 << 30
PERSONAS = ["owner", "admin", "teammate", "viewer", "outsider", "staff"]


@pytest.mark.parametrize("who", PERSONAS)
def test_every_signed_in_persona_lists_and_reads_devices(personas, devices, client_for, who):
    c = client_for(getattr(personas, who))
    r = c.get("/api/devices/")
    assert r.status_code == 200 and r.data["count"] == 2
    small, _ = devices
    d = c.get(f"/api/devices/{small.pk}/").data
    assert (d["host"], d["total_bytes"], d["queue"]) == ("node-a", 16 * GIB, "gpu.node-a.0")


def test_anonymous_cannot_read_devices(devices, client_for):
    assert client_for(None).get("/api/devices/").status_code == 401


@pytest.mark.parametrize("who", ["owner", "admin", "teammate", "viewer", "outsider"])
def test_tenant_roles_cannot_set_a_device_budget(personas, devices, client_for, row_counts, who):
    small, _ = devices
    before = row_counts()
    r = client_for(getattr(personas, who)).patch(f"/api/devices/{small.pk}/", {"budget_bytes": GIB}, format="json")
    assert r.status_code == 403
    assert Device.objects.get(pk=small.pk).budget_bytes == 16 * GIB
    assert row_counts() == before


def test_staff_set_a_budget_and_an_event_records_it(personas, devices, client_for):
    small, _ = devices
    r = client_for(personas.staff).patch(f"/api/devices/{small.pk}/", {"budget_bytes": 12 * GIB}, format="json")
    assert r.status_code == 200 and r.data["budget_bytes"] == 12 * GIB
    ev = Event.objects.get(kind="budget_change")
    assert ev.device == small and ev.actor == personas.staff and ev.details["new_bytes"] == 12 * GIB


@pytest.mark.parametrize("bad", [-1, 16 * GIB + 1, "lots", None])
def test_staff_cannot_set_an_out_of_range_budget(personas, devices, client_for, row_counts, bad):
    small, _ = devices
    before = row_counts()
    r = client_for(personas.staff).patch(f"/api/devices/{small.pk}/", {"budget_bytes": bad}, format="json")
    assert r.status_code == 400 and "budget_bytes" in r.data
    assert row_counts() == before and Device.objects.get(pk=small.pk).budget_bytes == 16 * GIB


def test_only_the_budget_is_writable(personas, devices, client_for):
    small, _ = devices
    c = client_for(personas.staff)
    assert c.put(f"/api/devices/{small.pk}/", {"budget_bytes": GIB}, format="json").status_code == 405
    c.patch(f"/api/devices/{small.pk}/", {"budget_bytes": GIB, "total_bytes": 1}, format="json")
    assert Device.objects.get(pk=small.pk).total_bytes == 16 * GIB


def test_a_devices_gate_headroom_is_shown_and_not_writable(personas, devices, client_for):
    small, _ = devices
    Device.objects.filter(pk=small.pk).update(gate_headroom=0.2)  # as the worker registered it
    c = client_for(personas.staff)
    assert c.get(f"/api/devices/{small.pk}/").data["gate_headroom"] == 0.2
    r = c.patch(f"/api/devices/{small.pk}/", {"gate_headroom": 0.5}, format="json")
    assert r.status_code == 400 and Device.objects.get(pk=small.pk).gate_headroom == 0.2
