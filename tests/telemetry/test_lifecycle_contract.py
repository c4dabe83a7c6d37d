"""The lifecycle messages' contract (zico_contracts.lifecycle): what the worker's link sends and the control
consumer reads, each field checked, the wrong one named; the figures a worker really sends pass."""
import time

import pytest

from zico_contracts.lifecycle import KINDS, LifecycleError, validate

BASE = {"t": 1.5, "device": "cpu.h1.0"}
GOOD = {
    "worker_up": {"total_bytes": 1 << 30, "pid": 7, "started_at": 1.0, "kind": "cpu", "index": 0, "host": "h1",
                  "name": "CPU pool", "uuid": "", "slots": 2, "budget_bytes": 1 << 29},
    "worker_down": {},
    "job_started": {"job": 3, "placement": 4, "resumed_from": 0, "iterations": 40, "pid": 99},
    "job_progress": {"job": 3, "placement": 4, "iteration": 5, "iterations": 40, "iterations_per_s": None,
                     "values": {"loss": float("nan"), "note": "warm", "ok": True, "acc": None}},
    "job_environment": {"job": 3, "state": "ready", "key": "ab", "packages": ["x==1"], "build_s": 0.5,
                        "cached": False},
    "job_delay": {"job": 3, "placement": 4, "iteration": -1, "delays": 0, "delay_s": 0.0, "delay_max_s": 0.0,
                  "gate_wait_s": 0.2},
    "job_finished": {"job": 3, "placement": None, "status": "failed", "reason": "bad run spec", "metrics": {}},
    "profile_done": {"job": 3, "curve": {"version": 1}, "profile_s": 2.0},
    "telemetry_gap": {"start": 1.0, "end": 2.0},
    "oom_prevented": {"job": 3, "count": 2, "overruns": 0, "waited_s": 0.1},
}


def test_every_kind_has_a_good_example_that_passes():
    assert set(GOOD) == set(KINDS)
    for kind, fields in GOOD.items():
        msg = {**BASE, "msg": kind, **fields}
        assert validate(msg) is msg


@pytest.mark.parametrize("msg, field", [
    ([1], "message"),
    ({**BASE, "msg": "oom", "job": 3}, "msg"),  # a kind no worker sends: a job's OOM is its job_finished reason
    ({"msg": "worker_down", "device": "cpu.h1.0"}, "t"),
    ({**BASE, "msg": "job_finished", "job": 3, "status": "exploded"}, "status"),
    ({**BASE, "msg": "job_finished", "job": 0, "status": "failed"}, "job"),
    ({**BASE, "msg": "job_finished", "job": 3, "status": "failed", "placement": "4"}, "placement"),
    ({**BASE, "msg": "job_started", "job": 3, "resumed_from": 0, "attempt": 2}, "attempt"),
    ({**BASE, "msg": "job_delay", "job": 3, "iteration": 1, "delays": 1, "delay_s": float("inf")}, "delay_s"),
    ({**BASE, "msg": "job_progress", "job": 3, "iteration": 1, "values": {"loss": [1]}}, "values"),
    ({**BASE, "msg": "profile_done", "job": 3}, "curve"),
    ({**BASE, "msg": "profile_done", "job": 3, "curve": {}, "error": "x"}, "curve"),
    ({**BASE, "msg": "worker_up", "total_bytes": -1, "pid": 7, "started_at": 1.0}, "total_bytes"),
])
def test_a_message_that_breaks_the_contract_is_refused_naming_its_field(msg, field):
    with pytest.raises(LifecycleError) as err:
        validate(msg)
    assert err.value.field == field and field in str(err.value)


def test_the_workers_link_refuses_to_queue_a_bad_message_and_sends_a_good_one(redis_url):
    from workers.link import Link

    link = Link(redis_url, "cpu.h1.0")
    with pytest.raises(LifecycleError, match="status"):
        link.emit("job_finished", job=3, status="exploded")
    assert link.pending == 0
    link.emit("job_finished", job=3, status="succeeded", metrics={"loss": 0.1}, reason="", placement=4)
    assert link.pending == 1 and validate(link._outbox[0])["t"] <= time.time()
