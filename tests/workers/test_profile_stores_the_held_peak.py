"""A catalog job's profile on the device worker (workers.profiling, the job process in its sandbox) sends a curve
that carries the bytes the job's pool held at most (``meta["held_peak_bytes"]``), the figure the one planning
rule raises the curve by (Note [One planning rule] in placement.gating). Real Redis, a real agent and job process."""
import json

import pytest
import redis

from placement.coordinator import Coordinator
from placement.gating import planning_curve, stored_held_peak
from placement.curves import curve_from_dict
from workers.agent import AgentSettings, DeviceAgent
from workers.device import DeviceRuntime, WorkerConfig, cpu_info
from workers.link import Link
from workers.profiling import profile
from servers import RedisServer
from zico_contracts import keys

MIB = 1 << 20


@pytest.fixture
def server():
    with RedisServer() as s:
        yield s


def test_a_catalog_profile_stores_its_held_peak_with_its_curve(server, tmp_path):
    total = 1024 * MIB
    config = WorkerConfig("cpu", "h", 0, 2, total, total, server.url, tmp_path / "ckpt", tmp_path / "data",
                          var_dir=tmp_path / "var")
    agent = DeviceAgent("cpu", total, total, Coordinator(total), AgentSettings())
    rt = DeviceRuntime(config, cpu_info(total), agent, Link(server.url, "cpu.h.0"))
    if agent.user_code_refusal():
        pytest.skip(f"no sandbox on this host: {agent.user_code_refusal()}")
    try:
        out = profile(rt, 7, {"workload": "tiny-lm", "params": {"batch_size": 4, "seq_len": 32, "data": "synthetic"},
                              "time_limit_s": 120, "tenant": 1})
    finally:
        agent.close()
    assert "error" not in out, out
    sent = [json.loads(f[b"data"]) for _, f in redis.Redis(port=server.port).xrange(keys.CONTROL_STREAM)]
    done = next(m for m in sent if m["msg"] == "profile_done")
    curve = curve_from_dict(done["curve"])
    held = stored_held_peak(curve)
    assert held is not None and held >= curve.peak_bytes  # a pool never holds less than it hands out
    assert planning_curve(curve).peak_bytes >= held
