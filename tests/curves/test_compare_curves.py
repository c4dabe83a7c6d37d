"""Curve comparison tests: phase alignment moves only the time axis; errors are measured honestly."""
import pytest

from placement.curves import MemoryCurve, max_relative_error, triangular_curve
from workers.curves.compare import align_phases, compare, max_error_binned, max_error_within_shift


def with_phases(curve, backward, optimizer):
    return MemoryCurve(curve.fractions, curve.bytes, curve.iteration_s, curve.persistent_bytes, curve.source,
                       curve.device, {"phase_fractions": {"forward": 0.0, "backward": backward, "optimizer": optimizer}})


def test_a_curve_late_by_its_phases_matches_once_aligned():
    ref = with_phases(triangular_curve(10, 110, forward_fraction=0.5, steps=1000), 0.5, 0.9)
    late = with_phases(triangular_curve(10, 110, forward_fraction=0.6, steps=1000), 0.6, 0.92)
    figures = compare(late, ref)
    assert figures["peak_error"] == pytest.approx(0.0)
    assert figures["max_error"] > 0.1
    assert figures["max_error_phase_aligned"] < 0.02
    aligned = align_phases(late, ref.meta["phase_fractions"])
    assert aligned.peak_bytes == late.peak_bytes and aligned.meta["phase_fractions"]["backward"] == 0.5


def test_alignment_does_not_hide_a_wrong_amount_of_memory():
    ref = with_phases(triangular_curve(10, 110, steps=500), 0.5, 0.9)
    big = with_phases(triangular_curve(10, 140, steps=500), 0.5, 0.9)
    figures = compare(big, ref)
    assert figures["peak_error"] == pytest.approx(30 / 110)
    assert figures["max_error_phase_aligned"] == pytest.approx(30 / 140, rel=0.02)


def test_alignment_needs_phase_marks():
    with pytest.raises(ValueError, match="backward"):
        align_phases(triangular_curve(10, 110), {"backward": 0.5, "optimizer": 0.9})
    assert compare(triangular_curve(10, 110), triangular_curve(10, 110))["max_error_phase_aligned"] is None


def test_a_small_time_shift_is_forgiven_within_the_band_but_a_wrong_amount_is_not():
    base = MemoryCurve([0.0, 0.30, 0.60], [10.0, 110.0, 10.0], 1.0, 10.0)
    early = MemoryCurve([0.0, 0.29, 0.59], [10.0, 110.0, 10.0], 1.0, 10.0)
    taller = MemoryCurve([0.0, 0.30, 0.60], [10.0, 120.0, 10.0], 1.0, 10.0)
    assert max_relative_error(early, base) == pytest.approx(100 / 110)
    assert max_error_within_shift(early, base, 0.02) == 0.0
    assert max_error_within_shift(early, base, 0.0) == pytest.approx(100 / 110)
    assert max_error_within_shift(taller, base, 0.02) == pytest.approx(10 / 120)
    assert max_error_within_shift(base, taller, 0.02) == pytest.approx(10 / 120)


def step_curve(at, high=100.0, low=10.0):
    """low until ``at``, then high until 0.9, then low: one tall step."""
    return MemoryCurve([0.0, at, 0.9], [low, high, low], 1.0, low, "estimate")


def test_binned_error_forgives_a_step_moved_within_its_bin_only():
    ref = step_curve(0.5)
    inside = step_curve(0.5 + 0.5 / 256)       # half a bin late: same bins
    two_bins = step_curve(0.5 + 2.5 / 256)     # two bins late
    assert max_relative_error(inside, ref) > 0.5  # the point metric charges the whole step
    assert max_error_binned(inside, ref) == 0.0
    assert max_error_binned(two_bins, ref) == pytest.approx(0.9)
    assert max_error_binned(step_curve(0.5, high=80.0), ref) == pytest.approx(0.2)  # a wrong amount counts
    assert compare(inside, ref)["max_error_binned"] == 0.0
