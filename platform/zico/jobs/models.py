"""Training jobs, their memory profiles, and the audit Event log.

Status changes go only through the verbs of :mod:`zico.jobs.lifecycle`;
submissions go through :func:`zico.jobs.submission.submit_job`, which validates the spec.
"""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone

from placement.curves import SOURCES, CurveError, MemoryCurve, curve_from_dict
from zico.tenants.models import Role
from zico_contracts import walltime
from zico_contracts.specs import ProfileSpec

from .code import code_spec
from .transitions import ALL_STATUSES, ON_DEVICE, TERMINAL, JobStatus

PRIORITY_MIN, PRIORITY_MAX = -100, 100


class JobQuerySet(models.QuerySet):
    def for_user(self, user) -> "JobQuerySet":
        """Jobs of every tenant ``user`` is a member of."""
        if not getattr(user, "is_authenticated", False):
            return self.none()
        return self.filter(tenant__memberships__user=user)

    def visible_to(self, user) -> "JobQuerySet":
        """Jobs ``user`` may read: all for cluster staff, else :meth:`for_user`."""
        if getattr(user, "is_authenticated", False) and user.is_staff:
            return self.all()
        return self.for_user(user)

    def unfinished(self) -> "JobQuerySet":
        return self.exclude(status__in=TERMINAL)


def on_device_q(prefix: str = "") -> models.Q:
    """A Q for the jobs that hold (or are about to hold) memory on a device: placed or running, or profiling
    in a placement of their own (a script job whose profile is the start of its run). ``prefix`` reaches the
    job through a relation (``"jobs__"``). A subquery, not a join, so counts stay one row per job."""
    in_placement = Job.placements.through.objects.filter(placement__ended_at__isnull=True).values("job_id")
    return models.Q(**{f"{prefix}status__in": ON_DEVICE}) | models.Q(**{f"{prefix}status": JobStatus.PROFILING,
                                                                        f"{prefix}pk__in": in_placement})


