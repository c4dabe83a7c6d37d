"""Cluster simulator: replays a job trace on simulated devices with a placement policy and a
gate per device. It calls the very same policy objects and the very same Coordinator as the
live system; only the clock (virtual) and the executor (placement.device_sim) differ.

Usage::

    result = simulate(trace, devices, tenants, MemoryAware())
    print(result.summary())
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Hashable, Mapping, Sequence

import numpy as np

from .device_sim import DeviceRun, Gate, TimeSlicingGate, UngatedGate
from .policies import Policy
from .state import ClusterState, Device, Job, Tenant

GATES = ("zico", "naive", "slicing")


@dataclass(frozen=True)
class Arrival:
    """A job of the trace: ``job`` is submitted at ``at_s`` seconds."""

    at_s: float
    job: Job


@dataclass
class SimResult:
    """Per-policy figures. Seconds, bytes; slowdowns are ratios to the solo run time."""

    policy: str
    gate: str
    makespan_s: float
    mean_jct_s: float
    peak_over_budget: float                 # max over devices of peak bytes / budget
    violations: int                         # spans over budget, all devices together
    slowdown: dict = field(default_factory=dict)     # job id -> run time / solo run time
    jct: dict = field(default_factory=dict)          # job id -> finish - arrival
    unplaced: list = field(default_factory=list)     # jobs no device could take

    def summary(self) -> dict:
        s = np.array(list(self.slowdown.values()) or [math.nan])
        return {
            "policy": self.policy, "gate": self.gate,
            "makespan_s": round(self.makespan_s, 2), "mean_jct_s": round(self.mean_jct_s, 2),
            "peak_over_budget": round(self.peak_over_budget, 3), "violations": self.violations,
            "slowdown_mean": round(float(s.mean()), 3), "slowdown_max": round(float(s.max()), 3),
            "unplaced": len(self.unplaced),
        }


def make_gate(kind: str) -> Gate | None:
    """Gate for ``kind`` (see GATES); None means the Coordinator DeviceRun makes on its clock.
    Raises ValueError on an unknown kind."""
    if kind == "zico":
        return None
    if kind == "naive":
        return UngatedGate()
    if kind == "slicing":
        return TimeSlicingGate()
    raise ValueError(f"unknown gate {kind!r} (expected one of {', '.join(GATES)})")


def simulate(trace: Sequence[Arrival], devices: Sequence[Device], tenants: Mapping[Hashable, Tenant],
             policy: Policy, *, gate: str = "zico", track_memory: bool = True,
             max_events: int = 5_000_000) -> SimResult:
    """Replay ``trace`` on ``devices`` (their ``running`` must be empty) with ``policy``.

    The policy is asked for placements whenever a job arrives or finishes. Each device runs its
    jobs behind a gate of kind ``gate``. Raises ValueError on a bad gate or a busy device,
    RuntimeError if the event budget runs out (a stuck simulation).
    """
    if any(d.running for d in devices):
        raise ValueError("simulate: devices must start empty")
    runs = {d.id: DeviceRun(d.budget_bytes, make_gate(gate), track_memory=track_memory) for d in devices}
    pending = sorted(trace, key=lambda a: a.at_s)
    arrived: dict[Hashable, float] = {}
    queued: dict[Hashable, Job] = {}
    placed_at: dict[Hashable, float] = {}
    finished: dict[Hashable, float] = {}
    jobs_by_id: dict[Hashable, Job] = {a.job.id: a.job for a in trace}
    usage: dict[Hashable, float] = {t: tenants[t].usage_byte_seconds for t in tenants}
    now, i, events = 0.0, 0, 0
    while i < len(pending) or any(r.jobs for r in runs.values()):
        events += 1
        if events > max_events:
            raise RuntimeError("simulate: event budget exhausted (stuck simulation?)")
        t_arr = pending[i].at_s if i < len(pending) else math.inf
        t_dev = min((r.next_event_s() for r in runs.values()), default=math.inf)
        now = min(t_arr, t_dev)
        if now == math.inf:
            break  # queued jobs that nothing can ever run
        for dev_id, r in runs.items():
            for jid in r.advance_to(now):
                finished[jid] = now
                job = jobs_by_id[jid]
                usage[job.tenant] += job.peak_bytes * (now - placed_at[jid])
        while i < len(pending) and pending[i].at_s <= now:
            queued[pending[i].job.id] = pending[i].job
            arrived[pending[i].job.id] = pending[i].at_s
            i += 1
        if queued:
            _place_round(policy, devices, runs, queued, tenants, usage, placed_at, jobs_by_id, now)
    return _result(policy, gate, devices, runs, arrived, placed_at, finished, jobs_by_id, queued)


def _place_round(policy, devices, runs, queued, tenants, usage, placed_at, jobs_by_id, now) -> None:
    live_tenants = {
        t: Tenant(t, v.weight, v.allow_cross_tenant, v.max_running_jobs, v.max_device_bytes,
                  usage[t] + sum(jobs_by_id[j].peak_bytes * (now - placed_at[j])
                                 for r in runs.values() for j in r.jobs if jobs_by_id[j].tenant == t))
        for t, v in tenants.items()
    }
    state = ClusterState(
        devices=tuple(Device(d.id, d.budget_bytes, tuple(jobs_by_id[j] for j in runs[d.id].jobs), d.kind, d.host, d.index)
                      for d in devices),
        queued=tuple(queued.values()), tenants=live_tenants, now_s=now)
    for p in policy.place(state):
        job = queued.pop(p.job_id)
        placed_at[job.id] = now
        runs[p.device_id].add_job(job)


def _result(policy, gate, devices, runs, arrived, placed_at, finished, jobs_by_id, queued) -> SimResult:
    jct = {j: finished[j] - arrived[j] for j in finished}
    slowdown = {j: (finished[j] - placed_at[j]) / (jobs_by_id[j].iterations * jobs_by_id[j].curve.iteration_s)
                for j in finished}
    start = min(arrived.values(), default=0.0)
    return SimResult(
        policy=getattr(policy, "name", type(policy).__name__), gate=gate,
        makespan_s=max(finished.values(), default=start) - start,
        mean_jct_s=float(np.mean(list(jct.values()))) if jct else math.nan,
        peak_over_budget=max(runs[d.id].stats.peak_bytes / d.budget_bytes for d in devices),
        violations=sum(r.stats.violations for r in runs.values()),
        slowdown=slowdown, jct=jct, unplaced=sorted(map(str, queued)),
    )
