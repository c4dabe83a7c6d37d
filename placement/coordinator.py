"""The coordinator: applies the gating rule live to the jobs co-located on one device.

It is pure logic with an injectable clock. The GPU worker wraps it (one thread per co-located
job calls :meth:`Coordinator.wait_to_start` before each iteration and :meth:`end_iteration`
after it); the simulator drives the very same class on a virtual clock through the
non-blocking :meth:`Coordinator.request_start`. See docs/placement.md for the API walk-through.

Note [Waiting line]
~~~~~~~~~~~~~~~~~~~
Jobs that asked to start and were told to wait form a line in order of their first request.
A request is decided by walking the line from its head: each waiter ahead of the requester gets
a *reservation* at its own least delay (on top of the in-flight iterations and the reservations
before it), then the requester gets its least delay on top of all of them. So a job never
jumps ahead of an earlier waiter in a way that delays it (no starvation: this is backfilling
at iteration granularity), yet a job whose iteration fits in a gap before an earlier waiter's
reservation starts at once. Reservations are recomputed at every decision from live progress,
so budget changes and slower-than-predicted jobs take effect at the next decision.

Recomputing lets a reservation slide, though: a job that jumps the line is planned with its shortest
likely iteration (placement.pacing), then runs held at its peak through its forward pass and falls
with its longest likely time, so the earlier waiter's next reservation lies later, and the next
jump fits before that one. Found by the scheduler: three small scripts under a budget just above
what they need together, the LSTM (the largest peak) was predicted at 94x, starved outright in
many time scalings (every start of the other two fitted before its sliding reservation). So
backfilling has a patience: once the head of the line has waited PATIENCE_ITERATIONS of the
longest expected iteration on the device, nobody behind it starts (reason ``"line"``) until it has
started; the iterations in flight then end and it fits, or it runs alone (Note [Running alone]).
This is the starvation guard of EASY backfilling (Lifka, "The ANL/IBM SP scheduling system", 1995):
a head waits at most its patience plus one iteration of each job in flight.

Note [Held at the peak]
~~~~~~~~~~~~~~~~~~~~~~~
An iteration in flight whose progress is unknown (its forward pass: the rise may come at any moment)
can be *held*: until its next progress report or its end, the others plan around it holding its
curve's peak for HOLD_ITERATIONS of the longest expected iteration on the device, so anything admitted
beside it fits beside its peak (``hold_peak``). placement.pacing holds every forward pass.

Note [A warm-up beside a falling neighbour]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A job's warm-up (its first iteration, planned flat at its peak: Note [Warm-up iteration] in
placement.pacing, which adds it with ``warmup=True``) is planned beside a neighbour's iteration in flight as if that neighbour held its peak
to the end of the iteration, not its falling curve. The plan counts a job's allocated bytes (raised by its
profile's pool overhead), but a neighbour's pool holds what its cache holds: a job that has run alone so far
shaped its cache without anyone reclaiming it, and in its backward pass its allocated bytes fall in segments
still partly in use, which no reclaim can return. A joiner admitted into that fall asks for its lazy
initialisation at once, the neighbour asks for more in its backward pass, both wait, and the allocator's
deadlock rule grants past the budget: seen once in eleven demo runs (436 MiB on a 422 MiB budget, the first
job holding 230 MiB with 146 MiB allocated as the second joined). So the warm-up starts at the neighbour's
iteration end at the latest (both peaks fit, or the neighbour waits at its gate, where its pool returns its
free segments); it waits at most one of the neighbour's iterations, once per run. From its second iteration
on a job is planned beside its neighbours' falling curves as before.

Note [Running alone]
~~~~~~~~~~~~~~~~~~~~
A job whose iteration cannot fit under the budget beside the others' commitments at any delay
(``least_delay_s`` is None) would wait for a budget change forever. When no iteration is in
flight and it heads the line, it starts anyway, alone: nothing the coordinator can do makes more
room, and the allocator's budget (and its deadlock rule) still bounds what it takes. The admission
is recorded as a delay with reason ``"alone"`` (or ``"infeasible"`` if it first had to wait for
others to finish). Jobs behind it in the line wait (reason ``"line"``) until it has started, so
it is not starved by others that fit and keep starting. Found on an H200: a worker's gate plans
its gate headroom below the device budget (Note [One planning rule] in placement.gating), and GPT-2 small's peak fell
between the two, so its first iteration waited forever.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable, Hashable

from .curves import MemoryCurve, derived_curve
from .gating import Commitment, least_delay_s

# Note [Bounded delay records]
# The coordinator records every delay it imposes, for the simulator's statistics and for tests. A live
# worker never drains them (it reports delays itself, workers/runner.py), and a long run of jobs that
# wait at every iteration would grow an unbounded list: the records are a ring of the newest
# DELAY_RECORDS_MAX (a few hundred kB), and ``delays_recorded`` / ``delay_ms_total`` count them all.
DELAY_RECORDS_MAX = 4096

# Note [Held at the peak]: a held job holds its peak for this many of the device's longest expected iterations,
# long enough to cover the whole iteration of any job admitted beside it.
HOLD_ITERATIONS = 2.0

# Note [Waiting line]: how long (in the device's longest expected iterations) the head of the line lets later
# requests start before it; then they wait until it has started.
PATIENCE_ITERATIONS = 1.0

# Default bins per shortest iteration for gating decisions (see Note [Gating rule]).
DEFAULT_RESOLUTION = 256


def _held_at_peak(c: MemoryCurve) -> MemoryCurve:
    """``c``'s peak, flat (Note [Held at the peak])."""
    return MemoryCurve(fractions=[0.0], bytes=[c.peak_bytes], iteration_s=c.iteration_s,
                       persistent_bytes=c.persistent_bytes, source=c.source, device=c.device)


