"""Timeline points of a device whose worker_up is handled after its first samples are stored once it is
registered: an unknown device key is not remembered as unknown by the consumer's device cache."""
import pytest

from zico.cluster.models import Device, Node
from zico.telemetry.downsample import Point
from zico.telemetry.handlers import store_points
from zico.telemetry.models import TimelinePoint

pytestmark = pytest.mark.django_db
KEY = "cpu.late-reg.0"


def _pool_point(second, reserved):
    return Point(device=KEY, job=None, second=second, allocated=reserved // 2, reserved=reserved, iteration=None,
                 phase="", device_used=None, budget=None)


def test_points_after_a_late_registration_are_stored():
    devices = {}  # the consumer's cache, kept across batches
    assert store_points([_pool_point(1_000, 10), _pool_point(1_001, 11)], devices) == 0  # not registered yet
    dev = Device.objects.create(node=Node.objects.create(host="late-reg"), index=0, kind="cpu", name="CPU pool",
                                total_bytes=1 << 30, budget_bytes=1 << 30)  # worker_up handled
    assert store_points([_pool_point(1_002, 12)], devices) == 1
    assert list(TimelinePoint.objects.filter(device=dev).values_list("second", "reserved_bytes")) == [(1_002, 12)]
