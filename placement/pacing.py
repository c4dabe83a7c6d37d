"""One job's live rules on its device's coordinator: what the coordinator is told about the job's iteration.

A :class:`Pacer` turns the events of one job's training loop (join, iteration start, the ``forward`` and
``backward`` marks, iteration end, sampled allocated bytes, leave) into the coordinator's inputs: the curve it
plans with, the expected iteration time and the progress of the iteration in flight. The device agent drives
it from the job process's messages on the real clock (workers.gate); the simulated executor
(placement.device_sim) drives the very same class from its virtual timeline, so the scheduler's predictions
and the simulator run what the agent runs. Pure logic: the time comes from the coordinator's clock.

Note [Warm-up iteration]
~~~~~~~~~~~~~~~~~~~~~~~~
The first iteration of a run (lazy initialisation, first-call overheads) is the least predictable, so the
coordinator sees it as holding the job's peak from start to end (a flat curve at the peak); from its end on
the job has its real curve. The warm-up is an ordinary request in the coordinator's line: it waits for room
like any iteration, and while it waits it holds a reservation that the neighbour's next iterations cannot
jump (Note [Waiting line] in placement.coordinator), so the two alternate instead of one starving. (Waiting
for a moment with no other job inside an iteration would wait out a neighbour iterating back to back: its
whole run; docs/benchmarks.md, "Measurements behind the notes".)

Note [Expected iteration time]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The coordinator extrapolates a job's progress as elapsed / expected iteration time, and plans a request
with its iteration time too. Past the peak (and the job is never seen before it: Note [Progress from
memory]) a longer time keeps the prediction earlier in a fall made non-increasing (``falling_envelope``),
holding more bytes than the job really does, which is safe; a shorter one hides memory still held. For a
request it is the other way round: a job that runs faster than planned meets its neighbours' commitments
earlier, so a request is planned with the *shortest* likely time (``IterationTime.shortest_s``: the solo
time, or the measured mean when iterations run faster), and a fall with the *longest* likely one
(``expected_s``). Since every commitment beside a request is then flat or falling, a request that runs
slower than planned only meets less memory (each of its bytes comes later, beside less).

The longest likely time is ``mean + DEVIATIONS x mean deviation`` of the measured iteration times
(moving averages with weights MEAN_GAIN and DEVIATION_GAIN), as a retransmission timeout is (RFC 6298,
Jacobson/Karels); the first measurement sets the mean, and its distance from the solo time the deviation.
The warm-up iteration is not averaged in (lazy initialisation makes it long), but until the first
measurement its time is the estimate; before it, CONTENTION x the solo time (co-located jobs slow each
other: shared cores or SMs).

Why not a fixed multiple of the measured time (it was 2 x a moving average): the margin is there for
iteration times that vary, and a fixed multiple charges it to jobs whose times do not. The scheduler
predicts a plan's slowdown by running these rules in the simulator (placement.groups.predict_gated), whose
times are exact; with a fixed 2 x the demo pair's predicted slowdown was 3.9-4.75x at every device budget
from 306 to 338 MiB (past ZICO_MAX_SLOWDOWN, 1.6x, and the demo's 3.0x), so the scheduler co-located it only
from 339 MiB on; with the deviation it is 1.26-1.29x from 314 MiB on (tests/placement/data/
demo-pair-profile.json; 1.23-1.31x before these rules ran in the simulator at all). The margin is what the job's measurements show:
none for steady times (the simulator; a steady GPU job), wide for a job on a loaded host (the demo's tiny-lm
on 2 shared cores ranges 0.16-2.24 s). So a prediction does not include a noisy host's margin: its slowdowns
are those of steady iterations, and a noisy run waits longer than predicted (the job page shows the
measured slowdown beside the predicted one).

Note [Progress from memory]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
Between marks the coordinator extrapolates progress from time, which is wrong whenever the machine runs
slower or faster than predicted. Two rules keep the prediction on the safe side: during ``forward`` the job
is *held at its peak* (Coordinator.hold_peak; its rise may come sooner than predicted, and the peak is what
the others must make room for) until the ``backward`` mark re-anchors it at the peak's fraction; during
``backward`` its live allocated bytes say where it is on the falling part of its curve (the first point
after the peak whose bytes have fallen to them). Observed bytes only ever move the estimate *back*; marks
and the end of the iteration move it forward. (The forward pass used to be a fall running 10 x slower from
the peak: for a curve whose peak is a narrow spike the prediction left the peak before the job reached it,
and the simulator, running this rule, went over budget in the budget property test.)
"""
from __future__ import annotations

