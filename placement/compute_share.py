"""A job's compute share: what it means, how one run's step times (and utilisation) estimate it, and how the
estimates of several runs are kept with the job's memory curve (``meta``), where the scheduler reads it.

Note [Measured compute share]
    **Meaning.** A job's share ``s`` is the fraction of its device's compute it keeps busy when alone, in
    (0, 1]. The contention model (Note [Contention model] in placement.device_sim) slows every job computing
    beside others by ``max(1, sum of the shares of the jobs computing)``; the scheduler predicts a group's
    slowdown with it (placement.groups). So a share is measured by what that model needs: how much a job's
    compute stretched beside neighbours of known shares.

    **One run** (:func:`estimate_share`, from a :class:`ShareEvidence` that placement.compute_meter
    accumulates on the device): only *compute time* counts, from the gate's ``go`` to the iteration's end
    (waits at the gate are not compute); the first iteration of a run (warm-up) is left out. Each steady
    iteration's compute splits into *alone* seconds ``A`` (no other job of the device computing) and
    *overlapped* seconds ``O``, during which the other computing jobs' shares sum to ``sigma`` (their stored
    shares, DEFAULT_COMPUTE_SHARE for a job without one) and ``m`` of them are identical to this job (the
    same curve: their share is this job's, unknown). Over ``N`` iterations of solo step time ``t0`` the job
    did ``N * t0`` solo-seconds of work, ``A`` of them alone, so its overlapped compute was stretched by
    ``F = O / (N * t0 - A)`` (when ``A >= N * t0`` the job ran slower alone than ``t0`` says, so ``t0`` does
    not hold for this run and its step times say nothing), and the model says ``F = (1 + m) * s + sigma``:
    ``s = (F - sigma) / (1 + m)`` with ``sigma`` and ``m`` their time-weighted means over the overlapped
    seconds (exact while the neighbours stay the same, as in a pair; an average when they change within the
    run). ``t0`` is the
    median compute time of the run's own iterations that overlapped nothing, when there are
    MIN_SOLO_ITERATIONS of them (same host, same load, no profiler's tracing), else the curve's
    ``iteration_s`` (the profile's, measured alone).

    **The 1/n floor.** Step times show contention only when there was some: when the group's shares sum to
    at most 1 nobody slows down, and every ``s <= (1 - sigma) / (1 + m)`` fits equally well (``1/n`` for
    ``n`` identical copies). The old formula returned that bound as if measured (the experiment's shares of
    0.51-0.53 for two single-threaded jobs on two cores were this bound plus noise). Now a stretch within
    NOISE of none (``F <= 1 + NOISE``) counts as no contention: the step times give only the bound, and the
    share is the job's *utilisation* while it computed alone when measured (its process's CPU time over wall
    time and the device's cores; NVML ``utilization.gpu`` on a GPU, without MPS one context's kernels at a
    time), capped by the bound: method ``utilisation``; without a utilisation, the bound itself (method
    ``bound``: pessimistic, the largest share the run allows). A job that ran alone the whole run has only
    its utilisation. A utilisation is the compute the job *got*: on a host shared with work outside Zico it
    reads low (the demo's tiny-lm read 0.14 of two cores at load 12), which the next run's step times correct
    once it contends.

    **Samples.** A run is measured from MIN_ITERATIONS steady iterations. The step-time branch needs
    overlapped compute worth MIN_OVERLAP_ITERATIONS solo steps and at least MIN_OVERLAP_FRACTION of the
    compute: the noise of every iteration lands on the overlapped seconds, amplified by ``compute / O``.
    Solo step times varied by 4-17 % (coefficient of variation; median about 10 %) in the experiment's
    sequential runs at load 9-16 on 2 cores; at 10 %, four iterations' worth puts two standard errors of
    their mean at NOISE. Utilisation needs alone compute
    worth MIN_UTILISATION_ITERATIONS solo steps.

    **Runs, neighbours that change.** Each run is one measurement against its own neighbours, whose shares
    enter at their stored values (a neighbour without one at the default, so a pair of new jobs attributes
    their contention through that assumption; each later run uses the shares measured meanwhile). The
    curve keeps the last MAX_RUNS measurements (:func:`combine`, stored in ``meta["compute_share_measured"]``)
    and ``meta["compute_share"]`` is their combination: the overlap-weighted mean of the ``contention`` ones
    when any (they calibrate the very slowdown the scheduler predicts), else the weighted mean of the
    ``utilisation`` ones capped by the lowest bound seen, else that bound. The scheduler reads it
    (``zico.scheduling.snapshot.compute_share``) and assumes DEFAULT_COMPUTE_SHARE only for a curve without
    one.

Only the standard library and the curve format are used (the placement core stays free of torch).
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Sequence

from .curves import MemoryCurve

SHARE_KEY = "compute_share"  # the curve meta key the scheduler reads
MEASURED_KEY = "compute_share_measured"  # how the share was measured (the runs it combines)
# Compute share assumed for a job whose curve carries none (Note [Contention model] in placement.device_sim):
# half a device. The scheduler and the device's meter (for neighbours) both use it.
DEFAULT_COMPUTE_SHARE = 0.5
METHODS = ("contention", "utilisation", "bound")  # most telling first (Note [Measured compute share])
NOISE = 0.10                     # a stretch of compute within 10 % of none is not contention
MIN_ITERATIONS = 3               # steady iterations a run needs to be measured at all
MIN_OVERLAP_ITERATIONS = 4.0     # overlapped compute, in solo steps, for the step-time branch
MIN_OVERLAP_FRACTION = 0.25      # ... and as a share of the run's compute
MIN_UTILISATION_ITERATIONS = 2.0  # alone compute, in solo steps, for a utilisation
MIN_SOLO_ITERATIONS = 3          # iterations with no overlap for the run's own solo step time
MIN_SHARE = 0.01                 # the least share stored (a share is > 0)
MAX_RUNS = 8                     # measurements kept with a curve


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: expected a positive number of seconds, got {value!r}")
    return float(value)


def _clip(share: float) -> float:
    return min(1.0, max(MIN_SHARE, float(share)))


def share_from_step_times(solo_step_s: float, colocated_step_s: float, copies: int = 2) -> float:
    """The compute share ``s = clip(colocated / solo / copies, (0, 1])`` of ``copies`` identical jobs that
    computed together all the time (the step-time branch of Note [Measured compute share] with ``A = 0``,
    ``sigma = 0``, ``m = copies - 1``; no contention gives the ``1 / copies`` bound).

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


