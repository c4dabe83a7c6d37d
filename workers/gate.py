"""The device agent's adapter over one job's :class:`placement.pacing.Pacer` (the coordinator's rules for a job).

Before each iteration the agent calls :meth:`Gate.wait`, which blocks until the device's coordinator
(``placement.coordinator.Coordinator``, one per device worker) admits the iteration (the time shift of the
sharing plan, decided live from every job's progress) and returns the delay imposed in seconds; it polls for
a cancel while it waits. The job's marks (:meth:`Gate.progress`) and its sampled allocated bytes
(:meth:`Gate.observe`) go to the pacer as they arrive. Every rule about what the coordinator is told (the
warm-up iteration, the expected iteration time, progress from memory) lives in placement.pacing, which the
simulator and the scheduler's predictions run too; this module adds only the real clock's blocking wait
and the delay tally. A job without a memory curve is not gated (the allocator's budget still holds).
"""
from __future__ import annotations

import logging
import time
from typing import Any

from .job.stopped import RunStopped  # noqa: F401  (raised by Gate.wait; re-exported for the agent)

log = logging.getLogger(__name__)

WAIT_POLL_S = 0.5  # how often a waiting job re-checks for cancellation
# Note [Delays that count]
#   A wait at the gate is a *delay* (the sharing plan's time shift) only when another job shares the coordinator
#   and the wait lasted at least DELAY_MIN_S. Shorter waits are the gate's own bookkeeping (a lock hand-over, a
#   condition-variable wake-up on a loaded 2-core machine), not a time shift: they are
#   summed in ``gate_wait_s`` but are neither counted as delays nor reported. Real delays are aggregated per job
#   run (count, total, largest; DelayTally) and sent at most every DELAY_REPORT_EVERY_S as one running total, so
#   the job's log holds one delay record per run instead of one per iteration.
DELAY_MIN_S = 0.05
DELAY_REPORT_EVERY_S = 5.0


class Gate:
    """Couples one job to the device's coordinator (or to nothing when the job has no curve).

    ``rt.coordinator``: the device's Coordinator or None; ``rt.link.stop_requested(job, placement)``: a cancel
    or abort status, else None; ``spec.curve``: the job's stored curve as the contract's dict, or None (the gate
    plans with its ``placement.gating.planning_curve``). Raises
    CurveError naming the bad field of a malformed curve.
    """

    def __init__(self, rt, spec):
        self.coordinator = rt.coordinator
        self.curve = None
        self.pacer = None
        self._stop_check = lambda: rt.link.stop_requested(spec.job, spec.placement)
        if spec.curve is not None and self.coordinator is not None:
            from placement.curves import curve_from_dict
            from placement.gating import planning_curve

            self.curve = planning_curve(curve_from_dict(spec.curve))  # Note [One planning rule] in placement.gating

    @property
    def joined(self) -> bool:
        return self.pacer is not None and self.pacer.joined

    def join(self, job_id: Any) -> None:
        if self.curve is not None:
            from placement.pacing import Pacer

            self.pacer = Pacer(self.coordinator, job_id, self.curve)
            self.pacer.join()

    def leave(self, job_id: Any) -> None:
        if self.joined:
            self.pacer.leave()

    def try_start(self, job_id: Any) -> bool:
        """One decision, now: True when the iteration may start (it is then in flight). Not joined: True."""
        return not self.joined or self.pacer.request().admit

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
        if not self.try_start(job_id):
            while not self.coordinator.wait_to_start(job_id, timeout_s=WAIT_POLL_S):
                stop = self._stop_check()
                if stop:
                    raise RunStopped(stop)
        waited = time.monotonic() - t0
        return 0.0 if alone or waited <= 1e-4 else waited

    def has_neighbours(self, job_id: Any) -> bool:
        """True when another job is on this job's coordinator."""
        return any(j != job_id for j in self.coordinator.job_ids)

    def observe(self, job_id: Any, allocated_bytes: int, phase: str) -> None:
        """The job's live allocated bytes in ``phase`` (the reporter's samples, 5 Hz): Note [Progress from memory]
        in placement/pacing.py."""
        if not self.joined:
            return
        try:
            self.pacer.observe(allocated_bytes, phase)
        except KeyError:  # the job left meanwhile
            pass

    def progress(self, job_id: Any, kind: str, iteration: int) -> None:
        """A mark of the job's loop: ``iteration_start`` (sent by the agent right after :meth:`wait`),
        ``forward``, ``backward``, ``iteration_end``; other kinds carry nothing for the coordinator."""
        from placement.pacing import MARKS

        if self.joined and kind in MARKS:
            self.pacer.mark(kind)


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
