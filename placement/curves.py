"""Memory curves: the one format and loader shared by profiler, scheduler, simulator and UI.

A memory curve is the bytes a job holds over one steady-state training iteration:

    {"version": 1, "source": "allocator-trace" | "estimate" | "torch-snapshot",
     "device": "cpu" | "cuda:0" | ..., "iteration_s": 0.21,
     "persistent_bytes": 97_000_000, "peak_bytes": 410_000_000,
     "points": [[0.0, 97_000_000], [0.01, 120_000_000], ..., [1.0, 97_000_000]]}

``points`` are ``[fraction_of_iteration, bytes]`` pairs, fractions in [0, 1] and non-decreasing;
the curve is a step function: the bytes of a point hold until the next point's fraction. The
curve is periodic: iteration k+1 starts where iteration k ends.

Only numpy is imported here (the placement core must stay free of Django, Celery and torch).
"""
from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

CURVE_VERSION = 1
SOURCES = ("allocator-trace", "estimate", "torch-snapshot")
# Upper bound on any byte figure we accept (1 PiB): catches unit mistakes and hostile input.
MAX_BYTES = 1 << 50


class CurveError(ValueError):
    """A memory curve is malformed; the message names the offending field."""


@dataclass(frozen=True)
class MemoryCurve:
    """Bytes held by one job over one steady-state iteration.

    Attributes:
        fractions: shape (n,), float64, non-decreasing in [0, 1]; where each step starts.
        bytes: shape (n,), float64, bytes held from ``fractions[i]`` to ``fractions[i+1]``.
        iteration_s: seconds one iteration takes (> 0).
        persistent_bytes: bytes held across iterations (weights, gradients, optimizer state).
        source: one of ``SOURCES``.
        device: where the curve was measured or estimated for, e.g. ``"cpu"``, ``"cuda:0"``.
        meta: free-form provenance (workload key, params, tool versions); not interpreted.
    """

    fractions: np.ndarray
    bytes: np.ndarray
    iteration_s: float
    persistent_bytes: float
    source: str = "estimate"
    device: str = "cpu"
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        f = np.asarray(self.fractions, dtype=np.float64)
        b = np.asarray(self.bytes, dtype=np.float64)
        object.__setattr__(self, "fractions", f)
        object.__setattr__(self, "bytes", b)
        _validate(f, b, self.iteration_s, self.persistent_bytes, self.source)

    # -- derived figures ------------------------------------------------------------
    @functools.cached_property
    def peak_bytes(self) -> float:
        """Largest bytes held at any point of the iteration (computed once: a curve is immutable)."""
        return float(self.bytes.max())

    @property
    def transient_peak_bytes(self) -> float:
        """Peak minus persistent bytes: what the iteration adds at its worst moment."""
        return self.peak_bytes - self.persistent_bytes

    def at(self, fraction: np.ndarray | float) -> np.ndarray:
        """Bytes held at ``fraction`` of the iteration (taken modulo 1; step function)."""
        x = np.mod(np.asarray(fraction, dtype=np.float64), 1.0)
        idx = np.searchsorted(self.fractions, x, side="right") - 1
        return self.bytes[np.clip(idx, 0, len(self.bytes) - 1)]

    def to_dict(self) -> dict[str, Any]:
        """The DESIGN contract's JSON object (ints for bytes, rounded fractions)."""
        return {
            "version": CURVE_VERSION,
            "source": self.source,
            "device": self.device,
            "iteration_s": float(self.iteration_s),
            "persistent_bytes": int(round(self.persistent_bytes)),
            "peak_bytes": int(round(self.peak_bytes)),
            "points": [[round(float(f), 6), int(round(b))] for f, b in zip(self.fractions, self.bytes)],
            **({"meta": self.meta} if self.meta else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


def _validate(f: np.ndarray, b: np.ndarray, iteration_s: float, persistent: float, source: str) -> None:
    if source not in SOURCES:
        raise CurveError(f"source: {source!r} is not one of {', '.join(SOURCES)}")
    if f.ndim != 1 or b.ndim != 1 or len(f) != len(b):
        raise CurveError("points: fractions and bytes must be 1-D and of equal length")
    if len(f) == 0:
        raise CurveError("points: a curve needs at least one point")
    if not (np.all(np.isfinite(f)) and np.all(np.isfinite(b))):
        raise CurveError("points: every fraction and byte count must be finite")
    if f[0] < 0 or f[-1] > 1 or np.any(np.diff(f) < 0):
        raise CurveError("points: fractions must be non-decreasing within [0, 1]")
    if np.any(b < 0) or np.any(b > MAX_BYTES):
        raise CurveError(f"points: byte counts must lie in [0, {MAX_BYTES}]")
    if not (isinstance(iteration_s, (int, float)) and math.isfinite(iteration_s) and iteration_s > 0):
        raise CurveError(f"iteration_s: must be a positive number of seconds, got {iteration_s!r}")
    if not (isinstance(persistent, (int, float)) and 0 <= persistent <= MAX_BYTES):
        raise CurveError(f"persistent_bytes: must lie in [0, {MAX_BYTES}], got {persistent!r}")
    if persistent > b.max() + 0.5:
        raise CurveError("persistent_bytes: exceeds the curve's peak bytes")


# -- loading ------------------------------------------------------------------------
_DEVICE = re.compile(r"cpu|cuda:\d{1,2}")  # the contract's device names (a missing one means "cpu")

def curve_from_dict(d: Any) -> MemoryCurve:
    """Build a curve from the contract's JSON object.

    Raises:
        CurveError: naming the missing or malformed field (wrong version, bad points,
            a ``peak_bytes`` that disagrees with the points, ...).
    """
    if not isinstance(d, dict):
        raise CurveError(f"curve: expected a JSON object, got {type(d).__name__}")
    for key in ("version", "source", "iteration_s", "persistent_bytes", "points"):
        if key not in d:
            raise CurveError(f"{key}: missing")
    if d["version"] != CURVE_VERSION:
        raise CurveError(f"version: {d['version']!r} is not supported (expected {CURVE_VERSION})")
    pts = d["points"]
    if not isinstance(pts, list) or not all(
        isinstance(p, (list, tuple)) and len(p) == 2 and all(_is_number(v) for v in p) for p in pts
    ):
        raise CurveError("points: expected a list of [fraction, bytes] number pairs")
    for key in ("iteration_s", "persistent_bytes"):
        if not _is_number(d[key]):
            raise CurveError(f"{key}: expected a number, got {type(d[key]).__name__}")
    if "peak_bytes" in d and not _is_number(d["peak_bytes"]):
        raise CurveError(f"peak_bytes: expected a number, got {type(d['peak_bytes']).__name__}")
    device = d.get("device", "cpu")
    if not (isinstance(device, str) and _DEVICE.fullmatch(device)):
        raise CurveError(f"device: expected 'cpu' or 'cuda:N', got {device!r}")
    meta = d.get("meta") or {}
    if not isinstance(meta, dict):
        raise CurveError(f"meta: expected a JSON object, got {type(meta).__name__}")
    arr = np.asarray(pts, dtype=np.float64).reshape(-1, 2)
    curve = MemoryCurve(
        fractions=arr[:, 0],
        bytes=arr[:, 1],
        iteration_s=float(d["iteration_s"]),
        persistent_bytes=float(d["persistent_bytes"]),
        source=d["source"],
        device=device,
        meta=dict(meta),
    )
    if "peak_bytes" in d:
        if abs(float(d["peak_bytes"]) - curve.peak_bytes) > max(1.0, 1e-6 * curve.peak_bytes):
            raise CurveError(f"peak_bytes: {d['peak_bytes']} disagrees with the points' peak {curve.peak_bytes:.0f}")
    return curve


def load_curve(path_or_text: str | Path) -> MemoryCurve:
    """Load a curve from a JSON file path or a JSON string (one starting with ``{``).

    Raises:
        CurveError: naming the file when it cannot be read, is not UTF-8 text (a binary file), is not
            valid JSON, nests too deep for the JSON decoder (RecursionError), or is not a valid curve.
    """
    text = str(path_or_text)
    where = "curve"
    if not text.lstrip().startswith("{"):
        where = f"curve file {path_or_text}"
        try:
            text = Path(path_or_text).read_text(encoding="utf-8")
        except OSError as exc:
            raise CurveError(f"{where}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError:
            raise CurveError(f"{where}: not a JSON curve (not UTF-8 text; a binary file?)") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CurveError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    except RecursionError:
        raise CurveError(f"{where}: not a JSON curve (JSON nesting too deep)") from None
    return curve_from_dict(data)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# -- construction helpers -------------------------------------------------------------
def curve_from_samples(
    times_s: Sequence[float],
    bytes_: Sequence[float],
    *,
    persistent_bytes: float | None = None,
    source: str = "allocator-trace",
    device: str = "cpu",
    meta: dict[str, Any] | None = None,
) -> MemoryCurve:
    """Curve of one iteration from (time, bytes-held-from-then-on) samples.

    Args:
        times_s: shape (n,), seconds, non-decreasing; ``times_s[0]`` is the iteration start and
            ``times_s[-1]`` its end (the last sample's bytes are the bytes held at the end).
        bytes_: shape (n,), bytes held from each time on.
        persistent_bytes: bytes held across iterations; default: the smaller of the first and
            last sample.
    Raises:
        CurveError: on fewer than two samples, a zero-length iteration or bad values.
    """
    t = np.asarray(times_s, dtype=np.float64)
    b = np.asarray(bytes_, dtype=np.float64)
    if len(t) < 2 or len(t) != len(b):
        raise CurveError("samples: need at least two (time, bytes) samples of equal length")
    dur = float(t[-1] - t[0])
    if not dur > 0:
        raise CurveError("samples: the iteration has zero or negative duration")
    if persistent_bytes is None:
        persistent_bytes = float(min(b[0], b[-1]))
    return MemoryCurve(
        fractions=(t - t[0]) / dur,
        bytes=b,
        iteration_s=dur,
        persistent_bytes=float(persistent_bytes),
        source=source,
        device=device,
        meta=dict(meta or {}),
    )


# -- tools ------------------------------------------------------------------------------
def resample(curve: MemoryCurve, n: int) -> np.ndarray:
    """Bytes at ``n`` evenly spaced fractions ``i/n`` (i = 0..n-1); shape (n,).

    Each sample is the *maximum* held within its bin ``[i/n, (i+1)/n)``, so a resampled curve
    never hides a peak (resampling is conservative for budget checks).
    Raises ValueError if n < 1.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    edges = np.arange(n + 1) / n
    out = curve.at(edges[:-1]).copy()  # value at each bin start
    # any step that begins strictly inside a bin raises that bin's max
    inner_bin = np.minimum((curve.fractions * n).astype(np.int64), n - 1)
    inside = curve.fractions < 1.0
    np.maximum.at(out, inner_bin[inside], curve.bytes[inside])
    return out


def resampled_curve(curve: MemoryCurve, n: int) -> MemoryCurve:
    """``curve`` as an ``n``-step curve (see :func:`resample`); same metadata."""
    return MemoryCurve(
        fractions=np.arange(n) / n,
        bytes=resample(curve, n),
        iteration_s=curve.iteration_s,
        persistent_bytes=curve.persistent_bytes,
        source=curve.source,
        device=curve.device,
        meta=curve.meta,
    )


def combined_bytes(
    curves: Sequence[MemoryCurve], shifts_s: Sequence[float], times_s: np.ndarray
) -> np.ndarray:
    """Sum of the group's bytes at ``times_s`` when job i's iterations start at ``shifts_s[i]``.

    Each job repeats its iteration forever with period ``iteration_s``; before its shift it
    holds its persistent bytes (it is placed and loaded but not yet iterating).
    Shapes: ``times_s`` (m,) seconds -> (m,) bytes. Raises ValueError on length mismatch.
    """
    if len(curves) != len(shifts_s):
        raise ValueError(f"{len(curves)} curves but {len(shifts_s)} shifts")
    t = np.asarray(times_s, dtype=np.float64)
    total = np.zeros_like(t)
    for c, s in zip(curves, shifts_s):
        rel = t - float(s)
        vals = c.at(rel / c.iteration_s)
        total += np.where(rel >= 0, vals, c.persistent_bytes)
    return total


# Note [Derived curves]: the coordinator and each job's pacer plan with curves derived from a job's curve (its
# warm-up, its falling envelope, its peak held flat). Building one validates it, and a gating prediction
# (placement.groups.predict_gated) builds about eleven (cost: docs/benchmarks.md, "Measurements behind the
# notes"); derived_curve builds each once per curve object and kind. An entry keeps its source curve, so a freed curve's
# id reused by another curve never gets the first one's derived curve; the memo is emptied when it reaches
# DERIVED_MAX entries. Derived curves are shared: nobody may change their arrays.
DERIVED_MAX = 256
_derived: dict[tuple[int, str], tuple[MemoryCurve, MemoryCurve]] = {}


def derived_curve(curve: MemoryCurve, kind: str, build: Callable[[MemoryCurve], MemoryCurve]) -> MemoryCurve:
    """``build(curve)``, built once per curve object and ``kind`` (a name for ``build``) and shared after
    (Note [Derived curves]). Thread-safe: two threads may both build it; either result is kept."""
    key = (id(curve), kind)
    hit = _derived.get(key)
    if hit is None or hit[0] is not curve:
        if len(_derived) >= DERIVED_MAX:
            _derived.clear()
        hit = _derived[key] = (curve, build(curve))
    return hit[1]


def max_relative_error(a: MemoryCurve, b: MemoryCurve, n: int = 512) -> float:
    """Largest |a - b| over the iteration, relative to the larger of the two peaks.

    Both curves are compared on ``n`` evenly spaced fractions (point values, not bin maxima),
    so curves with different iteration times compare by phase.
    """
    x = (np.arange(n) + 0.5) / n
    diff = np.abs(a.at(x) - b.at(x)).max()
    return float(diff / max(a.peak_bytes, b.peak_bytes, 1.0))


def summary(curve: MemoryCurve) -> dict[str, Any]:
    """Headline figures for CLIs and pages: peak, persistent and transient bytes, iteration s."""
    return {
        "source": curve.source,
        "device": curve.device,
        "iteration_s": curve.iteration_s,
        "peak_bytes": int(curve.peak_bytes),
        "persistent_bytes": int(curve.persistent_bytes),
        "transient_peak_bytes": int(curve.transient_peak_bytes),
        "points": len(curve.fractions),
    }


def triangular_curve(persistent: float, peak: float, iteration_s: float = 1.0, forward_fraction: float = 0.5,
                     steps: int = 200, source: str = "estimate") -> MemoryCurve:
    """A textbook curve: linear rise from ``persistent`` to ``peak`` over the forward part,
    linear fall back over the rest. For tests, docs and the simulator's synthetic jobs."""
    x = np.arange(steps) / steps
    up = persistent + (peak - persistent) * np.clip(x / forward_fraction, 0, 1)
    down = peak - (peak - persistent) * np.clip((x - forward_fraction) / (1 - forward_fraction), 0, 1)
    y = np.where(x <= forward_fraction, up, down)
    return MemoryCurve(fractions=x, bytes=y, iteration_s=iteration_s, persistent_bytes=persistent, source=source)

