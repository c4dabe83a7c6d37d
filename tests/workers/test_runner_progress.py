"""A job process's ``metric`` messages become ``job_progress`` on the control stream (workers.runner._Relay, a real
Link to a private Redis): iterations done from a script's optimizer steps or a catalog job's index, the script's
own total, and the job's figures (zico.log) under ``values``, apart from the message's own fields."""
import json

import pytest
import redis

from workers.link import Link
from workers.runner import RunSpec, _Relay
from zico_contracts.codejob import CodeSpec
from servers import RedisServer
from zico_contracts import keys


@pytest.fixture
def server():
    with RedisServer() as s:
        yield s


SCRIPT = RunSpec(job=7, workload="", params={}, placement=3,
                 code=CodeSpec.from_spec({"code_url": "http://web/code", "files_url": "http://web/files",
                                          "job_token": "tok", "code_sha256": "ab" * 32, "code_format": "tar.gz",
                                          "code_size_bytes": 100, "command": ["python", "train.py"]}))


def progress(server, messages, spec=SCRIPT):
    link = Link(server.url, "cpu.h.0")
    relay = _Relay(link, spec)
    for m in messages:
        relay.on_message(m)
    assert link.flush()
    got = [json.loads(f[b"data"]) for _, f in redis.Redis(port=server.port).xrange(keys.CONTROL_STREAM)]
    return [m for m in got if m["msg"] == "job_progress"]


def test_a_scripts_steps_total_and_zico_log_figures_reach_the_web_side(server):
    got = progress(server, [
        {"type": "ready", "resumed_from": 0, "iterations": 0},
        {"type": "metric", "values": {"iterations_done": 0}, "iterations_total": 40},  # zico.set_iterations_total
        # a figure may share a name with the message's own fields: it stays the job's
        {"type": "metric", "values": {"loss": 0.75, "note": "warmup", "t": 3.5, "iteration": 99,
                                      "iterations_done": 12}},
        # a platform figure a job process sends anyway (zico.log refuses it) is not charted as the job's
        {"type": "metric", "values": {"iterations_done": 13, "slowdown": 0.01, "compute_share": 0.001,
                                      "loss": 0.5}},
    ])
    assert [(m["iteration"], m["iterations"]) for m in got] == [(0, 40), (12, 40), (13, 40)]
    assert got[1]["values"] == {"loss": 0.75, "note": "warmup", "t": 3.5, "iteration": 99}
    assert got[2]["values"] == {"loss": 0.5}
    assert got[1]["t"] != 3.5 and got[1]["job"] == 7 and got[1]["placement"] == 3
    assert got[1]["iterations_per_s"] > 0


def test_a_catalog_jobs_index_is_its_progress_and_its_bookkeeping_is_not_a_figure(server):
    got = progress(server, [
        {"type": "ready", "resumed_from": 5, "iterations": 50},
        {"type": "metric", "values": {"iteration": 9, "iterations_done": 9, "iterations": 50, "loss": 1.25,
                                      "train_accuracy": 0.5}},
    ], RunSpec(job=8, workload="digits-cnn", params={}, placement=4))
    assert [(m["iteration"], m["iterations"]) for m in got] == [(9, 50)]
    assert got[0]["values"] == {"loss": 1.25, "train_accuracy": 0.5}
