"""A job's outputs on the web side: the files its worker uploads, and its log (live from the Redis stream of
zico_contracts.joblog, then from the stored copy).

Note [A job's log, live then stored]
    While a job runs, its lines are read from the Redis stream (``zico:job:<id>:log``, capped at
    ``joblog.STREAM_MAXLEN`` lines). When the run ends the control consumer (``job_finished``, or the last
    loss of a worker) calls :func:`archive_log`: the stream's lines, at most ``ZICO_LOG_MAX_BYTES`` of them
    (the tail: the last lines say why a job failed), become the job's stored log (a JobLog row and a JSON-lines
    file) and the stream is deleted. A job that ended without a run to report it (cancelled while queued) is
    archived by the first read once it has been over for ``ZICO_WORKER_UPLOAD_GRACE_S``. Every line keeps its
    stream entry id, so a reader's cursor (``?after=<id>``) goes on across the switch. Lines dropped before
    the copy (the stream's cap, then the size cap) are counted in ``dropped_lines`` and said in ``note``.
    ``complete`` is true once the stored copy exists: nothing more will come.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from zico_contracts import joblog
from zico_contracts.codearchive import ArchiveError, check_member_path

from .code_models import JobFile, JobLog, job_dir
from .models import Job

CURSOR_RE = re.compile(r"\d{1,20}-\d{1,20}")
PAGE_MAX = 5000
EARLIER_DEPLOYMENT_GRACE_S = 5.0  # lines older than the job's row by more than this are another job's


def _floor(job) -> tuple[int, int]:
    """The first stream id that can be this job's: a stream left by an earlier database's job of the same id
    holds older lines (as Note [Samples of an earlier deployment] in zico.web.live for telemetry)."""
    return int((job.created_at.timestamp() - EARLIER_DEPLOYMENT_GRACE_S) * 1000), 0


class OutputError(ValueError):
    """An output upload breaks a rule; ``field`` names the input (``path``, ``file``)."""

    def __init__(self, field: str, message: str, status: int = 400):
        super().__init__(f"{field}: {message}")
        self.field, self.message, self.status = field, message, status


# -- files ----------------------------------------------------------------------------------------
def store_output_file(job, path: str, upload) -> JobFile:
    """Store one output file of ``job`` at relative ``path`` (replacing an earlier upload of that path).

    Raises OutputError: a path breaking zico_contracts.codearchive.check_member_path, one that is another
    file's directory (or inside another file), a file over ``ZICO_OUTPUT_MAX_FILE_BYTES``, more files than
    ``ZICO_OUTPUT_MAX_FILES`` or more bytes than ``ZICO_OUTPUT_MAX_BYTES`` for the job (413 for sizes).
    """
    try:
        path = check_member_path(path)
    except ArchiveError as exc:
        raise OutputError("path", exc.problem) from None
    if not path:
        raise OutputError("path", "must name a file")
    others = JobFile.objects.filter(job=job).exclude(path=path)
    for other in others.filter(path__startswith=path + "/")[:1]:
        raise OutputError("path", f"is the directory of the output file {other.path!r}")
    parents = ["/".join(path.split("/")[:i]) for i in range(1, path.count("/") + 1)]
    if parents and (clash := others.filter(path__in=parents).first()):
        raise OutputError("path", f"is inside {clash.path!r}, which is an output file")
    if others.count() >= settings.ZICO_OUTPUT_MAX_FILES:
        raise OutputError("path", f"the job already has {settings.ZICO_OUTPUT_MAX_FILES} output files (the limit)")
    size = getattr(upload, "size", None)
    if size is not None and size > settings.ZICO_OUTPUT_MAX_FILE_BYTES:
        raise OutputError("file", f"{size} bytes is over the limit of {settings.ZICO_OUTPUT_MAX_FILE_BYTES} bytes "
                                  "per output file", 413)
    used = sum(others.values_list("size_bytes", flat=True))
    if size is not None and used + size > settings.ZICO_OUTPUT_MAX_BYTES:
        raise OutputError("file", f"the job's outputs would hold {used + size} bytes, over the limit of "
                                  f"{settings.ZICO_OUTPUT_MAX_BYTES}", 413)
    target = job_dir(job.pk) / "files" / Path(*path.split("/"))
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".upload-", suffix=".part")
    digest, got = hashlib.sha256(), 0
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in upload.chunks():
                got += len(chunk)
                digest.update(chunk)
                out.write(chunk)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    row, _ = JobFile.objects.update_or_create(job=job, path=path,
                                              defaults={"size_bytes": got, "sha256": digest.hexdigest()})
    return row


# -- log ------------------------------------------------------------------------------------------
def _line_json(line: dict) -> bytes:
    return (json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def archive_log(job, r) -> JobLog:
    """Copy ``job``'s Redis stream into its stored log, once (Note [A job's log, live then stored]); the
    stream is deleted after the commit. ``r`` is a redis-py client. Raises redis errors when Redis is down."""
    with transaction.atomic():
        Job.objects.select_for_update().filter(pk=job.pk).first()  # one archiver at a time per job
        existing = JobLog.objects.filter(job_id=job.pk).first()
        if existing is not None:
            return existing
        key = joblog.log_stream_key(job.pk)
        floor = _floor(job)
        entries = r.xrange(key, min=f"{floor[0]}-{floor[1]}", max="+")
        dropped = 0
        if entries:
            info = r.xinfo_stream(key)
            added = info.get("entries-added", info.get(b"entries-added"))
            dropped = max(0, int(added) - len(entries)) if added is not None else 0
        lines = [_line_json(joblog.parse(i, f)) for i, f in entries]
        kept, size = [], 0
        for raw in reversed(lines):
            if size + len(raw) > settings.ZICO_LOG_MAX_BYTES:
                break
            kept.append(raw)
            size += len(raw)
        kept.reverse()
        dropped += len(lines) - len(kept)
        path = job_dir(job.pk) / "log.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".log-", suffix=".part")
        with os.fdopen(fd, "wb") as out:
            out.writelines(kept)
        os.replace(tmp, path)
        stored = JobLog.objects.create(job_id=job.pk, lines=len(kept), size_bytes=size, dropped_lines=dropped)
        transaction.on_commit(lambda: r.delete(key))
    return stored


def parse_cursor(value: str | None) -> tuple[int, int] | None:
    """``?after=`` as a stream id pair; ValueError naming the parameter when malformed."""
    if value in (None, ""):
        return None
    if not CURSOR_RE.fullmatch(value):
        raise ValueError("after: expected the previous answer's cursor, a stream id like 1700000000000-0")
    ms, seq = value.split("-")
    return int(ms), int(seq)


def _id(value: str) -> tuple[int, int]:
    ms, _, seq = value.partition("-")
    return int(ms), int(seq or 0)


def _stale_end(job) -> bool:
    """True for an ended job no run will report any more (Note [A job's log, live then stored])."""
    if not job.is_finished or job.finished_at is None:
        return False
    return timezone.now() - job.finished_at > timedelta(seconds=settings.ZICO_WORKER_UPLOAD_GRACE_S)


def read_log(job, r, after: str | None = None, limit: int = 1000) -> dict:
    """One page of ``job``'s output lines after the cursor ``after`` (a stream id; None: from the start).

    Returns ``{"lines": [{"id", "t", "stream", "line", "cut"}], "cursor": the last id (or ``after``),
    "more": bool (another page is ready now), "source": "live" | "stored", "complete": bool,
    "dropped_lines": int, "note": str}``. ``r`` may be None (Redis unreachable): then only a stored copy is
    read. Raises ValueError naming ``after`` or ``limit``.
    """
    start = parse_cursor(after)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= PAGE_MAX:
        raise ValueError(f"limit: expected an integer in [1, {PAGE_MAX}]")
    stored = JobLog.objects.filter(job_id=job.pk).first()
    if stored is None and r is not None and _stale_end(job):
        stored = archive_log(job, r)
    if stored is not None:
        lines, more = [], False
        if stored.disk_path.exists():
            with open(stored.disk_path, "rb") as f:
                for raw in f:
                    line = json.loads(raw)
                    if start is not None and _id(line["id"]) <= start:
                        continue
                    if len(lines) == limit:
                        more = True
                        break
                    lines.append(line)
        dropped = stored.dropped_lines
        source, complete = "stored", True
    else:
        lines, more, dropped = [], False, 0
        if r is not None:
            low = f"{_floor(job)[0]}-0" if start is None or start < _floor(job) else f"({start[0]}-{start[1]}"
            entries = r.xrange(joblog.log_stream_key(job.pk), min=low, max="+", count=limit + 1)
            more = len(entries) > limit
            lines = [joblog.parse(i, f) for i, f in entries[:limit]]
            if start is None and entries:  # the first page says how many lines the stream's cap dropped
                info = r.xinfo_stream(joblog.log_stream_key(job.pk))
                added = info.get("entries-added", info.get(b"entries-added"))
                length = info.get("length", info.get(b"length"))
                dropped = max(0, int(added) - int(length)) if added is not None and length is not None else 0
        source, complete = "live", False
    note = (f"{dropped} earlier line{'s' if dropped != 1 else ''} not kept (the log keeps the last "
            f"{joblog.STREAM_MAXLEN} lines and {settings.ZICO_LOG_MAX_BYTES} bytes)") if dropped else ""
    return {"lines": lines, "cursor": lines[-1]["id"] if lines else (after or None), "more": more,
            "source": source, "complete": complete, "dropped_lines": dropped, "note": note}