class Job(models.Model):
    """One training job with an optional memory budget and a status: either a catalog workload with params
    (``workload`` set, ``code`` empty) or a command in a project (``code`` set, ``workload`` empty; ``command``
    and ``env`` follow zico_contracts.codejob)."""

    Status = models.TextChoices("Status", [(s.upper(), s) for s in ALL_STATUSES])

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="jobs")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                              related_name="jobs")
    name = models.CharField(max_length=200, blank=True)
    workload = models.CharField(max_length=64, blank=True, help_text="key in zico_workloads.catalog; "
                                                                    "empty for a job with code")
    params = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    code = models.ForeignKey("jobs.CodeArchive", on_delete=models.RESTRICT, null=True, blank=True,
                             related_name="jobs", help_text="the project a command job runs in")
    command = models.JSONField(default=list, blank=True, help_text="argv run in the project (code jobs)")
    env = models.JSONField(default=dict, blank=True, help_text="NAME -> value for the command (code jobs)")
    budget_bytes = models.BigIntegerField(null=True, blank=True, help_text="Bytes; most this job may hold")
    # Its wall-clock limit, resolved at submission (zico_contracts.walltime.resolve: the least of the job's own request,
    # its tenant's max_time_limit_s and settings.ZICO_JOB_TIME_LIMIT_S) and where it came from; null: a job stored
    # before limits (its run still gets its tenant's and the platform's, Job.wall_limit).
    time_limit_s = models.FloatField(null=True, blank=True, editable=False,
                                     help_text="Seconds its process may run (wall clock) before the agent stops it")
    time_limit_source = models.CharField(max_length=8, blank=True, editable=False,
                                         choices=[(k, v) for k, v in walltime.SOURCES.items()],
                                         help_text="whose limit time_limit_s is: job, tenant or platform")
    priority = models.SmallIntegerField(default=0, help_text=f"{PRIORITY_MIN}..{PRIORITY_MAX}; higher goes first")
    status = models.CharField(max_length=10, choices=Status.choices, default="queued", editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    status_changed_at = models.DateTimeField(default=timezone.now, editable=False)
    started_at = models.DateTimeField(null=True, blank=True, editable=False)
    finished_at = models.DateTimeField(null=True, blank=True, editable=False)
    failure_reason = models.TextField(blank=True, editable=False)
    # Why a job that waits for a device is not placed (placement.reasons), rewritten by each scheduler round
    # while it waits and cleared by its next status move (Note [Waiting reasons] in zico.scheduling.waiting).
    waiting_reason = models.TextField(blank=True, editable=False,
                                      help_text="why the scheduler did not place it in its last round")
    waiting_kind = models.CharField(max_length=24, blank=True, editable=False,
                                    help_text="placement.reasons kind, e.g. slowdown_limit, quota")
    waiting_since = models.DateTimeField(null=True, blank=True, editable=False,
                                         help_text="when the scheduler first gave it a waiting reason")
    metrics = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder,
                               help_text="iterations_per_s, peak_bytes, delay_s, slowdown, ...")
    # Scheduler/worker bookkeeping.
    attempts = models.PositiveIntegerField(default=0, editable=False, help_text="times the job entered running")
    lost_count = models.PositiveIntegerField(default=0, editable=False, help_text="times its worker was lost")
    progress_iteration = models.PositiveBigIntegerField(default=0, help_text="last iteration reported done")
    # The device profiling the job while it is ``profiling`` (set by the move there, cleared by any move
    # out), so a lost or restarted worker of that device sends the job back to the queue.
    profiling_device = models.ForeignKey("cluster.Device", on_delete=models.SET_NULL, null=True, blank=True,
                                         editable=False, related_name="profiling_jobs")
    total_iterations = models.PositiveBigIntegerField(null=True, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["tenant", "status"], name="job_tenant_status"),
            models.Index(fields=["status", "-priority", "created_at"], name="job_queue_order"),
        ]
        constraints = [
            models.CheckConstraint(condition=models.Q(budget_bytes__isnull=True) | models.Q(budget_bytes__gt=0),
                                   name="job_budget_positive"),
            models.CheckConstraint(condition=models.Q(priority__gte=PRIORITY_MIN, priority__lte=PRIORITY_MAX),
                                   name="job_priority_range"),
            models.CheckConstraint(condition=models.Q(time_limit_s__isnull=True) | models.Q(time_limit_s__gt=0),
                                   name="job_time_limit_positive"),
            models.CheckConstraint(condition=models.Q(status__in=ALL_STATUSES), name="job_status_known"),
            models.CheckConstraint(condition=(models.Q(code__isnull=True) & ~models.Q(workload=""))
                                   | (models.Q(code__isnull=False) & models.Q(workload="")),
                                   name="job_catalog_or_code"),
        ]

    def __str__(self) -> str:
        return self.name or f"{self.kind_label} #{self.pk}"

    @property
    def kind_label(self) -> str:
        """The workload key, or the command (shortened) of a job with code."""
        if self.workload:
            return self.workload
        text = " ".join(self.command or [])
        return text if len(text) <= 40 else text[:39] + "…"

    @property
    def is_finished(self) -> bool:
        return self.status in TERMINAL

    def can_be_cancelled_by(self, user) -> bool:
        """Cluster staff, an admin/owner of the job's tenant, or its owner while still role member or higher."""
        if not getattr(user, "is_authenticated", False):
            return False
        if user.is_staff or self.tenant.has_role(user, Role.ADMIN):
            return True
        return self.owner_id == user.pk and self.tenant.has_role(user, Role.MEMBER)

    def wall_limit(self) -> walltime.WallLimit | None:
        """The wall-clock limit its run is sent with (Note [A job's wall-clock limit] in workers.agent.agent): the
        limit resolved at submission, unless its tenant's maximum or the platform's is lower now (a limit lowered
        after submission holds for the job's next run too; one raised after it does not raise the job's)."""
        stored = self.time_limit_s if self.time_limit_source in walltime.SOURCES else None
        tenant_s = self.tenant.max_time_limit_s
        limit = walltime.resolve(platform_s=settings.ZICO_JOB_TIME_LIMIT_S, tenant_s=tenant_s)
        if stored is not None and (limit is None or stored <= limit.seconds):
            return walltime.WallLimit(stored, self.time_limit_source)
        return limit

    def profile_spec(self) -> dict[str, Any]:
        """The JSON spec of ``zico.device.profile_job`` for this job (read by workers.profiling.profile):
        ``{"workload", "params", "time_limit_s", "tenant"}``, the limit being ``settings.ZICO_PROFILE_TIME_LIMIT_S``
        and ``tenant`` the job's tenant id (the device's pool scrubs memory that moves between tenants),
        ``job_budget_bytes`` the job's own budget (the agent's hard cap), ``wall_limit`` its wall-clock limit
        (:meth:`wall_limit`), plus for a job with code the fields of zico_contracts.codejob (zico.jobs.code.code_spec); built by
        zico_contracts.specs.ProfileSpec, the class the worker parses it with."""
        return ProfileSpec(job=self.pk, workload=self.workload, params=self.params or {},
                           time_limit_s=float(settings.ZICO_PROFILE_TIME_LIMIT_S), tenant=self.tenant_id,
                           code=code_spec(self), job_budget_bytes=self.budget_bytes,
                           wall_limit=self.wall_limit()).to_dict()

    def latest_profile(self) -> "MemoryProfile | None":
        return self.profiles.order_by("-created_at", "-id").first()

    def active_placement(self):
        return self.placements.filter(ended_at__isnull=True).order_by("-started_at").first()


