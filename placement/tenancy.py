"""Tenant rules for placement: queue order (FIFO, or weighted fair share of device-memory-
seconds), quotas, and whether jobs of different tenants may share a device.

Note [Fair share of device-memory-seconds]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A job is charged its peak bytes times its run seconds (a co-located job is charged its own
peak, not its share of the group's smaller peak: sharing's saving goes to the cluster). A
tenant's *normalised usage* is (usage so far + the charge of the jobs it had placed in this
round, at their expected run time) / weight. The next job considered is the best job (priority,
then submission time) of the tenant with the smallest normalised usage, so over time every
tenant's device-memory-seconds approach their weight's share (as in weighted fair queuing).
"""
from __future__ import annotations

import heapq
from collections import defaultdict
from typing import Hashable, Iterable, Iterator, Mapping, Sequence

from . import reasons
from .reasons import WaitReason
from .state import ClusterState, Job, Tenant


def fifo_key(job: Job) -> tuple:
    """Higher priority first, then earlier submission, then id (a total order)."""
    return (-job.priority, job.submitted_s, str(job.id))


def expected_charge(job: Job) -> float:
    """Byte-seconds a job will be charged if run alone: peak bytes x iterations x iteration s."""
    return job.peak_bytes * job.iterations * job.curve.iteration_s


def fifo_order(jobs: Iterable[Job]) -> list[Job]:
    return sorted(jobs, key=fifo_key)


def fair_order(state: ClusterState) -> Iterator[Job]:
    """Queued jobs in weighted-fair-share order (Note above). A lazy iterator: the projected
    charge of each yielded job counts for its tenant from then on (whether or not the caller
    manages to place it: a tenant whose head job cannot be placed does not jump ahead)."""
    per_tenant: dict[Hashable, list[Job]] = defaultdict(list)
    for job in state.queued:
        per_tenant[job.tenant].append(job)
    for jobs in per_tenant.values():
        jobs.sort(key=fifo_key, reverse=True)  # pop() takes the best
    usage = {t: state.tenants[t].usage_byte_seconds for t in per_tenant}
    heap = [(usage[t] / state.tenants[t].weight, str(t), t) for t in per_tenant]
    heapq.heapify(heap)
    while heap:
        _, name, t = heapq.heappop(heap)
        job = per_tenant[t].pop()
        yield job
        usage[t] += expected_charge(job)
        if per_tenant[t]:
            heapq.heappush(heap, (usage[t] / state.tenants[t].weight, name, t))


class Quotas:
    """Running-job and device-byte quotas per tenant, counting jobs already running and those
    placed during this round (call :meth:`add` after each placement)."""

    def __init__(self, state: ClusterState) -> None:
        self._tenants: Mapping[Hashable, Tenant] = state.tenants
        self._jobs: dict[Hashable, int] = defaultdict(int)
        self._bytes: dict[Hashable, float] = defaultdict(float)
        for d in state.devices:
            for j in d.running:
                self.add(j)

    def allows(self, job: Job) -> bool:
        return self.refusal(job) is None

    def refusal(self, job: Job) -> WaitReason | None:
        """Why ``job`` would exceed its tenant's quota now (a :data:`placement.reasons.QUOTA`
        reason with the figures), or None when it fits."""
        t = self._tenants[job.tenant]
        if t.max_running_jobs is not None and self._jobs[job.tenant] + 1 > t.max_running_jobs:
            return reasons.quota("jobs", self._jobs[job.tenant], t.max_running_jobs)
        if t.max_device_bytes is not None and self._bytes[job.tenant] + job.peak_bytes > t.max_device_bytes:
            return reasons.quota("bytes", self._bytes[job.tenant], t.max_device_bytes, job.peak_bytes)
        return None

    def add(self, job: Job) -> None:
        self._jobs[job.tenant] += 1
        self._bytes[job.tenant] += job.peak_bytes


def refusing_tenants(allows: Mapping[Hashable, bool]) -> list[Hashable]:
    """The co-location rule, the one copy both the planner and the web side's placement check use: jobs of
    several tenants may share one device only when every tenant involved allows cross-tenant co-location;
    jobs of one tenant always may. ``allows`` maps each tenant with a job on the device (already there or
    arriving) to its ``allow_cross_tenant`` setting. Returns the tenants that refuse, in the mapping's
    order: empty when the jobs may meet."""
    if len(allows) <= 1:
        return []
    return [t for t, allowed in allows.items() if not allowed]


def may_share(job: Job, group: Sequence[Job], tenants: Mapping[Hashable, Tenant],
              profiling: Iterable[Hashable] = ()) -> bool:
    """May ``job`` join ``group`` on one device (:func:`refusing_tenants` over their tenants and the tenants
    ``profiling`` a job there, ``Device.profiling_tenants``: Note [Profile runs are tenants on their device])?"""
    involved = {job.tenant, *(o.tenant for o in group), *profiling}
    return not refusing_tenants({t: tenants[t].allow_cross_tenant for t in involved})


# Note [Profile runs are tenants on their device]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A catalog job without a curve is profiled by a ``profile_job`` task on a device, with no placement: it is
# not among the device's ``running`` jobs, since there is no curve to plan it with. Its process draws on the
# device's one pool all the same, beside whatever is placed there, so its tenant is on the device: the
# co-location rule (:func:`refusing_tenants`) counts it as it counts a placed job's, both ways (a refusing
# tenant's profile run keeps other tenants' jobs off the device, and a refusing tenant's job stays off a
# device where another tenant's job is being profiled). The service lists those tenants in
# ``Device.profiling_tenants`` (zico.scheduling.snapshot), the policies judge them with :func:`may_share`,
# and ``zico.jobs.lifecycle.place_many`` re-checks them under its locks. Memory is judged as it was before
# tenants counted: a policy does not plan with a profile run (it has no curve), whose process draws on the
# device's pool under the device budget like every job's (workers/profiling.py); only its tenant is added.
