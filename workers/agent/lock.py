"""One device agent per device: an exclusive ``flock`` on ``$ZICO_VAR_DIR/locks/<device>.lock``.

The lock belongs to the open file description, so it is released when its holder dies, however it dies
(a SIGKILLed worker leaves no stale lock). The holder's pid is written into the file for the message the
next one prints.
"""
from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path


class DeviceLocked(RuntimeError):
    """Another live process already runs the agent of this device; the message names it."""


def lock_path(var_dir: str | Path, device: str) -> Path:
    return Path(var_dir) / "locks" / (re.sub(r"[^A-Za-z0-9_.-]", "_", device) + ".lock")


def lock_device(var_dir: str | Path, device: str) -> int:
    """Take the device's lock; returns the fd (keep it open for the process's life). Raises DeviceLocked."""
    path = lock_path(var_dir, device)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise DeviceLocked(f"device {device} already has an agent (worker pid {holder}, lock {path}); "
                           "one worker per device: stop that one first") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