@dataclass
class ShareEvidence:
    """What one run of a job showed about its compute (placement.compute_meter accumulates it). Seconds.

    ``iterations``: steady iterations (warm-up excluded); ``compute_s``: their compute time (``go`` to end);
    ``alone_s`` / ``overlap_s``: of it, with no other job computing / with some; ``neighbours_share_s`` and
    ``identical_s``: the integrals over the overlapped seconds of the other computing jobs' shares (of jobs
    not identical to this one) and of their count (identical ones); ``busy_s`` / ``busy_wall_s``: device-
    seconds busy (CPU time over cores, or NVML utilisation x seconds) over the alone wall seconds they were
    read in; ``solo_steps_s``: compute times of steady iterations that overlapped nothing (the latest ones).
    """

    iterations: int = 0
    compute_s: float = 0.0
    alone_s: float = 0.0
    overlap_s: float = 0.0
    neighbours_share_s: float = 0.0
    identical_s: float = 0.0
    busy_s: float = 0.0
    busy_wall_s: float = 0.0
    solo_steps_s: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class ShareEstimate:
    """One run's measurement (Note [Measured compute share]): ``share`` in (0, 1], ``method`` (METHODS),
    ``bound`` (the most the step times allow, 1.0 when they set none), the evidence's figures (seconds) and
    ``slowdown`` (``F``, None without enough overlap), ``utilisation`` (None when not measured),
    ``solo_from`` (``"run"`` or ``"curve"``: where ``solo_step_s`` came from). ``to_dict`` is the wire form
    (zico_contracts.computeshare)."""

    share: float
    method: str
    bound: float
    iterations: int
    solo_step_s: float
    solo_from: str
    compute_s: float
    alone_s: float
    overlap_s: float
    neighbours_share: float
    identical: float
    slowdown: float | None
    utilisation: float | None
    utilisation_s: float

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in dataclasses.asdict(self).items()}


