"""Fixtures for telemetry tests: a clean Redis database of this lane's own, the control consumer and a worker's
link on it, and a job on a device."""
import pytest
import redis as redis_lib
from django.conf import settings

from zico.cluster.models import Device, Node, Placement
from zico.jobs.models import Job
from zico.tenants.models import Tenant
from zico.jobs.lifecycle import transition


@pytest.fixture
def redis_url():
    return settings.REDIS_URL  # the test Redis db (zico.test_settings), never the demo's


@pytest.fixture
def r(redis_url):
    client = redis_lib.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture
def consumer(redis_url, r):
    """The control consumer, reading the clean Redis database."""
    from zico.telemetry.consumer import ControlConsumer

    return ControlConsumer(redis_url, name="test", block_ms=20)


@pytest.fixture
def link(redis_url):
    """A device worker's Redis link, as device ``cpu.h1.0``."""
    from workers.link import Link

    return Link(redis_url, "cpu.h1.0")


@pytest.fixture
def tenant(db):
    return Tenant.objects.create(name="Acme", slug="acme")


def _make_device(host="h1", kind="cpu", index=0, total=4 << 30, budget=3 << 30):
    node, _ = Node.objects.get_or_create(host=host)
    return Device.objects.create(node=node, kind=kind, index=index, name="CPU pool", total_bytes=total,
                                 budget_bytes=budget)


def _make_placed_job(tenant, device, workload="digits-cnn"):
    """A job moved queued -> ready -> placed on ``device`` through the transition function."""
    job = Job.objects.create(tenant=tenant, workload=workload, params={})
    transition(job, "ready")
    placement = Placement.objects.create(device=device, plan={})
    placement.jobs.add(job)
    transition(job, "placed", device=device)
    return job, placement


@pytest.fixture
def make_device(db):
    """Factory: a Device on a Node (``host``, ``kind``, ``index``, ``total``, ``budget`` bytes)."""
    return _make_device


@pytest.fixture
def make_placed_job(db):
    """Factory: ``(job, placement)`` for a job placed on a device."""
    return _make_placed_job
