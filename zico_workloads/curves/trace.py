"""From an allocation trace with iteration marks to one steady-state memory curve.

Both the allocator trace of a real profiling run and the fake-tensor estimate end here, so the
two sources are cut, averaged and split the same way.

Plain record format (JSON-ready dicts; what ``records_to_trace`` accepts):

    {"t": 12.0031, "kind": "alloc", "bytes": 524288}            # seconds; bytes > 0
    {"t": 12.0102, "kind": "free",  "bytes": 524288}
    {"t": 12.0000, "kind": "mark",  "mark": "iteration_start", "iteration": 3}
    {"t": 12.0001, "kind": "mark",  "mark": "phase", "phase": "forward", "iteration": 3}
    {"t": 12.0410, "kind": "mark",  "mark": "iteration_end", "iteration": 3}

A ``"job"`` key, when present, selects one job's records from a shared trace.

Note [Averaging iterations]
Iterations are cut at their start and end marks; the first ``warmup`` iterations are skipped
(first-step allocations such as optimizer state). A training loop allocates the same sequence of
sizes every steady iteration, so the steady iterations are averaged *event by event*: each
allocation or free keeps its bytes and gets the mean of its fractions of the iteration. Averaging
bytes on a time grid instead would smear a short peak that lands a little earlier or later in each
iteration and report less than every iteration's peak. When the sequences differ (data-dependent
shapes), the iteration with the highest peak is kept, conservatively. The persistent part is the
mean of min(bytes at start, bytes at end) over the steady iterations. The iteration time is the
*median* of the steady iterations' durations: on a loaded machine one iteration may take several
times the others (another process held the cores), and a mean would carry that into every plan
made from the curve.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from placement.curves import CurveError, MemoryCurve, curve_from_samples

MARKS = ("iteration_start", "phase", "iteration_end")


@dataclass
class Trace:
    """One job's allocation trace.

    times_s: shape (n,) seconds, non-decreasing; deltas: shape (n,) bytes (+alloc, -free).
    initial_bytes: bytes the job held before the first record.
    marks: (t seconds, mark, iteration, phase or None) tuples in time order.
    """

    times_s: np.ndarray
    deltas: np.ndarray
    initial_bytes: float = 0.0
    marks: list[tuple[float, str, int, str | None]] = field(default_factory=list)

    def live_at(self, t: np.ndarray) -> np.ndarray:
        """Bytes held just after every record with time <= t; shape of ``t``."""
        cum = np.concatenate([[0.0], np.cumsum(self.deltas)])
        idx = np.searchsorted(self.times_s, np.asarray(t, dtype=np.float64), side="right")
        return self.initial_bytes + cum[idx]


# A curve needs a few iterations; thousands would run a real or fake training job for hours.
MAX_ITERATIONS = 100


def check_iterations(warmup: int, steady: int) -> None:
    """Raise ValueError naming ``warmup`` (an integer in 0..MAX_ITERATIONS is needed) or ``steady``
    (1..MAX_ITERATIONS)."""
    if isinstance(warmup, bool) or not isinstance(warmup, int) or not 0 <= warmup <= MAX_ITERATIONS:
        raise ValueError(f"warmup: expected an integer in 0..{MAX_ITERATIONS}, got {warmup!r}")
    if isinstance(steady, bool) or not isinstance(steady, int) or not 1 <= steady <= MAX_ITERATIONS:
        raise ValueError(f"steady: expected an integer in 1..{MAX_ITERATIONS}, got {steady!r}")


def records_to_trace(records: Iterable[dict[str, Any]], job: Any = None, initial_bytes: float = 0.0) -> Trace:
    """Parse plain records (see module doc) into a :class:`Trace`.

    Raises CurveError naming the record index and field when a record is malformed.
    """
    times, deltas, marks = [], [], []
    for k, r in enumerate(records):
        if not isinstance(r, dict):
            raise CurveError(f"trace[{k}]: expected a dict, got {type(r).__name__}")
        if job is not None and r.get("job", job) != job:
            continue
        t = r.get("t")
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not np.isfinite(t):
            raise CurveError(f"trace[{k}].t: expected seconds as a number, got {t!r}")
        kind = r.get("kind")
        if kind in ("alloc", "free"):
            b = r.get("bytes")
            if not isinstance(b, int) or isinstance(b, bool) or b < 0:
                raise CurveError(f"trace[{k}].bytes: expected a non-negative integer, got {b!r}")
            times.append(float(t))
            deltas.append(b if kind == "alloc" else -b)
        elif kind == "mark":
            if r.get("mark") not in MARKS:
                raise CurveError(f"trace[{k}].mark: expected one of {', '.join(MARKS)}, got {r.get('mark')!r}")
            marks.append((float(t), r["mark"], int(r.get("iteration", -1)), r.get("phase")))
        else:
            raise CurveError(f"trace[{k}].kind: expected alloc, free or mark, got {kind!r}")
    order = np.argsort(np.asarray(times), kind="stable")
    return Trace(np.asarray(times, dtype=np.float64)[order], np.asarray(deltas, dtype=np.float64)[order],
                 float(initial_bytes), sorted(marks, key=lambda m: m[0]))


def iteration_windows(trace: Trace) -> list[tuple[int, float, float, dict[str, float]]]:
    """(iteration, start s, end s, {phase: start s}) for every iteration with both marks."""
    starts: dict[int, float] = {}
    phases: dict[int, dict[str, float]] = {}
    out = []
    for t, mark, i, phase in trace.marks:
        if mark == "iteration_start":
            starts[i] = t
            phases[i] = {}
        elif mark == "phase" and i in phases and phase:
            phases[i].setdefault(phase, t)
        elif mark == "iteration_end" and i in starts:
            out.append((i, starts.pop(i), t, phases.pop(i, {})))
    return out


def iteration_curve(trace: Trace, start: float, end: float, **kw: Any) -> MemoryCurve:
    """The bytes held over ``[start, end]`` as a curve (records exactly at ``start`` count as before)."""
    inside = (trace.times_s > start) & (trace.times_s <= end)
    ts = np.concatenate([[start], trace.times_s[inside], [end]])
    bs = trace.live_at(ts)
    return curve_from_samples(ts, bs, **kw)


def steady_iteration_curves(trace: Trace, warmup: int = 1, **kw: Any) -> list[MemoryCurve]:
    """One curve per complete iteration after the first ``warmup`` ones (for noise figures)."""
    return [iteration_curve(trace, s, e, **kw) for _, s, e, _ in iteration_windows(trace)[warmup:]]


def trace_curve(trace: Trace, *, warmup: int = 1, source: str = "allocator-trace",
                device: str = "cpu", meta: dict[str, Any] | None = None) -> MemoryCurve:
    """Average the steady iterations of ``trace`` into one curve (see Note [Averaging iterations]).

    Raises:
        CurveError: no complete iteration after the ``warmup`` ones, or bad values.
    """
    windows = iteration_windows(trace)
    steady = windows[warmup:]
    if not steady:
        raise CurveError(f"trace: {len(windows)} complete iteration(s) marked; need more than warmup={warmup}")
    curves = [iteration_curve(trace, s, e, source=source, device=device) for _, s, e, _ in steady]
    durations = np.array([e - s for _, s, e, _ in steady])
    same = all(len(c.bytes) == len(curves[0].bytes) and np.array_equal(c.bytes, curves[0].bytes) for c in curves)
    if same:  # identical allocation sequences: average each event's place in the iteration
        fractions = np.mean([c.fractions for c in curves], axis=0)
        chosen = curves[0]
    else:  # differing sequences: keep the iteration with the highest peak (conservative)
        chosen = max(curves, key=lambda c: c.peak_bytes)
        fractions = chosen.fractions
    phase_fracs: dict[str, list[float]] = {}
    for _, s, e, phases in steady:
        for name, tp in phases.items():
            phase_fracs.setdefault(name, []).append((tp - s) / (e - s))
    info = {
        "iterations_averaged": len(steady) if same else 1,
        "warmup_iterations": warmup,
        "iteration_peaks_bytes": [int(c.peak_bytes) for c in curves],
        "iteration_s_spread": [round(float(durations.min()), 6), round(float(durations.max()), 6)],
        "phase_fractions": {k: round(float(np.mean(v)), 4) for k, v in phase_fracs.items()},
        **(meta or {}),
    }
    persistent = float(np.mean([min(c.bytes[0], c.bytes[-1]) for c in curves]))
    return MemoryCurve(fractions=fractions, bytes=chosen.bytes, iteration_s=float(np.median(durations)),
                       persistent_bytes=min(persistent, chosen.peak_bytes), source=source, device=device,
                       meta=info)
