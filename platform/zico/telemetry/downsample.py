"""Downsampling of live memory samples to at most one stored point per second per job (pure Python).

Live samples arrive at >= 4 Hz per job. For each (device, job) and each whole second the downsampler keeps
the *largest* allocated / reserved / device-used bytes seen (so a stored timeline never hides a peak) and
the last iteration and phase, plus each job's allocated bytes *at the device's peak instant* of that second
(Note [Stacking per-second points]). A device's second is emitted, all its series together, once a sample
of a later second arrives for that device, or by :meth:`Downsampler.flush` once it is older than ``lag_s``
(so a finished job's last second is stored too).

Note [Stacking per-second points]
    Per-second maxima of different jobs do not add up: two jobs handing memory over within one second
    (one frees 300 MiB at t=.2, the other takes 230 MiB at t=.6) have maxima summing to 530 MiB while the
    device never held more than 300 MiB. A worker's reporter stamps one tick's samples (every job's and the
    device's) with the same ``t``, so the downsampler can find the second's *peak instant* — the ``t`` at
    which the device row's allocated bytes were largest (without a device row: the sum of the jobs') — and
    keep each job's allocated bytes at that instant (``allocated_at_peak``; a job not sampled at exactly that
    ``t`` gets its sample nearest to it). Bands stacked from those values sum to what the device held at one
    instant, never more than the pool; the job's own maximum stays in ``allocated`` for its own chart.
    Limit: the reporter reads each job's figures and then the pool's, one after another, so a tick's job
    sum can pass the pool reading by what was allocated in between; the page builder scales such a second
    down to the pool (``zico.web.timelines._clip_to_pool``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable


@dataclass
class Point:
    """One stored second of one series; bytes are maxima over the second's samples."""

    device: str
    job: int | None
    second: int
    allocated: int
    reserved: int
    iteration: int | None
    phase: str
    device_used: int | None
    budget: int | None
    samples: int = 1
    allocated_at_peak: int | None = None  # set at emission (Note [Stacking per-second points])
    by_t: dict[float, int] = field(default_factory=dict, repr=False, compare=False)  # t -> allocated

    def fold(self, s: dict[str, Any]) -> None:
        t = float(s["t"])
        self.by_t[t] = max(self.by_t.get(t, 0), int(s.get("allocated") or 0))
        self.allocated = max(self.allocated, int(s.get("allocated") or 0))
        self.reserved = max(self.reserved, int(s.get("reserved") or 0))
        if s.get("device_used") is not None:
            self.device_used = max(self.device_used or 0, int(s["device_used"]))
        if s.get("iteration") is not None:
            self.iteration = int(s["iteration"])
        self.phase = str(s.get("phase") or self.phase)[:16]
        if s.get("budget") is not None:
            self.budget = int(s["budget"])
        self.samples += 1


class SampleError(ValueError):
    """A live sample lacks a field or has a wrong type; the message names it."""


def _point(s: dict[str, Any]) -> Point:
    try:
        t = float(s["t"])
        if not math.isfinite(t):
            raise ValueError
        job = s.get("job")
        p = Point(device=str(s["device"]), job=None if job is None else int(job), second=int(math.floor(t)),
                     allocated=int(s.get("allocated") or 0), reserved=int(s.get("reserved") or 0),
                     iteration=None if s.get("iteration") is None else int(s["iteration"]),
                     phase=str(s.get("phase") or "")[:16],
                     device_used=None if s.get("device_used") is None else int(s["device_used"]),
                     budget=None if s.get("budget") is None else int(s["budget"]))
        p.by_t[t] = p.allocated
        return p
    except KeyError as exc:
        raise SampleError(f"sample: missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError):
        raise SampleError(f"sample: malformed values in {s!r}") from None


@dataclass
class _Frame:
    """One device's open second: a point per series (``job`` None is the device row)."""

    second: int
    points: dict[int | None, Point]

    def close(self) -> list[Point]:
        """The frame's points with ``allocated_at_peak`` set (Note [Stacking per-second points])."""
        dev = self.points.get(None)
        if dev is not None:
            totals = dev.by_t
        else:
            totals = {}
            for p in self.points.values():
                for t, a in p.by_t.items():
                    totals[t] = totals.get(t, 0) + a
        peak_t = max(totals, key=lambda t: (totals[t], -t)) if totals else None
        for p in self.points.values():
            if p.job is None or peak_t is None or not p.by_t:
                p.allocated_at_peak = p.allocated
            else:
                nearest = min(p.by_t, key=lambda t: (abs(t - peak_t), t))
                p.allocated_at_peak = p.by_t[nearest]
        return list(self.points.values())


class Downsampler:
    """Folds samples into per-second points; emits each (device, job, second) at most once."""

    def __init__(self, lag_s: float = 2.0):
        self.lag_s = lag_s
        self._open: dict[str, _Frame] = {}
        self._last_emitted: dict[str, int] = {}
        self.rejected = 0
        self.last_error = ""

    def add(self, samples: Iterable[dict[str, Any]]) -> list[Point]:
        """Fold ``samples`` in; returns the points of seconds that are now complete.

        A malformed sample is skipped and counted in ``rejected`` (``last_error`` says why). A sample of a
        second its device has already moved past is dropped (samples of one device arrive in order).
        """
        out: list[Point] = []
        for s in samples:
            try:
                p = _point(s)
            except SampleError as exc:
                self.rejected += 1
                self.last_error = str(exc)
                continue
            if p.second <= self._last_emitted.get(p.device, -1):
                continue  # a late sample of a second already stored
            frame = self._open.get(p.device)
            if frame is not None and p.second > frame.second:
                out.extend(self._emit(p.device, frame))
                frame = None
            if frame is None:
                self._open[p.device] = _Frame(p.second, {p.job: p})
            elif p.second == frame.second:
                cur = frame.points.get(p.job)
                if cur is None:
                    frame.points[p.job] = p
                else:
                    cur.fold(s)
            # p.second < frame.second: late sample of the device's past second; dropped
        return out

    def flush(self, now: float) -> list[Point]:
        """Emit every open second that ended more than ``lag_s`` before ``now`` (unix s)."""
        out = []
        for dev, frame in list(self._open.items()):
            if frame.second + 1 + self.lag_s <= now:
                out.extend(self._emit(dev, frame))
        for dev, second in list(self._last_emitted.items()):  # forget devices idle for an hour
            if second + 3600 < now and dev not in self._open:
                del self._last_emitted[dev]
        return out

    def _emit(self, dev: str, frame: _Frame) -> list[Point]:
        self._last_emitted[dev] = frame.second
        self._open.pop(dev, None)
        return frame.close()
