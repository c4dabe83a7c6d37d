"""A run's measured compute share, stored with the job's memory curve so that the scheduler's next prediction for
an identical job uses it (Note [Measured compute share] in placement.compute_share; the measurement's fields:
zico_contracts.computeshare). The control consumer calls :func:`store_measured_share` for each ``job_finished``
that carries one.

Note [Where a measured share is stored]
    A share belongs to the job's kind (identical jobs: ``zico.jobs.known.identical``), like its curve. The runs
    measured so far live in the curve's ``meta`` (``placement.compute_share.combine``), so the newest stored
    profile among identical jobs carries the history; the measurement is combined into it and stored as a new
    MemoryProfile row of the finished job (the newest of its kind, the one an identical job submitted later
    copies: ``known.profiles_to_reuse``). Identical jobs not finished yet (queued, ready, placed, running) hold
    copies made before: their latest profile's share and history are updated in place, so the scheduler's next
    round plans them with it too. A measurement on a device of another kind than the curve's (a CPU share for
    a CUDA curve) is not stored: the share is the device's as much as the job's. Identical jobs ending at once
    are combined one after the other (a transaction-scoped advisory lock per kind, on PostgreSQL).
"""
from __future__ import annotations

import hashlib
import logging
from typing import Any

from django.db import connection, transaction

from placement.compute_share import MEASURED_KEY, SHARE_KEY, combine
from zico_contracts import computeshare

from .known import identical, params_key
from .models import Job, MemoryProfile
from .transitions import TERMINAL

log = logging.getLogger(__name__)


def _lock_kind(job: Job) -> None:
    """Hold a transaction-scoped advisory lock for ``job``'s kind (PostgreSQL; nothing elsewhere)."""
    if connection.vendor != "postgresql":
        return
    digest = hashlib.sha256("\0".join(params_key(job.workload, job.params or {})).encode()).digest()
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [int.from_bytes(digest[:8], "big", signed=True)])


def store_measured_share(job: Job, measurement: Any, placement: int | None = None) -> MemoryProfile | None:
    """Combine ``measurement`` (a job_finished's ``metrics["compute_share"]``) into the newest curve of ``job``'s
    kind and store it (Note [Where a measured share is stored]). Returns the new profile row, or None when
    nothing was stored: the job's kind has no stored curve, the device kinds differ, or this run (``job``,
    ``placement``) was already counted. Raises ShareError (zico_contracts.computeshare) naming a malformed field;
    nothing is written then."""
    m = computeshare.validate(measurement)
    with transaction.atomic():
        _lock_kind(job)
        kind = identical(job.workload, job.params or {}, "job__")
        base = MemoryProfile.objects.filter(kind).order_by("-created_at", "-id").first()
        if base is None:
            base = MemoryProfile.objects.filter(job=job).order_by("-created_at", "-id").first()
        if base is None:
            log.info("job %s: compute share measured but no curve of its kind is stored; not kept", job.pk)
            return None
        if computeshare.device_kind(m["device"]) != computeshare.device_kind(base.curve.get("device", "cpu")):
            log.info("job %s: compute share measured on %s, its curve is %s's; not kept", job.pk, m["device"],
                     base.curve.get("device"))
            return None
        meta = combine(base.curve.get("meta"), m, job=job.pk, placement=placement)
        if meta is None:
            return None  # a message seen twice
        row = MemoryProfile.record(job, {**base.curve, "meta": meta})
        shared = {SHARE_KEY: meta[SHARE_KEY], MEASURED_KEY: meta[MEASURED_KEY]}
        waiting = Job.objects.filter(identical(job.workload, job.params or {})).exclude(status__in=TERMINAL) \
            .exclude(pk=job.pk).values_list("pk", flat=True)
        for pk in waiting:
            latest = MemoryProfile.objects.filter(job_id=pk).order_by("-created_at", "-id").first()
            same_kind = latest is not None and computeshare.device_kind(latest.curve.get("device", "cpu")) \
                == computeshare.device_kind(m["device"])
            if same_kind:
                latest.curve = {**latest.curve, "meta": {**(latest.curve.get("meta") or {}), **shared}}
                latest.save(update_fields=["curve"])
    log.info("job %s: compute share %.3f (%s) measured; its kind's share is now %.3f (%d runs)", job.pk,
             m["share"], m["method"], meta[SHARE_KEY], len(meta[MEASURED_KEY]["runs"]))
    return row
