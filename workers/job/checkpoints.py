"""Job checkpoints under ``ZICO_CHECKPOINT_DIR``: atomic save and load, so a requeued job resumes.

Layout: ``<dir>/job-<id>/checkpoint.pt`` holding ``{"job": id, "iteration": last completed iteration,
"state": the training job's state_dict(), "saved_at": unix s, "train_s": training seconds so far,
"job_created_at": the job's creation time (ISO 8601) when the scheduler sent it}``.

Note [Checkpoints across deployments]
Job ids restart at 1 when a deployment starts from an empty database but keeps its checkpoint
directory, so ``job-7/checkpoint.pt`` may be another job's. A checkpoint carries its job's creation
time; ``load`` given the current job's discards (deletes) one with a different time and returns None,
so the job starts from scratch instead of resuming someone else's training.

Note [Checkpoints that cannot half-write]
A save writes a temporary file in the same directory, fsyncs it, renames it over the old one
(``os.replace`` is atomic on POSIX) and fsyncs the directory, so neither a worker killed mid-save nor a
machine losing power after ``save`` returned leaves half a file: the path holds the previous checkpoint or
the new one. When the write fails (disk full: ENOSPC, quota: EDQUOT, file too large: EFBIG, or any other
OSError, which torch may hand on wrapped in a RuntimeError) ``save`` deletes the temporary file, leaves the
previous checkpoint as it was and raises :class:`CheckpointSaveError` naming the path, the reason and the
bytes free there (``shutil.disk_usage``). The caller's training goes on without that checkpoint: the
runner logs a warning and counts it in the job's metrics (``checkpoint_failures``,
``checkpoint_last_failure``); a requeued job then resumes from the last checkpoint that did save.
"""
from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any


class CheckpointError(RuntimeError):
    """A checkpoint exists but cannot be read (corrupt, or written for another job)."""


class CheckpointSaveError(CheckpointError):
    """A checkpoint could not be written (Note [Checkpoints that cannot half-write]); nothing was left
    behind and the previous checkpoint is intact.

    Attributes:
        path: the checkpoint path that was not written.
        reason: the OS's (or torch's) explanation, e.g. ``[Errno 28] No space left on device``.
        errno: the OSError's errno when known (ENOSPC, EDQUOT, EFBIG, ...), else None.
        free_bytes: bytes free on the file system of ``path`` when the write failed (None if unknown).
        free_after_bytes: bytes free once the partial file was removed (None if unknown).
    """

    def __init__(self, path: Path, reason: str, err: int | None, free_bytes: int | None,
                 free_after_bytes: int | None = None):
        self.path, self.reason, self.errno = path, reason, err
        self.free_bytes, self.free_after_bytes = free_bytes, free_after_bytes
        free = "unknown" if free_bytes is None else f"{free_bytes} bytes"
        after = "" if free_after_bytes is None else f", {free_after_bytes} bytes once the partial file was removed"
        super().__init__(f"checkpoint {path} not saved: {reason}; free space there: {free} at the failure{after}; "
                         "the previous checkpoint (if any) is kept")

log = logging.getLogger(__name__)


def checkpoint_path(root: Path | str, job_id: int) -> Path:
    return Path(root) / f"job-{int(job_id)}" / "checkpoint.pt"


def save(root: Path | str, job_id: int, iteration: int, state: dict[str, Any], **extra: Any) -> Path:
    """Write the checkpoint of ``job_id`` after ``iteration`` atomically and durably; returns its path
    (:func:`checkpoint_path`; :func:`save_file` with it).
    """
    return save_file(checkpoint_path(root, job_id), job_id, iteration, state, **extra)


def save_file(path: Path | str, job_id: int, iteration: int, state: dict[str, Any], **extra: Any) -> Path:
    """Write the checkpoint of ``job_id`` after ``iteration`` at ``path`` (its directory made if missing)
    atomically and durably; returns the path. A job in its sandbox writes to its output directory this way
    (``workers/catalog_project/train.py``: the worker mounts ``<dir>/job-<id>`` there).

    Raises:
        CheckpointSaveError: the file system refused the write (full, quota, read-only, ...); no temporary
            or partial file remains and the previous checkpoint is intact (Note [Checkpoints that cannot
            half-write]). The caller should carry on training and count the failure.
    """
    import threading

    import torch

    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    payload = {"job": int(job_id), "iteration": int(iteration), "state": state, "saved_at": time.time(), **extra}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException as exc:
        if not isinstance(exc, (OSError, RuntimeError)) or (isinstance(exc, RuntimeError) and not _io_failure(exc)):
            _discard(tmp)
            raise  # not the file system's doing (a state that cannot be pickled, an interrupt): a bug to see
        free_at_failure = _free_bytes(path)
        _discard(tmp)
        err = _errno(exc)
        reason = str(exc) or type(exc).__name__
        if err is not None and not isinstance(exc, OSError):  # torch's text alone ("unexpected pos") hides it
            reason = f"[Errno {err}] {os.strerror(err)} ({reason})"
        raise CheckpointSaveError(path, reason, err, free_at_failure, _free_bytes(path)) from exc
    return path


