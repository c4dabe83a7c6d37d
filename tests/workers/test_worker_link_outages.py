"""The worker's Redis link loses no lifecycle message and records the gap when Redis restarts."""
import json
import time

import pytest
import redis

from workers.link import Link
from servers import RedisServer
from zico_contracts import keys


@pytest.fixture
def server():
    with RedisServer() as s:
        yield s


def _control(server):
    client = redis.Redis(port=server.port)
    return [json.loads(f[b"data"]) for _, f in client.xrange(keys.CONTROL_STREAM)]


def test_messages_queued_while_redis_is_down_arrive_in_order_after_it_returns(server):
    link = Link(server.url, "cpu.h.0")
    link.emit("job_started", job=1, placement=1, resumed_from=0)
    assert link.flush()
    server.stop()
    link.emit("job_progress", job=1, placement=1, iteration=5)
    link.emit("job_finished", job=1, placement=1, status="succeeded")
    assert not link.flush()
    assert not link.publish_samples([{"job": 1, "device": "cpu.h.0", "t": time.time()}])
    assert link.pending == 2
    server.start()  # fresh, empty Redis on the same port
    assert link.flush()
    got = _control(server)
    assert [m["msg"] for m in got] == ["telemetry_gap", "job_progress", "job_finished"]
    gap = next(m for m in got if m["msg"] == "telemetry_gap")
    assert gap["end"] > gap["start"]
    assert link.pending == 0 and len(link.gaps) == 1


def test_reads_while_redis_is_down_do_not_raise(server):
    link = Link(server.url, "cpu.h.0")
    server.stop()
    assert link.stop_requested(3, 4) is None
    assert link.budget_request() is None
    assert link.heartbeat({"pid": 1}) is False


def test_unknown_message_types_are_refused():
    link = Link("redis://127.0.0.1:1/0", "cpu.h.0")
    with pytest.raises(ValueError, match="msg: expected one of .*, got .job_exploded."):
        link.emit("job_exploded", job=1)


def test_bad_device_keys_are_refused():
    with pytest.raises(ValueError, match="invalid device key"):
        Link("redis://127.0.0.1:1/0", "gpu.bad host.0")
