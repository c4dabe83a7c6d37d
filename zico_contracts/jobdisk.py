"""How a device worker bounds a job's disk, as its heartbeat says it: written once here for both sides.

The worker (``workers.jobdisk.JobDisks.describe``) puts ``{"bound": "quota" | "watch", "bytes": N, "why": ...}``
under :data:`METRIC` in every heartbeat; the device page shows it (:func:`describe`). ``quota``: each job's
output and scratch directories are a file system of ``bytes`` of their own, so a write past it fails; ``watch``:
the agent alone measures them and stops a job past ``bytes``, and ``why`` says why there is no quota (Note [A
job's disk] in workers.agent.diskwatch). Standard library only.
"""
from __future__ import annotations

from typing import Any

from .oom import format_bytes

METRIC = "job_disk"  # the key in a device worker's heartbeat
QUOTA, WATCH = "quota", "watch"


def describe(info: Any) -> str:
    """One line for a person: ``"64.00 GiB of disk per job (a file system of its own)"``, or ``"... (watched:
    no quota, because ...)"``; "" for anything malformed (a heartbeat of an older worker)."""
    if not isinstance(info, dict) or info.get("bound") not in (QUOTA, WATCH):
        return ""
    try:
        size = format_bytes(int(info["bytes"]))
    except (KeyError, TypeError, ValueError):
        return ""
    if info["bound"] == QUOTA:
        return f"{size} of disk per job (a file system of its own)"
    why = str(info.get("why") or "")[:200]
    return f"{size} of disk per job (watched: no quota{', because ' + why if why else ''})"