class SaveTally:
    """One run's checkpoint saves: :meth:`save` never raises a :class:`CheckpointSaveError`, it logs a
    warning and counts it, so the training loop that calls it goes on (Note [Checkpoints that cannot
    half-write]); :meth:`metrics` is what the run adds to its job's metrics."""

    def __init__(self) -> None:
        self.failures = 0
        self.last_failure = ""

    def save(self, root: Path | str, job_id: int, iteration: int, state: dict[str, Any], **extra: Any) -> Path | None:
        """:func:`save`; None (and a warning, and one more failure counted) when it raised CheckpointSaveError."""
        try:
            return save(root, job_id, iteration, state, **extra)
        except CheckpointSaveError as exc:
            return self._failed(job_id, exc)

    def save_file(self, path: Path | str, job_id: int, iteration: int, state: dict[str, Any],
                  **extra: Any) -> Path | None:
        """:func:`save_file`, counted as :meth:`save` counts."""
        try:
            return save_file(path, job_id, iteration, state, **extra)
        except CheckpointSaveError as exc:
            return self._failed(job_id, exc)

    def _failed(self, job_id: int, exc: CheckpointSaveError) -> None:
        self.failures += 1
        self.last_failure = str(exc)
        log.warning("job %s: %s; training goes on without this checkpoint (%d failed so far)",
                    job_id, exc, self.failures)

    def metrics(self) -> dict[str, Any]:
        """``{"checkpoint_failures": count, "checkpoint_last_failure": message}``, or {} when none failed."""
        if not self.failures:
            return {}
        return {"checkpoint_failures": self.failures, "checkpoint_last_failure": self.last_failure[:1000]}


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX: the entry lives in the directory's own data)."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _io_failure(exc: BaseException) -> bool:
    """True when a RuntimeError from torch.save is a write failure underneath (its zip writer reports a
    failed write as ``RuntimeError: ... file write failed`` or chains the OSError)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError):
            return True
        seen = seen.__cause__ or seen.__context__
    text = str(exc).lower()
    return "write failed" in text or "unexpected pos" in text or "no space" in text


def _errno(exc: BaseException) -> int | None:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno:
            return seen.errno
        seen = seen.__cause__ or seen.__context__
    return None


def _free_bytes(path: Path) -> int | None:
    for where in (path.parent, path.parent.parent):
        try:
            return shutil.disk_usage(where).free
        except OSError:
            continue
    return None


def _discard(tmp: Path) -> None:
    try:
        tmp.unlink()
    except OSError:
        pass  # absent (the open failed) or undeletable: never hide the write error behind this one


def load(root: Path | str, job_id: int, job_created_at: str | None = None) -> dict[str, Any] | None:
    """The last checkpoint of ``job_id`` (tensors on CPU), or None when there is none — or when it was
    written for an earlier job with the same id (``job_created_at`` given and different; the stale file
    is deleted, Note [Checkpoints across deployments]). :func:`load_file` of :func:`checkpoint_path`.

    Raises:
        CheckpointError: the file is unreadable or belongs to another job id.
    """
    return load_file(checkpoint_path(root, job_id), job_id, job_created_at)


def load_file(path: Path | str, job_id: int, job_created_at: str | None = None) -> dict[str, Any] | None:
    """:func:`load` of the checkpoint at ``path`` (a stale one is deleted, its directory left)."""
    import torch

    path = Path(path)
    if not path.exists():
        return None
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for a bad file
        raise CheckpointError(f"checkpoint {path} is unreadable: {exc}") from exc
    if not isinstance(payload, dict) or payload.get("job") != int(job_id) or "state" not in payload:
        raise CheckpointError(f"checkpoint {path} does not belong to job {job_id}")
    saved_for = payload.get("job_created_at")
    if job_created_at is not None and saved_for is not None and saved_for != job_created_at:
        path.unlink(missing_ok=True)
        return None
    return payload


def remove(root: Path | str, job_id: int) -> None:
    """Delete the checkpoint of a job that ended for good (no error if absent)."""
    path = checkpoint_path(root, job_id)
    try:
        path.unlink()
        path.parent.rmdir()
    except FileNotFoundError:
        pass
    except OSError:
        pass  # directory not empty: leave other files alone
