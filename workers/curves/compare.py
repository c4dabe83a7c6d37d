"""Comparing two memory curves of one job: peak error, curve error, and curve error after phase alignment.

``max_relative_error`` (placement.curves) compares curves at equal fractions of their iteration,
so it charges both a wrong amount of memory and a right amount at the wrong moment. The second
kind is what an estimate's modelled clock gets wrong most (see docs/curves.md); ``align_phases``
warps a curve's time axis piecewise-linearly so its phase starts (forward, backward, optimizer,
from the marks recorded in ``meta["phase_fractions"]``) fall where another curve's do, which
separates the two kinds of error. A scheduler holding a running job's measured phase fractions
can apply the same warp to an estimate. ``max_error_within_shift`` forgives a step that comes a
little early or late (a tolerance band in time) but not a wrong amount of memory;
``max_error_binned`` compares the curves at the coordinator's own resolution.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from placement.coordinator import DEFAULT_RESOLUTION
from placement.curves import MemoryCurve, max_relative_error, resample

PHASES = ("backward", "optimizer")  # forward starts at 0 in both


def align_phases(curve: MemoryCurve, target: dict[str, float]) -> MemoryCurve:
    """``curve`` with its time axis warped so its phase starts land on ``target``'s fractions.

    Both ``curve.meta["phase_fractions"]`` and ``target`` need ``backward`` and ``optimizer``
    fractions in (0, 1), increasing. Raises ValueError otherwise.
    """
    src = curve.meta.get("phase_fractions") or {}
    xs, ys = [0.0], [0.0]
    for name in PHASES:
        if name not in src or name not in target:
            raise ValueError(f"phase_fractions: both curves need a {name!r} fraction")
        xs.append(float(src[name]))
        ys.append(float(target[name]))
    xs.append(1.0)
    ys.append(1.0)
    if np.any(np.diff(xs) <= 0) or np.any(np.diff(ys) <= 0):
        raise ValueError(f"phase_fractions: not increasing within (0, 1): {xs[1:-1]} -> {ys[1:-1]}")
    return MemoryCurve(np.interp(curve.fractions, xs, ys), curve.bytes, curve.iteration_s, curve.persistent_bytes,
                       curve.source, curve.device, {**curve.meta, "phase_fractions": {"forward": 0.0, **{
                           k: float(target[k]) for k in PHASES}}})


def max_error_within_shift(a: MemoryCurve, b: MemoryCurve, shift: float = 0.02, n: int = 4096) -> float:
    """Largest distance of either curve from the other's band, relative to the larger peak.

    The band of ``b`` at fraction x is [min, max] of ``b`` over [x - shift, x + shift] (periodic),
    so a step that comes up to ``shift`` of an iteration early or late costs nothing, while a
    wrong amount of memory costs in full. Symmetric in ``a`` and ``b``. With ``shift=0`` it is
    ``max_relative_error`` on ``n`` points. Raises ValueError for ``shift`` outside [0, 0.5).
    """
    if not 0 <= shift < 0.5:
        raise ValueError(f"shift must lie in [0, 0.5), got {shift}")
    x = (np.arange(n) + 0.5) / n
    va, vb = a.at(x), b.at(x)
    w = int(round(shift * n))

    def band(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if w == 0:
            return v, v
        wrapped = np.concatenate([v[-w:], v, v[:w]])
        win = np.lib.stride_tricks.sliding_window_view(wrapped, 2 * w + 1)
        return win.min(axis=1), win.max(axis=1)

    lo_b, hi_b = band(vb)
    lo_a, hi_a = band(va)
    out_a = np.maximum(np.maximum(va - hi_b, lo_b - va), 0)
    out_b = np.maximum(np.maximum(vb - hi_a, lo_a - vb), 0)
    return float(max(out_a.max(), out_b.max()) / max(a.peak_bytes, b.peak_bytes, 1.0))


def max_error_binned(a: MemoryCurve, b: MemoryCurve, n: int = DEFAULT_RESOLUTION) -> float:
    """Largest difference of the two curves as the coordinator sees them — resampled to ``n`` bins
    per iteration, each bin its maximum (``placement.curves.resample``; the coordinator decides on
    ``DEFAULT_RESOLUTION`` = 256 bins) — relative to the larger peak. A step that moves within
    its bin costs nothing; a wrong amount costs in full. Raises ValueError for n < 1."""
    return float(np.abs(resample(a, n) - resample(b, n)).max() / max(a.peak_bytes, b.peak_bytes, 1.0))


def compare(estimate: MemoryCurve, reference: MemoryCurve) -> dict[str, Any]:
    """Figures of ``estimate`` against ``reference`` (ratios are relative to the reference, the
    max errors relative to the larger peak, as ``max_relative_error``)."""
    out = {
        "peak_error": estimate.peak_bytes / reference.peak_bytes - 1.0,
        "persistent_error": (estimate.persistent_bytes / reference.persistent_bytes - 1.0)
        if reference.persistent_bytes else None,
        "max_error": max_relative_error(estimate, reference),
        "max_error_within_2pct_shift": max_error_within_shift(estimate, reference, 0.02),
        "max_error_binned": max_error_binned(estimate, reference),
        "iteration_s_ratio": estimate.iteration_s / reference.iteration_s,
    }
    try:
        aligned = align_phases(estimate, reference.meta.get("phase_fractions") or {})
        out["max_error_phase_aligned"] = max_relative_error(aligned, reference)
    except ValueError:
        out["max_error_phase_aligned"] = None
    return out
