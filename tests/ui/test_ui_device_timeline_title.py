"""The device timeline page is titled by the device's kind (a CPU pool's is no "GPU memory timeline")."""
import pytest

from zico.cluster.models import Device, Node

GIB = 1 << 30
pytestmark = pytest.mark.django_db


def test_the_device_timeline_is_titled_by_the_device_kind(cluster, client_for, personas):
    cpu = Device.objects.create(node=Node.objects.create(host="cpu-host"), index=0, kind="cpu", name="CPU pool",
                                total_bytes=GIB, budget_bytes=GIB)
    staff = client_for(personas.staff)
    assert '<h2 id="tl-title">CPU memory timeline</h2>' in staff.get(f"/devices/{cpu.pk}/").content.decode()
    assert '<h2 id="tl-title">GPU memory timeline</h2>' in \
        staff.get(f"/devices/{cluster.device.pk}/").content.decode()
