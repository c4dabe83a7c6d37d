"""The agent <-> job control protocol (zico_contracts.agent): every message validated, fields named in errors,
and the contracts package importable without Django, Celery or torch."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from zico_contracts import agent as proto

ROOT = Path(__file__).resolve().parents[2]


def test_contracts_import_neither_django_celery_nor_torch():
    code = ("import sys, zico_contracts, zico_contracts.agent, zico_contracts.userjob; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'celery', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_round_trip_of_every_message_over_a_socketpair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sent = [proto.encode("hello", version=proto.PROTOCOL_VERSION, job_id=7, pid=os.getpid()),
            proto.encode("ready", resumed_from=0, iterations=3),
            proto.encode("iteration_begin", iteration=0),
            proto.encode("mark", kind="backward", iteration=0),
            proto.encode("iteration_end", iteration=0, marks={"forward": 0.01}),
            proto.encode("stats", allocated=1, reserved=2, peak_allocated=3, peak_reserved=4, iteration=0,
                         phase="forward"),
            proto.encode("metric", values={"loss": 1.5, "workload": "x", "accuracy": None}),
            proto.encode("done", status="succeeded", metrics={"loss": 1.0})]
    a.sendall(b"".join(sent))
    a.close()
    reader = proto.LineReader(b, proto.JOB_TO_AGENT)
    kinds = []
    while (msg := reader.read()) is not None:
        kinds.append(msg["type"])
    assert kinds == ["hello", "ready", "iteration_begin", "mark", "iteration_end", "stats", "metric", "done"]


@pytest.mark.parametrize("msg, field", [
    ([1], "message"),
    ({"type": "nope"}, "type"),
    ({"type": "hello", "version": 1, "pid": 3}, "job_id"),
    ({"type": "hello", "version": 2, "job_id": 1, "pid": 3}, "version"),
    ({"type": "iteration_begin", "iteration": -1}, "iteration"),
    ({"type": "iteration_begin", "iteration": True}, "iteration"),
    ({"type": "stats", "allocated": 1, "reserved": 1, "peak_allocated": 1, "peak_reserved": "1", "iteration": 0,
      "phase": "forward"}, "peak_reserved"),
    ({"type": "stats", "allocated": 1, "reserved": 1, "peak_allocated": 1, "peak_reserved": 1, "iteration": 0,
      "phase": "lunch"}, "phase"),
    ({"type": "done", "status": "great", "metrics": {}}, "status"),
    ({"type": "done", "status": "failed", "metrics": {}, "extra": 1}, "extra"),
    ({"type": "go", "delay_s": float("nan")}, "delay_s"),
    ({"type": "metric", "values": {"loss": [1]}}, "values"),
])
def test_a_bad_message_is_refused_naming_its_field(msg, field):
    with pytest.raises(proto.ProtocolError) as err:
        proto.validate(msg)
    assert err.value.field == field
    assert field in str(err.value)


def test_direction_limits_the_types_and_bad_json_is_named():
    with pytest.raises(proto.ProtocolError) as err:
        proto.decode(proto.encode("go", delay_s=0.0), proto.JOB_TO_AGENT)
    assert err.value.field == "type"
    with pytest.raises(proto.ProtocolError) as err:
        proto.decode(b"{not json")
    assert err.value.field == "message"
    with pytest.raises(proto.ProtocolError):
        proto.decode(json.dumps({"type": "metric", "values": {"note": "x" * proto.MAX_LINE_BYTES}}).encode())