from typing import Hashable

import numpy as np

from .coordinator import Coordinator, Decision
from .curves import MemoryCurve, derived_curve

CONTENTION = 3.0        # expected time before any measurement, x the solo time (Note [Expected iteration time])
DEVIATIONS = 4.0        # margin: this many mean deviations (RFC 6298's K)
MEAN_GAIN = 0.125       # weight of the newest measurement in the mean (RFC 6298's alpha)
DEVIATION_GAIN = 0.25   # weight of the newest measurement in the mean deviation (RFC 6298's beta)
MARKS = ("iteration_start", "forward", "backward", "iteration_end")


def warmup_curve(curve: MemoryCurve) -> MemoryCurve:
    """``curve``'s peak held for the whole iteration (Note [Warm-up iteration])."""
    return MemoryCurve(fractions=[0.0], bytes=[curve.peak_bytes], iteration_s=curve.iteration_s,
                       persistent_bytes=curve.persistent_bytes, source=curve.source, device=curve.device)


def falling_envelope(curve: MemoryCurve) -> MemoryCurve:
    """``curve`` with its part from the peak on replaced by the most it will still hold (the running
    maximum from the end back to the peak): never rising after the peak (Note [Progress from memory])."""
    b = curve.bytes.copy()
    peak = int(b.argmax())
    b[peak:] = np.maximum.accumulate(b[peak:][::-1])[::-1]
    return MemoryCurve(fractions=curve.fractions, bytes=b, iteration_s=curve.iteration_s,
                       persistent_bytes=curve.persistent_bytes, source=curve.source, device=curve.device,
                       meta=curve.meta)


class IterationTime:
    """Iteration times from measured ones (Note [Expected iteration time]). Seconds.

    Args:
        solo_s: the curve's solo iteration time (> 0).
    Raises ValueError for a non-positive ``solo_s``.
    """

    def __init__(self, solo_s: float) -> None:
        if not solo_s > 0:
            raise ValueError(f"solo iteration time must be > 0 seconds, got {solo_s!r}")
        self.solo_s = float(solo_s)
        self.mean_s: float | None = None
        self.deviation_s = 0.0
        self.warmup_s: float | None = None

    def add_warmup(self, took_s: float) -> None:
        """The warm-up iteration's time (seconds): the expected time until the first :meth:`add`."""
        self.warmup_s = max(0.0, float(took_s))

    def add(self, took_s: float) -> None:
        """One measured iteration time (seconds, >= 0)."""
        took_s = max(0.0, float(took_s))
        if self.mean_s is None:  # the first sample sets the mean; its distance from the solo time, the deviation
            self.mean_s, self.deviation_s = took_s, abs(took_s - self.solo_s)
            return
        self.deviation_s += DEVIATION_GAIN * (abs(took_s - self.mean_s) - self.deviation_s)
        self.mean_s += MEAN_GAIN * (took_s - self.mean_s)

    @property
    def expected_s(self) -> float:
        """The longest the iteration is likely to take (a fall is predicted with it): ``CONTENTION x solo``
        before any measurement, else ``mean + DEVIATIONS x deviation``; never below the solo time's millionth."""
        if self.mean_s is None:
            return CONTENTION * self.solo_s if self.warmup_s is None else max(self.warmup_s, self.solo_s)
        return max(self.mean_s + DEVIATIONS * self.deviation_s, 1e-6 * self.solo_s)

    @property
    def shortest_s(self) -> float:
        """The shortest it is likely to take (a request is planned with it): the solo time, or the mean
        when measured iterations are shorter; never below the solo time's millionth."""
        return max(min(self.solo_s, self.mean_s if self.mean_s is not None else self.solo_s), 1e-6 * self.solo_s)


