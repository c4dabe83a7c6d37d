"""Fixed time shifts for co-located jobs with equal iteration times: the combined peak as a
function of the shifts (bounds on a grid, exact values) and the search for the best shifts of a
group of any size. placement.groups builds sharing plans on top of it (Note [Equal and unequal
iteration times] there says when fixed shifts apply).

Note [Shift search]
~~~~~~~~~~~~~~~~~~~
Shifts are multiples of one grid step (1/n of the iteration); job 0 starts at 0. Two bounds
price a whole *box* of shifts at once: with every job's curve cut into n bins, ``upper`` (bin
maxima, rolled by each job's shift and summed) bounds the exact peak at the box's corner, and
``lower`` (bin minima widened to two neighbouring bins, so that it holds for every shift inside
a box one step wide) bounds the exact peak of every shift in the box from below.

Two jobs: every one of the n shifts is priced by both bounds (an n x n table), and only shifts
whose lower bound beats the best upper bound get an exact check (:func:`exact_peak`).

Three or more jobs (k - 1 free shifts): coarse to fine. (1) Every box of a coarse grid of ``n0``
steps is priced (``n0`` the largest power of two with ``n0 ** k <= EXHAUSTIVE_CELLS``: 64 steps
for three jobs, 32 for four, 16 for five; the last job's shift is a max-plus product, so a
level costs ``n0 ** k`` additions). (2) The grid step is halved level by level up to ``resolution``;
each level keeps the ``BEAM`` boxes with the lowest lower bounds among those that could still
beat the best upper bound by more than ``SEARCH_RTOL`` (the rest provably cannot), plus the
``BEAM // 4`` with the best upper bounds (so the best corner found so far is never dropped), and
prices their 2 ** (k - 1) children. (3) A window of +-2 steps (+-1 for five jobs or more) around
the three best corners is priced, and the three best get an exact check. Without the beam cap
(1)-(2) would be a branch and bound; the cap makes it a heuristic. Against brute force over a
fine grid (tests/placement/test_placement_group_search.py, docs/placement.md) it is within 1 %
for identical triangular curves, mixed catalog estimates and random step curves on grids up to
``n0`` steps (where level (1) alone is exhaustive); random curves with finer detail than ``n0``
(no structure at the coarse grid's scale) can end a few per cent above the optimum.

With a budget the least-delay shifts are wanted (where gating settles): jobs are added one at a
time at their smallest fitting shift (greedy); when that finds none for three or more jobs, the
least-peak search runs, and if its shifts fit, each job in turn is moved back to its smallest
shift that still fits.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .curves import MemoryCurve, combined_bytes, resample
from .gating import BUDGET_RTOL

PERIOD_RTOL = 1e-3          # iteration times this close count as equal
DEFAULT_RESOLUTION = 256    # shift grid: steps per iteration
SNAP = 1e-9                 # of an iteration: see exact_peak
EXHAUSTIVE_CELLS = 1 << 20  # coarse level of the search: n0 ** k bin sums at most
BEAM = 32                   # boxes refined per level of the search (see Note [Shift search])
SEARCH_RTOL = 2e-3          # a box that cannot beat the best corner by this much is dropped
MAX_SEARCH_JOBS = 6         # more jobs than this: shifts chosen one job at a time (greedy)


def equal_periods(curves: Sequence[MemoryCurve], rtol: float = PERIOD_RTOL) -> bool:
    """True when every iteration time is within ``rtol`` of the first."""
    t0 = curves[0].iteration_s
    return all(abs(c.iteration_s - t0) <= rtol * t0 for c in curves)


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


def _bin_min(curve: MemoryCurve, n: int) -> np.ndarray:
    """Smallest bytes inside each of ``n`` equal bins of the iteration; shape (n,)."""
    out = curve.at(np.arange(n) / n).copy()
    inner = np.minimum((curve.fractions * n).astype(np.int64), n - 1)
    ok = curve.fractions < 1.0
    np.minimum.at(out, inner[ok], curve.bytes[ok])
    return out


def _rolled(p: np.ndarray) -> np.ndarray:
    """The view r[k, m] = p[(m - k) mod n] (bin m of a curve started k bins later), no copy."""
    n = len(p)
    return sliding_window_view(np.concatenate([p, p]), n)[n:0:-1]


def peak_by_shift(a: MemoryCurve, b: MemoryCurve, resolution: int = DEFAULT_RESOLUTION) -> np.ndarray:
    """Upper bound of the combined peak when ``b``'s iterations start ``k / resolution`` of an
    iteration after ``a``'s, for k = 0..resolution-1; shape (resolution,), bytes.

    Raises ValueError unless the two iteration times are equal (see :func:`equal_periods`).
    """
    if not equal_periods([a, b]):
        raise ValueError(f"unequal iteration times ({a.iteration_s} s, {b.iteration_s} s): use plan_group")
    return (resample(a, resolution)[None, :] + _rolled(resample(b, resolution))).max(axis=1)


def best_shifts(curves: Sequence[MemoryCurve], budget_bytes: float | None = None,
                resolution: int = DEFAULT_RESOLUTION) -> tuple[float, ...] | None:
    """Time shifts (seconds, first job 0) for jobs with equal iteration times.

    Without a budget: the shifts with the least combined peak (every shift on the grid for two
    jobs, the search of Note [Shift search] for three to ``MAX_SEARCH_JOBS``, one job at a time
    beyond). With a budget: the smallest shifts (least delay) whose exact combined peak is within
    the budget, which is where the coordinator's gating settles; None when none is found.
    ``resolution``: grid steps per iteration (the search of three or more jobs uses the first
    grid of ``n0 * 2 ** j`` steps at least this fine).

    Raises ValueError on unequal iteration times, an empty group or a resolution below 1.
    """
    if not curves:
        raise ValueError("best_shifts needs at least one curve")
    if resolution < 1:
        raise ValueError(f"resolution must be >= 1, got {resolution}")
    if not equal_periods(curves):
        raise ValueError("unequal iteration times: plan per-iteration gating with plan_group")
    curves = list(curves)
    period, n = curves[0].iteration_s, resolution
    if len(curves) == 1:
        return (0.0,)
    searched = 2 < len(curves) <= MAX_SEARCH_JOBS
    if budget_bytes is None and searched:
        n, ks = least_peak_grid(curves, resolution)
    else:
        ks = _greedy(curves, budget_bytes, n)
        if ks is None and searched:
            n, ks = least_peak_grid(curves, resolution)
            limit = budget_bytes * (1 + BUDGET_RTOL)
            if exact_peak(curves, [k * period / n for k in ks]) > limit:
                return None
            ks = _least_delay(curves, ks, n, budget_bytes)
    return None if ks is None else tuple(k * period / n for k in ks)


def least_peak_grid(curves: Sequence[MemoryCurve], resolution: int = DEFAULT_RESOLUTION) -> tuple[int, list[int]]:
    """The search of Note [Shift search] for 3..``MAX_SEARCH_JOBS`` jobs with equal iteration times.

    Returns (n, ks): the grid's steps per iteration (the first ``n0 * 2 ** j >= resolution``) and
    each job's shift in steps (``ks[0] == 0``), the best of three exact checks. Raises ValueError
    for fewer than three or more than ``MAX_SEARCH_JOBS`` curves.
    """
    k = len(curves)
    if not 3 <= k <= MAX_SEARCH_JOBS:
        raise ValueError(f"least_peak_grid searches 3 to {MAX_SEARCH_JOBS} jobs, got {k}")
    n0 = 2
    while (2 * n0) ** k <= EXHAUSTIVE_CELLS and n0 < resolution:
        n0 *= 2
    levels = [n0]
    while levels[-1] < resolution:
        levels.append(2 * levels[-1])
    ups, los = _profiles(curves, n0)
    head = np.indices((n0,) * (k - 2)).reshape(k - 2, -1).T
    K = np.concatenate([np.zeros((len(head) * n0, 1), np.int64), np.repeat(head, n0, axis=0),
                        np.tile(np.arange(n0), len(head))[:, None]], axis=1)
    ub, lb = _every_box(ups, head), _every_box(los, head)
    corners = np.indices((2,) * (k - 1)).reshape(k - 1, -1).T
    children = np.concatenate([np.zeros((len(corners), 1), np.int64), corners], axis=1)
    for n in levels[1:]:
        hopeful = np.flatnonzero(lb < ub.min() * (1 - SEARCH_RTOL))
        keep = np.union1d(hopeful[_smallest(lb[hopeful], BEAM)], _smallest(ub, BEAM // 4))
        K = (2 * K[keep][:, None, :] + children[None]).reshape(-1, k)
        ups, los = _profiles(curves, n)
        ub, lb = _box_bound(ups, K), _box_bound(los, K)
    n = levels[-1]
    r = 2 if k <= 4 else 1
    offsets = np.indices((2 * r + 1,) * (k - 1)).reshape(k - 1, -1).T - r
    window = np.concatenate([np.zeros((len(offsets), 1), np.int64), offsets], axis=1)
    K = ((K[_smallest(ub, 3)][:, None, :] + window[None]) % n).reshape(-1, k)
    cands = sorted({tuple(int(kk) for kk in row) for row in K[_smallest(_box_bound(ups, K), 3)]})
    period = curves[0].iteration_s
    peaks = [exact_peak(curves, [kk * period / n for kk in c]) for c in cands]
    return n, list(cands[int(np.argmin(peaks))])


def _smallest(values: np.ndarray, m: int) -> np.ndarray:
    """Indices of the ``m`` smallest values, ascending by value (deterministic among ties)."""
    if len(values) > m:
        idx = np.argpartition(values, m - 1)[:m]
        return idx[np.lexsort((idx, values[idx]))]
    return np.argsort(values, kind="stable")


def _profiles(curves: Sequence[MemoryCurve], n: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per job on ``n`` bins: bin maxima (for ``upper``) and the ``lower`` profile of Note
    [Shift search] (job 0, fixed at shift 0: its bytes at each bin start). Shapes (n,)."""
    memo: dict[tuple[int, bool], tuple[np.ndarray, np.ndarray]] = {}
    ups, los = [], []
    for i, c in enumerate(curves):
        key = (id(c), i == 0)
        if key not in memo:
            if i == 0:
                lo = c.at(np.arange(n) / n)
            else:
                lo = _bin_min(c, n)
                lo = np.minimum(lo, np.roll(lo, 1))  # a box one step wide reaches into the bin before
            memo[key] = (resample(c, n), lo)
        ups.append(memo[key][0])
        los.append(memo[key][1])
    return ups, los


