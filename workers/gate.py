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

from .stopped import RunStopped  # noqa: F401  (raised by Gate.wait; re-exported for the agent)

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
#   predictable, so the coordinator sees it as holding the job's peak from start to end (a flat curve,
#   Note [Warm-up iteration]); from its end on the job has its real curve.
# Note [Warm-up iteration]
#   The warm-up used to start only once a 50 ms poll found no other job inside an iteration; a neighbour
#   whose iterations follow each other back to back is almost never between two, so the new job waited out
#   its neighbour's whole run (measured: 17.45 s, the neighbour's entire run, in the demo). Now the warm-up is
#   an ordinary request in the coordinator's line with a flat curve at the job's peak: it waits for room like
#   any iteration, and while it waits it holds a reservation that the neighbour's next iterations cannot
#   jump (Note [Waiting line] in placement/coordinator.py), so the two alternate instead of one starving.
CONTENTION = 3.0
SAFETY = 2.0
FORWARD_STALL = 10.0  # during forward the coordinator sees the job held at its peak (Note [Progress from memory])
# Note [Delays that count]
#   A wait at the gate is a *delay* (the sharing plan's time shift) only when another job shares the coordinator
#   and the wait lasted at least DELAY_MIN_S. Shorter waits are the gate's own bookkeeping (a lock hand-over, a
#   condition-variable wake-up, a 50 ms warm-up poll on a loaded 2-core machine), not a time shift: they are
#   summed in ``gate_wait_s`` but are neither counted as delays nor reported. Real delays are aggregated per job
#   run (count, total, largest; DelayTally) and sent at most every DELAY_REPORT_EVERY_S as one running total, so
#   the job's log holds one delay record per run instead of one per iteration.
DELAY_MIN_S = 0.05
DELAY_REPORT_EVERY_S = 5.0


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
            self.coordinator.add_job(job_id, self._warmup_curve(), CONTENTION * self.curve.iteration_s)
            self.joined = True

    def _warmup_curve(self):
        """The job's peak held for the whole iteration (Note [Warm-up iteration])."""
        from placement.curves import MemoryCurve

        c = self.curve
        return MemoryCurve(fractions=[0.0], bytes=[c.peak_bytes], iteration_s=c.iteration_s,
                           persistent_bytes=c.persistent_bytes, source=c.source, device=c.device)

    def leave(self, job_id: Any) -> None:
        if self.joined:
            self.coordinator.remove_job(job_id)
            self.joined = False

    def wait(self, job_id: Any, iteration: int) -> float:
        """Block until iteration ``iteration`` may start; returns the seconds waited (0.0 for a job alone on
        its coordinator, which is never held back: Note [Delays that count]).

        Raises:
            RunStopped: a cancel or abort arrived while waiting (the iteration was not started).
        """
        if not self.joined:
            return 0.0
        alone = not self.has_neighbours(job_id)  # still asks: the coordinator must see its iteration in flight
        t0 = time.monotonic()
        while not self.coordinator.wait_to_start(job_id, timeout_s=WAIT_POLL_S):
            stop = self._stop_check()
            if stop:
                raise RunStopped(stop)
        waited = time.monotonic() - t0
        return 0.0 if alone or waited <= 1e-4 else waited

    def has_neighbours(self, job_id: Any) -> bool:
        """True when another job is on this job's coordinator."""
        return any(j != str(job_id) for j in self.coordinator.snapshot()["jobs"])

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
            if not self._warmed_up:  # Note [Warm-up iteration]: from now on, the job's real curve
                self.coordinator.remove_job(job_id)
                self.coordinator.add_job(job_id, self.curve, self._expected_s(), loaded=True)
                self._warmed_up = True
            elif self._iteration_s > 0:
                self.coordinator.set_iteration_s(job_id, self._expected_s())

    def _expected_s(self) -> float:
        """Expected iteration time handed to the coordinator (Note [Expected iteration time ...])."""
        if self._iteration_s is None:
            return CONTENTION * self.curve.iteration_s
        return SAFETY * self._iteration_s


class DelayTally:
    """One job run's delays at the gate, aggregated (Note [Delays that count]).

    ``add`` takes every wait (seconds) and whether a neighbour shared the coordinator at the time; ``report``
    returns the running totals to send when there is something new and DELAY_REPORT_EVERY_S has passed since
    the last report (or ``final``), else None.
    """

    def __init__(self, clock=time.monotonic) -> None:
        self.count = 0            # real delays
        self.total_s = 0.0        # their sum, seconds
        self.largest_s = 0.0      # the longest one, seconds
        self.gate_wait_s = 0.0    # every second spent at the gate, noise included
        self._clock = clock
        self._reported = 0
        self._next = clock() + DELAY_REPORT_EVERY_S

    def add(self, waited_s: float) -> bool:
        """Record one wait; True when it counts as a delay."""
        self.gate_wait_s += waited_s
        if waited_s < DELAY_MIN_S:
            return False
        self.count += 1
        self.total_s += waited_s
        self.largest_s = max(self.largest_s, waited_s)
        return True

    def report(self, final: bool = False) -> dict | None:
        now = self._clock()
        if self.count == self._reported or (not final and now < self._next):
            return None
        self._reported, self._next = self.count, now + DELAY_REPORT_EVERY_S
        return self.metrics()

    def metrics(self) -> dict:
        """The totals, as stored in the job's metrics: ``delays`` (count), ``delay_s`` (sum), ``delay_max_s``
        (largest), ``gate_wait_s`` (all time at the gate), seconds rounded to 0.1 ms."""
        return {"delays": self.count, "delay_s": round(self.total_s, 4), "delay_max_s": round(self.largest_s, 4),
                "gate_wait_s": round(self.gate_wait_s, 4)}
