"""A CPU device's share per job on the pages: the job page shows its run's cores and threads (a job's own thread
setting named) and its slowdown predicted beside measured with the error; the device page shows what each job of
the device gets, from its worker's heartbeat."""
import json
from html import unescape

import pytest

from zico.cluster.models import Device, Node
from zico_contracts import cpushare, keys

pytestmark = pytest.mark.django_db


def test_the_job_page_shows_its_cpu_share_and_the_slowdowns_error(client_for, personas, cluster):
    job = cluster.acme_job
    share = {"slot": 1, "slots": 2, "cores": 2, "cpus": [1], "threads": 1, "user_set": ["OMP_NUM_THREADS"]}
    job.metrics = {"slowdown": 1.4, cpushare.METRIC: share}  # the plan predicted 1.05 (the fixture's)
    job.save(update_fields=["metrics"])
    html = unescape(client_for(personas.owner).get(f"/jobs/{job.pk}/").content.decode())
    assert ('id="stat-cpu-share">1 of 2 cores (CPU 1), 1 thread (slot 2 of 2); the job\'s own OMP_NUM_THREADS '
            'kept instead of 1</div>') in html
    assert ">(error -25 %)</span>" in html  # (1.05 - 1.4) / 1.4


def test_a_job_without_a_cpu_share_shows_none(client_for, personas, cluster):
    html = client_for(personas.owner).get(f"/jobs/{cluster.rival_job.pk}/").content.decode()
    assert "stat-cpu-share" not in html


def test_the_device_page_shows_each_jobs_share_from_the_heartbeat(client_for, personas, rdb):
    personas.owner.is_staff = True
    personas.owner.save()
    device = Device.objects.create(node=Node.objects.create(host="cpu-host"), index=0, kind="cpu", name="CPU pool",
                                   total_bytes=1 << 30, budget_bytes=1 << 30)
    key = keys.heartbeat_key(keys.device_key("cpu", "cpu-host", 0))
    page = lambda: client_for(personas.owner).get(f"/devices/{device.pk}/").content.decode()  # noqa: E731
    rdb.delete(key)
    try:
        assert "device-cpu-share" not in page()  # no worker heartbeat: nothing claimed
        rdb.set(key, json.dumps({"pid": 1, cpushare.METRIC: {"cores": 2, "slots": 2, "threads": 1}}))
        assert ">1 of 2 cores and 1 thread per job (2 slots)</span>" in page()
    finally:
        rdb.delete(key)


def test_the_device_page_shows_how_its_worker_bounds_a_jobs_disk(client_for, personas, rdb):
    # Note [A job's disk] in workers/agent/diskwatch.py: the worker's heartbeat says quota or watch, and why
    from zico_contracts import jobdisk

    personas.owner.is_staff = True
    personas.owner.save()
    device = Device.objects.create(node=Node.objects.create(host="disk-host"), index=0, kind="cpu", name="CPU pool",
                                   total_bytes=1 << 30, budget_bytes=1 << 30)
    key = keys.heartbeat_key(keys.device_key("cpu", "disk-host", 0))
    page = lambda: unescape(client_for(personas.owner).get(f"/devices/{device.pk}/").content.decode())  # noqa: E731
    rdb.delete(key)
    try:
        assert "device-job-disk" not in page()
        rdb.set(key, json.dumps({"pid": 1, jobdisk.METRIC: {"bound": "quota", "bytes": 8 << 30}}))
        assert ">8.00 GiB of disk per job (a file system of its own)</span>" in page()
        rdb.set(key, json.dumps({"pid": 1, jobdisk.METRIC: {"bound": "watch", "bytes": 1 << 30, "why": (
            "this host has no loop devices (/dev/loop-control is missing)")}}))
        assert (">1.00 GiB of disk per job (watched: no quota, because this host has no loop devices "
                "(/dev/loop-control is missing))</span>") in page()
    finally:
        rdb.delete(key)