def estimate_share(ev: ShareEvidence, curve_iteration_s: float | None) -> ShareEstimate | None:
    """One run's compute share from its evidence (Note [Measured compute share]); None when the run shows too
    little (fewer than MIN_ITERATIONS steady iterations, no solo step time, or neither enough overlap nor
    enough alone time with a utilisation). ``curve_iteration_s``: the job's curve's solo iteration time."""
    if ev.iterations < MIN_ITERATIONS:
        return None
    if len(ev.solo_steps_s) >= MIN_SOLO_ITERATIONS:
        t0, solo_from = statistics.median(ev.solo_steps_s), "run"
    elif curve_iteration_s and curve_iteration_s > 0:
        t0, solo_from = float(curve_iteration_s), "curve"
    else:
        return None
    util = None
    if ev.busy_wall_s >= MIN_UTILISATION_ITERATIONS * t0 and ev.busy_s > 0:
        util = _clip(ev.busy_s / ev.busy_wall_s)
    common = dict(iterations=ev.iterations, solo_step_s=t0, solo_from=solo_from, compute_s=ev.compute_s,
                  alone_s=ev.alone_s, overlap_s=ev.overlap_s, utilisation=util, utilisation_s=ev.busy_wall_s)
    left = ev.iterations * t0 - ev.alone_s  # solo work done while overlapped, seconds
    overlap = ev.overlap_s >= MIN_OVERLAP_ITERATIONS * t0 and ev.overlap_s >= MIN_OVERLAP_FRACTION * ev.compute_s
    if not overlap or left <= 0:  # left <= 0: slower alone than t0 says, which then does not hold for this run
        if util is None:
            return None
        return ShareEstimate(util, "utilisation", 1.0, neighbours_share=0.0, identical=0.0, slowdown=None, **common)
    sigma, m = ev.neighbours_share_s / ev.overlap_s, ev.identical_s / ev.overlap_s
    stretch = ev.overlap_s / left
    common.update(neighbours_share=sigma, identical=m, slowdown=stretch)
    if stretch > 1 + NOISE:
        return ShareEstimate(_clip((stretch - sigma) / (1 + m)), "contention", 1.0, **common)
    bound = _clip((1 - sigma) / (1 + m)) if sigma < 1 else 1.0  # neighbours said to fill the device: no bound
    if util is not None:
        return ShareEstimate(min(util, bound), "utilisation", bound, **common)
    if sigma >= 1:
        return None
    return ShareEstimate(bound, "bound", bound, **common)


def combine(meta: dict[str, Any] | None, measurement: dict[str, Any], job: Any = None,
            placement: Any = None) -> dict[str, Any] | None:
    """``meta`` with ``measurement`` (a run's :meth:`ShareEstimate.to_dict`, as checked by
    zico_contracts.computeshare) added to its last MAX_RUNS runs and the share they combine to (Note [Measured
    compute share]); None when that run (same ``job`` and ``placement``) is already counted. A ``meta`` whose
    ``compute_share_measured`` has no runs (an experiment's copies measurement) starts afresh."""
    meta = dict(meta or {})
    before = meta.get(MEASURED_KEY)
    runs = list(before.get("runs", [])) if isinstance(before, dict) else []
    if job is not None and any(r.get("job") == job and r.get("placement") == placement for r in runs):
        return None
    weight = measurement["utilisation_s"] if measurement["method"] == "utilisation" else measurement["overlap_s"]
    runs.append({"share": measurement["share"], "method": measurement["method"], "bound": measurement["bound"],
                 "weight_s": round(max(float(weight), 1e-6), 6), "slowdown": measurement.get("slowdown"),
                 "utilisation": measurement.get("utilisation"), "job": job, "placement": placement})
    runs = runs[-MAX_RUNS:]
    bound = min(r["bound"] for r in runs)
    method = next(m for m in METHODS if any(r["method"] == m for r in runs))
    if method == "bound":
        share = bound
    else:
        chosen = [r for r in runs if r["method"] == method]
        share = sum(r["share"] * r["weight_s"] for r in chosen) / sum(r["weight_s"] for r in chosen)
        share = share if method == "contention" else min(share, bound)
    meta[SHARE_KEY] = round(_clip(share), 4)
    meta[MEASURED_KEY] = {"method": method, "runs": runs}
    return meta


def with_measured_share(curve: MemoryCurve, solo_step_s: float, colocated_step_s: float,
                        copies: int = 2) -> MemoryCurve:
    """``curve`` with the share of :func:`share_from_step_times` in ``meta`` (the experiment's measurement beside
    identical copies, recorded as ``{solo_step_s, colocated_step_s, copies}``; the other fields unchanged)."""
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
