"""Fixtures for the API tests: personas, a logged-in client per persona, devices, row counting."""
import pytest
from django.apps import apps
from rest_framework.test import APIClient

from zico.cluster.models import Device, Node
from tests.support.tenants import make_personas

GIB = 1 << 30


@pytest.fixture
def personas(db):
    return make_personas()


@pytest.fixture
def client_for(personas):
    """client_for(user) -> an APIClient signed in with a real session (SessionAuthentication)."""

    def make(user):
        c = APIClient()
        if user is not None:
            c.force_login(user)
        return c

    return make


@pytest.fixture
def devices(db):
    """Two GPUs on one node: 16 GiB and 80 GiB (the largest total is 80 GiB)."""
    node = Node.objects.create(host="node-a")
    small = Device.objects.create(node=node, index=0, kind="gpu", name="T4", uuid="GPU-a0",
                                  total_bytes=16 * GIB, budget_bytes=16 * GIB)
    big = Device.objects.create(node=node, index=1, kind="gpu", name="H100", uuid="GPU-a1",
                                total_bytes=80 * GIB, budget_bytes=72 * GIB)
    return small, big


@pytest.fixture
def row_counts(db):
    """row_counts() -> {model label: rows} over every Zico and auth model, to prove nothing was stored."""

    def count():
        labels = ("tenants", "cluster", "jobs", "auth")
        return {m._meta.label: m.objects.count() for m in apps.get_models() if m._meta.app_label in labels}

    return count
