"""Job checkpoints under ``ZICO_CHECKPOINT_DIR``: atomic save and load, so a requeued job resumes.

Layout: ``<dir>/job-<id>/checkpoint.pt`` holding ``{"job": id, "iteration": last completed iteration,
"state": the training job's state_dict(), "saved_at": unix s, "train_s": training seconds so far,
"job_created_at": the job's creation time (ISO 8601) when the scheduler sent it}``.

Note [Checkpoints across deployments]
Job ids restart at 1 when a deployment starts from an empty database but keeps its checkpoint
directory, so ``job-7/checkpoint.pt`` may be another job's. A checkpoint carries its job's creation
time; ``load`` given the current job's discards (deletes) one with a different time and returns None,
so the job starts from scratch instead of resuming someone else's training.
A save writes a temporary file in the same directory and renames it over the old one (``os.replace`` is
atomic on POSIX), so a worker killed mid-save leaves the previous checkpoint intact, never half a file.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


class CheckpointError(RuntimeError):
    """A checkpoint exists but cannot be read (corrupt, or written for another job)."""


def checkpoint_path(root: Path | str, job_id: int) -> Path:
    return Path(root) / f"job-{int(job_id)}" / "checkpoint.pt"


def save(root: Path | str, job_id: int, iteration: int, state: dict[str, Any], **extra: Any) -> Path:
    """Write the checkpoint of ``job_id`` after ``iteration`` atomically; returns its path."""
    import torch

    path = checkpoint_path(root, job_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    payload = {"job": int(job_id), "iteration": int(iteration), "state": state, "saved_at": time.time(), **extra}
    with open(tmp, "wb") as f:
        torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def load(root: Path | str, job_id: int, job_created_at: str | None = None) -> dict[str, Any] | None:
    """The last checkpoint of ``job_id`` (tensors on CPU), or None when there is none — or when it was
    written for an earlier job with the same id (``job_created_at`` given and different; the stale file
    is deleted, Note [Checkpoints across deployments]).

    Raises:
        CheckpointError: the file is unreadable or belongs to another job id.
    """
    import torch

    path = checkpoint_path(root, job_id)
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
        remove(root, job_id)
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
