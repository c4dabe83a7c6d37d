"""Fixtures for the scheduler service tests: a tenant, a node with GPUs on a unique host (its
Celery queues are unique too, and emptied afterwards), and jobs with stored curves."""
import uuid

import pytest
import redis
from django.conf import settings

from placement.curves import triangular_curve
from zico.cluster.models import Device, Node
from zico.jobs.models import Job, MemoryProfile
from zico.tenants.models import Tenant
from zico.jobs.lifecycle import transition

GiB = 1 << 30


@pytest.fixture
def broker():
    """The real Redis the Celery broker uses (REDIS_URL of this lane)."""
    return redis.Redis.from_url(settings.CELERY_BROKER_URL)


@pytest.fixture
def cluster(db, broker):
    """A node with two 16 GiB GPUs on a unique host; queues removed at the end."""
    host = f"sched-{uuid.uuid4().hex[:8]}"
    node = Node.objects.create(host=host)
    devices = [Device.objects.create(node=node, index=i, kind="gpu", name="Test GPU", uuid=f"GPU-{host}-{i}",
                                     total_bytes=16 * GiB, budget_bytes=16 * GiB) for i in range(2)]
    yield devices
    for d in devices:
        broker.delete(d.queue)


@pytest.fixture
def tenant(db):
    return Tenant.objects.create(name="Acme", slug=f"acme-{uuid.uuid4().hex[:6]}", max_running_jobs=100)


@pytest.fixture
def make_job(db):
    """make_job(tenant, curve=None, status="ready"): a job with a stored curve (10 GiB peak,
    2 GiB persistent, 0.2 s iterations by default; none when ``curve`` is False, and then params of its
    own: a seed no other job has, so no identical job's profile serves it, zico.jobs.known)."""
    seeds = iter(range(1000, 10**6))

    def make(tenant, *, curve=None, status="ready", priority=0):
        params = {"iterations": 50} if curve is not False else {"iterations": 50, "seed": next(seeds)}
        job = Job.objects.create(tenant=tenant, workload="digits-cnn", params=params, priority=priority)
        if curve is not False:
            MemoryProfile.record(job, curve or triangular_curve(2 * GiB, 10 * GiB, 0.2))
        if status != "queued":
            transition(job, status)
        return job

    return make


@pytest.fixture
def queued_messages(broker):
    """queued_messages(queue): (task name, args) of the messages waiting on a Celery queue in
    Redis (kombu's JSON envelope, body base64)."""
    import base64
    import json

    def read(queue):
        out = []
        for raw in broker.lrange(queue, 0, -1):
            msg = json.loads(raw)
            out.append((msg["headers"]["task"], json.loads(base64.b64decode(msg["body"]))[0]))
        return out

    return read
