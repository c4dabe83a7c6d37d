"""Fixtures for the model tests: the standard personas and one GPU device."""
import pytest

from zico.cluster.models import Device, Node
from tests.support.tenants import make_personas


@pytest.fixture
def personas(db):
    return make_personas()


@pytest.fixture
def gpu(db):
    node = Node.objects.create(host="node-a")
    return Device.objects.create(node=node, index=0, kind="gpu", name="Test GPU", uuid="GPU-test-0",
                                 total_bytes=16 << 30, budget_bytes=16 << 30)
