"""scripts/demo_gain.py: the demo's gain is the sum of solo times over the pair's span together, its check fails with
its figures at a ratio of 1.0 or less, the plan's ratio keeps each job's slowdown only while the other still runs, and
uncoordinated sharing is found to pass the budget where the measured curves (as each pool held them) meet."""
import sys

import pytest

from placement.curves import triangular_curve

MIB = 1 << 20
CURVES = [triangular_curve(5 * MIB, 110 * MIB, iteration_s=0.1), triangular_curve(5 * MIB, 190 * MIB, iteration_s=0.25)]
RESERVED = [150 * MIB, 230 * MIB]


@pytest.fixture(scope="module")
def dg(load_script):
    from .conftest import SCRIPTS

    sys.path.insert(0, str(SCRIPTS))  # demo_gain imports demo_plan beside it, as scripts/demo.py runs it
    try:
        yield load_script("demo_gain.py", "zico_demo_gain")
    finally:
        sys.path.remove(str(SCRIPTS))


def test_the_gain_is_the_solo_sum_over_the_span_together(dg):
    g = dg.gain([100, 40], CURVES, [1000.0, 995.0], [12.0, 10.0])  # first start 985, last end 1000
    assert g.solo == pytest.approx((10.0, 10.0)) and g.together == pytest.approx(15.0)
    assert g.ratio == pytest.approx(20 / 15)
    with pytest.raises(ValueError, match="one entry per job"):
        dg.gain([100], CURVES, [1.0, 2.0], [1.0, 1.0])
    assert dg.predicted_ratio([10.0, 10.0], [1.2, None]) is None


def test_the_plan_predicts_a_slowdown_while_both_run_and_the_one_left_runs_alone(dg):
    # a done at 12 s; b, at 1.5x, has done 12/15 of its run and does the rest alone in 2 s
    assert dg.predicted_span([10.0, 10.0], [1.2, 1.5]) == pytest.approx(14.0)
    assert dg.predicted_ratio([10.0, 10.0], [1.2, 1.5]) == pytest.approx(20 / 14)
    # the demo's pair (solo 24.6 s and 13.1 s at 1.77x and 1.25x): a gain, where the longest stretched
    # solo time (43.5 s) said 0.87x
    assert dg.predicted_ratio([24.6, 13.1], [1.77, 1.25]) == pytest.approx(37.7 / (16.375 + 24.6 * (1 - 16.375 / 43.542)),
                                                                             rel=1e-3)
    assert dg.predicted_span([5.0, 5.0, 5.0], [2.0, 2.0, 2.0]) == pytest.approx(10.0)  # all end at once
    assert dg.predicted_span([8.0], [1.5]) == pytest.approx(8.0)  # alone: its solo time


def test_the_check_fails_at_no_gain_and_counts_unless_the_runs_measured_shares_rule_a_gain_out(dg):
    faster = dg.gain([100, 40], CURVES, [1000.0, 1000.0], [12.0, 10.0])
    slower = dg.gain([100, 40], CURVES, [1000.0, 1000.0], [25.0, 10.0])
    lines, check = dg.gain_check(faster, ["a", "b"], 300 * MIB, 380 * MIB, None, 1.4, 1.3)
    assert check.ok and check.counted and "1.67x, the plan predicted 1.40x" in lines[0]
    _, check = dg.gain_check(slower, ["a", "b"], 300 * MIB, 380 * MIB, None, 1.4, 1.2)
    assert not check.ok and check.counted and check.line().startswith(
        "check FAIL: together sooner than one after the other: 0.80x is not > 1.0")
    # the run's compute interfered: with its measured shares the plan predicts no gain, so it is not counted
    _, check = dg.gain_check(slower, ["a", "b"], 300 * MIB, 380 * MIB, None, 1.4, 0.85)
    assert not check.counted and "with the compute shares measured in this run the plan predicts 0.85x" in check.text
    assert check.line().startswith("check NOT COUNTED (fail): together sooner than one after the other: 0.80x")
    _, check = dg.gain_check(faster, ["a", "b"], 380 * MIB, 380 * MIB, None, 1.4)
    assert not check.ok and check.counted  # no sharing at a budget of the sum itself


def test_the_replanned_ratio_falls_when_the_measured_shares_say_the_jobs_compute_contends(dg):
    solo = [10.0, 10.0]
    apart = dg.replanned_ratio(CURVES, [0.5, 0.5], 1 << 30, solo)   # room for both: only compute counts
    contended = dg.replanned_ratio(CURVES, [1.0, 1.0], 1 << 30, solo)
    assert apart == pytest.approx(2.0) and contended == pytest.approx(1.0)
    assert dg.replanned_ratio(CURVES, [0.5, 0.5], 100 * MIB, solo) is None  # below the pair's floor: no plan


def test_uncoordinated_sharing_passes_the_budget_where_the_pools_bytes_meet(dg):
    t, held = dg.uncoordinated(CURVES, RESERVED, 300 * MIB, 10.0)
    assert 0 < t < 0.25 and held > 300 * MIB  # both rise from their start: they pass it in the first iterations
    assert dg.uncoordinated(CURVES, RESERVED, sum(RESERVED), 10.0) is None