@dataclass(frozen=True)
class Decision:
    """Answer to one start request.

    Attributes:
        admit: True: start the iteration now (it is now in flight).
        delay_s: when not admitted, seconds after which to ask again; None when the job cannot
            run under the current budget at all (wait for a budget change or a job to leave).
        reason: ``"budget"`` (its iteration would push the device over budget), ``"line"``
            (an earlier waiter goes first) or ``"infeasible"``; ``""`` when admitted, ``"alone"``
            when admitted although its iteration does not fit (Note [Running alone]).
    """

    admit: bool
    delay_s: float | None
    reason: str = ""


@dataclass(frozen=True)
class DelayRecord:
    """One delay the coordinator imposed: ``job_id``'s iteration ``iteration`` (0-based) started
    ``delay_ms`` milliseconds after it first asked, for ``reason`` (see :class:`Decision`)."""

    job_id: Hashable
    iteration: int
    delay_ms: float
    reason: str
    at_s: float


@dataclass
class _JobState:
    curve: MemoryCurve
    iteration_s: float
    loaded: bool = False            # holds its persistent bytes (from its first start on)
    iterations_started: int = 0
    in_flight: bool = False
    fraction: float = 0.0           # progress at ``reported_at``
    reported_at: float = 0.0
    requested_at: float | None = None
    first_reason: str = ""
    held: MemoryCurve | None = None  # in flight and held at its peak: this flat curve (Note [Held at the peak])
    warmup: bool = False  # its curve is a warm-up's (Note [A warm-up beside a falling neighbour])


