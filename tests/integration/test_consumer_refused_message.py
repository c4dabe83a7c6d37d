"""A control message the database refuses (a value out of range) is logged and dropped by the control consumer:
it is acknowledged, the messages after it are handled, and the consumer does not mistake it for an outage."""
import json
import time

import pytest
import redis

from zico.jobs.models import Job
from zico.jobs.submission import submit_job
from zico_contracts import keys
from zico.telemetry.consumer import ControlConsumer

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_message_the_database_refuses_is_dropped_and_the_stream_goes_on(redis_server, tenant_owner):
    tenant, owner = tenant_owner
    job = submit_job(tenant=tenant, owner=owner, workload="digits-cnn", params={"iterations": 10})
    r = redis.Redis.from_url(redis_server.url)
    consumer = ControlConsumer(redis_server.url, name="refused")
    consumer.step()  # creates the consumer group
    dev = keys.device_key("cpu", "refusedhost", 0)
    for iteration in (10**30, 7):  # the first overflows the column (a DataError), the second is fine
        r.xadd(keys.CONTROL_STREAM, {"data": json.dumps({"msg": "job_progress", "job": job.pk, "device": dev,
                                                         "t": time.time(), "iteration": iteration})})
    for _ in range(3):
        consumer.step()
    assert Job.objects.get(pk=job.pk).progress_iteration == 7
    assert r.xpending(keys.CONTROL_STREAM, keys.CONTROL_GROUP)["pending"] == 0  # both acknowledged
    assert consumer._db_down_since is None and consumer.handled == 2
