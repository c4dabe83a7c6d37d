"""Fixtures for the web UI tests: personas, a shared device with jobs of two tenants, stored and live telemetry.

The browser fixtures (``browser``, ``page``, ``sign_in``) are suite-wide, in tests/conftest.py.
Live samples go to the real Redis named by settings.REDIS_URL (run these tests with a Redis database of
their own, e.g. REDIS_URL=redis://127.0.0.1:6379/7); the telemetry stream is emptied around each test.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import pytest
import redis
from django.conf import settings
from django.test import Client

from zico.cluster.models import Device, Node, Placement
from zico.jobs.models import Event, Job, MemoryProfile
from zico.jobs.submission import submit_job
from zico_contracts import keys
from zico.telemetry.models import TimelinePoint
from tests.support.tenants import make_personas
from zico.jobs.lifecycle import transition

GIB = 1 << 30
MIB = 1 << 20


@pytest.fixture
def personas(db):
    return make_personas()


@pytest.fixture
def client_for(personas):
    """client_for(user) -> a Django test client signed in as ``user`` (None: signed out)."""
    def make(user):
        c = Client()
        if user is not None:
            c.force_login(user)
        return c
    return make


@pytest.fixture
def rdb():
    """The tests' Redis, with the telemetry stream removed before and after the test."""
    r = redis.Redis.from_url(settings.REDIS_URL, decode_responses=True)
    r.delete(keys.TELEMETRY_STREAM)
    yield r
    r.delete(keys.TELEMETRY_STREAM)


def _publish(r, *, job: int | None, device: str, t: float | None = None, allocated: int, reserved: int,
            iteration: int | None = None, **extra) -> str:
    """Append one sample the way a device worker's Link does (workers/link.py); returns its stream id."""
    sample = {"job": job, "device": device, "t": time.time() if t is None else t, "allocated": allocated,
              "reserved": reserved, "iteration": iteration, "phase": "forward", **extra}
    data = json.dumps(sample)
    entry = r.xadd(keys.TELEMETRY_STREAM, {"data": data})
    return entry


@pytest.fixture
def publish(rdb):
    """publish(job=..., device=..., allocated=..., reserved=..., ...) appends one live sample; returns its id."""
    return lambda **kw: _publish(rdb, **kw)


@dataclass
class Cluster:
    device: Device
    key: str
    acme_job: Job      # owner's job, placed on the device
    rival_job: Job     # outsider's job, co-located on the same device
    placement: Placement


@pytest.fixture
def cluster(personas, rdb):
    """One 80 GiB GPU (budget 72 GiB) running an acme job and a rival job together, with a memory curve,
    a sharing plan, a delay event and 30 s of stored timeline for each job; the live stream starts empty."""
    p = personas
    node = Node.objects.create(host="node-a")
    device = Device.objects.create(node=node, index=0, kind="gpu", name="NVIDIA H100 80GB HBM3",
                                   uuid="GPU-ui-0", total_bytes=80 * GIB, budget_bytes=72 * GIB)
    acme_job = submit_job(tenant=p.tenant, owner=p.owner, workload="digits-cnn", params={"iterations": 500},
                          budget_bytes=20 * GIB, name="acme-secret-model")
    rival_job = submit_job(tenant=p.other_tenant, owner=p.outsider, workload="digits-cnn", params={},
                           name="rival-secret-model")
    for job in (acme_job, rival_job):
        transition(job, "ready")
        transition(job, "placed", device=device)
        transition(job, "running", device=device)
    placement = Placement.objects.create(device=device, plan={  # the layout of SharingPlan.to_dict()
        "job_ids": [acme_job.pk, rival_job.pk], "mode": "shift",
        "predicted_slowdown": [1.05, 1.05], "budget_bytes": 72 * GIB, "predicted_peak_bytes": 61 * GIB,
        "sum_of_peaks_bytes": 70 * GIB})
    placement.jobs.set([acme_job, rival_job])
    MemoryProfile.record(acme_job, {
        "version": 1, "source": "estimate", "device": "cuda:0", "iteration_s": 0.5,
        "persistent_bytes": 4 * GIB, "peak_bytes": 18 * GIB,
        "points": [[0.0, 4 * GIB], [0.3, 12 * GIB], [0.55, 18 * GIB], [0.8, 8 * GIB], [1.0, 4 * GIB]]})
    Event.record(Event.Kind.DELAY, job=rival_job, device=device, iteration=7, delay_s=0.12)
    Event.record(Event.Kind.DELAY, job=acme_job, device=device, iteration=9, delay_s=0.05)
    now = int(time.time())
    for s in range(now - 60, now - 30):
        when = datetime.fromtimestamp(s, tz=timezone.utc)
        TimelinePoint.objects.create(device=device, job=acme_job, second=s, time=when,
                                     allocated_bytes=10 * GIB, reserved_bytes=12 * GIB, iteration=s % 100)
        TimelinePoint.objects.create(device=device, job=rival_job, second=s, time=when,
                                     allocated_bytes=6 * GIB, reserved_bytes=7 * GIB, iteration=s % 50)
        TimelinePoint.objects.create(device=device, job=None, second=s, time=when, allocated_bytes=16 * GIB,
                                     reserved_bytes=20 * GIB, budget_bytes=72 * GIB, device_used_bytes=21 * GIB)
    return Cluster(device, keys.device_key("gpu", "node-a", 0), acme_job, rival_job, placement)