def _box_bound(profiles: list[np.ndarray], K: np.ndarray) -> np.ndarray:
    """max over bins of the profiles rolled by each box's shifts and summed; K (B, k) -> (B,)."""
    total = _rolled(profiles[0])[K[:, 0]].copy()
    for i in range(1, len(profiles)):
        total += _rolled(profiles[i])[K[:, i]]
    return total.max(axis=1)


def _every_box(profiles: list[np.ndarray], head: np.ndarray) -> np.ndarray:
    """:func:`_box_bound` of every box of the grid, the last job's shift by a max-plus product:
    ``head`` (C, k - 2) holds the shifts of jobs 1..k-2; returns (C * n,), last shift fastest."""
    n = len(profiles[0])
    part = np.broadcast_to(profiles[0], (len(head), n)).copy()
    for i in range(1, len(profiles) - 1):
        part += _rolled(profiles[i])[head[:, i - 1]]
    last = np.ascontiguousarray(_rolled(profiles[-1]).T)  # last[m, j]: bin m, last job shifted j
    out = part[:, :1] + last[0]
    for m in range(1, n):  # bin by bin: (C, n) stays in cache, 3x faster than one (C, n, n) sum
        np.maximum(out, part[:, m:m + 1] + last[m], out=out)
    return out.ravel()


