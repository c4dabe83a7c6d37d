"""Nodes, devices and placements: the cluster as the scheduler sees it.

A Node is one worker host; a Device is one GPU (or the host's CPU pool for the demo) with its
total and budget bytes. A Placement puts one or more jobs on one device with a sharing plan
(time shifts / gating thresholds, see the placement package); only the scheduler writes them.
"""
from __future__ import annotations

import uuid

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models, transaction
from django.utils import timezone

from placement.gating import DEFAULT_GATE_HEADROOM, minimal_feasible_budget, planning_curve
from zico.jobs.code import code_spec
from zico.jobs.events import Event
from zico.jobs.models import Job, MemoryProfile
from zico.jobs.transitions import ON_DEVICE
from zico_contracts.queues import device_key, device_queue
from zico_contracts.specs import RunSpec

# Note [Budget floor]
#     No device or job budget below 64 MiB is accepted (a device smaller than that may use its whole total).
#     Every catalog workload's smallest measured curve is several MiB of parameters plus the allocator's
#     2 MiB segments, and a 1-byte budget was accepted before: its worker's allocator refused every
#     allocation and its gate held every job. The floor is not a fit check (that is the running group's
#     need, below, and the job's measured peak at submission); it only keeps obvious typos out.
MIN_BUDGET_BYTES = 64 << 20
# A script profiling placement's plan key for the default bound its job runs under (zico_contracts.jobbudget).
DEFAULT_BOUND_KEY = "default_budget_bytes"

HOST_VALIDATOR = RegexValidator(r"^[A-Za-z0-9][A-Za-z0-9_-]*$", "letters, digits, '-' and '_' only")


class Status(models.TextChoices):
    ONLINE = "online", "Online"
    DRAINING = "draining", "Draining"  # runs its jobs, takes no new placements
    OFFLINE = "offline", "Offline"


class Node(models.Model):
    """A worker host; ``host`` is the name used in queue names (cpu.<host>, gpu.<host>.<index>)."""

    host = models.CharField(max_length=63, unique=True, validators=[HOST_VALIDATOR])
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ONLINE)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["host"]

    def __str__(self) -> str:
        return self.host


