"""The gating rule's binned arithmetic (placement.gating) against its plain definitions, kept here as they
were written before it was made faster: the same bins, the same least start and the same gating
predictions, bit for bit, on random curves, profiles and commitments and on whole predictions of groups of
two and three (so the scheduler's decisions cannot change with it). Also the memo of derived curves."""
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view

from placement import coordinator, gating
from placement.curves import MemoryCurve, derived_curve, load_curve, resampled_curve, triangular_curve
from placement.gating import Commitment
from placement.groups import predict_gated
from placement.state import Job

GB = 1e9
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DATA = Path(__file__).parent / "data"


# -- the definitions (placement.gating before Note [Least start bin]) --------------------------------------
def ref_bin_max(curve, start_fraction, bin_fraction, nbins, after):
    edges = start_fraction + np.arange(nbins) * bin_fraction
    out = np.where(edges < 1.0, curve.at(np.minimum(edges, 1.0 - 1e-12)), after)
    f = curve.fractions
    lo = int(np.searchsorted(f, start_fraction, side="right"))
    hi = int(np.searchsorted(f, min(1.0, start_fraction + nbins * bin_fraction), side="left"))
    if hi > lo:
        idx = np.minimum(np.floor((f[lo:hi] - start_fraction) / bin_fraction).astype(np.int64), nbins - 1)
        bins, first = np.unique(idx, return_index=True)
        out[bins] = np.maximum(out[bins], np.maximum.reduceat(curve.bytes[lo:hi], first))
    end_bin = math.floor((1.0 - start_fraction) / bin_fraction)
    if 0 <= end_bin < nbins:
        out[end_bin] = max(out[end_bin], after)
    return out


def ref_iteration_bins(curve, iteration_s, dt):
    n = max(1, math.ceil(iteration_s / dt - 1e-9))
    return ref_bin_max(curve, 0.0, dt / iteration_s, n, curve.persistent_bytes)


def ref_committed_profile(others, dt, nbins):
    total = np.zeros(nbins)
    for c in others:
        persistent = c.curve.persistent_bytes
        if c.start_in_s is not None:
            k0 = int(math.floor(c.start_in_s / dt + 1e-9))
            prof = np.full(nbins, persistent)
            if not c.loaded:
                prof[: min(k0, nbins)] = 0.0
            seg = ref_iteration_bins(c.curve, c.iteration_s, dt)
            k1 = min(nbins, k0 + len(seg))
            if k0 < nbins:
                prof[k0:k1] = np.maximum(prof[k0:k1], seg[: k1 - k0])
            total += prof
        elif c.fraction is not None:
            f = min(max(float(c.fraction), 0.0), 1.0 - 1e-9)
            total += ref_bin_max(c.curve, f, dt / c.iteration_s, nbins, persistent)
        elif c.loaded:
            total += persistent
    return total


def ref_least_start_bin(profile, job_bins, budget_bytes, tail_bytes=0.0):
    r = len(job_bins)
    peaks = (sliding_window_view(profile, r) + job_bins[None, :]).max(axis=1)
    if tail_bytes:
        later = np.maximum.accumulate(profile[::-1])[::-1]
        after = np.append(later[r:], 0.0)[: len(peaks)]
        peaks = np.maximum(peaks, after + tail_bytes)
    ok = np.flatnonzero(peaks <= budget_bytes * (1 + gating.BUDGET_RTOL))
    return int(ok[0]) if len(ok) else None


def ref_least_delay_s(job, others, budget_bytes, dt, cache=None):
    bins = ref_iteration_bins(job.curve, job.iteration_s, dt)
    n = gating.horizon_bins(others, dt, len(bins))
    tail = 0.0 if job.loaded else job.curve.persistent_bytes
    k = ref_least_start_bin(ref_committed_profile(others, dt, n), bins, budget_bytes, tail)
    return None if k is None else k * dt


# -- random inputs ---------------------------------------------------------------------------------------
@st.composite
def curves(draw):
    """A step curve of 1..60 steps (one step: a flat curve, as a warm-up is), bytes up to 8 GB."""
    n = draw(st.integers(1, 60))
    cuts = sorted(draw(st.lists(st.floats(0.0, 1.0), min_size=n - 1, max_size=n - 1)))
    levels = np.array(draw(st.lists(st.floats(0.0, 8.0), min_size=n, max_size=n))) * GB
    persistent = float(levels.min()) * draw(st.floats(0.0, 1.0))
    return MemoryCurve(np.array([0.0] + cuts), levels, draw(st.sampled_from([0.05, 0.2, 0.77, 1.0])), persistent)


@SETTINGS
@given(curves(), st.floats(0.0, 1.0), st.floats(1e-3, 0.5), st.integers(1, 700), st.floats(0.0, 8.0))
def test_bin_max_equals_its_definition(curve, start, width, nbins, after_gb):
    got = gating.bin_max(curve, start, width, nbins, after_gb * GB)
    assert np.array_equal(got, ref_bin_max(curve, start, width, nbins, after_gb * GB))


