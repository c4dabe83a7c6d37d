"""Code archives on the web side: storing an upload (checked by zico_contracts.codearchive), the job token a
worker presents, and the run-spec fields of a job with code (zico_contracts.codejob).

Note [Storing an upload]
    The upload is copied to a temporary file under ``ZICO_CODE_DIR/tmp`` while its sha256 and size are taken
    (more than ``ZICO_CODE_MAX_BYTES`` stops the copy), then checked whole (:func:`inspect_archive`). A refused
    archive leaves nothing: the temporary file is removed and no row is written. An accepted one is moved to
    its content address (``CodeArchive.blob_path``; one file for every tenant that uploads the same bytes) and
    gets a row; the same bytes uploaded again to the same tenant return the existing row.

Note [Job tokens]
    A worker fetches a job's code and uploads its outputs with a token that names that job only:
    ``django.core.signing.TimestampSigner`` (HMAC-SHA256 with SECRET_KEY, salt ``zico.jobs.worker-token``) of
    the job id, made when the run spec is built and valid for ``ZICO_WORKER_TOKEN_TTL_S``. Nothing is stored:
    a token is checked by its signature and age, and refused once its job has ended more than
    ``ZICO_WORKER_UPLOAD_GRACE_S`` ago (zico.api.worker), so a leaked token is of no use for long. A new
    SECRET_KEY voids every token (a resent run spec carries a new one).
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from django.conf import settings
from django.core import signing
from django.db import IntegrityError, transaction
from django.urls import reverse

from zico_contracts.codearchive import ArchiveError, ArchiveLimits, inspect_archive
from zico_contracts.codejob import CodeSpec

from .code_models import CodeArchive

TOKEN_SALT = "zico.jobs.worker-token"


class ArchiveTooLarge(ArchiveError):
    """The upload is over ``ZICO_CODE_MAX_BYTES`` (the API answers 413)."""


def archive_limits() -> ArchiveLimits:
    """Note [Code archive limits] with this deployment's settings."""
    return ArchiveLimits(max_bytes=settings.ZICO_CODE_MAX_BYTES, max_unpacked_bytes=settings.ZICO_CODE_MAX_UNPACKED_BYTES,
                         max_files=settings.ZICO_CODE_MAX_FILES, max_ratio=float(settings.ZICO_CODE_MAX_RATIO))


def output_limits() -> dict[str, int]:
    """What ``POST /api/worker/jobs/{id}/files/`` accepts per job (bytes, counts)."""
    return {"max_files": settings.ZICO_OUTPUT_MAX_FILES, "max_bytes": settings.ZICO_OUTPUT_MAX_BYTES,
            "max_file_bytes": settings.ZICO_OUTPUT_MAX_FILE_BYTES}


def _spool(upload, directory: Path, limit: int) -> tuple[Path, str, int]:
    """Copy ``upload`` (a Django UploadedFile or any object with ``chunks()`` or ``read()``) to a temporary
    file in ``directory``: (path, sha256 hex, bytes). Raises ArchiveTooLarge past ``limit`` bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=directory, prefix="upload-", suffix=".part")
    digest, size = hashlib.sha256(), 0
    chunks = upload.chunks() if hasattr(upload, "chunks") else iter(lambda: upload.read(1 << 16), b"")
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                size += len(chunk)
                if size > limit:
                    raise ArchiveTooLarge(f"the archive is over the limit of {limit} bytes (ZICO_CODE_MAX_BYTES)")
                digest.update(chunk)
                out.write(chunk)
    except BaseException:
        os.unlink(name)
        raise
    return Path(name), digest.hexdigest(), size


def store_archive(tenant, upload, user=None) -> tuple[CodeArchive, bool]:
    """Check and store an uploaded archive for ``tenant`` (Note [Storing an upload]): (row, created).

    Raises:
        ArchiveTooLarge: over ``ZICO_CODE_MAX_BYTES``.
        ArchiveError: any other rule of Note [Code archive limits]; the message names the member and problem.
    """
    limits = archive_limits()
    tmp, sha, size = _spool(upload, Path(settings.ZICO_CODE_DIR) / "tmp", limits.max_bytes)
    try:
        if not size:
            raise ArchiveError("the upload is empty: expected a tar.gz or zip archive")
        info = inspect_archive(tmp, limits)
        existing = CodeArchive.objects.filter(tenant=tenant, sha256=sha).first()
        if existing is not None:
            return existing, False
        blob = CodeArchive.blob_path(sha, info.format)
        blob.parent.mkdir(parents=True, exist_ok=True)
        if blob.exists():
            tmp.unlink()
        else:
            os.chmod(tmp, 0o644)
            os.replace(tmp, blob)
        try:
            with transaction.atomic():
                row = CodeArchive.objects.create(tenant=tenant, uploaded_by=user, sha256=sha, format=info.format,
                                                 size_bytes=size, files=info.files, unpacked_bytes=info.unpacked_bytes)
        except IntegrityError:  # the same bytes, uploaded concurrently
            return CodeArchive.objects.get(tenant=tenant, sha256=sha), False
        return row, True
    finally:
        if tmp.exists():
            tmp.unlink()


def discard_archive(archive: CodeArchive) -> None:
    """Delete ``archive``'s row, and its file when no other tenant's row shares it (a form whose job was
    refused after its archive was stored)."""
    sha, path = archive.sha256, archive.path
    archive.delete()
    if not CodeArchive.objects.filter(sha256=sha).exists() and path.exists():
        path.unlink()


def issue_job_token(job_id: int) -> str:
    """A token for the worker-facing endpoints of job ``job_id`` (Note [Job tokens])."""
    return signing.TimestampSigner(salt=TOKEN_SALT).sign(str(int(job_id)))


def job_id_from_token(token: str) -> int:
    """The job id a token was issued for. Raises ``signing.SignatureExpired`` (older than
    ``ZICO_WORKER_TOKEN_TTL_S``) or ``signing.BadSignature`` (not ours, or altered)."""
    value = signing.TimestampSigner(salt=TOKEN_SALT).unsign(token, max_age=settings.ZICO_WORKER_TOKEN_TTL_S)
    if not value.isdigit():
        raise signing.BadSignature("not a job token")
    return int(value)


def code_spec(job) -> CodeSpec | None:
    """The code fields of ``job``'s run and profile specs (a fresh job token each time), or None for a catalog
    job."""
    if job.code_id is None:
        return None
    archive, base = job.code, settings.ZICO_WORKER_API_URL
    return CodeSpec(code_url=base + reverse("worker-job-code", args=[job.pk]), code_sha256=archive.sha256,
                    code_format=archive.format, code_size_bytes=archive.size_bytes, command=list(job.command),
                    job_token=issue_job_token(job.pk), files_url=base + reverse("worker-job-files", args=[job.pk]),
                    env=dict(job.env or {}), code_limits=archive_limits().to_dict(),
                    output_limits=output_limits())