class MemoryProfile(models.Model):
    """A memory curve (DESIGN contract) with its headline figures copied out for queries: a job's own (``job``
    set), or one a tenant member uploaded as a PyTorch snapshot for a job identity before any such job ran
    (``job`` empty; ``tenant`` and ``identity``, the params of the identical jobs it serves:
    ``{"code_sha256", "command", "env"}``, zico.jobs.submission). Who uploaded a snapshot is ``uploaded_by``.
    Reuse by identical jobs: Note [Known memory needs] in zico.jobs.known."""

    Source = models.TextChoices("Source", [(s.upper().replace("-", "_"), s) for s in SOURCES])

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="profiles", null=True, blank=True)
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, null=True, blank=True,
                               related_name="identity_profiles", help_text="the tenant of a curve without a job")
    identity = models.JSONField(null=True, blank=True, encoder=DjangoJSONEncoder,
                                help_text="params of the identical jobs a curve without a job serves")
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                    related_name="+", help_text="who uploaded it (a snapshot); empty: measured")
    source = models.CharField(max_length=20, choices=Source.choices)
    curve = models.JSONField(help_text="memory curve JSON (placement.curves contract)")
    peak_bytes = models.BigIntegerField()
    persistent_bytes = models.BigIntegerField()
    iteration_s = models.FloatField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "-created_at"], name="profile_identity_tenant")]
        constraints = [
            # a job's curve, or a snapshot's for an identity in a tenant: never both, never neither
            models.CheckConstraint(condition=models.Q(job__isnull=False, tenant__isnull=True, identity__isnull=True)
                                   | models.Q(job__isnull=True, tenant__isnull=False, identity__isnull=False,
                                              source="torch-snapshot"),
                                   name="profile_of_job_or_identity"),
        ]

    def __str__(self) -> str:
        return f"{self.source} profile of job {self.job_id}" if self.job_id else \
            f"{self.source} profile for {self.identity} in tenant {self.tenant_id}"

    @classmethod
    def record(cls, job: Job, curve: MemoryCurve | dict, uploaded_by=None) -> "MemoryProfile":
        """Store ``curve`` (a MemoryCurve or the contract's dict) for ``job``.

        Raises:
            CurveError: the dict is not a valid curve (the message names the field).
        """
        c = curve if isinstance(curve, MemoryCurve) else curve_from_dict(curve)
        d = c.to_dict()
        return cls.objects.create(job=job, source=c.source, curve=d, peak_bytes=d["peak_bytes"],
                                  persistent_bytes=d["persistent_bytes"], iteration_s=c.iteration_s,
                                  uploaded_by=uploaded_by)

    def memory_curve(self) -> MemoryCurve:
        """The stored curve as a MemoryCurve (raises CurveError if the row was corrupted)."""
        return curve_from_dict(self.curve)

    def clean(self) -> None:
        try:
            c = curve_from_dict(self.curve)
        except CurveError as exc:
            raise ValidationError({"curve": str(exc)}) from exc
        if c.source != self.source:
            raise ValidationError({"source": f"{self.source!r} disagrees with the curve's source {c.source!r}"})


from .events import Event  # noqa: E402,F401 (a model of the app, registered here; zico.jobs.events)
from .code_models import CodeArchive, JobFile, JobLog  # noqa: E402,F401 (models of the app, registered here)
