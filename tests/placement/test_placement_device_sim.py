"""The simulated device executor: baseline gates, the contention model and exact accounting."""
import pytest

from placement.curves import triangular_curve
from placement.device_sim import DeviceRun, TimeSlicingGate, UngatedGate
from placement.state import Job

GB = 1e9
M0, P = 1 * GB, 5 * GB


def _run(gate, share=0.6, iterations=10, budget=100 * GB):
    run = DeviceRun(budget, gate)
    c = triangular_curve(M0, P, 1.0)
    for i in range(2):
        run.add_job(Job(i, "t", c, iterations=iterations, compute_share=share))
    return run


def test_naive_sharing_runs_both_at_once_and_peaks_at_the_sum():
    run = _run(UngatedGate())
    run.run_until_idle()
    assert run.stats.peak_bytes == pytest.approx(2 * P)
    # both iterate all the time: each at 1 / (0.6 + 0.6) of solo speed
    assert max(v[2] for v in run.stats.finished.values()) == pytest.approx(10 * 1.2)


def test_time_slicing_never_has_two_iterations_in_flight():
    run = _run(TimeSlicingGate())
    while run.jobs:
        assert sum(r.running for r in run.jobs.values()) <= 1
        run.advance_to(run.next_event_s())
    assert run.stats.peak_bytes == pytest.approx(P + M0)
    assert max(v[2] for v in run.stats.finished.values()) == pytest.approx(20.0)  # alone, one after the other


def test_a_saturating_pair_gains_nothing_from_running_together():
    run = _run(UngatedGate(), share=1.0)
    run.run_until_idle()
    assert max(v[2] for v in run.stats.finished.values()) == pytest.approx(20.0)


def test_violations_count_each_span_over_budget_once():
    run = _run(UngatedGate(), iterations=3, budget=(P + M0) * 1.2)
    run.run_until_idle()
    assert run.stats.violations == 3  # in phase: one excursion per iteration
    assert 0 < run.stats.over_budget_s < 3 * 1.2
