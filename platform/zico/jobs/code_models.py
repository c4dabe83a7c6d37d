"""Models of jobs that run a user's command in a project: the code archive, the job's output files and its
stored log. Their bytes live in files under settings (``ZICO_CODE_DIR``, ``ZICO_JOB_FILES_DIR``); the rows
hold what the API shows. Storage and checks: zico.jobs.code (archives) and zico.jobs.outputs (files, log).
"""
from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models

from zico_contracts.codearchive import FORMATS


class CodeArchive(models.Model):
    """A project directory uploaded as tar.gz or zip, content-addressed by the sha256 of its bytes, per
    tenant: uploading the same bytes again to the same tenant returns this row."""

    Format = models.TextChoices("Format", [(f.replace(".", "_").upper(), f) for f in FORMATS])

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="code_archives")
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                    related_name="+")
    sha256 = models.CharField(max_length=64, help_text="hex digest of the archive's bytes")
    format = models.CharField(max_length=8, choices=Format.choices)
    size_bytes = models.BigIntegerField(help_text="bytes of the archive")
    files = models.PositiveIntegerField(help_text="regular files in it")
    unpacked_bytes = models.BigIntegerField(help_text="bytes of its files together")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["tenant", "sha256"], name="code_archive_tenant_sha256")]

    def __str__(self) -> str:
        return f"{self.sha256[:12]}.{self.format} ({self.tenant_id})"

    @staticmethod
    def blob_path(sha256: str, fmt: str) -> Path:
        """Where the bytes of an archive live: ``ZICO_CODE_DIR/<sha[:2]>/<sha>.<format>`` (shared by the
        tenants that uploaded the same bytes)."""
        return Path(settings.ZICO_CODE_DIR) / sha256[:2] / f"{sha256}.{fmt}"

    @property
    def path(self) -> Path:
        return self.blob_path(self.sha256, self.format)


def job_dir(job_id: int) -> Path:
    """``ZICO_JOB_FILES_DIR/<job id>``: the job's stored log and its ``files/``."""
    return Path(settings.ZICO_JOB_FILES_DIR) / str(int(job_id))


class JobFile(models.Model):
    """One output file a worker uploaded for a job (``POST /api/worker/jobs/{id}/files/``)."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=1024, help_text="relative POSIX path inside the job's outputs")
    size_bytes = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["path"]
        constraints = [models.UniqueConstraint(fields=["job", "path"], name="job_file_job_path")]

    def __str__(self) -> str:
        return f"{self.path} of job {self.job_id}"

    @property
    def disk_path(self) -> Path:
        return job_dir(self.job_id) / "files" / Path(*self.path.split("/"))


class JobLog(models.Model):
    """The stored copy of a job's output lines, taken from its Redis stream when the job ended; the lines are a
    JSON-lines file (``job_dir/log.jsonl``), at most ``ZICO_LOG_MAX_BYTES`` (the tail is kept)."""

    job = models.OneToOneField("jobs.Job", on_delete=models.CASCADE, related_name="stored_log")
    lines = models.PositiveIntegerField(help_text="lines stored")
    size_bytes = models.BigIntegerField(help_text="bytes of the stored file")
    dropped_lines = models.PositiveBigIntegerField(default=0, help_text="earlier lines not kept (stream cap, "
                                                                        "size cap)")
    stored_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"log of job {self.job_id} ({self.lines} lines)"

    @property
    def disk_path(self) -> Path:
        return job_dir(self.job_id) / "log.jsonl"
