"""The device worker gates with its device row's gate headroom, as with its budget: its ``--gate-headroom`` only
seeds the row, the reporter applies the figure the web side writes (zico_contracts.keys.gate_headroom_key) to the
coordinator (Note [One planning rule] in placement.gating). Real Redis, a real agent and coordinator."""
import pytest
import redis

from placement.coordinator import Coordinator
from placement.gating import gate_share
from workers.agent import AgentSettings, DeviceAgent
from workers.device import DeviceRuntime, WorkerConfig, cpu_info
from workers.link import Link
from workers.reporter import Reporter
from servers import RedisServer
from zico_contracts import keys

MIB = 1 << 20
DEV = "cpu.h.0"


@pytest.fixture
def server():
    with RedisServer() as s:
        yield s


def test_the_worker_gates_with_the_rows_headroom_and_budget_and_ignores_a_bad_one(server, tmp_path):
    budget = 512 * MIB
    config = WorkerConfig("cpu", "h", 0, 2, 1024 * MIB, budget, server.url, tmp_path, tmp_path, gate_headroom=0.3)
    agent = DeviceAgent("cpu", 1024 * MIB, budget, Coordinator(gate_share(0.3) * budget), AgentSettings())
    rt = DeviceRuntime(config, cpu_info(1024 * MIB), agent, Link(server.url, DEV))
    web = redis.Redis(port=server.port)
    try:
        reporter = Reporter(rt)
        reporter.tick()  # nothing written by the web side yet: the seed
        assert rt.gate_headroom == 0.3 and agent.coordinator.budget_bytes == pytest.approx(0.7 * budget)
        web.set(keys.gate_headroom_key(DEV), "0.1")  # the row's figure (zico.telemetry.handlers.on_worker_up)
        reporter.tick()
        assert rt.gate_headroom == 0.1 and agent.coordinator.budget_bytes == pytest.approx(0.9 * budget)
        web.set(keys.budget_key(DEV), 256 * MIB)  # a new budget keeps the row's share
        reporter.tick()
        assert agent.coordinator.budget_bytes == pytest.approx(0.9 * 256 * MIB)
        for bad in ("1.5", "-0.1", "much"):  # never a broken plan: the last good figure stays
            web.set(keys.gate_headroom_key(DEV), bad)
            reporter.tick()
            assert rt.gate_headroom == 0.1 and agent.coordinator.budget_bytes == pytest.approx(0.9 * 256 * MIB)
    finally:
        agent.close()
