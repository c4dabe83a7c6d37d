"""scripts/demo_gain.py: the demo's gain is the sum of solo times over the pair's span together, its check fails with
its figures at a ratio of 1.0 or less, counts only where the plan predicts a gain, and uncoordinated sharing is found
to pass the budget where the measured curves (as each pool held them) meet."""
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
    assert dg.predicted_ratio([10.0, 10.0], [1.2, 1.5]) == pytest.approx(20 / 15)
    assert dg.predicted_ratio([10.0, 10.0], [1.2, None]) is None


def test_the_check_fails_at_no_gain_and_counts_only_where_the_plan_predicts_one(dg):
    faster = dg.gain([100, 40], CURVES, [1000.0, 1000.0], [12.0, 10.0])
    slower = dg.gain([100, 40], CURVES, [1000.0, 1000.0], [25.0, 10.0])
    lines, check, counted = dg.gain_check(faster, ["a", "b"], 300 * MIB, 380 * MIB, None, 1.4)
    assert check.ok and counted and "1.67x, the plan predicted 1.40x" in lines[0]
    _, check, counted = dg.gain_check(slower, ["a", "b"], 300 * MIB, 380 * MIB, None, 1.4)
    assert not check.ok and counted and check.line().startswith("check FAIL: together sooner than one after the "
                                                                "other: 0.80x is not > 1.0")
    _, check, counted = dg.gain_check(slower, ["a", "b"], 300 * MIB, 380 * MIB, None, 0.7)
    assert not check.ok and not counted and "the plan itself predicted 0.70x" in check.text
    assert check.line().startswith("check NOT COUNTED (fail): together sooner than one after the other: 0.80x "
                                   "is not > 1.0")
    _, check, _ = dg.gain_check(faster, ["a", "b"], 380 * MIB, 380 * MIB, None, 1.4)
    assert not check.ok  # no sharing at a budget of the sum itself


def test_uncoordinated_sharing_passes_the_budget_where_the_pools_bytes_meet(dg):
    t, held = dg.uncoordinated(CURVES, RESERVED, 300 * MIB, 10.0)
    assert 0 < t < 0.25 and held > 300 * MIB  # both rise from their start: they pass it in the first iterations
    assert dg.uncoordinated(CURVES, RESERVED, sum(RESERVED), 10.0) is None


