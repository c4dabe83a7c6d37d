"""placement.pacing: one job's rules on its coordinator, as the simulated executor runs them on a virtual clock
(the agent runs the same class: tests/workers/test_gate_decisions.py)."""
import json
from pathlib import Path

import pytest

from placement.coordinator import Coordinator
from placement.curves import curve_from_dict, triangular_curve
from placement.device_sim import DeviceRun
from placement.pacing import CONTENTION, IterationTime, Pacer, falling_envelope
from placement.state import Job

MIB = 1 << 20
DATA = Path(__file__).parent / "data"


def demo_pair():
    """The demo's two jobs as profiled alone (curves, reserved peak bytes)."""
    d = json.loads((DATA / "demo-pair-profile.json").read_text())
    return [curve_from_dict(c) for c in d["curves"]], d["reserved_bytes"]


def test_steady_iteration_times_leave_no_margin_and_noisy_ones_do():
    steady = IterationTime(0.5)
    assert steady.expected_s == CONTENTION * 0.5  # nothing measured yet
    steady.add_warmup(2.0)
    assert steady.expected_s == 2.0  # until the first steady iteration: the warm-up's time
    for _ in range(20):
        steady.add(0.5)
    assert steady.expected_s == pytest.approx(0.5)
    noisy = IterationTime(0.5)
    for took in [0.3, 0.9] * 10:
        noisy.add(took)
    assert noisy.expected_s > 0.9  # longer than any measured iteration: a fall is never predicted too early
    assert noisy.shortest_s == 0.5  # a request is planned with the shortest likely time (the solo one here)
    with pytest.raises(ValueError, match="solo iteration time"):
        IterationTime(0.0)


def test_a_fall_is_planned_on_its_envelope():
    c = curve_from_dict({"version": 1, "source": "estimate", "device": "cpu", "iteration_s": 1.0,
                         "persistent_bytes": 10, "peak_bytes": 100,
                         "points": [[0, 10], [0.2, 100], [0.4, 30], [0.6, 60], [0.8, 10]]})
    e = falling_envelope(c)
    assert list(e.bytes) == [10, 100, 60, 60, 10]  # the later bump of 60 is held from the peak on
    assert e.peak_bytes == c.peak_bytes and e.persistent_bytes == c.persistent_bytes


def test_a_forward_pass_holds_the_peak_until_backward():
    now = [0.0]
    c = triangular_curve(10 * MIB, 100 * MIB, iteration_s=1.0)
    coord = Coordinator(150 * MIB, clock=lambda: now[0])
    a, b = Pacer(coord, "a", c), Pacer(coord, "b", c)
    a.join()
    b.join()
    for p in (a, b):  # both through their warm-up, one after the other
        assert p.request().admit
        p.mark("iteration_start")
        p.mark("forward")
        now[0] += 1.0
        p.mark("backward")
        p.mark("iteration_end")
    assert a.request().admit
    a.mark("iteration_start")
    a.mark("forward")
    now[0] += 0.45  # a is rising, nearly at its peak; its fall would leave room for b later
    first = b.request()
    assert not first.admit  # b's peak does not fit beside a's held peak
    a.mark("backward")  # a is at its peak and falls from now on: b may plan its rise into a's fall
    second = b.request()
    assert second.admit or second.delay_s < first.delay_s


def test_the_first_iteration_of_a_newcomer_does_not_wait_out_its_neighbours_run():
    # Note [Warm-up iteration]: the neighbour iterates back to back; the newcomer's warm-up gets its turn
    c = triangular_curve(10 * MIB, 100 * MIB, iteration_s=0.2)
    trace = []
    run = DeviceRun(150 * MIB, trace=trace)  # the two peaks never fit together: they must alternate
    run.add_job(Job("a", "t", c, iterations=100))
    run.advance_to(3 * 0.2 + 0.01)  # a is in its fourth iteration, and has 97 to go
    joined = run.now
    run.add_job(Job("b", "t", c, iterations=3))
    run.run_until_idle()
    b_first = next(t for t, j, call, _, admitted in trace if j == "b" and call == "request" and admitted)
    a_ends = [t for t, j, call, args, _ in trace if j == "a" and call == "mark" and args == ("iteration_end",)]
    waited_out = sum(1 for t in a_ends if joined < t <= b_first)
    assert waited_out <= 2, f"b's warm-up waited for {waited_out} of a's iterations"
    assert run.stats.violations == 0 and not run.jobs


def test_the_demo_pair_shares_its_device_within_budget_through_the_pacers():
    curves, _ = demo_pair()
    budget = 0.8 * sum(c.peak_bytes for c in curves)  # below the sum of peaks, above the feasible floor
    run = DeviceRun(budget)
    run.add_job(Job(1, "demo", curves[0], iterations=24, compute_share=0.5))
    run.add_job(Job(2, "demo", curves[1], iterations=10, compute_share=0.5))
    run.run_until_idle()
    assert not run.jobs and run.stats.violations == 0
    assert run.stats.peak_bytes <= budget * (1 + 1e-6)


def test_a_job_behind_others_that_jump_the_line_waits_at_most_its_patience_and_their_iterations():
    """Three small scripts' measured curves under a budget just above what they need together, timed as on a
    loaded host: the MLP and the Transformer, planned with their shortest iteration, each fitted before the LSTM's
    reservation, then held their peak and fell slowly, so the reservation slid past every next start and the LSTM
    waited 4.2 s for its first iteration and started 2 in 10 s (predicted slowdown inf; Note [Waiting line])."""
    from placement.coordinator import PATIENCE_ITERATIONS
    from placement.gating import planning_curve
    from placement.groups import predict_gated

    d = json.loads((DATA / "three-scripts-profile.json").read_text())
    budget = d["budget_bytes"] * (1 - d["gate_headroom"])  # the scheduler's plan for the device
    timing = {"mlp": (1.45, 0.5), "lstm": (1.71, 0.1), "transformer": (2.03, 0.3)}  # (x solo time, compute share)
    jobs = []
    for name, (stretch, share) in timing.items():
        c = planning_curve(curve_from_dict(d["curves"][name]))  # as the scheduler's snapshot plans it
        c = type(c)(fractions=c.fractions, bytes=c.bytes, iteration_s=c.iteration_s * stretch,
                    persistent_bytes=c.persistent_bytes, source=c.source, device=c.device, meta=c.meta)
        jobs.append(Job(id=name, tenant="t", curve=c, compute_share=share))
    run = DeviceRun(budget, resolution=32)
    for j in jobs:
        run.add_job(j, 1000)
    run.advance_to(10.0)
    longest = max(j.curve.iteration_s for j in jobs)  # contention factor 1: the shares sum below 1
    waits = {}
    for r in run.gate.delays:
        waits[r.job_id] = max(waits.get(r.job_id, 0.0), r.delay_ms / 1000)
    assert max(waits.values()) <= (PATIENCE_ITERATIONS + 2) * longest, (waits, longest)
    assert run.stats.violations == 0
    _, slowdown = predict_gated(jobs, budget)
    assert max(slowdown) < 5, slowdown