def _greedy(curves: list[MemoryCurve], budget_bytes: float | None, n: int) -> list[int] | None:
    """Jobs added one at a time in the given order, each at its least-peak shift (no budget) or
    its smallest fitting shift (budget; None when one does not fit); shifts in steps of 1/n."""
    period = curves[0].iteration_s
    up_sum, lo_sum = resample(curves[0], n), _bin_min(curves[0], n)
    ks = [0]
    for i in range(1, len(curves)):
        up_i, lo_i = _rolled(resample(curves[i], n)), _rolled(_bin_min(curves[i], n))
        up = (up_sum[None, :] + up_i).max(axis=1)
        lo = (lo_sum[None, :] + lo_i).max(axis=1)
        part = curves[: i + 1]
        if budget_bytes is None:
            k = _least_peak_shift(part, ks, up, lo, period, n)
        else:
            k = _least_fitting_shift(part, ks, up, lo, period, n, budget_bytes)
            if k is None:
                return None
        ks.append(k)
        up_sum = up_sum + up_i[k]
        lo_sum = lo_sum + lo_i[k]
    return ks


def _least_delay(curves: list[MemoryCurve], ks: list[int], n: int, budget_bytes: float) -> list[int]:
    """Fitting shifts ``ks`` with each job in turn (1..k-1) moved to its smallest shift that
    still fits beside the others (never later than it was: its own shift fits)."""
    period = curves[0].iteration_s
    ups = [resample(c, n) for c in curves]
    los = [_bin_min(c, n) for c in curves]
    ks = list(ks)
    for i in range(1, len(curves)):
        others = [j for j in range(len(curves)) if j != i]
        up = (sum(_rolled(ups[j])[ks[j]] for j in others)[None, :] + _rolled(ups[i])).max(axis=1)
        lo = (sum(_rolled(los[j])[ks[j]] for j in others)[None, :] + _rolled(los[i])).max(axis=1)
        part = [curves[j] for j in others] + [curves[i]]
        k = _least_fitting_shift(part, [ks[j] for j in others], up, lo, period, n, budget_bytes)
        ks[i] = ks[i] if k is None else k  # None only through float rounding: its own shift fits
    return ks


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
