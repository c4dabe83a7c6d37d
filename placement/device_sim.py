"""Simulated executor for one device: runs co-located jobs' iterations on a virtual clock
behind a gate (the real :class:`~placement.coordinator.Coordinator`, or a baseline gate) and
measures memory exactly. Used by the planner's predictions and by the cluster simulator; the
GPU worker runs the same coordinator with real threads and a real clock.

Each job talks to a Coordinator through a :class:`~placement.pacing.Pacer`, as the device agent's
jobs do (workers.gate): the executor sends the events a training loop sends, at the times its
timeline reaches them: ``iteration_start`` and ``forward`` when an iteration is admitted,
``backward`` when the iteration reaches its curve's peak (where the forward pass ends),
``iteration_end`` at its end, and the allocated bytes of every iteration in flight (``observe``) at
every event, as the agent's reporter samples them. ``trace`` records each of those calls and each
decision, to replay them elsewhere (tests/workers/test_gate_decisions.py replays them through
the agent's gate).

Note [Contention model]
~~~~~~~~~~~~~~~~~~~~~~~
Jobs share the device's compute. Each job has a ``compute_share`` (fraction of the device it
uses alone); while a set S of jobs is in an iteration, every one of them advances at
``1 / max(1, sum of shares over S)`` of its solo speed (processor sharing). Because every
in-flight job is slowed by the *same* factor, the real timeline is a time-warp of what the
coordinator predicts with solo iteration times, so coordinated runs never exceed the budget
(up to the gating bins' conservatism, which only adds headroom). A job waiting at its gate does
not compute. The shares are inputs (measure them with NVML utilisation on a GPU host).
The coordinator gates each job with its planning curve (``placement.gating.planning_curve``, Note [One
planning rule]) against the whole budget: a simulated device holds exactly its jobs' curves (no pool overhead,
no cache left behind), so it keeps no gate headroom.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Hashable, Protocol

import numpy as np

from .coordinator import Coordinator, Decision
from .curves import MemoryCurve
from .gating import planning_curve
from .pacing import Pacer
from .state import Job

EPS = 1e-12


class Gate(Protocol):
    """What the executor needs from a baseline gate (a subset of the Coordinator's iteration protocol;
    a Coordinator is driven through per-job Pacers instead)."""

    def add_job(self, job_id: Hashable, curve: MemoryCurve, iteration_s: float | None = None) -> None: ...
    def remove_job(self, job_id: Hashable) -> None: ...
    def request_start(self, job_id: Hashable) -> Decision: ...
    def end_iteration(self, job_id: Hashable) -> None: ...


class UngatedGate:
    """Naive spatial sharing: every iteration starts at once, no coordination."""

    def add_job(self, job_id, curve, iteration_s=None): pass
    def remove_job(self, job_id): pass
    def end_iteration(self, job_id): pass

    def request_start(self, job_id) -> Decision:
        return Decision(True, 0.0)


class TimeSlicingGate:
    """Iteration-level time slicing: one iteration in flight at a time, round robin."""

    def __init__(self) -> None:
        self._busy: Hashable | None = None
        self._line: list[Hashable] = []

    def add_job(self, job_id, curve, iteration_s=None): pass

    def remove_job(self, job_id):
        if job_id in self._line:
            self._line.remove(job_id)

    def end_iteration(self, job_id):
        self._busy = None

    def request_start(self, job_id) -> Decision:
        if job_id not in self._line:
            self._line.append(job_id)
        if self._busy is None and self._line[0] == job_id:
            self._line.pop(0)
            self._busy = job_id
            return Decision(True, 0.0)
        return Decision(False, None, "slice")


class _Direct:
    """A baseline gate's side of one job: the Pacer's calls, passed straight to the gate."""

    def __init__(self, gate: Gate, job_id: Hashable, curve: MemoryCurve) -> None:
        self.gate, self.job_id, self.curve = gate, job_id, curve
        self.peak_fraction = float(curve.fractions[int(curve.bytes.argmax())])

    def join(self) -> None:
        self.gate.add_job(self.job_id, self.curve, self.curve.iteration_s)

    def leave(self) -> None:
        self.gate.remove_job(self.job_id)

    def request(self) -> Decision:
        return self.gate.request_start(self.job_id)

    def mark(self, kind: str) -> None:
        if kind == "iteration_end":
            self.gate.end_iteration(self.job_id)

    def observe(self, allocated_bytes: float, phase: str) -> None:
        pass


@dataclass
class _Run:
    job: Job
    iterations_left: int
    pacer: object = None                # a Pacer (Coordinator) or _Direct (baseline gate)
    running: bool = False
    backward: bool = False              # the iteration in flight has passed its peak (backward sent)
    fraction: float = 0.0
    retry_at: float | None = 0.0        # when a waiting job asks again; None: on the next change
    started_s: float = 0.0
    first_iteration_s: float | None = None
    loaded: bool = False                # holds its persistent bytes (after its first start)


@dataclass
class DeviceStats:
    """Figures of one simulated device. Bytes and seconds."""

    peak_bytes: float = 0.0
    violations: int = 0                 # spans of time during which the device held > budget
    over_budget_s: float = 0.0
    finished: dict = field(default_factory=dict)   # job id -> (placed_s, first_start_s, end_s)


class DeviceRun:
    """One device's jobs on a virtual clock.

    Args:
        budget_bytes: the device budget (also given to the gate by the caller).
        gate: a Coordinator (built with ``clock=lambda: run.now``), UngatedGate or TimeSlicingGate;
            default: a Coordinator on this run's clock.
        track_memory: measure the exact combined bytes (peak, violations); off for quick
            predictions.
        start_s: initial virtual time, seconds.
        resolution: bins per shortest iteration of the default Coordinator's decisions.
        trace: when a list, every call into a job's pacer is appended to it as
            ``(time_s, job_id, call, args, result)``: ``call`` one of ``join``, ``request`` (result: admitted,
            bool), ``mark`` (args: the mark), ``observe`` (args: allocated bytes, phase), ``leave``.
    """

    def __init__(self, budget_bytes: float, gate: Gate | None = None, *, track_memory: bool = True,
                 start_s: float = 0.0, resolution: int | None = None, trace: list | None = None) -> None:
        self.now = float(start_s)
        self.budget_bytes = float(budget_bytes)
        if gate is None:
            kw = {"resolution": resolution} if resolution else {}
            gate = Coordinator(budget_bytes, clock=lambda: self.now, **kw)
        self.gate = gate
        self.track_memory = track_memory
        self.jobs: dict[Hashable, _Run] = {}
        self.stats = DeviceStats()
        self.trace = trace
        self._over = False

    # -- membership ---------------------------------------------------------------------
    def add_job(self, job: Job, iterations: int | None = None) -> None:
        """Place ``job`` here now; it asks to start its first iteration at once."""
        if isinstance(self.gate, Coordinator):  # gated with the one planning rule (Note [One planning rule])
            pacer = Pacer(self.gate, job.id, planning_curve(job.curve))
        else:
            pacer = _Direct(self.gate, job.id, job.curve)
        r = _Run(job, int(iterations or job.iterations), pacer, started_s=self.now)
        self.jobs[job.id] = r
        self._call(r, "join")
        self._poll(force=True)

    @property
    def speed(self) -> float:
        """Solo-seconds of work per second for every in-flight job (Note [Contention model])."""
        return 1.0 / max(1.0, sum(r.job.compute_share for r in self.jobs.values() if r.running))

    def next_event_s(self) -> float:
        """Virtual time of the next iteration end or gate retry; inf when idle."""
        t = math.inf
        sp = self.speed
        for r in self.jobs.values():
            if r.running:
                to = 1.0 if r.backward else r.pacer.peak_fraction
                t = min(t, self.now + max(0.0, to - r.fraction) * r.job.curve.iteration_s / sp)
            elif r.retry_at is not None:
                t = min(t, max(r.retry_at, self.now))
        return t

    def advance_to(self, t: float) -> list[Hashable]:
        """Run every event up to virtual time ``t``; returns the ids of jobs that finished."""
        done: list[Hashable] = []
        while True:
            te = self.next_event_s()
            if te > t + EPS:
                self._advance(t)
                return done
            self._advance(te)
            done += self._handle_events()

    def run_until_idle(self, limit_s: float = math.inf) -> list[Hashable]:
        """Advance until every job has finished (or ``limit_s``)."""
        done: list[Hashable] = []
        while self.jobs:
            te = self.next_event_s()
            if te == math.inf or te > limit_s:
                break
            done += self.advance_to(te)
        return done

    # -- internals ------------------------------------------------------------------------
    def _advance(self, t: float) -> None:
        if t <= self.now:
            return
        sp, dt = self.speed, t - self.now
        if self.track_memory:
            self._measure(dt, sp)
        for r in self.jobs.values():
            if r.running:
                r.fraction = min(1.0, r.fraction + dt * sp / r.job.curve.iteration_s)
        self.now = t

    def _measure(self, dt: float, sp: float) -> None:
        """Exact combined bytes over [now, now + dt): every step start of every running curve."""
        times = [np.zeros(1)]
        for r in self.jobs.values():
            if r.running:
                c = r.job.curve
                f1 = r.fraction + dt * sp / c.iteration_s
                f = c.fractions[(c.fractions > r.fraction) & (c.fractions < f1)]
                times.append((f - r.fraction) * c.iteration_s / sp)
        # just after each step start (see shifts.exact_peak: no zero-length rounding spikes),
        # and only inside [0, dt): the interval's end belongs to the next interval
        ts = np.concatenate(times) + 1e-9 * dt
        ts = ts[ts < dt]
        total = np.zeros_like(ts)
        for r in self.jobs.values():
            c = r.job.curve
            if r.running:
                total += c.at(np.minimum(r.fraction + ts * sp / c.iteration_s, 1.0 - 1e-12))
            elif r.loaded:
                total += c.persistent_bytes
        peak = float(total.max())
        self.stats.peak_bytes = max(self.stats.peak_bytes, peak)
        over = total > self.budget_bytes * (1 + 1e-6)
        if over.any():
            if not self._over:
                self.stats.violations += 1
            # time over budget: the share of the sampled steps that were over, times dt (approx.)
            self.stats.over_budget_s += dt * float(over.mean())
        self._over = bool(over[-1]) if len(over) else False

    def _handle_events(self) -> list[Hashable]:
        done: list[Hashable] = []
        for jid, r in list(self.jobs.items()):
            if r.running and not r.backward and r.fraction >= r.pacer.peak_fraction - 1e-9:
                r.backward = True
                self._call(r, "mark", "backward")
            if r.running and r.fraction >= 1.0 - 1e-9:
                r.running, r.fraction = False, 0.0
                r.iterations_left -= 1
                self._call(r, "mark", "iteration_end")
                if r.first_iteration_s is None:
                    r.first_iteration_s = self.now
                if r.iterations_left <= 0:
                    self._call(r, "leave")
                    self.stats.finished[jid] = (r.started_s, r.first_iteration_s, self.now)
                    del self.jobs[jid]
                    done.append(jid)
                else:
                    r.retry_at = self.now
        self._poll(force=True)
        return done

    def _poll(self, force: bool = False) -> None:
        # live allocated bytes first (the agent's reporter samples them), then every change wakes
        # every waiter (as Condition.notify_all does for the agent's waiting jobs)
        for r in self.jobs.values():
            if r.running:
                c = r.job.curve
                # c.at(x) for x in [0, 1), without its array round trips (a third of a prediction's polls)
                held = c.bytes[max(int(c.fractions.searchsorted(min(r.fraction, 1.0 - 1e-12), side="right")) - 1, 0)]
                self._call(r, "observe", float(held), "backward" if r.backward else "forward")
        for r in list(self.jobs.values()):
            if r.running:
                continue
            if not force and (r.retry_at is None or r.retry_at > self.now + EPS):
                continue
            d = self._call(r, "request")
            if d.admit:
                r.running, r.backward, r.fraction, r.retry_at, r.loaded = True, False, 0.0, None, True
                self._call(r, "mark", "iteration_start")
                self._call(r, "mark", "forward")
            else:
                r.retry_at = None if d.delay_s is None else self.now + d.delay_s

    def _call(self, r: _Run, call: str, *args):
        out = getattr(r.pacer, call)(*args)
        if self.trace is not None:
            self.trace.append((self.now, r.job.id, call, args, out.admit if call == "request" else None))
        return out
