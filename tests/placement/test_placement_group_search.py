"""The shift search for groups of two to four jobs with equal iteration times (Note [Shift search]
in placement.shifts) against a brute force written here: identical triangular curves, a mixed
group of catalog estimates, random step curves, and budgets the greedy pass alone cannot meet.

The estimates in tests/placement/data were written by ``manage.py curve estimate KEY -p ...
-p data=synthetic --device cuda --points 512 --json PATH`` (workload and params in each file's meta);
the real snapshots are tests/curves/data's (its README.md says where they come from).
"""
import dataclasses
import functools
import itertools
import lzma
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.curves import MemoryCurve, load_curve, resampled_curve, triangular_curve
from placement.shifts import MAX_SEARCH_JOBS, best_shifts, exact_peak, least_peak_grid

GB = 1e9
DATA = Path(__file__).parent / "data"
SNAPSHOTS = Path(__file__).parents[1] / "curves" / "data"


def brute_force(curves, m, samples):
    """Least combined peak over every choice of shifts that are multiples of 1/m of the iteration
    (job 0 at 0), each priced by its largest sum of bytes at ``samples`` evenly spaced instants.
    Exact for curves whose steps start at multiples of 1/samples when m divides samples."""
    assert samples % m == 0
    step = samples // m
    vals = [c.at(np.arange(samples) / samples) for c in curves]
    last = np.stack([np.roll(vals[-1], j * step) for j in range(m)])  # (m, samples)
    best = np.inf
    for ks in itertools.product(range(m), repeat=len(curves) - 2):
        part = vals[0] + sum(np.roll(v, k * step) for v, k in zip(vals[1:-1], ks))
        best = min(best, float((part[None, :] + last).max(axis=1).min()))
    return best


@pytest.mark.parametrize("k, m", [(3, 200), (4, 40)])
def test_identical_triangular_curves_get_within_1_percent_of_the_brute_force_optimum(k, m):
    c = triangular_curve(1 * GB, 5 * GB)  # 200 steps: the brute force over 1/m steps is exact
    group = [c] * k
    optimum = brute_force(group, m, 200)
    assert exact_peak(group, best_shifts(group)) <= optimum * 1.01


@functools.cache
def real_curve(name):
    """A catalog estimate (``resnet50``, ...) or a real snapshot (``lm-fullstep-a``, ...) on 512 steps."""
    if name.startswith("lm-"):
        from zico_workloads.curves.snapshot import snapshot_curve

        raw = lzma.decompress((SNAPSHOTS / f"{name}.pickle.xz").read_bytes())
        return resampled_curve(snapshot_curve(raw), 512)
    return resampled_curve(load_curve(DATA / f"{name}-estimate.json"), 512)


def estimates(names):
    """Real curves on a 512-step grid, all given the first one's iteration time."""
    curves = [real_curve(name) for name in names]
    return [dataclasses.replace(c, iteration_s=curves[0].iteration_s) for c in curves]


@pytest.mark.parametrize("names, m", [
    (("resnet50", "bert-base", "gpt2-small"), 256),
    (("gpt2-small", "bert-base", "bert-base"), 256),
    (("lm-fullstep-a", "lm-ctx128-fullstep-b", "lm-ctx128-fullstep-b"), 256),
    (("resnet50", "bert-base", "gpt2-small", "resnet50"), 32),
])
def test_a_mixed_group_of_real_curves_gets_within_1_percent_of_a_fine_grid_search(names, m):
    group = estimates(names)
    optimum = brute_force(group, m, 512)
    peak = exact_peak(group, best_shifts(group))
    assert peak <= optimum * 1.01
    assert peak < sum(c.peak_bytes for c in group) * 0.9  # the curves do interleave


@st.composite
def step_groups(draw):
    """2-4 jobs of step curves on a grid of m in {4, 8, 16, 32} steps (levels in quarter GB),
    sometimes all the same curve."""
    m = draw(st.sampled_from([4, 8, 16, 32]))
    k = draw(st.integers(2, 4))

    def curve():
        persistent = draw(st.integers(1, 8)) * 0.25 * GB
        levels = np.array(draw(st.lists(st.integers(0, 16), min_size=m, max_size=m))) * 0.25 * GB
        return MemoryCurve(np.arange(m) / m, persistent + levels, 1.0, persistent)

    same = draw(st.booleans())
    first = curve()
    return m, [first] * k if same else [first] + [curve() for _ in range(k - 1)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(step_groups())
def test_random_step_curves_get_within_1_percent_of_the_brute_force_optimum(group_m):
    m, group = group_m
    # steps on the 1/m grid: the least peak over all real shifts is on that grid too (a
    # change of the combined order of steps happens where shift differences are multiples of 1/m)
    optimum = brute_force(group, m, m)
    assert exact_peak(group, best_shifts(group)) <= optimum * 1.01


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(step_groups(), st.floats(0.01, 0.05))
def test_a_budget_the_least_peak_meets_gets_shifts_that_fit(group_m, slack):
    m, group = group_m
    budget = brute_force(group, m, m) * (1 + slack)
    shifts = best_shifts(group, budget)
    assert shifts is not None
    assert exact_peak(group, shifts) <= budget * (1 + 1e-9)


def test_three_triangles_fit_a_budget_the_greedy_pass_cannot_meet():
    c = triangular_curve(1 * GB, 5 * GB)
    # greedy puts job 2 in phase with job 1 (2 x 5 GB fits), which leaves job 3 nothing under 11 GB
    budget = 10.0 * GB
    shifts = best_shifts([c, c, c], budget)
    assert shifts is not None and exact_peak([c, c, c], shifts) <= budget
    assert best_shifts([c, c, c], 8.9 * GB) is None  # no shifts beat the group's mean bytes (9 GB)


def test_the_search_refuses_group_sizes_it_does_not_handle():
    c = triangular_curve(1 * GB, 5 * GB)
    for k in (2, MAX_SEARCH_JOBS + 1):
        with pytest.raises(ValueError, match="searches 3 to"):
            least_peak_grid([c] * k)
