"""One device's meter of its jobs' compute: which jobs compute at the same time and for how long, and how busy a
job keeps the device while it computes alone; when a job leaves, what its run showed becomes a measured compute
share (Note [Measured compute share] in placement.compute_share).

Pure logic: the clock and the busy readings are injected. The device agent drives it with the real clock from
its jobs' gate answers (``go``) and iteration ends (workers.agent), reading each job process's CPU time (CPU
device) or the device's NVML utilisation (GPU); tests drive it from the simulator's timeline
(placement.device_sim), whose contention model is exact.

A job *computes* from its ``go`` (:meth:`ComputeMeter.begin`) to its iteration's end (:meth:`ComputeMeter.end`);
the wait at the gate before the ``go`` and whatever the job does between an end and its next request are not
compute. A profile run (no iterations reported, ``continuous``) computes from :meth:`ComputeMeter.start` to its
end: it slows its neighbours and is counted as their neighbour, but is not measured itself.
"""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from .compute_share import DEFAULT_COMPUTE_SHARE, SHARE_KEY, ShareEstimate, ShareEvidence, estimate_share

MAX_SOLO_STEPS = 256  # the latest alone iterations' compute times kept per run (their median is the solo step)
CpuClock = Callable[[], "float | None"]  # a job process's CPU seconds so far (None: unreadable)