class Pacer:
    """Couples one job to its device's :class:`~placement.coordinator.Coordinator`.

    Call :meth:`join` once, then per iteration :meth:`request` until it admits, :meth:`mark` for
    ``iteration_start`` (right after admission), ``forward``, ``backward`` and ``iteration_end``, and
    :meth:`observe` with sampled allocated bytes at any time; :meth:`leave` at the end. Times come from
    the coordinator's clock; ``curve`` is the job's (solo) memory curve.
    """

    def __init__(self, coordinator: Coordinator, job_id: Hashable, curve: MemoryCurve) -> None:
        self.coordinator = coordinator
        self.job_id = job_id
        self.curve = curve
        self.time = IterationTime(curve.iteration_s)
        self.joined = False
        self.warmed_up = False
        self._peak_index = int(curve.bytes.argmax())
        self._peak_fraction = float(curve.fractions[self._peak_index])
        self._started_at = 0.0

    @property
    def peak_fraction(self) -> float:
        """Where the job's forward pass ends (its curve's peak), as a fraction of the iteration."""
        return self._peak_fraction

    def join(self) -> None:
        """Add the job with its warm-up curve (Note [Warm-up iteration]). Raises ValueError if it is there."""
        self.coordinator.add_job(self.job_id, derived_curve(self.curve, "warmup", warmup_curve), self.time.shortest_s,
                                 warmup=True)
        self.joined = True

    def leave(self) -> None:
        """Remove the job (finished, failed, cancelled); nothing when it never joined or already left."""
        if self.joined:
            self.coordinator.remove_job(self.job_id)
            self.joined = False

    def request(self) -> Decision:
        """One decision: may the job's next iteration start now (then it is in flight)?"""
        return self.coordinator.request_start(self.job_id)

    def mark(self, kind: str) -> None:
        """A mark of the training loop (one of MARKS). Raises ValueError for another kind."""
        c, j = self.coordinator, self.job_id
        if kind == "iteration_start":  # admitted: planned with its shortest time, it runs with its longest
            self._started_at = c.now()  # (what a job without forward and backward marks is seen to do)
            c.set_iteration_s(j, self.time.expected_s)
        elif kind == "forward":  # Note [Progress from memory]: at its peak until backward
            if c.progress(j) is not None:  # a mark outside an iteration in flight carries nothing
                c.hold_peak(j)
        elif kind == "backward":  # from the peak on, falling no faster than its longest time says
            c.set_iteration_s(j, self.time.expected_s)
            c.report_progress(j, self._peak_fraction)
        elif kind == "iteration_end":
            c.end_iteration(j)
            if not self.warmed_up:  # Note [Warm-up iteration]: from now on, the job's real curve
                self.time.add_warmup(c.now() - self._started_at)
                c.remove_job(j)
                c.add_job(j, derived_curve(self.curve, "falling", falling_envelope), self.time.shortest_s,
                          loaded=True)
                self.warmed_up = True
            else:
                self.time.add(c.now() - self._started_at)
                c.set_iteration_s(j, self.time.shortest_s)
        else:
            raise ValueError(f"unknown mark {kind!r} (expected one of {', '.join(MARKS)})")

    def observe(self, allocated_bytes: float, phase: str) -> None:
        """Re-anchor the iteration in flight from live allocated bytes during ``backward`` (Note [Progress
        from memory]); only ever moves the estimate back. Another phase, or no iteration in flight: nothing."""
        if not self.joined or not self.warmed_up or phase != "backward":
            return
        b = self.curve.bytes
        peak = self._peak_index
        hits = (b[peak:] <= allocated_bytes).nonzero()[0]
        where = float(self.curve.fractions[peak + hits[0]]) if len(hits) else float(self.curve.fractions[-1])
        now = self.coordinator.progress(self.job_id)
        if now is not None and where < now:
            self.coordinator.report_progress(self.job_id, where)
