"""Group evaluation on literal curves: Zico's textbook case (two identical triangular curves
meet at half an iteration) and the plan modes."""
import pytest

from placement.curves import triangular_curve
from placement.groups import best_shifts, contention_factor, exact_peak, peak_by_shift, plan_group
from placement.state import Job

GB = 1e9
M0, P = 1.5 * GB, 6.0 * GB


def test_two_identical_triangular_jobs_meet_half_an_iteration_apart():
    c = triangular_curve(M0, P, iteration_s=0.8, forward_fraction=0.5)
    shifts = best_shifts([c, c])
    assert shifts[0] == 0.0
    assert shifts[1] == pytest.approx(0.4, rel=0.01)
    assert exact_peak([c, c], shifts) == pytest.approx(P + M0, rel=0.01)


def test_with_the_tightest_budget_the_least_delay_shift_is_still_half_an_iteration():
    c = triangular_curve(M0, P, iteration_s=1.0)
    shifts = best_shifts([c, c], budget_bytes=(P + M0) * 1.001)
    assert shifts[1] == pytest.approx(0.5, rel=0.01)


def test_a_looser_budget_needs_a_smaller_shift():
    c = triangular_curve(M0, P, iteration_s=1.0)
    tight = best_shifts([c, c], budget_bytes=(P + M0) * 1.001)[1]
    loose = best_shifts([c, c], budget_bytes=(P + M0) * 1.3)[1]
    assert 0 < loose < tight
    assert exact_peak([c, c], [0, loose]) <= (P + M0) * 1.3


def test_no_shift_fits_below_peak_plus_the_partners_persistent_bytes():
    c = triangular_curve(M0, P)
    assert best_shifts([c, c], budget_bytes=(P + M0) * 0.98) is None
    assert plan_group([Job(1, "t", c), Job(2, "t", c)], (P + M0) * 0.98) is None


def test_the_shift_profile_is_lowest_at_half_an_iteration_and_highest_in_phase():
    c = triangular_curve(M0, P)
    prof = peak_by_shift(c, c, 128)
    assert prof.argmin() == 64
    assert prof[0] == pytest.approx(2 * P, rel=1e-6)


def test_unequal_iteration_times_are_refused_by_fixed_shifts():
    with pytest.raises(ValueError, match="unequal iteration times"):
        best_shifts([triangular_curve(M0, P, 1.0), triangular_curve(M0, P, 1.3)])


def test_plan_modes_follow_the_budget():
    c = triangular_curve(M0, P, 1.0)
    jobs = [Job(1, "t", c, compute_share=0.5), Job(2, "t", c, compute_share=0.5)]
    assert plan_group(jobs, 2 * P).mode == "independent"
    shift = plan_group(jobs, (P + M0) * 1.05)
    assert shift.mode == "shift" and shift.predicted_slowdown == (1.0, 1.0)
    assert shift.saving_bytes == pytest.approx(2 * P - shift.predicted_peak_bytes)
    d = triangular_curve(M0, P, 1.37, forward_fraction=0.4)
    gated = plan_group([Job(1, "t", c, compute_share=0.7), Job(2, "t", d, compute_share=0.7)], (P + M0) * 1.1)
    assert gated.mode == "gating"
    assert gated.predicted_peak_bytes <= (P + M0) * 1.1
    # gating adds delay on top of contention (1.4) for at least one job
    assert max(gated.predicted_slowdown) > contention_factor([0.7, 0.7])