class Coordinator:
    """Gates the iteration starts of the jobs on one device so their memory stays in budget.

    Args:
        budget_bytes: bytes all jobs together may hold (> 0).
        clock: returns seconds (monotonic); default ``time.monotonic``. The simulator passes
            its virtual clock.
        resolution: bins per shortest expected iteration for decisions.
    Thread-safe: every method takes one lock; :meth:`wait_to_start` waits on its condition.
    """

    def __init__(self, budget_bytes: float, *, clock: Callable[[], float] = time.monotonic,
                 resolution: int = DEFAULT_RESOLUTION) -> None:
        self._check_budget(budget_bytes)
        if resolution < 8:
            raise ValueError(f"resolution must be >= 8 bins, got {resolution}")
        self._budget = float(budget_bytes)
        self._clock = clock
        self._resolution = int(resolution)
        self._jobs: dict[Hashable, _JobState] = {}
        self._bins: dict = {}  # memo of whole iterations' bins (placement.gating.cached_iteration_bins)
        self._cond = threading.Condition()
        # Note [Bounded delay records]: the newest DELAY_RECORDS_MAX records, plus running totals.
        self.delays: deque[DelayRecord] = deque(maxlen=DELAY_RECORDS_MAX)
        self.delays_recorded = 0
        self.delay_ms_total = 0.0

    # -- membership and settings ------------------------------------------------------
    def add_job(self, job_id: Hashable, curve: MemoryCurve, iteration_s: float | None = None,
                *, loaded: bool = False, warmup: bool = False) -> None:
        """Add a job with its planning curve (``placement.gating.planning_curve``). It holds nothing until its first admitted iteration, which must load its
        persistent state (call :meth:`wait_to_start` before putting the model and optimizer on
        the device); from then on it holds at least its persistent bytes. ``loaded=True`` says it
        already holds them (they were allocated before joining, ungated). ``iteration_s``: its
        expected iteration time on this device now (default: the curve's solo time). ``warmup=True``: ``curve``
        is the job's warm-up (placement.pacing), planned beside its neighbours' iterations in flight as if they
        held their peaks to their ends (Note [A warm-up beside a falling neighbour]). Raises ValueError if the
        job is already here."""
        with self._cond:
            if job_id in self._jobs:
                raise ValueError(f"job {job_id!r} is already on this coordinator")
            self._jobs[job_id] = _JobState(curve, float(iteration_s or curve.iteration_s), loaded=bool(loaded),
                                           warmup=bool(warmup))
            self._cond.notify_all()

    def remove_job(self, job_id: Hashable) -> None:
        """Drop a job (finished, failed or cancelled); waiters re-decide. Raises KeyError."""
        with self._cond:
            del self._jobs[job_id]
            self._cond.notify_all()

    def set_budget(self, budget_bytes: float) -> None:
        """Change the budget at run time; it applies from the next decision on (in-flight
        iterations finish as admitted)."""
        self._check_budget(budget_bytes)
        with self._cond:
            self._budget = float(budget_bytes)
            self._cond.notify_all()

    def set_iteration_s(self, job_id: Hashable, iteration_s: float) -> None:
        """Update a job's expected iteration time (contention changed or measured). The
        in-flight iteration keeps its progress; only the time still to run is rescaled."""
        if not iteration_s > 0:
            raise ValueError(f"iteration_s must be > 0 seconds, got {iteration_s!r}")
        with self._cond:
            st = self._jobs[job_id]
            now = self._clock()
            st.fraction, st.reported_at = self._fraction(st, now), now
            st.iteration_s = float(iteration_s)
            self._cond.notify_all()

    def now(self) -> float:
        """The coordinator's clock, seconds (the injected one: virtual in the simulator)."""
        return self._clock()

    def progress(self, job_id: Hashable) -> float | None:
        """How far ``job_id``'s iteration in flight is predicted to be now (fraction in [0, 1)); None when
        it is not in flight or not here."""
        with self._cond:
            st = self._jobs.get(job_id)
            return None if st is None or not st.in_flight else self._fraction(st, self._clock())

    @property
    def budget_bytes(self) -> float:
        return self._budget

    @property
    def job_ids(self) -> list[Hashable]:
        with self._cond:
            return list(self._jobs)

    # -- iteration protocol -------------------------------------------------------------
    def request_start(self, job_id: Hashable) -> Decision:
        """Non-blocking: may ``job_id`` start its next iteration now? If admitted, the
        iteration is in flight from now. Raises KeyError for an unknown job, RuntimeError if
        its previous iteration has not ended."""
        with self._cond:
            return self._request(job_id)

    def wait_to_start(self, job_id: Hashable, timeout_s: float | None = None) -> bool:
        """Blocking (worker threads): wait until ``job_id`` may start its next iteration,
        re-deciding at the computed delay or whenever anything changes. Uses real time for
        the waits (the injected clock only for decisions). Returns True when admitted, False
        on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while True:
                d = self._request(job_id)
                if d.admit:
                    return True
                wait = d.delay_s
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def report_progress(self, job_id: Hashable, fraction: float) -> None:
        """The job's in-flight iteration is ``fraction`` (0..1) done (e.g. from the allocator's
        phase or a backward hook); re-anchors the prediction of when it ends and ends a hold."""
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"fraction must lie in [0, 1], got {fraction!r}")
        with self._cond:
            st = self._jobs[job_id]
            if st.held is not None:
                st.held = None
                self._cond.notify_all()
            st.fraction, st.reported_at = float(fraction), self._clock()

    def hold_peak(self, job_id: Hashable) -> None:
        """Hold ``job_id``'s iteration in flight at its curve's peak until its next
        :meth:`report_progress` or :meth:`end_iteration` (Note [Held at the peak]). Raises KeyError
        for an unknown job, RuntimeError when no iteration of it is in flight."""
        with self._cond:
            st = self._jobs[job_id]
            if not st.in_flight:
                raise RuntimeError(f"job {job_id!r} has no iteration in flight to hold")
            st.held = derived_curve(st.curve, "held", _held_at_peak)

    def end_iteration(self, job_id: Hashable) -> None:
        """The job's iteration ended (its transient memory is freed); waiters re-decide."""
        with self._cond:
            st = self._jobs[job_id]
            st.in_flight, st.fraction, st.held = False, 0.0, None
            self._cond.notify_all()

    def drain_delays(self) -> list[DelayRecord]:
        """The delays recorded since the last drain (oldest first, at most ``DELAY_RECORDS_MAX``), removed
        from :attr:`delays`; the totals ``delays_recorded`` and ``delay_ms_total`` keep counting."""
        with self._cond:
            out = list(self.delays)
            self.delays.clear()
            return out

    def snapshot(self) -> dict:
        """Live state for telemetry: budget and, per job, in-flight flag, progress, iterations."""
        with self._cond:
            now = self._clock()
            return {
                "budget_bytes": self._budget,
                "jobs": {
                    str(j): {"in_flight": s.in_flight, "fraction": round(self._fraction(s, now), 4),
                             "iterations_started": s.iterations_started, "waiting": s.requested_at is not None}
                    for j, s in self._jobs.items()
                },
            }

    # -- internals ----------------------------------------------------------------------
    def _request(self, job_id: Hashable) -> Decision:
        st = self._jobs[job_id]
        if st.in_flight:
            raise RuntimeError(f"job {job_id!r} asked to start while its iteration is in flight")
        now = self._clock()
        if st.requested_at is None:
            st.requested_at = now
        decision = self._decide(job_id, now)
        if st.first_reason == "":
            st.first_reason = decision.reason or "none"
        if decision.admit:
            waited = now - st.requested_at
            if st.first_reason != "none":
                self.delays.append(DelayRecord(job_id, st.iterations_started, waited * 1000.0, st.first_reason, now))
                self.delays_recorded += 1
                self.delay_ms_total += waited * 1000.0
            st.in_flight, st.fraction, st.reported_at, st.loaded = True, 0.0, now, True
            st.iterations_started += 1
            st.requested_at, st.first_reason = None, ""
        return decision

    def _decide(self, job_id: Hashable, now: float) -> Decision:
        dt = min(s.iteration_s for s in self._jobs.values()) / self._resolution
        line = sorted((s.requested_at, i, j) for i, (j, s) in enumerate(self._jobs.items())
                      if s.requested_at is not None and not s.in_flight)
        reserved: dict[Hashable, float] = {}
        alone_ahead = False  # an earlier waiter will run alone next (Note [Running alone])
        patience_s = PATIENCE_ITERATIONS * max(s.iteration_s for s in self._jobs.values())
        head_waited_s = now - line[0][0] if line else 0.0
        for _, _, waiter in line:
            if waiter == job_id and alone_ahead:
                return Decision(False, None, "line")
            if waiter == job_id and reserved and head_waited_s >= patience_s:  # the head's patience is spent
                return Decision(False, reserved.get(line[0][2]), "line")
            ws = self._jobs[waiter]
            others = [self._commitment(j, s, now, reserved.get(j), beside_warmup=ws.warmup)
                      for j, s in self._jobs.items() if j != waiter]
            me = Commitment(ws.curve, ws.iteration_s, loaded=ws.loaded)
            delay = least_delay_s(me, others, self._budget, dt, self._bins)
            if waiter == job_id:
                if delay is None:
                    if waiter == line[0][2] and not any(s.in_flight for s in self._jobs.values()):
                        return Decision(True, 0.0, "alone")  # Note [Running alone]
                    return Decision(False, None, "infeasible")
                if delay <= 0.0:
                    return Decision(True, 0.0)
                if not reserved:  # nobody ahead holds a reservation: the budget alone delays it
                    return Decision(False, delay, "budget")
                alone = least_delay_s(me, [self._commitment(j, s, now, None, beside_warmup=ws.warmup)
                                           for j, s in self._jobs.items() if j != waiter],
                                      self._budget, dt, self._bins)
                return Decision(False, delay, "budget" if alone and alone > 0 else "line")
            if delay is not None:
                reserved[waiter] = delay
            else:
                alone_ahead = True
        raise AssertionError("requester missing from the waiting line")  # pragma: no cover

    def _commitment(self, job_id: Hashable, st: _JobState, now: float, reserved_in_s: float | None,
                    beside_warmup: bool = False) -> Commitment:
        if st.held is not None:  # Note [Held at the peak]
            hold_s = HOLD_ITERATIONS * max(s.iteration_s for s in self._jobs.values())
            return Commitment(st.held, hold_s, fraction=0.0)
        if st.in_flight:  # Note [A warm-up beside a falling neighbour]
            curve = derived_curve(st.curve, "held", _held_at_peak) if beside_warmup else st.curve
            return Commitment(curve, st.iteration_s, fraction=self._fraction(st, now))
        return Commitment(st.curve, st.iteration_s, start_in_s=reserved_in_s, loaded=st.loaded)

    @staticmethod
    def _fraction(st: _JobState, now: float) -> float:
        if not st.in_flight:
            return 0.0
        # a job slower than predicted stays just short of its end until it reports the end
        return min(st.fraction + (now - st.reported_at) / st.iteration_s, 1.0 - 1e-6)

    @staticmethod
    def _check_budget(budget_bytes: float) -> None:
        if not (isinstance(budget_bytes, (int, float)) and budget_bytes > 0):
            raise ValueError(f"budget_bytes must be a positive number of bytes, got {budget_bytes!r}")
