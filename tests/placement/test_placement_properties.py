"""Property tests of the placement core's promises: plans stay within budget, gating never
deadlocks, a coordinated device never exceeds its budget."""
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.coordinator import Coordinator
from placement.curves import MemoryCurve
from placement.device_sim import DeviceRun
from placement.gating import minimal_feasible_budget
from placement.groups import best_shifts, exact_peak, peak_by_shift, plan_group
from placement.state import Job

GB = 1e9
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def curves(draw, iteration_s=None):
    """A step curve with 2..40 steps, persistent 0.1..4 GB, transient up to 8 GB, starting and
    ending at its persistent bytes (a steady-state iteration)."""
    n = draw(st.integers(2, 40))
    persistent = draw(st.floats(0.1, 4.0)) * GB
    levels = np.array(draw(st.lists(st.floats(0.0, 8.0), min_size=n, max_size=n))) * GB
    levels[0] = levels[-1] = 0.0
    cuts = np.sort(np.array(draw(st.lists(st.floats(0.001, 0.999), min_size=n - 1, max_size=n - 1))))
    t = iteration_s if iteration_s is not None else draw(st.sampled_from([0.2, 0.35, 0.5, 0.77, 1.0]))
    return MemoryCurve(np.concatenate([[0.0], cuts]), persistent + levels, t, persistent)


def _budget_between(draw, group):
    """A budget from the group's minimal feasible budget up to its sum of peaks (+10 %)."""
    lo = minimal_feasible_budget(group)
    hi = sum(c.peak_bytes for c in group) * 1.1
    return lo + draw(st.floats(0.0, 1.0)) * (hi - lo)


@SETTINGS
@given(st.data())
def test_a_returned_plan_never_predicts_more_than_the_budget(data):
    group = data.draw(st.lists(curves(), min_size=2, max_size=3))
    budget = _budget_between(data.draw, group) * data.draw(st.sampled_from([0.9, 1.0]))
    jobs = [Job(i, "t", c, compute_share=data.draw(st.sampled_from([0.3, 0.6, 1.0]))) for i, c in enumerate(group)]
    plan = plan_group(jobs, budget)
    if plan is None:
        assert minimal_feasible_budget(group) > budget
        return
    assert plan.predicted_peak_bytes <= budget * (1 + 1e-9)
    if plan.mode in ("independent", "shift"):
        assert exact_peak(group, plan.shifts_s) <= budget * (1 + 1e-9)
    assert all(s >= 1.0 for s in plan.predicted_slowdown)


@SETTINGS
@given(st.data())
def test_budgeted_shifts_fit_exactly_and_the_shift_grid_is_an_upper_bound(data):
    period = data.draw(st.sampled_from([0.3, 1.0]))
    a, b = data.draw(curves(period)), data.draw(curves(period))
    grid = peak_by_shift(a, b, 64)
    for k in (0, 17, 40):
        assert exact_peak([a, b], [0.0, k * period / 64]) <= grid[k] * (1 + 1e-9)
    budget = _budget_between(data.draw, [a, b])
    shifts = best_shifts([a, b], budget)
    if shifts is not None:
        assert exact_peak([a, b], shifts) <= budget * (1 + 1e-9)


@SETTINGS
@given(st.data())
def test_gating_always_lets_some_job_proceed_at_or_above_the_minimal_budget(data):
    group = data.draw(st.lists(curves(), min_size=2, max_size=4))
    budget = _budget_between(data.draw, group)
    now = [0.0]
    coord = Coordinator(budget, clock=lambda: now[0], resolution=64)
    for i, c in enumerate(group):
        coord.add_job(i, c)
    # a random live state: some jobs in flight at random progress, the rest asking to start
    in_flight = data.draw(st.lists(st.booleans(), min_size=len(group), max_size=len(group)))
    for i, flying in enumerate(in_flight):
        if flying and coord.request_start(i).admit:
            coord.report_progress(i, data.draw(st.floats(0.0, 0.99)))
    waiting = [i for i in range(len(group)) if not coord.snapshot()["jobs"][str(i)]["in_flight"]]
    decisions = {i: coord.request_start(i) for i in waiting}
    # every waiter gets a finite delay; with nothing in flight the head of the line starts now
    for d in decisions.values():
        assert d.admit or (d.delay_s is not None and math.isfinite(d.delay_s))
    if waiting and not any(in_flight):
        assert any(d.admit for d in decisions.values())


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_coordinated_device_never_exceeds_its_budget(data):
    group = data.draw(st.lists(curves(), min_size=2, max_size=3))
    budget = _budget_between(data.draw, group)
    run = DeviceRun(budget, resolution=64)
    for i, c in enumerate(group):
        share = data.draw(st.sampled_from([0.3, 0.7, 1.0]))
        run.add_job(Job(i, "t", c, iterations=data.draw(st.integers(3, 12)), compute_share=share))
    run.run_until_idle(limit_s=1e4)
    assert not run.jobs, "every job finishes (no deadlock)"
    assert run.stats.violations == 0
    assert run.stats.peak_bytes <= budget * (1 + 1e-6)
