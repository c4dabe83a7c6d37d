"""Plain value objects the placement core works on: tenants, jobs, devices, cluster state,
sharing plans and placements. Frozen dataclasses, no behaviour beyond validation and small
derived figures, so policies stay pure functions of their input.

Units: bytes for memory, seconds for time, "byte-seconds" for device-memory-seconds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping

from .curves import MemoryCurve

JobId = Hashable
DeviceId = Hashable


class StateError(ValueError):
    """A state object is malformed; the message names the offending field."""


@dataclass(frozen=True)
class Tenant:
    """A tenant as the policies see it.

    Attributes:
        id: tenant key.
        weight: share weight for weighted fair share of device-memory-seconds (> 0).
        allow_cross_tenant: may this tenant's jobs share a device with other tenants' jobs
            (co-located jobs share one process, so a crash in one can end the other). Cross-tenant
            co-location needs both tenants to allow it.
        max_running_jobs: quota on placed (running) jobs; None = unlimited.
        max_device_bytes: quota on the sum of placed jobs' peak bytes; None = unlimited.
        usage_byte_seconds: device-memory-seconds consumed so far (charged as each job's
            peak bytes times its run seconds; see docs/placement.md).
    """

    id: Hashable
    weight: float = 1.0
    allow_cross_tenant: bool = False
    max_running_jobs: int | None = None
    max_device_bytes: float | None = None
    usage_byte_seconds: float = 0.0

    def __post_init__(self) -> None:
        if not (isinstance(self.weight, (int, float)) and self.weight > 0 and math.isfinite(self.weight)):
            raise StateError(f"tenant {self.id!r} weight: must be a positive number, got {self.weight!r}")
        if self.max_running_jobs is not None and self.max_running_jobs < 0:
            raise StateError(f"tenant {self.id!r} max_running_jobs: must be >= 0")
        if self.max_device_bytes is not None and self.max_device_bytes < 0:
            raise StateError(f"tenant {self.id!r} max_device_bytes: must be >= 0")


@dataclass(frozen=True)
class Job:
    """A training job: queued (waiting for a device) or running on one.

    Attributes:
        id: job key (the database id in the service).
        tenant: its tenant's id.
        curve: its memory curve (one steady-state iteration, solo iteration time).
        submitted_s: submission time, seconds on the state's clock (FIFO order).
        priority: larger runs first within a tenant's order.
        iterations: iterations still to run (the simulator uses it; >= 1).
        compute_share: fraction of a device's compute the job uses when alone, in (0, 1]. The
            contention model (docs/placement.md) slows every job on a device by
            ``max(1, sum of shares)``. 1.0 (saturating) is the pessimistic default.
        curve_key: identity of the curve for caching group evaluations (e.g. the workload key);
            jobs with equal keys must have equal curves. Default: the curve object's id.
    """

    id: JobId
    tenant: Hashable
    curve: MemoryCurve
    submitted_s: float = 0.0
    priority: int = 0
    iterations: int = 1
    compute_share: float = 1.0
    curve_key: Hashable = None

    def __post_init__(self) -> None:
        if not isinstance(self.curve, MemoryCurve):
            raise StateError(f"job {self.id!r} curve: expected a MemoryCurve, got {type(self.curve).__name__}")
        if not (0 < self.compute_share <= 1):
            raise StateError(f"job {self.id!r} compute_share: must lie in (0, 1], got {self.compute_share!r}")
        if not (isinstance(self.iterations, int) and self.iterations >= 1):
            raise StateError(f"job {self.id!r} iterations: must be an int >= 1, got {self.iterations!r}")
        if self.curve_key is None:
            object.__setattr__(self, "curve_key", ("curve", id(self.curve)))

    @property
    def peak_bytes(self) -> float:
        return self.curve.peak_bytes

    @property
    def persistent_bytes(self) -> float:
        return self.curve.persistent_bytes


@dataclass(frozen=True)
class Device:
    """A device and the jobs already running on it.

    Attributes:
        id: device key.
        budget_bytes: most bytes its jobs may hold together (the device memory less a reserve,
            or an operator's budget).
        running: jobs placed on it and not yet finished.
        kind, host, index: where its Celery queue is (``zico_contracts.queues.device_queue``).
        group_share: share of the budget its worker's coordinator gates a group with
            (``1 - gate_headroom``, from the worker's registration), in (0, 1]; None: the policy's
            default.
        profiling_tenants: tenants with a job being profiled on it outside ``running`` (a catalog
            job's profile run: no curve yet, so nothing to plan with). They count for the co-location
            rule, not for memory (Note [Profile runs are tenants on their device] in placement.tenancy).
    """

    id: DeviceId
    budget_bytes: float
    running: tuple[Job, ...] = ()
    kind: str = "gpu"
    host: str = "localhost"
    index: int = 0
    group_share: float | None = None
    profiling_tenants: frozenset = frozenset()

    def __post_init__(self) -> None:
        if not (self.budget_bytes > 0 and math.isfinite(self.budget_bytes)):
            raise StateError(f"device {self.id!r} budget_bytes: must be a positive number of bytes")
        if self.group_share is not None and not 0 < self.group_share <= 1:
            raise StateError(f"device {self.id!r} group_share: must lie in (0, 1], got {self.group_share}")
        object.__setattr__(self, "running", tuple(self.running))
        object.__setattr__(self, "profiling_tenants", frozenset(self.profiling_tenants))

    @property
    def label(self) -> str:
        """``kind.host.index`` (``gpu.node1.0``): the device's one name, as zico_contracts.queues.device_key
        spells it for Redis and the pages, and zico.cluster.models.Device.__str__ for the service."""
        return f"{self.kind}.{self.host}.{self.index}"


@dataclass(frozen=True)
class ClusterState:
    """What a policy sees: devices (with their running jobs), queued jobs and tenants.

    ``queued`` jobs must all have curves; jobs without one are profiled first (the service
    does that) and are not given to policies. Every job's tenant must be in ``tenants``.
    """

    devices: tuple[Device, ...]
    queued: tuple[Job, ...]
    tenants: Mapping[Hashable, Tenant]
    now_s: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", tuple(self.devices))
        object.__setattr__(self, "queued", tuple(self.queued))
        ids = [d.id for d in self.devices]
        if len(set(ids)) != len(ids):
            raise StateError("devices: device ids must be unique")
        for job in self.queued + tuple(j for d in self.devices for j in d.running):
            if job.tenant not in self.tenants:
                raise StateError(f"job {job.id!r} tenant: {job.tenant!r} is not in tenants")
        for d in self.devices:
            for t in d.profiling_tenants:
                if t not in self.tenants:
                    raise StateError(f"device {d.id!r} profiling_tenants: {t!r} is not in tenants")


@dataclass(frozen=True)
class SharingPlan:
    """How a co-location group shares one device's memory.

    Attributes:
        budget_bytes: the device budget the plan was made for.
        job_ids: the group, in the order of ``shifts_s`` and ``predicted_slowdown``.
        mode: ``"independent"`` (sum of peaks fits: no gating ever needed), ``"shift"`` (equal
            iteration times: a fixed time shift per job keeps the sum under budget), or
            ``"gating"`` (unequal iteration times, or no fixed shift fits: the coordinator gates
            every iteration start).
        shifts_s: per job, the offset of its iteration starts in seconds (``"shift"`` mode;
            zeros otherwise). The shift search's answer, behind ``mode`` and the predicted peak; not stored:
            the worker's coordinator finds each job's delay live (Note [Gating rule]), so nothing reads it.
        predicted_peak_bytes: predicted combined peak; always <= ``budget_bytes``.
        predicted_slowdown: per job, predicted co-located iteration time over solo iteration
            time (contention factor times added gating delay).
        sum_of_peaks_bytes: what the group would need without sharing.
    """

    budget_bytes: float
    job_ids: tuple
    mode: str
    shifts_s: tuple[float, ...]
    predicted_peak_bytes: float
    predicted_slowdown: tuple[float, ...]
    sum_of_peaks_bytes: float

    @property
    def saving_bytes(self) -> float:
        """Memory the plan saves against running the group without sharing."""
        return self.sum_of_peaks_bytes - self.predicted_peak_bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (stored with a placement, shown on the job page, sent to the worker), without
        ``shifts_s`` (see above)."""
        return {
            "budget_bytes": int(round(self.budget_bytes)),  # rounded like the predicted peak, which never exceeds it
            "job_ids": list(self.job_ids),
            "mode": self.mode,
            "predicted_peak_bytes": int(round(self.predicted_peak_bytes)),
            "predicted_slowdown": [round(float(s), 4) for s in self.predicted_slowdown],
            "sum_of_peaks_bytes": int(round(self.sum_of_peaks_bytes)),
        }


@dataclass(frozen=True)
class Placement:
    """One decision: start ``job_id`` on ``device_id``; ``plan`` covers the device's whole group
    after the job joins (running jobs first, then newly placed ones)."""

    job_id: JobId
    device_id: DeviceId
    plan: SharingPlan
    meta: dict[str, Any] = field(default_factory=dict)
