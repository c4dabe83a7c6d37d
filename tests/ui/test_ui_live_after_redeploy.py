"""After a fresh deployment (new database, same device key and job ids), live charts do not show the
previous worker's samples still in the Redis stream: only samples taken after the device registered or
the job was submitted (zico.web.live, Note [Samples of an earlier deployment])."""
import time

import pytest

from zico.web import live

GIB = 1 << 30
OLD_RESERVED = 268 * (1 << 20)  # what the previous deployment's worker last reported
pytestmark = pytest.mark.django_db


def test_device_and_job_charts_skip_samples_of_an_earlier_deployment(cluster, client_for, personas, publish):
    # the cluster fixture's device and jobs were just created; a sample older than them (beyond the grace)
    # was written by the previous deployment's worker under the same device key and job id
    old_t = time.time() - live.REGISTRATION_GRACE_S - 30
    job = cluster.acme_job.pk
    publish(job=job, device=cluster.key, t=old_t, allocated=3 * GIB, reserved=OLD_RESERVED)
    publish(job=None, device=cluster.key, t=old_t, allocated=3 * GIB, reserved=OLD_RESERVED, budget=72 * GIB)
    publish(job=job, device=cluster.key, allocated=11 * GIB, reserved=13 * GIB)
    publish(job=None, device=cluster.key, allocated=16 * GIB, reserved=20 * GIB, budget=72 * GIB)

    dev = client_for(personas.staff).get(f"/data/devices/{cluster.device.pk}/timeline.json").json()
    band = [p[1] for p in dev["series"][str(job)]]
    assert band[-1] == 11 * GIB and 3 * GIB not in band
    pool_reserved = [p[2] for p in dev["pool"]]
    assert pool_reserved[-1] == 20 * GIB and OLD_RESERVED not in pool_reserved
    mem = client_for(personas.owner).get(f"/data/jobs/{job}/memory.json").json()
    assert mem["points"][-1][1:3] == [11 * GIB, 13 * GIB]
    assert [3 * GIB, OLD_RESERVED] not in [p[1:3] for p in mem["points"]]


def test_samples_within_the_grace_of_registration_still_show(cluster, client_for, personas, publish):
    # the worker samples before the control consumer has created the device row: those are its own
    t = cluster.device.created_at.timestamp() - live.REGISTRATION_GRACE_S / 2
    publish(job=None, device=cluster.key, t=t, allocated=1 * GIB, reserved=2 * GIB, budget=72 * GIB)
    dev = client_for(personas.staff).get(f"/data/devices/{cluster.device.pk}/timeline.json").json()
    assert dev["pool"][-1][2] == 2 * GIB
