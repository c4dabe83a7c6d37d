"""The repeating period at the end of a trace's signed allocation sizes (one training iteration).

Used by ``zico_workloads.curves.snapshot`` to cut one iteration out of a trace without step annotations
(its Note [Finding one iteration]).
"""
from __future__ import annotations

import numpy as np


def find_period(deltas: np.ndarray, min_events: int = 8, min_swing: float = 0.25,
                max_work: int = 200_000_000) -> int | None:
    """Smallest p such that the last p nonzero deltas equal the p before them, sum to zero (memory
    back at its level) and swing live bytes by at least ``min_swing`` of the whole trace's swing
    (so a loop of equal small allocations, e.g. inside an optimizer step, is not taken for an
    iteration); None when there is no such p.

    Cheap checks (the element one period back, the period's sum from prefix sums) come before the
    full comparison, and at most ``max_work`` elements are compared in all, so a hostile trace
    cannot make the import quadratic.
    """
    nz = deltas[deltas != 0]
    n = len(nz)
    prefix = np.concatenate([[0], np.cumsum(nz)])
    total_swing = float(prefix.max() - prefix.min()) if n else 0.0
    work = 0
    for p in range(min_events, n // 2 + 1):
        if nz[-1] != nz[-1 - p] or prefix[n] - prefix[n - p] != 0:
            continue
        work += p
        if work > max_work:
            return None
        tail = nz[-p:]
        if np.array_equal(tail, nz[-2 * p:-p]):
            level = np.cumsum(tail)
            if float(level.max() - min(level.min(), 0)) >= min_swing * total_swing:
                return p
    return None
