"""A job's compute share measured from its step times, stored in its memory curve's ``meta``.

Note [Measured compute share]
    The contention model (Note [Contention model] in placement.device_sim) slows every job iterating
    beside others by ``max(1, sum of their shares)``. ``n`` identical copies of one job iterating together
    therefore each take ``d = max(1, n * s)`` times their solo step time, so a job's share is measured as
    ``s = d / n`` from its solo median step time and its median step time beside ``n - 1`` copies of itself,
    clipped to (0, 1]. A slowdown of 1 (the copies did not contend) gives ``s = 1 / n``: any share up to
    that would have shown the same, so it is the largest consistent value (the pessimistic one). The
    share is stored as ``meta["compute_share"]`` with how it was measured (``meta["compute_share_measured"]``:
    the step times in seconds and the number of copies); the scheduler reads it
    (``zico.scheduling.snapshot.compute_share``) and assumes its default only for a curve without one.

Only the standard library and the curve format are used (the placement core stays free of torch).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from .curves import MemoryCurve

SHARE_KEY = "compute_share"  # the curve meta key the scheduler reads
MEASURED_KEY = "compute_share_measured"  # how the share was measured (step times, copies)


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: expected a positive number of seconds, got {value!r}")
    return float(value)


def share_from_step_times(solo_step_s: float, colocated_step_s: float, copies: int = 2) -> float:
    """The compute share ``s = clip(colocated / solo / copies, (0, 1])`` (Note [Measured compute share]).

    Args:
        solo_step_s: the job's median step time alone on the device, seconds.
        colocated_step_s: its median step time while ``copies - 1`` identical copies iterated beside it, seconds.
        copies: how many identical jobs iterated together (>= 2).
    Raises ValueError naming a non-positive or non-finite time, or ``copies`` below 2.
    """
    solo = _positive("solo_step_s", solo_step_s)
    together = _positive("colocated_step_s", colocated_step_s)
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 2:
        raise ValueError(f"copies: expected an integer >= 2, got {copies!r}")
    return min(1.0, max(1.0, together / solo) / copies)


def predicted_slowdown(shares: Sequence[float]) -> float:
    """Step time of each job beside the others over its solo step time: ``max(1, sum(shares))``
    (Note [Contention model]). Raises ValueError for a share outside (0, 1]."""
    for s in shares:
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0 < s <= 1:
            raise ValueError(f"compute share must lie in (0, 1], got {s!r}")
    return max(1.0, float(sum(shares)))


def relative_error(predicted: float, measured: float) -> float:
    """``(predicted - measured) / measured``: positive when the model predicts more slowdown than measured."""
    return (float(predicted) - float(measured)) / _positive("measured", measured)


def with_measured_share(curve: MemoryCurve, solo_step_s: float, colocated_step_s: float,
                        copies: int = 2) -> MemoryCurve:
    """``curve`` with its measured share in ``meta`` (:func:`share_from_step_times`; the other fields unchanged)."""
    share = share_from_step_times(solo_step_s, colocated_step_s, copies)
    measured = {"solo_step_s": round(float(solo_step_s), 6), "colocated_step_s": round(float(colocated_step_s), 6),
                "copies": copies}
    return dataclasses.replace(curve, meta={**curve.meta, SHARE_KEY: round(share, 4), MEASURED_KEY: measured})


def stored_share(curve: MemoryCurve) -> float | None:
    """The share a curve carries in ``meta["compute_share"]`` when it lies in (0, 1], else None."""
    share = curve.meta.get(SHARE_KEY) if curve.meta else None
    if isinstance(share, (int, float)) and not isinstance(share, bool) and 0 < share <= 1:
        return float(share)
    return None
