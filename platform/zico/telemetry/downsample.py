"""Downsampling of live memory samples to at most one stored point per second per job (pure Python).

Live samples arrive at >= 4 Hz per job. For each (device, job) and each whole second the downsampler keeps
the *largest* allocated / reserved / device-used bytes seen (so a stored timeline never hides a peak) and
the last iteration and phase. A second is emitted once a sample of a later second arrives for the same
series, or by :meth:`Downsampler.flush` once it is older than ``lag_s`` (so a finished job's last second
is stored too).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
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

    def fold(self, s: dict[str, Any]) -> None:
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
        return Point(device=str(s["device"]), job=None if job is None else int(job), second=int(math.floor(t)),
                     allocated=int(s.get("allocated") or 0), reserved=int(s.get("reserved") or 0),
                     iteration=None if s.get("iteration") is None else int(s["iteration"]),
                     phase=str(s.get("phase") or "")[:16],
                     device_used=None if s.get("device_used") is None else int(s["device_used"]),
                     budget=None if s.get("budget") is None else int(s["budget"]))
    except KeyError as exc:
        raise SampleError(f"sample: missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError):
        raise SampleError(f"sample: malformed values in {s!r}") from None


class Downsampler:
    """Folds samples into per-second points; emits each (device, job, second) at most once."""

    def __init__(self, lag_s: float = 2.0):
        self.lag_s = lag_s
        self._open: dict[tuple[str, int | None], Point] = {}
        self._last_emitted: dict[tuple[str, int | None], int] = {}
        self.rejected = 0
        self.last_error = ""

    def add(self, samples: Iterable[dict[str, Any]]) -> list[Point]:
        """Fold ``samples`` in; returns the points of seconds that are now complete.

        A malformed sample is skipped and counted in ``rejected`` (``last_error`` says why).
        """
        out: list[Point] = []
        for s in samples:
            try:
                p = _point(s)
            except SampleError as exc:
                self.rejected += 1
                self.last_error = str(exc)
                continue
            key = (p.device, p.job)
            if p.second <= self._last_emitted.get(key, -1):
                continue  # a late sample of a second already stored
            cur = self._open.get(key)
            if cur is None:
                self._open[key] = p
            elif p.second == cur.second:
                cur.fold(s)
            elif p.second > cur.second:
                out.append(self._emit(key, cur))
                self._open[key] = p
            # p.second < cur.second: late sample of an open series' past second; dropped
        return out

    def flush(self, now: float) -> list[Point]:
        """Emit every open second that ended more than ``lag_s`` before ``now`` (unix s)."""
        out = []
        for key, p in list(self._open.items()):
            if p.second + 1 + self.lag_s <= now:
                out.append(self._emit(key, p))
                del self._open[key]
        for key, second in list(self._last_emitted.items()):  # forget series idle for an hour
            if second + 3600 < now and key not in self._open:
                del self._last_emitted[key]
        return out

    def _emit(self, key, p: Point) -> Point:
        self._last_emitted[key] = p.second
        return p
