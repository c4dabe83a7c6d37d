"""scripts/demo_plan.py: the demo's budget is one the scheduler's own policy accepts for the pair, below the sum
of their solo peaks, and its checks fail with their figures when a condition does not hold."""
import pytest

from placement.curves import triangular_curve
from placement.policies import MemoryAware

MIB = 1 << 20


@pytest.fixture(scope="module")
def dp(load_script):
    return load_script("demo_plan.py", "zico_demo_plan")


CURVES = [triangular_curve(5 * MIB, 110 * MIB, iteration_s=0.12), triangular_curve(5 * MIB, 190 * MIB, iteration_s=0.5)]
RESERVED = [150 * MIB, 230 * MIB]
SHARES = [0.5, 0.5]


def _together(dp, policy, budget):
    return dp.placed_together(policy.place(dp.pair_state(CURVES, SHARES, budget, 0.8))) is not None


def test_the_budget_is_one_the_policy_accepts_below_the_sum_of_solo_peaks(dp):
    policy = MemoryAware(group_share=0.8)
    choice = dp.choose_budget(policy, CURVES, SHARES, RESERVED, 200 * MIB, 0.8)
    assert choice.plan is not None and choice.budget_bytes < sum(RESERVED)
    assert _together(dp, policy, choice.budget_bytes)
    low = choice.lowest_accepted_bytes
    assert low <= choice.budget_bytes < choice.capacity_bytes
    assert low == 200 * MIB or not _together(dp, policy, low - dp.GRID_STEP)  # the threshold, from the policy
    assert max(choice.plan.predicted_slowdown) <= policy.max_slowdown


def test_a_slowdown_limit_of_one_leaves_no_budget_below_the_sum_and_says_so(dp):
    policy = MemoryAware(group_share=0.8, max_slowdown=1.0)
    choice = dp.choose_budget(policy, CURVES, SHARES, RESERVED, 200 * MIB, 0.8)
    assert choice.plan is None and choice.lowest_accepted_bytes is None
    assert choice.budget_bytes < sum(RESERVED)  # the demo still runs below the sum, to show what happens
    assert not _together(dp, policy, choice.budget_bytes)


def test_spans_overlap_only_on_one_device_and_in_time(dp):
    assert dp.overlapping([(1, 0, 10)], [(1, 5, 20)])
    assert not dp.overlapping([(1, 0, 10)], [(1, 10, 20)])  # one after the other
    assert not dp.overlapping([(1, 0, 10)], [(2, 5, 20)])   # two devices


def test_each_check_fails_with_its_figures(dp):
    ok = dp.checks(["succeeded", "succeeded"], True, 300 * MIB, 320 * MIB, 380 * MIB, "h:cpu0")
    assert all(c.ok for c in ok) and len(ok) == 4
    bad = dp.checks(["succeeded", "failed"], False, 330 * MIB, 380 * MIB, 380 * MIB, "h:cpu0")
    lines = [c.line() for c in bad]
    assert [c.ok for c in bad] == [False, False, True, False]
    assert "succeeded, failed" in lines[0] and "one after the other" in lines[1]
    assert "380.0 MiB < sum of solo peaks 380.0 MiB" in lines[3]
    none = dp.checks(["succeeded"] * 2, True, None, 320 * MIB, 380 * MIB, "h:cpu0")
    assert not none[2].ok and "nothing stored" in none[2].text


def test_the_profiled_demo_pair_is_co_located_within_the_platforms_slowdown_limit(dp):
    # the demo's pair as scripts/demo.py profiles it, planned by the scheduler's policy (zico.scheduling.service
    # .make_policy) with the default ZICO_MAX_SLOWDOWN of 1.6 and the demo's gate share; the prediction runs the
    # agent's own pacing rules (placement.pacing), Note [Expected iteration time]
    import json
    from pathlib import Path

    from placement.curves import curve_from_dict
    from placement.gating import overhead_headroom
    from tools.colocate import feasible_floor

    d = json.loads((Path(__file__).resolve().parents[1] / "placement" / "data" / "demo-pair-profile.json").read_text())
    curves, reserved = [curve_from_dict(c) for c in d["curves"]], d["reserved_bytes"]
    share = 1 - overhead_headroom(sum(c.peak_bytes for c in curves), sum(reserved))
    policy = MemoryAware(max_slowdown=1.6, group_share=share)
    choice = dp.choose_budget(policy, curves, SHARES, reserved, feasible_floor(curves, reserved), share)
    assert choice.plan is not None and choice.plan.mode in ("gating", "shift")
    assert choice.budget_bytes < sum(reserved)
    assert max(choice.plan.predicted_slowdown) <= 1.6
