"""A user's PyTorch memory snapshot as a memory curve: read an upload with the guarded importer
(zico_workloads.curves.snapshot), check its peak against what could ever hold it, and store it as a
``torch-snapshot`` MemoryProfile of a job with code (``POST /api/jobs/{id}/profile/``, ``zico curve import JOB``,
the "your code" form) or of a job identity in a tenant, before any such job runs (``POST /api/curves/``,
``zico submit --snapshot``, ``zico curve import --for DIR``). A job with a curve is not profiled: the scheduler's
next round moves it to ready, and identical jobs of the tenant reuse the curve (Note [Known memory needs] in
zico.jobs.known). Nothing here runs a job or imports torch.

Note [A snapshot is its tenant's word]
    A snapshot's curve is what its uploader says the job needs, not what the platform measured. A wrong one (a
    made-up tiny peak) lets the scheduler co-locate the job where it does not fit; the device agent's budget
    still holds, so that job runs out of memory, or is held back, and nobody else's memory is taken. To keep
    the consequence with the tenant that uploaded it, a snapshot's curve serves identical jobs of that tenant
    only, while curves the platform measured are shared by every identical job as before. Only jobs with code
    take one: a catalog workload is estimated and profiled by the platform. The file is untrusted input: the
    importer bounds it before it builds anything and never imports a global (Note [Snapshots are untrusted
    input] in zico_workloads/curves/snapshot.py); here its size is capped first (``ZICO_SNAPSHOT_MAX_BYTES``,
    at most the importer's ``MAX_FILE_BYTES``), and a refused file stores nothing.

Note [When a snapshot may be attached]
    To a job with code that is queued (not profiled yet: the next round finds the curve and moves the job to
    ready without profiling it) or that has ended (the curve then serves its reruns). Not while the job is
    profiled or is placed and run with a curve it already has (profiling, ready, placed, running, lost): 409.
    The job's row is locked while its status is checked and the curve stored, as the scheduler's round locks
    the queued rows it moves, so a round sees the queued job either without the curve or with it.
"""
from __future__ import annotations

from typing import Any, BinaryIO

from django.conf import settings
from django.db import transaction

from zico.tenants.models import Tenant

from .known import SNAPSHOT_SOURCE, devices_budgets, peak_misfit
from .models import Event, Job, MemoryProfile
from .submission import JobSpecError, code_identity, validate_code_job
from .transitions import TERMINAL, JobStatus

ATTACHABLE = frozenset({JobStatus.QUEUED, *TERMINAL})  # Note [When a snapshot may be attached]


class SnapshotRefused(ValueError):
    """The upload is not a snapshot Zico can use; ``message`` says what is wrong (an API 400 on ``snapshot``)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class SnapshotTooLarge(SnapshotRefused):
    """The upload is over :func:`max_bytes` (an API 413)."""


class SnapshotConflict(Exception):
    """The job's status does not take a snapshot now (an API 409; Note [When a snapshot may be attached])."""


def max_bytes() -> int:
    """The largest snapshot accepted, bytes: ``ZICO_SNAPSHOT_MAX_BYTES``, at most the importer's own limit."""
    from zico_workloads.curves.snapshot import MAX_FILE_BYTES

    return min(int(settings.ZICO_SNAPSHOT_MAX_BYTES), MAX_FILE_BYTES)


def read_snapshot(upload: BinaryIO, device: int | None = None, name: str = ""):
    """The ``torch-snapshot`` curve of an uploaded ``torch.cuda.memory._dump_snapshot()`` pickle.

    Args:
        upload: a binary file (Django's UploadedFile: its ``size`` is checked before it is read).
        device: index into the snapshot's ``device_traces``; default: the device with the most events.
        name: the file's name, kept in the curve's ``meta.file``.
    Returns:
        a placement.curves.MemoryCurve (bytes over one iteration, seconds).
    Raises:
        SnapshotTooLarge: over :func:`max_bytes`, read no further.
        SnapshotRefused: anything the importer refuses (not a pickle, a pickle asking to import or build
            objects, over one of its limits, not a snapshot, a field out of range, no segments, no events),
            with the importer's message naming the field or opcode.
    """
    from zico_workloads.curves.snapshot import SnapshotError, snapshot_curve

    limit = max_bytes()
    size = getattr(upload, "size", None)
    if isinstance(size, int) and size > limit:
        raise SnapshotTooLarge(f"the snapshot is {size} bytes, over the limit of {limit} (ZICO_SNAPSHOT_MAX_BYTES)")
    data = upload.read(limit + 1)
    if len(data) > limit:
        raise SnapshotTooLarge(f"the snapshot is over the limit of {limit} bytes (ZICO_SNAPSHOT_MAX_BYTES)")
    meta: dict[str, Any] = {"file": name[:200]} if name else {}
    try:
        return snapshot_curve(data, device=device, meta={"uploaded_bytes": len(data), **meta})
    except SnapshotError as exc:  # the field is named "snapshot" already: "snapshot: snapshot: ..." says it twice
        raise SnapshotRefused(str(exc).removeprefix("snapshot: ")) from None


