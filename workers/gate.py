"""The job thread's side of the coordinator (``placement.coordinator.Coordinator``, one per device worker).

Before each iteration a job thread calls :meth:`Gate.wait`, which blocks until the coordinator admits the
iteration (the time shift of the sharing plan, decided live from every job's progress) and returns the
delay imposed in seconds. The training loop's marks report progress: ``backward`` re-anchors the job at
the fraction of its curve's peak (where the forward pass ends), ``iteration_end`` ends the iteration and
updates the job's expected iteration time (see Note [Expected iteration time is overestimated on purpose]). A job without a memory curve is not gated (the allocator's budget still holds).
"""
from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger(__name__)

WAIT_POLL_S = 0.5  # how often a waiting job re-checks for cancellation
EMA = 0.3  # weight of the newest measured iteration time
# Note [Expected iteration time is overestimated on purpose]
#   The coordinator extrapolates a job's progress as elapsed / expected iteration time. Co-located jobs
#   slow each other (shared cores or SMs), so the solo time from the profile is too short, and a job
#   predicted "almost done" may still be at its peak. A longer expected time keeps the prediction earlier
#   in the iteration, which never hides memory still to come: so the gate starts at CONTENTION x the solo
#   time and then uses SAFETY x a moving average of the measured co-located times.
#   The first iteration of a run (warm-up: lazy initialisation, first-call overheads) is the least
#   predictable, so it starts only when no other job of the device is inside an iteration.
CONTENTION = 3.0
SAFETY = 2.0
FORWARD_STALL = 10.0  # during forward the coordinator sees the job held at its peak (Note [Progress from memory])


class RunStopped(Exception):
    """A cancel or abort arrived while the job waited at the gate; ``status`` says which."""

    def __init__(self, status: str):
        super().__init__(status)
        self.status = status


class Gate:
    """Couples one job thread to the device's coordinator (or to nothing when the job has no curve)."""

    def __init__(self, rt, spec):
        self.coordinator = rt.coordinator
        self.curve = None
        self.joined = False
        self._stop_check = lambda: rt.link.stop_requested(spec.job, spec.placement)
        self._iter_started = 0.0
        self._iteration_s: float | None = None
        self._warmed_up = False
        if spec.curve is not None and self.coordinator is not None:
            from placement.curves import curve_from_dict

            self.curve = curve_from_dict(spec.curve)  # raises CurveError naming the bad field
            self._peak_index = int(self.curve.bytes.argmax())
            self._peak_fraction = float(self.curve.fractions[self._peak_index])

    def join(self, job_id: Any) -> None:
        if self.curve is not None:
            self.coordinator.add_job(job_id, self.curve, CONTENTION * self.curve.iteration_s)
            self.joined = True

    def leave(self, job_id: Any) -> None:
        if self.joined:
            self.coordinator.remove_job(job_id)
            self.joined = False

    def wait(self, job_id: Any, iteration: int) -> float:
        """Block until iteration ``iteration`` may start; returns the seconds waited.

        Raises:
            RunStopped: a cancel or abort arrived while waiting (the iteration was not started).
        """
        if not self.joined:
            return 0.0
        t0 = time.monotonic()
        if not self._warmed_up:
            while any(v["in_flight"] for j, v in self.coordinator.snapshot()["jobs"].items() if j != str(job_id)):
                stop = self._stop_check()
                if stop:
                    raise RunStopped(stop)
                time.sleep(0.05)
            self._warmed_up = True
        while not self.coordinator.wait_to_start(job_id, timeout_s=WAIT_POLL_S):
            stop = self._stop_check()
            if stop:
                raise RunStopped(stop)
        waited = time.monotonic() - t0
        return waited if waited > 1e-4 else 0.0

    def observe(self, job_id: Any, allocated_bytes: int, phase: str) -> None:
        """Re-anchor the job's progress from its live allocated bytes (the reporter calls this at 5 Hz).

        Note [Progress from memory]
            Between marks the coordinator extrapolates progress from time, which is wrong whenever the
            machine runs slower or faster than predicted. Two rules keep the prediction on the safe side:
            during ``forward`` a job is taken to be *at its peak already* (its rise may come sooner than
            predicted, and the peak is what the others must make room for); during ``backward`` its live
            allocated bytes say where it is on the falling part of its curve (the first point after the
            peak whose bytes have fallen to them). The gate only ever moves the estimate *back*; marks and
            the end of the iteration move it forward.
        """
        if not self.joined or phase not in ("forward", "backward"):
            return
        f, b = self.curve.fractions, self.curve.bytes
        peak = self._peak_index
        if phase == "forward":
            where = float(f[peak])
        else:
            hits = (b[peak:] <= allocated_bytes).nonzero()[0]
            where = float(f[peak + hits[0]]) if len(hits) else float(f[-1])
        try:
            now = self.coordinator.snapshot()["jobs"].get(str(job_id))
            if now and now["in_flight"] and where < now["fraction"]:
                self.coordinator.report_progress(job_id, where)
        except (KeyError, ValueError):  # the job left meanwhile
            pass

    def progress(self, job_id: Any, kind: str, iteration: int) -> None:
        if not self.joined:
            return
        now = time.monotonic()
        if kind == "iteration_start":
            self._iter_started = now
        elif kind == "forward":  # Note [Progress from memory]: at its peak, and not falling, until backward
            self.coordinator.set_iteration_s(job_id, FORWARD_STALL * self._expected_s())
            self.coordinator.report_progress(job_id, self._peak_fraction)
        elif kind == "backward":
            self.coordinator.set_iteration_s(job_id, self._expected_s())
            self.coordinator.report_progress(job_id, self._peak_fraction)
        elif kind == "iteration_end":
            self.coordinator.end_iteration(job_id)
            took = now - self._iter_started
            self._iteration_s = took if self._iteration_s is None else (1 - EMA) * self._iteration_s + EMA * took
            if self._iteration_s > 0:
                self.coordinator.set_iteration_s(job_id, self._expected_s())

    def _expected_s(self) -> float:
        """Expected iteration time handed to the coordinator (Note [Expected iteration time ...])."""
        if self._iteration_s is None:
            return CONTENTION * self.curve.iteration_s
        return SAFETY * self._iteration_s
