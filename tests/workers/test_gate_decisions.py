"""The agent's gate (workers.gate.Gate) and the simulated executor (placement.device_sim) run the same coordinator
rules: one co-located pair's recorded events, replayed through the gate on a fake clock, get the simulator's
admit/hold decisions at the same times and the same delays."""
import json
from pathlib import Path
from types import SimpleNamespace

from placement.coordinator import Coordinator
from placement.curves import curve_from_dict
from placement.device_sim import DeviceRun
from placement.state import Job
from workers.gate import Gate

PAIR = Path(__file__).resolve().parents[1] / "placement" / "data" / "demo-pair-profile.json"


def _gate(coordinator, curve_dict, job):
    rt = SimpleNamespace(coordinator=coordinator, link=SimpleNamespace(stop_requested=lambda job, placement: None))
    return Gate(rt, SimpleNamespace(curve=curve_dict, job=job, placement=1))


def test_the_agents_gate_decides_as_the_simulator_on_the_recorded_events_of_a_pair():
    dicts = json.loads(PAIR.read_text())["curves"]  # the demo's two jobs, profiled alone
    curves = [curve_from_dict(d) for d in dicts]
    budget = 0.8 * sum(c.peak_bytes for c in curves)  # they must share: below the sum of their peaks
    # shares of 0.8 slow both while both iterate (Note [Contention model]): iteration times vary, and live bytes
    # re-anchor the falls (Note [Progress from memory]), so every rule of the pacer takes part
    trace = []
    run = DeviceRun(budget, trace=trace)
    run.add_job(Job(1, "demo", curves[0], iterations=24, compute_share=0.8))
    run.add_job(Job(2, "demo", curves[1], iterations=10, compute_share=0.8))
    run.run_until_idle()
    assert not run.jobs and run.stats.violations == 0
    recorded = [(t, j, admitted) for t, j, call, _, admitted in trace if call == "request"]
    assert any(not a for _, _, a in recorded) and sum(a for _, _, a in recorded) == 34  # holds, and every start

    now = [0.0]
    coordinator = Coordinator(budget, clock=lambda: now[0])  # what workers.bootstrap builds, on a fake clock
    gates = {1: _gate(coordinator, dicts[0], 1), 2: _gate(coordinator, dicts[1], 2)}
    iteration = {1: -1, 2: -1}
    replayed = []
    for t, job, call, args, _ in trace:  # the calls the agent makes for each message (workers/agent/agent.py)
        now[0] = t
        gate = gates[job]
        if call == "join":
            gate.join(job)
        elif call == "request":  # iteration_begin: Gate.wait's decision
            replayed.append((t, job, gate.try_start(job)))
        elif call == "mark":
            if args[0] == "iteration_start":
                iteration[job] += 1
            gate.progress(job, args[0], iteration[job])
        elif call == "observe":  # a stats message: allocated bytes and phase
            gate.observe(job, int(args[0]), args[1])
        elif call == "leave":
            gate.leave(job)
    assert replayed == recorded
    assert [(d.job_id, d.iteration, round(d.delay_ms, 6), d.reason) for d in coordinator.delays] == \
        [(d.job_id, d.iteration, round(d.delay_ms, 6), d.reason) for d in run.gate.delays]