def check_fits(curve, budget_bytes: int | None) -> None:
    """Refuse a curve whose peak exceeds the job's ``budget_bytes`` or every registered device's budget: such a job
    could never be placed. Raises SnapshotRefused naming both figures."""
    budgets = devices_budgets()
    refused = peak_misfit(int(curve.peak_bytes), "the peak of its snapshot", budget_bytes,
                          max((b for _, b in budgets), default=None))
    if refused is not None:
        raise SnapshotRefused(refused[1])


def _summary(profile: MemoryProfile) -> dict[str, Any]:
    return {"profile": profile.pk, "source": profile.source, "peak_bytes": profile.peak_bytes,
            "file": (profile.curve.get("meta") or {}).get("file", "")}


def check_attachable(job: Job) -> None:
    """Raise SnapshotRefused for a catalog job, SnapshotConflict for a status that takes no snapshot now (Note
    [When a snapshot may be attached]); :func:`attach_to_job` checks again under the row's lock."""
    if job.code_id is None:
        raise SnapshotRefused(f"job {job.pk} runs the catalog workload {job.workload}, whose curve the platform "
                              "estimates and profiles; a snapshot is taken for a job with code")
    if job.status not in ATTACHABLE:
        raise SnapshotConflict(f"job {job.pk} is {job.status}: a snapshot is attached while the job is queued, "
                               "before it is profiled, or after it has ended (for its reruns)")


def attach_to_job(job: Job, curve, user) -> MemoryProfile:
    """Store ``curve`` as ``job``'s newest profile, uploaded by ``user``, with a ``profile`` Event.

    Raises:
        SnapshotRefused: a catalog job, or a peak that fits neither the job's budget nor any device.
        SnapshotConflict: the job is not queued and has not ended (Note [When a snapshot may be attached]).
    """
    with transaction.atomic():
        locked = Job.objects.select_for_update().select_related("tenant").get(pk=job.pk)
        check_attachable(locked)
        check_fits(curve, locked.budget_bytes)
        profile = MemoryProfile.record(locked, curve, uploaded_by=user)
        Event.record(Event.Kind.PROFILE, job=locked, actor=user, **_summary(profile))
    return profile


def store_for_identity(tenant: Tenant, code, command: Any, env: Any, curve, user) -> MemoryProfile:
    """Store ``curve`` for the jobs of ``tenant`` that will run ``command`` with ``env`` in the archive ``code``
    (their identity, :func:`zico.jobs.submission.code_identity`), uploaded by ``user``, with a ``profile`` Event.

    Raises:
        JobSpecError: naming ``code``, ``command[i]`` or ``env.<NAME>`` (the submission's own checks).
        SnapshotRefused: a peak over every device's budget.
    """
    command, env = validate_code_job(tenant, code, command, env)
    check_fits(curve, None)
    d = curve.to_dict()
    with transaction.atomic():
        profile = MemoryProfile.objects.create(job=None, tenant=tenant, identity=code_identity(code, command, env),
                                               uploaded_by=user, source=SNAPSHOT_SOURCE, curve=d,
                                               peak_bytes=d["peak_bytes"], persistent_bytes=d["persistent_bytes"],
                                               iteration_s=curve.iteration_s)
        Event.record(Event.Kind.PROFILE, tenant=tenant, actor=user, identity=profile.identity, **_summary(profile))
    return profile

