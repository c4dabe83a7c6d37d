"""Group evaluation: combined peak of co-located jobs as a function of time shifts, the best
shifts for a budget, and a group's sharing plan with its predicted slowdown.

Note [Equal and unequal iteration times]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
With equal iteration times (within ``PERIOD_RTOL``) the relative phase of the jobs stays put, so
a fixed time shift per job is a plan: :func:`best_shifts` searches shifts on a grid of
``resolution`` steps per iteration (upper bounds from bin maxima, lower bounds from bin
minima, exact checks with :func:`exact_peak` where the bounds disagree).

With unequal iteration times the relative phase drifts through every value, so any fixed
shift eventually meets the worst case (sum of peaks). We do not bound the drift; we plan
**per-iteration gating**: the coordinator gates every iteration start (placement.gating), and
the plan's slowdown is *predicted by running the same coordinator* on a virtual clock for a
few iterations (placement.device_sim). The gating invariant keeps the predicted peak within the
budget. The coordinator also gates equal-period groups, which keeps them on their shifts.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .curves import MemoryCurve, combined_bytes, resample
from .gating import BUDGET_RTOL, minimal_feasible_budget
from .state import Job, SharingPlan

PERIOD_RTOL = 1e-3          # iteration times this close count as equal
DEFAULT_RESOLUTION = 256    # shift grid: steps per iteration
PREDICT_ITERATIONS = 2      # longest-job iterations per half of a gating prediction (see predict_gated)
SNAP = 1e-9                 # of an iteration: see exact_peak
PREDICT_RESOLUTION = 32     # coordinator bins per shortest iteration in predictions (speed over precision)


def contention_factor(shares: Sequence[float]) -> float:
    """``max(1, sum(shares))``: how much slower each job runs while all of them iterate
    (Note [Contention model] in placement.device_sim)."""
    return max(1.0, float(sum(shares)))


def equal_periods(curves: Sequence[MemoryCurve], rtol: float = PERIOD_RTOL) -> bool:
    """True when every iteration time is within ``rtol`` of the first."""
    t0 = curves[0].iteration_s
    return all(abs(c.iteration_s - t0) <= rtol * t0 for c in curves)


def _bin_min(curve: MemoryCurve, n: int) -> np.ndarray:
    """Smallest bytes inside each of ``n`` equal bins of the iteration; shape (n,)."""
    out = curve.at(np.arange(n) / n).copy()
    inner = np.minimum((curve.fractions * n).astype(np.int64), n - 1)
    ok = curve.fractions < 1.0
    np.minimum.at(out, inner[ok], curve.bytes[ok])
    return out


def _shift_matrix(n: int) -> np.ndarray:
    """idx[k, m] = (m - k) mod n: bin m of a curve started k bins later."""
    return (np.arange(n)[None, :] - np.arange(n)[:, None]) % n


def peak_by_shift(a: MemoryCurve, b: MemoryCurve, resolution: int = DEFAULT_RESOLUTION) -> np.ndarray:
    """Upper bound of the combined peak when ``b``'s iterations start ``k / resolution`` of an
    iteration after ``a``'s, for k = 0..resolution-1; shape (resolution,), bytes.

    Raises ValueError unless the two iteration times are equal (see :func:`equal_periods`).
    """
    if not equal_periods([a, b]):
        raise ValueError(f"unequal iteration times ({a.iteration_s} s, {b.iteration_s} s): use plan_group")
    ua, ub = resample(a, resolution), resample(b, resolution)
    return (ua[None, :] + ub[_shift_matrix(resolution)]).max(axis=1)


def best_shifts(curves: Sequence[MemoryCurve], budget_bytes: float | None = None,
                resolution: int = DEFAULT_RESOLUTION) -> tuple[float, ...] | None:
    """Time shifts (seconds, first job 0) for jobs with equal iteration times.

    Without a budget: the shifts with the smallest combined peak. With a budget: the smallest
    shifts (least delay) whose exact combined peak is within the budget, which is where the
    coordinator's gating settles; None when no shift on the grid fits. More than two jobs are
    added one at a time in the given order (greedy); without a budget, two passes of coordinate
    descent then move single jobs while the exact peak drops.

    Raises ValueError on unequal iteration times or an empty group.
    """
    if not curves:
        raise ValueError("best_shifts needs at least one curve")
    if not equal_periods(curves):
        raise ValueError("unequal iteration times: plan per-iteration gating with plan_group")
    n, period = resolution, curves[0].iteration_s
    idx = _shift_matrix(n)
    up_sum, lo_sum = resample(curves[0], n), _bin_min(curves[0], n)
    ks = [0]
    for i in range(1, len(curves)):
        up = (up_sum[None, :] + resample(curves[i], n)[idx]).max(axis=1)
        lo = (lo_sum[None, :] + _bin_min(curves[i], n)[idx]).max(axis=1)
        part = list(curves[: i + 1])
        if budget_bytes is None:
            k = _least_peak_shift(part, ks, up, lo, period, n)
        else:
            k = _least_fitting_shift(part, ks, up, lo, period, n, budget_bytes)
            if k is None:
                return None
        ks.append(k)
        up_sum = up_sum + resample(curves[i], n)[idx[k]]
        lo_sum = lo_sum + _bin_min(curves[i], n)[idx[k]]
    if budget_bytes is None and len(curves) > 2:
        ks = _refine(list(curves), ks, period, n)
    return tuple(k * period / n for k in ks)


def _refine(curves: list[MemoryCurve], ks: list[int], period: float, n: int, passes: int = 2) -> list[int]:
    """Coordinate descent after the greedy pass: move one job at a time to the shift with the
    least combined upper bound given the others; keep a move only if the exact peak drops."""
    idx = _shift_matrix(n)
    ups = [resample(c, n) for c in curves]
    best = exact_peak(curves, [k * period / n for k in ks])
    for _ in range(passes):
        moved = False
        for i in range(1, len(curves)):
            rest = sum(ups[j][idx[ks[j]]] for j in range(len(curves)) if j != i)
            k = int(np.argmin((rest[None, :] + ups[i][idx]).max(axis=1)))
            trial = ks[:i] + [k] + ks[i + 1:]
            peak = exact_peak(curves, [kk * period / n for kk in trial])
            if peak < best * (1 - 1e-9):
                ks, best, moved = trial, peak, True
        if not moved:
            break
    return ks


def exact_peak(curves: Sequence[MemoryCurve], shifts_s: Sequence[float]) -> float:
    """Combined peak (bytes) of jobs with equal iteration times started at ``shifts_s``.

    Evaluated just after every step start (``SNAP`` of an iteration later), so two steps that
    meet at the same instant but round to slightly different floats do not add up to a
    spike that lasts no time at all. Steps shorter than ``SNAP`` iterations are ignored.
    """
    period = curves[0].iteration_s
    start = max(shifts_s)
    pts = np.concatenate([np.mod(s + c.fractions * c.iteration_s - start, period) for c, s in zip(curves, shifts_s)])
    t = start + np.mod(pts + SNAP * period, period)
    return float(combined_bytes(curves, shifts_s, t).max())


def _exact(curves, ks, k, period, n) -> float:
    return exact_peak(curves, [kk * period / n for kk in ks + [k]])


def _least_fitting_shift(curves, ks, up, lo, period, n, budget) -> int | None:
    limit = budget * (1 + BUDGET_RTOL)
    for k in range(n):
        if up[k] <= limit:
            return k
        if lo[k] <= limit and _exact(curves, ks, k, period, n) <= limit:
            return k
    return None


def _least_peak_shift(curves, ks, up, lo, period, n) -> int:
    best_up = up.min()
    cands = np.flatnonzero(lo <= best_up)  # only these can beat the best upper bound
    exact = [(_exact(curves, ks, int(k), period, n), int(k)) for k in cands[:64]]
    return min(exact)[1] if exact else int(np.argmin(up))


def plan_group(jobs: Sequence[Job], budget_bytes: float, *, resolution: int = DEFAULT_RESOLUTION) -> SharingPlan | None:
    """The sharing plan for ``jobs`` on one device under ``budget_bytes``, or None when the
    group cannot run within it (budget below :func:`~placement.gating.minimal_feasible_budget`).

    Predicted slowdown per job (co-located iteration time over solo): the contention factor
    for ``"independent"`` and ``"shift"`` plans (every job always iterating; the one-time
    initial shift is not counted); measured on a virtual-clock run of the coordinator for
    ``"gating"`` plans. Raises ValueError on an empty group.
    """
    if not jobs:
        raise ValueError("plan_group needs at least one job")
    curves = [j.curve for j in jobs]
    ids = tuple(j.id for j in jobs)
    total = float(sum(c.peak_bytes for c in curves))
    if minimal_feasible_budget(curves) > budget_bytes * (1 + BUDGET_RTOL):
        return None
    factor = contention_factor([j.compute_share for j in jobs])
    zeros = tuple(0.0 for _ in jobs)
    if total <= budget_bytes * (1 + BUDGET_RTOL):
        # unequal periods drift through every phase: the worst case is the sum of peaks
        peak = exact_peak(curves, zeros) if equal_periods(curves) else total
        return SharingPlan(budget_bytes, ids, "independent", zeros, peak, tuple(factor for _ in jobs), total)
    if equal_periods(curves):
        shifts = best_shifts(curves, budget_bytes, resolution)
        if shifts is not None:
            peak = exact_peak(curves, shifts)
            return SharingPlan(budget_bytes, ids, "shift", shifts, peak, tuple(factor for _ in jobs), total)
    # gating fills the device up to its budget: the budget is the predicted peak (an upper
    # bound; measuring the simulated peak would cost a quarter more time per prediction)
    _, slowdown = predict_gated(jobs, budget_bytes, track_memory=False)
    return SharingPlan(budget_bytes, ids, "gating", zeros, min(float(budget_bytes), total), slowdown, total)


def predict_gated(jobs: Sequence[Job], budget_bytes: float, iterations: int = PREDICT_ITERATIONS,
                  resolution: int = PREDICT_RESOLUTION, track_memory: bool = True) -> tuple[float, tuple[float, ...]]:
    """Run the coordinator on a virtual clock (placement.device_sim) for ``2 * iterations`` of
    the longest iteration (times the contention factor) and measure over the second half.

    Returns (peak bytes measured, or 0.0 without ``track_memory``; per-job slowdown). With the
    defaults a prediction takes a few ms; on the scale benchmark's workloads its slowdowns are
    within 5 % of a 24-iteration run at 128 bins (scripts/bench_placement.py, docs/placement.md).
    """
    from .device_sim import DeviceRun  # device_sim imports the coordinator, which imports gating

    longest = max(j.curve.iteration_s for j in jobs)
    horizon = 2 * iterations * longest * contention_factor([j.compute_share for j in jobs])
    counts = {j.id: math.ceil(horizon / j.curve.iteration_s) + 2 for j in jobs}  # nobody finishes
    run = DeviceRun(budget_bytes, track_memory=track_memory, resolution=resolution)
    for j in jobs:
        run.add_job(j, counts[j.id])
    marks: dict = {}
    half = horizon / 2
    run.advance_to(half)
    for jid, r in run.jobs.items():
        marks[jid] = (run.now, counts[jid] - r.iterations_left + r.fraction)
    run.advance_to(horizon)
    slow = []
    for j in jobs:
        r = run.jobs.get(j.id)
        t0, it0 = marks.get(j.id, (half, 0.0))
        done = (counts[j.id] - r.iterations_left + r.fraction) if r else counts[j.id]
        rate = (done - it0) / max(run.now - t0, 1e-12)
        # no job runs faster than solo; the max only removes float rounding below 1.0
        slow.append(math.inf if rate <= 0 else max(1.0, 1.0 / (rate * j.curve.iteration_s)))
    return run.stats.peak_bytes, tuple(slow)