def curve_identity(curve: dict[str, Any] | None) -> str | None:
    """Identity of a memory curve (the contract's dict) without its ``meta``: jobs with equal identities are
    identical (one profile, copied), so they share one unknown share. None for no curve."""
    if not curve:
        return None
    body = {k: v for k, v in curve.items() if k != "meta"}
    return hashlib.sha1(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def curve_share(curve: dict[str, Any] | None) -> float:
    """The share a neighbour is taken at: its curve's stored ``meta["compute_share"]`` when in (0, 1], else
    DEFAULT_COMPUTE_SHARE."""
    share = ((curve or {}).get("meta") or {}).get(SHARE_KEY)
    if isinstance(share, (int, float)) and not isinstance(share, bool) and 0 < share <= 1:
        return float(share)
    return DEFAULT_COMPUTE_SHARE


# The compute split of one iteration (ShareEvidence's fields, seconds), added to the run's evidence as it ends.
SPLIT_FIELDS = ("alone_s", "overlap_s", "neighbours_share_s", "identical_s", "busy_s", "busy_wall_s")


@dataclass
class _Job:
    key: str | None
    share: float
    iteration_s: float | None
    cpu_s: CpuClock | None
    continuous: bool
    computing: bool = False
    begun: int = 0                        # iterations begun in this run
    now: ShareEvidence = field(default_factory=ShareEvidence)  # the iteration in flight: its SPLIT_FIELDS
    alone_since: float | None = None      # start of the current stretch of computing alone
    alone_cpu: float | None = None        # the job's CPU seconds then
    evidence: ShareEvidence = field(default_factory=ShareEvidence)


class ComputeMeter:
    """Compute time of every job on one device, split by who else computed (see the module's docstring).

    Args:
        clock: seconds, monotonic.
        cores: the device's CPU cores (a CPU device's utilisation is CPU seconds / (wall seconds x cores)).
    Thread-safe: every method takes one lock. Unknown job ids are ignored by :meth:`begin`, :meth:`end` and
    :meth:`leave` (a job that never joined is not metered).
    """

    def __init__(self, clock: Callable[[], float], cores: int = 1) -> None:
        if cores < 1:
            raise ValueError(f"cores: expected >= 1, got {cores!r}")
        self.clock, self.cores = clock, int(cores)
        self._jobs: dict[Hashable, _Job] = {}
        self._lock = threading.Lock()
        self._last = clock()
        self._last_reading: float | None = None

    # -- membership ---------------------------------------------------------------------------------
    def join(self, job_id: Hashable, curve: dict[str, Any] | None, cpu_s: CpuClock | None = None,
             continuous: bool = False) -> None:
        """Meter ``job_id`` (its curve: the contract's dict, or None), reading its CPU seconds with ``cpu_s``
        (CPU devices; None: no CPU readings). ``continuous``: a profile run, never measured itself."""
        with self._lock:
            self._advance()
            self._jobs[job_id] = _Job(curve_identity(curve), curve_share(curve), _iteration_s(curve), cpu_s,
                                      continuous)

    def set_curve(self, job_id: Hashable, curve: dict[str, Any]) -> None:
        """``job_id`` has a (new) curve: its identity and share for its neighbours, and its solo time."""
        with self._lock:
            j = self._jobs.get(job_id)
            if j is not None:
                j.key, j.share, j.iteration_s = curve_identity(curve), curve_share(curve), _iteration_s(curve)

    def leave(self, job_id: Hashable) -> ShareEstimate | None:
        """``job_id`` has ended: its run's measured share (None when too little was seen, or a profile run);
        an iteration still in flight is not counted."""
        with self._lock:
            j = self._jobs.get(job_id)
            if j is not None:
                self._event(leaving=job_id)  # a neighbour may compute alone from now
        if j is None or j.continuous:
            return None
        return estimate_share(j.evidence, j.iteration_s)

    # -- events -------------------------------------------------------------------------------------
    def start(self, job_id: Hashable) -> None:
        """A continuous job (a profile run) starts computing."""
        self._set(job_id, True)

    def begin(self, job_id: Hashable) -> None:
        """``job_id`` was let start an iteration (the gate's ``go``): it computes from now."""
        self._set(job_id, True)

    def end(self, job_id: Hashable) -> None:
        """``job_id``'s iteration ended; counted when it was not the run's first (warm-up)."""
        with self._lock:
            j = self._jobs.get(job_id)
            if j is None or not j.computing:
                return
            self._event(changing=job_id, computing=False)
            it, ev = j.now, j.evidence
            if j.begun > 1:
                ev.iterations += 1
                ev.compute_s += it.alone_s + it.overlap_s
                for name in SPLIT_FIELDS:
                    setattr(ev, name, getattr(ev, name) + getattr(it, name))
                if it.overlap_s == 0.0:
                    ev.solo_steps_s.append(it.alone_s)
                    del ev.solo_steps_s[:-MAX_SOLO_STEPS]
            j.now = ShareEvidence()

    def utilisation(self, busy_fraction: float) -> None:
        """A device-wide busy fraction read now (NVML ``utilization.gpu`` / 100). It is the utilisation of
        the job computing alone through the whole time since the previous reading, if one did; else unused."""
        with self._lock:
            now = self._advance()
            prev, self._last_reading = self._last_reading, now
            if prev is None or now <= prev:
                return
            alone = [j for j in self._jobs.values() if j.computing]
            if len(alone) == 1 and alone[0].alone_since is not None and alone[0].alone_since <= prev:
                alone[0].now.busy_s += min(1.0, max(0.0, float(busy_fraction))) * (now - prev)
                alone[0].now.busy_wall_s += now - prev

    def _set(self, job_id: Hashable, computing: bool) -> None:
        with self._lock:
            j = self._jobs.get(job_id)
            if j is None or j.computing == computing:
                return
            self._event(changing=job_id, computing=computing)
            if computing:
                j.begun += 1
                j.now = ShareEvidence()

    def _advance(self) -> float:
        """Account the time since the last event to every computing job (alone, or beside whom); returns now."""
        now = self.clock()
        dt = now - self._last
        working = [j for j in self._jobs.values() if j.computing]
        if dt > 0:
            for j in working:
                others = [k for k in working if k is not j]
                if not others:
                    j.now.alone_s += dt
                    continue
                j.now.overlap_s += dt
                same = sum(1 for k in others if j.key is not None and k.key == j.key)
                j.now.identical_s += dt * same
                j.now.neighbours_share_s += dt * sum(k.share for k in others if j.key is None or k.key != j.key)
        self._last = max(self._last, now)
        return now

    def _event(self, changing: Hashable = None, computing: bool = False, leaving: Hashable = None) -> None:
        """:meth:`_advance`, then, when the set of computing jobs changes (``changing`` starts or stops
        computing, ``leaving`` leaves): close the stretch of the job that computed alone (its CPU seconds read
        now), apply the change, and open the stretch of the job that computes alone from now, if one does."""
        now = self._advance()
        if leaving is not None and not self._jobs[leaving].computing:
            del self._jobs[leaving]
            return
        if changing is None and leaving is None:
            return
        for j in self._jobs.values():
            if j.computing and j.alone_cpu is not None and j.alone_since is not None:
                cpu = j.cpu_s()
                if cpu is not None and cpu >= j.alone_cpu and now > j.alone_since:
                    j.now.busy_s += (cpu - j.alone_cpu) / self.cores
                    j.now.busy_wall_s += now - j.alone_since
            j.alone_since = j.alone_cpu = None
        if changing in self._jobs:
            self._jobs[changing].computing = computing
        self._jobs.pop(leaving, None)
        working = [j for j in self._jobs.values() if j.computing]
        if len(working) == 1:
            j = working[0]
            j.alone_since = now
            j.alone_cpu = j.cpu_s() if j.cpu_s is not None else None


def _iteration_s(curve: dict[str, Any] | None) -> float | None:
    value = (curve or {}).get("iteration_s")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None
