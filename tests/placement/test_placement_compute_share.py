"""A job's compute share from its solo and co-located step times (placement.compute_share): the formula, its
bounds and bad input, stored in the curve's meta through the curve format
(the scheduler's reading of it: tests/scheduling/test_scheduling_share_from_curve.py)."""
import pytest

from placement.compute_share import predicted_slowdown, relative_error, share_from_step_times
from placement.curves import triangular_curve

MiB = 1 << 20


@pytest.mark.parametrize("solo, together, copies, share", [
    (0.10, 0.16, 2, 0.8),    # two copies 1.6x slower each: 2s = 1.6
    (0.10, 0.30, 3, 1.0),    # three copies 3x slower: a saturating job
    (0.10, 0.25, 2, 1.0),    # slower than the model allows (2.5x for two): clipped to the whole device
    (0.10, 0.10, 2, 0.5),    # no contention seen: the largest share that shows none
    (0.10, 0.08, 2, 0.5),    # faster beside a copy (noise): same
])
def test_share_is_the_slowdown_over_the_copies_clipped_to_the_device(solo, together, copies, share):
    assert share_from_step_times(solo, together, copies) == pytest.approx(share)


def test_the_prediction_from_measured_shares_reproduces_the_measured_slowdown_of_identical_copies():
    s = share_from_step_times(0.2, 0.34, 2)
    assert predicted_slowdown([s, s]) == pytest.approx(0.34 / 0.2)
    assert predicted_slowdown([0.3, 0.4]) == 1.0  # under one device: no slowdown
    assert relative_error(1.2, 1.0) == pytest.approx(0.2) and relative_error(0.9, 1.0) == pytest.approx(-0.1)


@pytest.mark.parametrize("args, match", [
    ((0, 0.1, 2), "solo_step_s"), ((0.1, float("nan"), 2), "colocated_step_s"), ((0.1, -1, 2), "colocated_step_s"),
    ((0.1, 0.2, 1), "copies"), ((0.1, 0.2, True), "copies"), ((True, 0.2, 2), "solo_step_s"),
])
def test_bad_step_times_are_refused_naming_the_argument(args, match):
    with pytest.raises(ValueError, match=match):
        share_from_step_times(*args)


def test_a_share_outside_the_device_is_refused_by_the_prediction():
    with pytest.raises(ValueError, match="compute share"):
        predicted_slowdown([0.5, 1.5])
