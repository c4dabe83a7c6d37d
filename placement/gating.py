"""The gating rule: may a job start its next iteration now, and if not, the least delay after
which it may. Pure functions over binned memory profiles (numpy only); the coordinator calls
them under its lock with the live progress of every job on the device.

Note [Gating rule]
~~~~~~~~~~~~~~~~~~
Every *admitted* iteration is a commitment: the device will hold that job's curve from the
iteration's start to its end. A job that is not iterating holds its persistent bytes, except
a newcomer before its first iteration, which holds nothing yet: its first iteration loads its
persistent state, so a newcomer's check also covers holding its persistent bytes alongside
every later commitment already made (``tail_bytes``). A new
iteration of job X starting ``d`` seconds from now is admitted when, over X's whole iteration
``[now + d, now + d + T_X)``, the committed bytes of the other jobs plus X's curve stay within
the budget. The others' *future* iterations are not in the sum: they are gated in turn and
will see X's iteration as committed. So, as long as jobs progress as predicted, the sum of all
committed iterations never exceeds the budget (the allocator's budget is the safety net for
mispredictions).

Time is cut into bins of ``dt`` seconds and every profile takes the *largest* bytes inside each
bin, so the check is conservative by at most one bin's change of a curve (``dt`` defaults to the
shortest iteration / 256).

No deadlock: once every committed iteration has ended, the others hold only persistent bytes,
so X fits iff ``budget >= peak_X + sum(persistent of the others)``. For a budget at least the
group's *minimal feasible budget* ``max_i(peak_i + sum_{j != i} persistent_j)`` (the largest
single-job peak with its partners idle) every request gets a finite delay, and when no
iteration is in flight the first waiter starts at once.

Note [Least start bin]
~~~~~~~~~~~~~~~~~~~~~~
The least delay is the first start ``k`` whose window of the committed profile fits beside the job's
bins: ``max_m(profile[k + m] + job[m]) <= limit``. Computing that for every start costs K x R sums, and a
gating prediction asks it about seventy times (up to K = 3,600 bins, R = 512). ``least_start_bin`` gives
the same answer from fewer sums, using only that ``a + x`` rounds monotonically in ``x`` (so a bound that
is over the limit proves the exact sum over too): (1) start 0, exactly; (2) the first start whose window
holds no bin with ``profile[i] + min(job) > limit`` (every earlier window holds one); (3) from there, in
chunks of starts (64, then 4x), a block test: the job's bins in 32 blocks of ``w`` bins (the last block
ends at R, overlapping the one before), a start ruled out when some block's smallest bin plus the largest
profile bin under that block is over the limit; (4) the starts left, in order, with the definition's own
sums (with blocks of one bin, (3) is the definition). Measured on the 32,559 requests of the
memory-aware policy's groups-of-three rounds on both scale benchmarks' states: the same answer for every
one (tests/placement/test_placement_gating_reference.py checks this against the definition).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .curves import MemoryCurve

# Relative slack on budget comparisons, for float rounding only (1e-9 of the budget).
BUDGET_RTOL = 1e-9
# least_start_bin: blocks of a job's bins in its first pass, and the starts it checks at first (Note [Least start bin]).
LEAST_START_BLOCKS = 32
LEAST_START_CHUNK = 64
# Most entries of an iteration-bins memo (cached_iteration_bins) before it is emptied.
BINS_CACHE_MAX = 256

# Note [One planning rule]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# The budget bounds the bytes the pool has *granted* (held: a job's segments, cached blocks included); a curve
# counts *allocated* bytes. Every planner of a group (the scheduler's policy, the device worker's coordinator,
# the simulator, tools.colocate and the real-run experiment) plans with one rule, ``planning_curve`` against
# ``(1 - gate headroom) x budget``:
#
# 1. Held bytes: every point of the job's curve, and its persistent bytes, raised by its pool overhead, the held
#    peak stored with the curve (``meta["held_peak_bytes"]``: the peak bytes its own pool held while its profile
#    was measured, written by the worker) less its allocated peak, so the curve counts what the budget counts.
#    Each job runs in its own process with its own segments, so the overheads add up, as the solo figures show.
# 2. At its peak from its backward mark: the coordinator's pacer (placement.pacing) holds a job at its peak
#    during its forward pass and, at the ``backward`` mark, re-anchors it at its curve's peak. A job whose peak
#    comes later, inside its backward pass (resnet18 on CPU: backward at 0.35 of the iteration, the peak at
#    0.71, gradients piling up as activations go), was then seen 0.37 of an iteration further on than it was,
#    already falling while it still rose, and a neighbour was let in beside its real peak: both jobs waited for
#    memory at once and the agent's deadlock rule granted past the budget (7-23 grants per run of resnet18 +
#    tiny-lm at the floor of this rule with a 0.05 headroom; 10-18 at 0.10). So the curve holds its peak from
#    the step of its backward mark (``meta["phase_fractions"]["backward"]``, written by the allocator-trace
#    profile) up to the peak: the first peak point is then the backward mark, and the pacer's anchor is right.
# 3. The gate headroom, ``DEFAULT_GATE_HEADROOM`` of the budget unless the device's row says otherwise
#    (``Device.gate_headroom``, seeded by the worker's ``--gate-headroom``), left for what the solo figures do
#    not show: a neighbour's cache that the agent does not take back (it reclaims for a waiter only from a job
#    holding at least as much, or held at its gate) and a loaded machine's timing. Measured on resnet18 +
#    tiny-lm at the floor this rule gives, 2 shared cores at load 7-17: 0 grants past the budget in 3 of 3 runs
#    at 0.10, grants in 1 of 4 runs at 0.05.
#
# Fallback: a curve without a stored held peak (an estimate, a PyTorch snapshot, a curve stored before the
# worker recorded it, a simulated job) is planned with no pool overhead (its allocated bytes); only the gate
# headroom covers its overhead, so such a group is planned tighter than a measured one. The least budget this
# rule can plan is ``held_floor``: ``minimal_feasible_budget`` of the planning curves over ``1 - headroom``.
DEFAULT_GATE_HEADROOM = 0.10
# The curve meta key holding the peak bytes the job's own pool held while its profile was measured.
HELD_PEAK_KEY = "held_peak_bytes"


def with_held_peak(curve: MemoryCurve, held_peak_bytes: float) -> MemoryCurve:
    """``curve`` with the peak bytes its pool held while it was measured stored in ``meta["held_peak_bytes"]``
    (an int, never below the curve's allocated peak: a pool never holds less than it hands out), the figure
    :func:`planning_curve` reads. Raises ValueError for a negative or non-finite ``held_peak_bytes``."""
    if isinstance(held_peak_bytes, bool) or not (isinstance(held_peak_bytes, (int, float))
                                                 and math.isfinite(held_peak_bytes) and held_peak_bytes >= 0):
        raise ValueError(f"held_peak_bytes must be a finite byte count >= 0, got {held_peak_bytes!r}")
    held = int(max(round(held_peak_bytes), math.ceil(curve.peak_bytes)))
    return MemoryCurve(fractions=curve.fractions.copy(), bytes=curve.bytes.copy(), iteration_s=curve.iteration_s,
                       persistent_bytes=curve.persistent_bytes, source=curve.source, device=curve.device,
                       meta={**curve.meta, HELD_PEAK_KEY: held})


def stored_held_peak(curve: MemoryCurve) -> float | None:
    """The held peak stored with ``curve`` (bytes), or None when it has none or an unusable one (then
    :func:`planning_curve` falls back to the allocated curve, Note [One planning rule])."""
    v = curve.meta.get(HELD_PEAK_KEY)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        return None
    return float(v)


def planning_curve(curve: MemoryCurve) -> MemoryCurve:
    """The curve the gate plans ``curve`` (a stored profile: allocated bytes, its held peak in ``meta``) with, the
    one planning rule (Note [One planning rule]): every point and the persistent bytes raised by the stored pool
    overhead ``max(0, held_peak_bytes - peak)`` (none without a stored held peak), then its peak held from the
    step holding its backward mark (``meta["phase_fractions"]["backward"]``, when the curve has one before its
    peak) up to the peak. Bytes in, a new curve out, ``meta`` gaining ``held_overhead_bytes`` (the bytes added:
    this curve's share of the headroom over its allocated bytes) and ``peak_from_fraction`` (where the held peak
    begins). Pure; the same stored curve gives the same planning curve on every side."""
    held = stored_held_peak(curve)
    extra = 0.0 if held is None else max(0.0, held - curve.peak_bytes)
    f = curve.fractions
    b = curve.bytes + extra
    peak = int(b.argmax())
    backward = (curve.meta.get("phase_fractions") or {}).get("backward")
    if isinstance(backward, (int, float)) and 0.0 <= backward < f[peak]:
        start = max(0, int(np.searchsorted(f, backward, side="right")) - 1)  # the step holding the mark
        b[start:peak] = b[peak]
        peak = start
    return MemoryCurve(fractions=f.copy(), bytes=b, iteration_s=curve.iteration_s,
                       persistent_bytes=curve.persistent_bytes + extra, source=curve.source, device=curve.device,
                       meta={**curve.meta, "held_overhead_bytes": int(round(extra)),
                             "peak_from_fraction": float(f[peak])})


def gate_share(headroom: float) -> float:
    """The share of the budget the gate plans with, ``1 - headroom``. Raises ValueError unless 0 <= headroom < 1."""
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not 0.0 <= headroom < 1.0:
        raise ValueError(f"gate headroom must lie in [0, 1), got {headroom!r}")
    return 1.0 - float(headroom)


def held_floor(planning_curves: Sequence[MemoryCurve], headroom: float = DEFAULT_GATE_HEADROOM) -> float:
    """The least budget (bytes) under which the gate can plan ``planning_curves`` (from :func:`planning_curve`)
    with ``headroom``: ``minimal_feasible_budget(planning_curves) / (1 - headroom)``. Raises ValueError unless
    0 <= headroom < 1."""
    return minimal_feasible_budget(planning_curves) / gate_share(headroom)


@dataclass(frozen=True)
class Commitment:
    """What one other job holds from now on.

    Attributes:
        curve: its memory curve.
        iteration_s: its expected iteration time now (contention included), seconds.
        fraction: how far its in-flight iteration is, in [0, 1); None if it is not iterating
            (then it holds ``curve.persistent_bytes``).
        start_in_s: for a *reserved* iteration (a waiter ahead in line), seconds from now to its
            start; None for an in-flight or idle job.
        loaded: False for a job that has not started its first iteration: it holds nothing yet
            (its first iteration loads its persistent state), then its persistent bytes for good.
    """

    curve: MemoryCurve
    iteration_s: float
    fraction: float | None = None
    start_in_s: float | None = None
    loaded: bool = True


def bin_max(curve: MemoryCurve, start_fraction: float, bin_fraction: float, nbins: int,
            after: float) -> np.ndarray:
    """Largest bytes inside each of ``nbins`` bins of ``bin_fraction`` of an iteration, from
    ``start_fraction`` (in [0, 1]) on; bytes past the iteration's end (fraction 1) are ``after``.

    Returns shape (nbins,) bytes. Conservative: a step that begins inside a bin raises it.
    """
    f, b = curve.fractions, curve.bytes
    end_bin = math.floor((1.0 - start_fraction) / bin_fraction)    # the bin holding the iteration's end
    m = min(nbins, end_bin + 3)  # bins from m on start past fraction 1 (2 bins' margin for rounding): ``after``
    edges = start_fraction + np.arange(m) * bin_fraction
    if len(f) == 1 and start_fraction >= f[0]:  # a flat curve (a warm-up or held iteration): one level
        out = np.where(edges < 1.0, b[0], after)
    else:  # the bytes at each bin's start (curve.at, whose modulo changes nothing in [0, 1))
        out = np.where(edges < 1.0, b[np.maximum(f.searchsorted(np.minimum(edges, 1.0 - 1e-12), side="right") - 1, 0)],
                       after)
        lo = int(f.searchsorted(start_fraction, side="right"))
        hi = int(f.searchsorted(min(1.0, start_fraction + nbins * bin_fraction), side="left"))
        if hi > lo:  # steps starting inside the window, grouped by bin (fractions are sorted, so are their bins)
            idx = np.minimum(np.floor((f[lo:hi] - start_fraction) / bin_fraction).astype(np.int64), nbins - 1)
            first = np.flatnonzero(np.concatenate(([True], idx[1:] != idx[:-1])))
            bins = idx[first]
            out[bins] = np.maximum(out[bins], np.maximum.reduceat(b[lo:hi], first))
    if 0 <= end_bin < nbins:
        out[end_bin] = max(out[end_bin], after)
    if m < nbins:
        out = np.concatenate((out, np.full(nbins - m, float(after))))
    return out


def iteration_bins(curve: MemoryCurve, iteration_s: float, dt: float) -> np.ndarray:
    """One whole iteration of ``curve`` lasting ``iteration_s`` on bins of ``dt`` seconds;
    shape (ceil(iteration_s / dt),). The last bin also covers the return to persistent bytes."""
    n = max(1, math.ceil(iteration_s / dt - 1e-9))
    return bin_max(curve, 0.0, dt / iteration_s, n, curve.persistent_bytes)


def cached_iteration_bins(curve: MemoryCurve, iteration_s: float, dt: float, cache: dict | None) -> np.ndarray:
    """:func:`iteration_bins`, memoised in ``cache`` (a dict the caller keeps, e.g. one per coordinator; None:
    no memo) by the curve object, ``iteration_s`` and ``dt``; the arrays it returns are read-only. The entry
    keeps its curve, so a key is never served for another curve that reuses a freed curve's ``id``; the
    dict is emptied when it reaches ``BINS_CACHE_MAX`` entries."""
    if cache is None:
        return iteration_bins(curve, iteration_s, dt)
    key = (id(curve), iteration_s, dt)
    hit = cache.get(key)
    if hit is None or hit[0] is not curve:
        if len(cache) >= BINS_CACHE_MAX:
            cache.clear()
        bins = iteration_bins(curve, iteration_s, dt)
        bins.flags.writeable = False
        hit = cache[key] = (curve, bins)
    return hit[1]


def committed_profile(others: Sequence[Commitment], dt: float, nbins: int, cache: dict | None = None) -> np.ndarray:
    """Bytes the other jobs hold over the next ``nbins`` bins of ``dt`` seconds; shape (nbins,).

    In-flight jobs hold the rest of their curve, then persistent bytes; idle jobs hold persistent
    bytes; reserved iterations hold their curve from ``start_in_s`` for one iteration. ``cache``: see
    :func:`cached_iteration_bins`.
    """
    total = np.zeros(nbins)
    for c in others:
        persistent = c.curve.persistent_bytes
        if c.start_in_s is not None:
            k0 = int(math.floor(c.start_in_s / dt + 1e-9))
            prof = np.full(nbins, persistent)
            if not c.loaded:
                prof[: min(k0, nbins)] = 0.0
            seg = cached_iteration_bins(c.curve, c.iteration_s, dt, cache)
            k1 = min(nbins, k0 + len(seg))
            if k0 < nbins:
                prof[k0:k1] = np.maximum(prof[k0:k1], seg[: k1 - k0])
            total += prof
        elif c.fraction is not None:
            f = min(max(float(c.fraction), 0.0), 1.0 - 1e-9)
            total += bin_max(c.curve, f, dt / c.iteration_s, nbins, persistent)
        elif c.loaded:
            total += persistent
    return total


def horizon_bins(others: Sequence[Commitment], dt: float, extra_bins: int) -> int:
    """Bins needed to see every commitment end, plus ``extra_bins``."""
    end = 0.0
    for c in others:
        if c.start_in_s is not None:
            end = max(end, c.start_in_s + c.iteration_s)
        elif c.fraction is not None:
            end = max(end, (1.0 - min(max(c.fraction, 0.0), 1.0)) * c.iteration_s)
    return math.ceil(end / dt) + extra_bins + 2


def least_start_bin(profile: np.ndarray, job_bins: np.ndarray, budget_bytes: float,
                    tail_bytes: float = 0.0) -> int | None:
    """Smallest ``k`` with ``max_m(profile[k + m] + job_bins[m]) <= budget`` and, after the
    job's iteration, ``profile[i] + tail_bytes <= budget`` for every later bin ``i``; None if no
    ``k`` within the profile does (extend the profile past every commitment to be sure).

    ``tail_bytes``: what the job holds after its iteration that the profile does not count yet
    (a newcomer's persistent bytes). Shapes: ``profile`` (K,), ``job_bins`` (R,) with K >= R.
    Note [Least start bin] says how it is found without computing every start's R sums.
    """
    r = len(job_bins)
    if len(profile) < r:
        raise ValueError(f"profile of {len(profile)} bins is shorter than the job's {r} bins")
    profile = np.ascontiguousarray(profile, dtype=np.float64)
    limit = budget_bytes * (1 + BUDGET_RTOL)
    n = len(profile) - r + 1                                        # starts k = 0 .. K - R
    tail_ok = None
    if tail_bytes:
        later = np.maximum.accumulate(profile[::-1])[::-1]          # later[i] = max(profile[i:])
        tail_ok = np.append(later[r:], 0.0)[:n] + tail_bytes <= limit
    if (profile[:r] + job_bins).max() <= limit and (tail_ok is None or tail_ok[0]):
        return 0
    # Note [Least start bin]: the first start whose window holds no bin over the limit beside the job's
    # smallest bin, then from there, a chunk of starts at a time, the block test and the definition's sums
    over = np.flatnonzero(profile + job_bins.min() > limit)
    k0 = 1
    if len(over) and over[0] < r + 1:
        gaps = np.flatnonzero(np.diff(over) > r)                    # over[i + 1] - over[i] - 1 >= R free bins
        k0 = int(over[gaps[0]] if len(gaps) else over[-1]) + 1
    w = -(-r // LEAST_START_BLOCKS)
    full = (r - w) // w                                             # blocks at 0, w, ..., before the last
    low = job_bins[:full * w].reshape(full, w).min(axis=1)
    low_last = job_bins[r - w:].min()
    size = LEAST_START_CHUNK
    while k0 < n:
        k1 = min(n, k0 + size)
        top = profile[k0:k1 + r - 1]                                # top[i] = max(profile[k0 + i:k0 + i + w])
        span = 1
        while span * 2 <= w:
            top = np.maximum(top[:-span], top[span:])
            span *= 2
        if span < w:
            top = np.maximum(top[:len(top) - (w - span)], top[w - span:])
        ok = top[r - w:] + low_last <= limit
        if full:
            ok &= (_windows(top, k1 - k0, full, w) + low <= limit).all(axis=1)
        if tail_ok is not None:
            ok &= tail_ok[k0:k1]
        starts = k0 + np.flatnonzero(ok)
        if w > 1 and len(starts):  # blocks of one bin are the definition itself
            first = starts[0]
            rows = _windows(profile[first:], starts[-1] - first + 1, r, 1)[starts - first]
            starts = starts[(rows + job_bins).max(axis=1) <= limit]
        if len(starts):
            return int(starts[0])
        k0, size = k1, size * 4
    return None


def _windows(a: np.ndarray, rows: int, cols: int, step: int) -> np.ndarray:
    """Read-only view of contiguous 1-D ``a`` as ``rows`` x ``cols``: row i is ``a[i], a[i + step], ...``
    (numpy's as_strided without its checks: the callers keep every index within ``a``)."""
    s = a.strides[0]
    v = np.ndarray((rows, cols), a.dtype, a, 0, (s, s * step))
    v.flags.writeable = False
    return v


def least_delay_s(job: Commitment, others: Sequence[Commitment], budget_bytes: float, dt: float,
                  cache: dict | None = None) -> float | None:
    """Least delay in seconds (a multiple of ``dt``) after which ``job`` may start an iteration
    given the others' commitments; 0.0 means "now"; None when the budget can never hold it
    (``budget < peak_job + sum(persistent of the others)``). ``cache``: a dict to memoise whole
    iterations' bins in (:func:`cached_iteration_bins`), or None.
    """
    bins = cached_iteration_bins(job.curve, job.iteration_s, dt, cache)
    n = horizon_bins(others, dt, len(bins))
    tail = 0.0 if job.loaded else job.curve.persistent_bytes
    k = least_start_bin(committed_profile(others, dt, n, cache), bins, budget_bytes, tail)
    return None if k is None else k * dt


def minimal_feasible_budget(curves: Sequence[MemoryCurve]) -> float:
    """``max_i(peak_i + sum_{j != i} persistent_j)``: the least budget under which gating can run
    every job of the group (one at a time, the others idle). Bytes."""
    if not curves:
        return 0.0
    persistent = sum(c.persistent_bytes for c in curves)
    return max(c.peak_bytes + persistent - c.persistent_bytes for c in curves)