@st.composite
def profiles(draw):
    """A profile (K bins) and a job's bins (R <= K) shaped as the gating rule sees them: others holding
    more now, falling to their persistent bytes later, plus noise; a job's bins rising and falling."""
    k = draw(st.integers(1, 900))
    r = draw(st.integers(1, k))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    fall = draw(st.integers(0, k))
    profile = np.where(np.arange(k) < fall, rng.uniform(2, 9, k), rng.uniform(1, 3, k)) * GB
    if draw(st.booleans()):
        profile = np.maximum.accumulate(profile[::-1])[::-1]  # never rising, as commitments that end
    peak_at = draw(st.integers(0, r - 1))
    job = (1 + 5 * np.minimum(np.arange(r) / max(peak_at, 1), 1) * rng.uniform(0.5, 1, r)) * GB
    budget = draw(st.floats(3.0, 16.0)) * GB
    tail = draw(st.sampled_from([0.0, 0.5 * GB, 2 * GB]))
    return profile, job, budget, tail


@SETTINGS
@given(profiles())
def test_least_start_bin_equals_its_definition(args):
    assert gating.least_start_bin(*args) == ref_least_start_bin(*args)


@st.composite
def commitments(draw):
    """A requesting job and 1..3 others in flight, idle, newcomers or holding reservations."""
    others = []
    for _ in range(draw(st.integers(1, 3))):
        curve, it = draw(curves()), draw(st.sampled_from([0.05, 0.2, 0.5, 1.3]))
        kind = draw(st.sampled_from(["flight", "idle", "reserved"]))
        if kind == "flight":
            others.append(Commitment(curve, it, fraction=draw(st.floats(0.0, 1.0))))
        elif kind == "idle":
            others.append(Commitment(curve, it, loaded=draw(st.booleans())))
        else:
            others.append(Commitment(curve, it, start_in_s=draw(st.floats(0.0, 2.0)), loaded=draw(st.booleans())))
    job = Commitment(draw(curves()), draw(st.sampled_from([0.05, 0.2, 0.5, 1.3])), loaded=draw(st.booleans()))
    dt = min([job.iteration_s] + [c.iteration_s for c in others]) / draw(st.sampled_from([8, 32, 64]))
    return job, others, draw(st.floats(1.0, 24.0)) * GB, dt


@SETTINGS
@given(commitments())
def test_least_delay_equals_its_definition_with_and_without_the_bins_memo(args):
    want = ref_least_delay_s(*args)
    memo: dict = {}
    assert gating.least_delay_s(*args) == want
    assert gating.least_delay_s(*args, cache=memo) == want
    assert gating.least_delay_s(*args, cache=memo) == want  # from the memo


# -- whole predictions -----------------------------------------------------------------------------------
def _groups():
    """Groups of two and three with unequal iteration times, as the scale benchmark forms them
    (scripts/bench_placement.py's workloads), and of catalog estimates, at budgets between their
    minimal feasible budget and the sum of their peaks."""
    sys.path.insert(0, str(Path(__file__).parents[2] / "scripts"))
    from bench_placement import workload_curves

    rng = random.Random(5)
    pool = workload_curves(12, rng)
    estimates = [resampled_curve(load_curve(DATA / f"{n}-estimate.json"), 512)
                 for n in ("resnet50", "bert-base", "gpt2-small")]
    estimates = [MemoryCurve(c.fractions, c.bytes, t, c.persistent_bytes) for c, t in zip(estimates, (0.3, 0.5, 0.8))]
    out = []
    for size in (2, 3, 3):
        for _ in range(6):
            curves = rng.sample(pool, size)
            if len({c.iteration_s for c in curves}) > 1:
                out.append(curves)
    out.append(estimates)
    out.append([estimates[0], triangular_curve(1 * GB, 5 * GB, 0.2), estimates[2]])
    return [(c, rng.uniform(0.2, 0.9)) for c in out]


@pytest.mark.parametrize("curves, where", _groups())
def test_gating_predictions_are_unchanged_bit_for_bit(curves, where, monkeypatch):
    lo = gating.minimal_feasible_budget(curves)
    budget = lo + where * (sum(c.peak_bytes for c in curves) - lo)
    jobs = [Job(i, "t", c, compute_share=s) for i, (c, s) in enumerate(zip(curves, (0.3, 0.5, 0.3)))]
    now = predict_gated(jobs, budget, track_memory=False)
    tracked = predict_gated(jobs, budget)
    monkeypatch.setattr(coordinator, "least_delay_s", ref_least_delay_s)
    assert predict_gated(jobs, budget, track_memory=False) == now
    assert predict_gated(jobs, budget) == tracked


# -- derived curves --------------------------------------------------------------------------------------
def test_a_derived_curve_is_built_once_per_curve_and_never_served_for_another():
    a, b = triangular_curve(1 * GB, 5 * GB), triangular_curve(1 * GB, 5 * GB)
    built = []

    def flat(c):
        built.append(c)
        return MemoryCurve([0.0], [c.peak_bytes], c.iteration_s, c.persistent_bytes)

    first = derived_curve(a, "test-flat", flat)
    assert derived_curve(a, "test-flat", flat) is first and built == [a]
    assert derived_curve(b, "test-flat", flat) is not first and built == [a, b]
    # an entry left by a freed curve whose id another curve now has is rebuilt, not served
    from placement import curves as curves_module

    stale = triangular_curve(2 * GB, 3 * GB)
    curves_module._derived[(id(stale), "test-flat")] = (a, first)
    assert derived_curve(stale, "test-flat", flat).peak_bytes == stale.peak_bytes and built[-1] is stale
