"""Group evaluation: a group's sharing plan with its predicted slowdown. The time shifts of
jobs with equal iteration times come from placement.shifts (re-exported here).

Note [Equal and unequal iteration times]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
With equal iteration times (within ``PERIOD_RTOL``) the relative phase of the jobs stays put, so
a fixed time shift per job is a plan: :func:`~placement.shifts.best_shifts` searches shifts on
a grid of ``resolution`` steps per iteration with upper bounds from bin maxima, lower bounds
from bin minima and exact checks with :func:`~placement.shifts.exact_peak` where the bounds
disagree: every shift for two jobs, coarse to fine for three or more (Note [Shift search]).

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

from .gating import BUDGET_RTOL, minimal_feasible_budget
from .shifts import DEFAULT_RESOLUTION, PERIOD_RTOL, best_shifts, equal_periods, exact_peak, peak_by_shift
from .state import Job, SharingPlan

__all__ = ["DEFAULT_RESOLUTION", "PERIOD_RTOL", "best_shifts", "contention_factor", "equal_periods",
           "exact_peak", "peak_by_shift", "plan_group", "predict_gated"]

PREDICT_ITERATIONS = 4      # longest-job iterations per half of a gating prediction (see predict_gated)
PREDICT_RESOLUTION = 32     # coordinator bins per shortest iteration in predictions (speed over precision)


def contention_factor(shares: Sequence[float]) -> float:
    """``max(1, sum(shares))``: how much slower each job runs while all of them iterate
    (Note [Contention model] in placement.device_sim)."""
    return max(1.0, float(sum(shares)))


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

    Returns (peak bytes measured, or 0.0 without ``track_memory``; per-job slowdown). Each job runs
    the agent's own rules on the coordinator (placement.pacing, warm-up included, in the first half).
    With the defaults a prediction takes about 10 ms; on the scale benchmark's workload pairs its
    slowdowns lie within 3.6 % (median; 8.3 % at the 90th percentile) of a 24-iteration run at 128 bins
    (``scripts/bench_placement.py --accuracy``, docs/placement.md).
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