class BudgetError(ValueError):
    """A device budget is out of range; ``field`` names the input."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class BudgetConflict(BudgetError):
    """A device budget is in range but below what the jobs now placed or running on the device need
    (the API answers 409: the request is well formed, the device's state refuses it)."""


class DeviceStatusError(BudgetError):
    """A device status change is refused (``field`` is ``status``); :class:`DeviceStatusConflict` when the
    device's state refuses it (the API answers 409)."""


class DeviceStatusConflict(DeviceStatusError):
    """The device is offline: its status follows its worker until the worker is back."""


class DeviceQuerySet(models.QuerySet):
    def largest_total_bytes(self) -> int | None:
        """Total bytes of the largest device, or None when no device is registered."""
        return self.aggregate(m=models.Max("total_bytes"))["m"]


class Device(models.Model):
    """One GPU (kind ``gpu``) or a host's CPU pool (kind ``cpu``) that runs jobs.

    ``total_bytes`` is what the device has (NVML ``memory.total`` for a GPU); ``budget_bytes``
    is the most the shared allocator may hand out on it (<= total), set by cluster staff.
    """

    class Kind(models.TextChoices):
        GPU = "gpu", "GPU"
        CPU = "cpu", "CPU"

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="devices")
    index = models.PositiveIntegerField(help_text="CUDA/NVML index on the node (0 for the CPU pool)")
    kind = models.CharField(max_length=3, choices=Kind.choices)
    uuid = models.CharField(max_length=64, blank=True, help_text="NVML UUID (GPU-…); empty for CPU pools")
    name = models.CharField(max_length=100, help_text="e.g. NVIDIA H100 80GB HBM3")
    total_bytes = models.BigIntegerField(validators=[MinValueValidator(1)])
    budget_bytes = models.BigIntegerField(validators=[MinValueValidator(0)])
    gate_headroom = models.FloatField(
        default=DEFAULT_GATE_HEADROOM,
        help_text="share of the budget its worker's coordinator leaves free (the worker's --gate-headroom seeds "
                  "a new row; the worker reads it from here); the scheduler plans groups against the rest")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.ONLINE)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = DeviceQuerySet.as_manager()

    class Meta:
        ordering = ["node__host", "kind", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "kind", "index"], name="device_unique_node_kind_index"),
            models.UniqueConstraint(fields=["uuid"], condition=~models.Q(uuid=""), name="device_unique_uuid"),
            models.CheckConstraint(condition=models.Q(total_bytes__gt=0), name="device_total_positive"),
            models.CheckConstraint(
                condition=models.Q(budget_bytes__gte=0) & models.Q(budget_bytes__lte=models.F("total_bytes")),
                name="device_budget_within_total",
            ),
            models.CheckConstraint(condition=models.Q(gate_headroom__gte=0) & models.Q(gate_headroom__lt=1),
                                   name="device_gate_headroom_in_unit_interval"),
        ]

    def __str__(self) -> str:
        return self.key  # the one spelling: gpu.node1.0

    @property
    def host(self) -> str:
        return self.node.host

    @property
    def key(self) -> str:
        """The device's one name on the wire (Redis keys, channels, samples): ``<kind>.<host>.<index>``, as
        zico_contracts.queues.device_key writes it. Reads ``node`` (select_related it for many devices)."""
        return device_key(self.kind, self.node.host, self.index)

    @property
    def queue(self) -> str:
        """The Celery queue of the worker owning this device (zico_contracts.queues.device_queue)."""
        return device_queue(self.kind, self.node.host, self.index)

    @transaction.atomic
    def set_budget(self, budget_bytes: int, *, actor=None) -> None:
        """Set the device budget in bytes and record a budget_change Event.

        Note [Budget under running jobs]
            A budget is refused (not applied later) when it is below what the device's running group
            needs: ``placement.gating.minimal_feasible_budget`` over the planning curves (``planning_curve``) of
            the latest curves of the jobs placed or running on it (``max_i(peak_i + sum of the others' persistent bytes)``), divided by the
            share of the budget its gate plans against (``1 - gate_headroom``). Below that figure the
            worker's gate can hold no iteration of some job, so the job stalls with no reason shown.
            To shrink a busy device, set it draining (:meth:`set_status`; ``PATCH /api/devices/<id>/
            {"status": "draining"}``) and lower the budget once its jobs have ended.

        Raises:
            BudgetError: ``budget_bytes`` is not an int in [min(MIN_BUDGET_BYTES, total_bytes), total_bytes].
                A budget of 0 is refused: a device that should take no new jobs is set to status draining.
            BudgetConflict: the budget is below the running group's need (see the Note); nothing is written.
        """
        if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int):
            raise BudgetError("budget_bytes", f"expected an integer number of bytes, got {budget_bytes!r}")
        if budget_bytes <= 0:
            raise BudgetError("budget_bytes", f"must be > 0 bytes, got {budget_bytes} (to stop new placements on "
                                              'a device, set its status to draining: {"status": "draining"})')
        if budget_bytes > self.total_bytes:
            raise BudgetError("budget_bytes", f"{budget_bytes} exceeds the device total of {self.total_bytes} bytes")
        floor = min(MIN_BUDGET_BYTES, self.total_bytes)
        if budget_bytes < floor:
            raise BudgetError("budget_bytes", f"{budget_bytes} bytes is below the floor of {floor} bytes "
                                              f"({floor >> 20} MiB, zico.cluster.models.MIN_BUDGET_BYTES)")
        # Lock the row as lifecycle.place_many does, so no group is placed between this check and the write.
        locked = Device.objects.select_for_update().get(pk=self.pk)
        need, job_ids = locked.running_group_need()
        if budget_bytes < need:
            raise BudgetConflict("budget_bytes", (
                f"{budget_bytes} bytes is below what the jobs running on {self} need: jobs "
                f"{', '.join(map(str, job_ids))} need at least {need} bytes (their minimal feasible budget over "
                f"the gate's {1 - locked.gate_headroom:.0%} share of the budget); set the device draining "
                '(PATCH {"status": "draining"}) so that no new job is placed on it, and lower the budget once '
                "they end (or cancel them)"))
        old = locked.budget_bytes
        self.budget_bytes = budget_bytes
        if old == budget_bytes:
            return
        Device.objects.filter(pk=self.pk).update(budget_bytes=budget_bytes)
        Event.record(Event.Kind.BUDGET_CHANGE, device=self, actor=actor, old_bytes=old, new_bytes=budget_bytes)

    SETTABLE_STATUSES = (Status.ONLINE, Status.DRAINING)

    @transaction.atomic
    def set_status(self, status: str, *, actor=None) -> None:
        """Set the device ``draining`` (it runs its jobs and takes no new placements) or ``online`` again, and
        record a ``device_status`` Event. ``offline`` is not set by hand: it follows the device's worker
        (lost or stopped, zico.telemetry.liveness) and ends when the worker is back. A draining device stays
        draining when its worker restarts (``worker_up``); one whose worker is lost is offline, and online
        again when the worker is back.

        Raises:
            DeviceStatusError: ``status`` is not ``online`` or ``draining``.
            DeviceStatusConflict: the device is offline; nothing is written.
        """
        if status not in self.SETTABLE_STATUSES:
            raise DeviceStatusError("status", f"{status!r} cannot be set: one of online, draining (offline follows "
                                              "the device's worker)")
        locked = Device.objects.select_for_update().get(pk=self.pk)  # as lifecycle.place_many locks it
        if locked.status == Status.OFFLINE:
            raise DeviceStatusConflict("status", f"{self} is offline (its worker is lost or stopped); its status "
                                                 "follows the worker until the worker is back")
        old = locked.status
        self.status = status
        if old == status:
            return
        Device.objects.filter(pk=self.pk).update(status=status)
        Event.record(Event.Kind.DEVICE_STATUS, device=self, actor=actor, old=old, new=status)

    def running_group_need(self) -> tuple[int, list[int]]:
        """(least budget in bytes the jobs placed or running here can run under, their ids): see
        Note [Budget under running jobs]. (0, []) when no such job has a stored curve."""
        ids = sorted(set(Job.objects.filter(status__in=ON_DEVICE, placements__device=self,
                                            placements__ended_at__isnull=True).values_list("pk", flat=True)))
        curves, with_curve = [], []
        for pk in ids:
            profile = MemoryProfile.objects.filter(job_id=pk).order_by("-created_at", "-id").first()
            if profile is not None:
                curves.append(planning_curve(profile.memory_curve()))  # Note [One planning rule]
                with_curve.append(pk)
        if not curves:
            return 0, []
        share = 1 - self.gate_headroom
        return int(-(-minimal_feasible_budget(curves) // share)), with_curve

    def heartbeat(self, when=None) -> None:
        """Mark the device (and its node) as seen now."""
        when = when or timezone.now()
        Device.objects.filter(pk=self.pk).update(last_heartbeat=when)
        Node.objects.filter(pk=self.node_id).update(last_heartbeat=when)
        self.last_heartbeat = when


class PlacementError(ValueError):
    """A placement cannot be opened; the message starts with the offending input's name."""


class PlacementQuerySet(models.QuerySet):
    def active(self) -> "PlacementQuerySet":
        return self.filter(ended_at__isnull=True)


class Placement(models.Model):
    """Jobs co-located on one device under one sharing plan; opened only by the scheduler, through
    :func:`zico.jobs.lifecycle.place_many` (also for a script job alone, to be profiled as its run starts).

    ``plan`` is the sharing plan as JSON, as ``placement.state.SharingPlan.to_dict()`` writes it
    (the placement package owns the schema): ``{"job_ids": [3, 5],
    "predicted_slowdown": [1.02, 1.1], "mode": "shift", "budget_bytes": ..., "predicted_peak_bytes": ...,
    "sum_of_peaks_bytes": ...}`` — the per-job lists are aligned with ``job_ids``. Read per-job figures
    through :meth:`plan_by_job`, the one place that knows that layout.

    ``run_token`` is a random UUID set when the placement is created. The scheduler sends it with every
    ``run_job`` of the placement and the worker stores it in the run's done record, so a done record
    left in Redis by another deployment (ids restart at 1 with a new database) is recognised as stale.
    """

    device = models.ForeignKey(Device, on_delete=models.PROTECT, related_name="placements")
    jobs = models.ManyToManyField("jobs.Job", related_name="placements")
    plan = models.JSONField(default=dict, blank=True)
    run_token = models.UUIDField(default=uuid.uuid4, editable=False)
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=200, blank=True)

    objects = PlacementQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["device", "ended_at"], name="placement_device_active")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(ended_at__isnull=True) | models.Q(ended_at__gte=models.F("started_at")),
                name="placement_ends_after_start",
            ),
        ]

    def __str__(self) -> str:
        return f"placement {self.pk} on {self.device}"

    @property
    def is_active(self) -> bool:
        return self.ended_at is None

    def run_spec(self, job, curve: dict | None) -> dict:
        """The JSON spec of ``zico.device.run_job`` for ``job`` in this placement (zico_contracts.specs.RunSpec):
        workload, params, placement id, ``run_token`` (str), the job's memory ``curve``, the ``plan`` and
        ``job_created_at`` (ISO 8601; names the job across deployments for its checkpoints), ``tenant`` (its id:
        the device's pool scrubs memory that moves between tenants), ``job_budget_bytes`` (the job's own budget,
        which the device agent never lets its process pass; for a script profiled beside other jobs without one,
        the default bound its profiling placement's plan holds as ``default_budget_bytes``, with
        ``job_budget_default``: zico_contracts.jobbudget), ``wall_limit`` (its wall-clock limit,
        ``Job.wall_limit``, which the device agent enforces); for a job with
        code also the fields of zico_contracts.codejob (``code_url``, ``command``, ``job_token``, ...). A script
        job without a curve (``curve`` None) is profiled as its run starts: ``profile`` carries
        ``time_limit_s`` (``settings.ZICO_PROFILE_TIME_LIMIT_S``; Note [A script's profile is the start of its
        run] in workers/runner.py). Raises zico_contracts.specs.SpecError naming the field when the spec would
        be refused by the worker."""
        profile, budget, default = None, job.budget_bytes, False
        if curve is None and job.code_id is not None:
            profile = {"time_limit_s": float(settings.ZICO_PROFILE_TIME_LIMIT_S)}
            bound = (self.plan or {}).get(DEFAULT_BOUND_KEY)
            if budget is None and isinstance(bound, int) and not isinstance(bound, bool) and bound > 0:
                budget, default = bound, True  # Note [Where a script is profiled] in zico.scheduling.service
        return RunSpec(job=job.pk, workload=job.workload, params=job.params or {}, placement=self.pk,
                       run_token=str(self.run_token), curve=curve, plan=self.plan,
                       job_created_at=job.created_at.isoformat(), tenant=job.tenant_id,
                       code=code_spec(job), profile=profile, job_budget_bytes=budget,
                       wall_limit=job.wall_limit(), job_budget_default=default).to_dict()

    def plan_by_job(self) -> dict[int, dict]:
        """Per-job figures of the stored sharing plan: ``{job id: {"predicted_slowdown": ratio | None}}`` for
        every job listed in ``plan["job_ids"]``.

        The plan is ``SharingPlan.to_dict()`` (placement/state.py), whose ``predicted_slowdown`` is a
        list aligned with ``job_ids``. A missing or malformed plan (an empty
        dict, lists of another length) yields None figures rather than raising: a page must still render.
        """
        plan = self.plan if isinstance(self.plan, dict) else {}
        job_ids = plan.get("job_ids")
        if not isinstance(job_ids, list):
            return {}

        def aligned(name):
            values = plan.get(name)
            return values if isinstance(values, list) and len(values) == len(job_ids) else [None] * len(job_ids)

        return {j: {"predicted_slowdown": r} for j, r in zip(job_ids, aligned("predicted_slowdown"))
                if isinstance(j, int) and not isinstance(j, bool)}

    def end(self, reason: str = "") -> None:
        """Mark the placement ended now (idempotent)."""
        if self.ended_at is None:
            self.ended_at = timezone.now()
            self.end_reason = reason[:200]
            Placement.objects.filter(pk=self.pk, ended_at__isnull=True).update(
                ended_at=self.ended_at, end_reason=self.end_reason)
