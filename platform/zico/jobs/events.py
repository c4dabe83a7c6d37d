"""The audit Event log: who or what changed something, when, and the details.

Its own module, importing no other model module, so that the models that record Events (tenants, cluster)
import it at the top without an import circle; the jobs app registers it (zico.jobs.models).
"""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils import timezone


class Event(models.Model):
    """An audit record: who or what changed something, when, and the details."""

    class Kind(models.TextChoices):
        STATUS_CHANGE = "status_change", "Status change"
        PLACEMENT = "placement", "Placement"
        DELAY = "delay", "Delay"
        BUDGET_CHANGE = "budget_change", "Budget change"
        OOM_PREVENTED = "oom_prevented", "OOM prevented"
        WORKER_LOST = "worker_lost", "Worker lost"
        ROLE_CHANGE = "role_change", "Role change"
        QUOTA_CHANGE = "quota_change", "Quota change"
        TENANT_CHANGE = "tenant_change", "Tenant settings change"
        OUTAGE = "outage", "Service outage"  # Redis or the database unreachable, recorded once it is back
        WAITING = "waiting", "Waiting"  # the scheduler's reason for not placing the job changed
        DEVICE_STATUS = "device_status", "Device status change"  # staff set a device draining or online again
        PROFILE = "profile", "Memory curve attached"  # a member attached a snapshot's curve to the job

    time = models.DateTimeField(default=timezone.now, db_index=True, editable=False)
    kind = models.CharField(max_length=20, choices=Kind.choices, editable=False)
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.SET_NULL, null=True, blank=True,
                               related_name="events", editable=False)
    device = models.ForeignKey("cluster.Device", on_delete=models.SET_NULL, null=True, blank=True,
                               related_name="events", editable=False)
    job = models.ForeignKey("jobs.Job", on_delete=models.SET_NULL, null=True, blank=True, related_name="events",
                            editable=False)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                              related_name="+", editable=False, help_text="empty: the system did it")
    details = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder, editable=False)

    class Meta:
        ordering = ["-time", "-id"]
        indexes = [models.Index(fields=["tenant", "-time"], name="event_tenant_time"),
                   models.Index(fields=["kind", "-time"], name="event_kind_time")]

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%d %H:%M:%S} {self.kind}"

    @classmethod
    def record(cls, kind: str, *, tenant=None, device=None, job=None, actor=None, **details: Any) -> "Event":
        """Write one event; ``tenant`` defaults to the job's. ``actor`` may be a user or None/anonymous.

        Raises ValueError on an unknown kind.
        """
        if kind not in cls.Kind.values:
            raise ValueError(f"unknown event kind {kind!r} (expected one of {', '.join(cls.Kind.values)})")
        if tenant is None and job is not None:
            tenant = job.tenant_id and job.tenant
        if actor is not None and not getattr(actor, "is_authenticated", False):
            actor = None
        return cls.objects.create(kind=kind, tenant=tenant, device=device, job=job, actor=actor, details=details)
