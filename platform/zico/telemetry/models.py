"""Stored telemetry: the downsampled memory timeline (<= 1 point per second per job), the jobs' own metrics
(``zico.log``) and telemetry gaps.

Written only by the control consumer (:mod:`zico.telemetry.consumer`); read by pages and the API.
Retention is bounded: :func:`prune` deletes points older than ``settings.ZICO_TIMELINE_RETENTION_S``
(default 7 days), so the table holds at most ``retention x 1 point/s`` per running job.
"""
from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

class TimelinePoint(models.Model):
    """One second of one job's memory on one device (``job`` empty: the whole device's pool).

    Byte fields are the *largest* value sampled within the second (so a stored timeline never hides a
    peak), except ``allocated_at_peak_bytes``: the job's allocated bytes at the instant of that second when
    the device held the most, which is what the device chart stacks (Note [Stacking per-second points] in
    zico.telemetry.downsample). ``iteration`` and ``phase`` are the last ones seen in it.
    """

    device = models.ForeignKey("cluster.Device", on_delete=models.CASCADE, related_name="timeline")
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, null=True, blank=True, related_name="timeline")
    second = models.BigIntegerField(help_text="unix time of the sample's second (floor)")
    time = models.DateTimeField(help_text="the same second as a datetime (UTC)")
    allocated_bytes = models.BigIntegerField()
    reserved_bytes = models.BigIntegerField()
    allocated_at_peak_bytes = models.BigIntegerField(
        null=True, blank=True, help_text="allocated bytes at the second's device peak instant (stacked bands)")
    iteration = models.BigIntegerField(null=True, blank=True)
    phase = models.CharField(max_length=16, blank=True)
    device_used_bytes = models.BigIntegerField(null=True, blank=True, help_text="NVML memory.used (GPU) or RSS")
    budget_bytes = models.BigIntegerField(null=True, blank=True)
    samples = models.PositiveIntegerField(default=1, help_text="live samples folded into this point")

    class Meta:
        ordering = ["second", "id"]
        indexes = [
            models.Index(fields=["device", "second"], name="timeline_device_second"),
            models.Index(fields=["job", "second"], name="timeline_job_second"),
            models.Index(fields=["time"], name="timeline_time"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["job", "second"], condition=models.Q(job__isnull=False),
                                    name="timeline_one_point_per_job_second"),
            models.UniqueConstraint(fields=["device", "second"], condition=models.Q(job__isnull=True),
                                    name="timeline_one_point_per_device_second"),
        ]

    def __str__(self) -> str:
        return f"{self.device_id}/{self.job_id or 'device'} @ {self.second}"

    def to_dict(self) -> dict:
        return {"t": self.second, "job": self.job_id, "allocated": self.allocated_bytes,
                "allocated_at_peak": self.allocated_at_peak_bytes, "reserved": self.reserved_bytes, "iteration": self.iteration, "phase": self.phase,
                "device_used": self.device_used_bytes, "budget": self.budget_bytes}


class MetricPoint(models.Model):
    """One value of one of a job's own figures: a number the job reported with ``zico.log(name=value)`` (a
    catalog workload's loss and accuracy), at most one a second per name (workers.job.entry.MetricSink),
    stored by the control consumer from ``job_progress`` and charted on the job page, live and after.

    Kept with the job (deleted with it), at most ``MAX_POINTS_PER_METRIC`` per name: see Note [Thinning a
    job's metrics] in :func:`zico.telemetry.handlers.store_metrics`.
    """

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="metric_points")
    name = models.CharField(max_length=100)
    t = models.FloatField(help_text="when the worker sent it (unix s)")
    iteration = models.BigIntegerField(help_text="the job's iterations done (optimizer steps) at that time")
    value = models.FloatField()

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["job", "name", "id"], name="metric_job_name_id")]
        constraints = [models.UniqueConstraint(fields=["job", "name", "t"], name="metric_one_value_per_job_name_t")]

    def __str__(self) -> str:
        return f"job {self.job_id} {self.name}={self.value:g} @ iteration {self.iteration}"


MAX_POINTS_PER_METRIC = 2000  # per job and name: enough for a line chart's shape (Note [Thinning a job's metrics])


class TelemetryGap(models.Model):
    """A stretch during which a device worker could not reach Redis (its samples are missing there)."""

    device = models.ForeignKey("cluster.Device", on_delete=models.CASCADE, related_name="telemetry_gaps")
    start = models.DateTimeField()
    end = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-start"]

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def __str__(self) -> str:
        return f"gap on {self.device_id}: {self.seconds:.1f} s from {self.start:%H:%M:%S}"


def retention_s() -> int:
    """Seconds of timeline kept (``settings.ZICO_TIMELINE_RETENTION_S``)."""
    return settings.ZICO_TIMELINE_RETENTION_S


def prune(now=None) -> int:
    """Delete timeline points older than the retention; returns how many were deleted."""
    cutoff = (now or timezone.now()) - timedelta(seconds=retention_s())
    deleted, _ = TimelinePoint.objects.filter(time__lt=cutoff).delete()
    return deleted
